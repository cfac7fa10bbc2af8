package dev.portcullis.core;

/** What a policy set does when a policy cannot be evaluated (it throws, returns null, times out). */
public enum OnErrorBehavior {
    /** Fail the call with a {@link PolicyEvaluationError} (the default). */
    DENY,
    /** Skip the policy and go on. */
    ALLOW
}
