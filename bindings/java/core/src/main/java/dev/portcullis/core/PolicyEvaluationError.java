package dev.portcullis.core;

/**
 * A policy could not be evaluated (it threw, returned {@code null} or something that is not a
 * decision, ran past its deadline, or its backend failed) and the policy set's
 * {@link OnErrorBehavior} is {@code DENY}. {@link #getCause()} is the exception a Java policy
 * threw, when it threw one.
 */
public class PolicyEvaluationError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String policyId;
    private final InterceptionPoint interceptionPoint;
    private final String causeText;

    /**
     * An evaluation error.
     *
     * @param policyId the policy that failed
     * @param interceptionPoint where
     * @param causeText what went wrong, with its causes
     * @param cause the exception a Java policy threw, or {@code null}
     */
    public PolicyEvaluationError(
            String policyId, InterceptionPoint interceptionPoint, String causeText, Throwable cause) {
        super("Policy evaluation failed for '" + policyId + "' at '" + interceptionPoint + "': " + causeText,
                cause);
        this.policyId = policyId;
        this.interceptionPoint = interceptionPoint;
        this.causeText = causeText;
    }

    /**
     * The policy that failed.
     *
     * @return the policy id
     */
    public String policyId() {
        return policyId;
    }

    /**
     * Where it failed.
     *
     * @return the point
     */
    public InterceptionPoint interceptionPoint() {
        return interceptionPoint;
    }

    /**
     * What went wrong, with its causes.
     *
     * @return the description
     */
    public String causeText() {
        return causeText;
    }
}
