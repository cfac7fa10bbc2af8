package dev.portcullis.core.internal;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.InterceptionPoint;
import dev.portcullis.core.Policy;
import dev.portcullis.core.PolicyContext;
import dev.portcullis.core.PolicyDecision;

/**
 * What the native library calls for a policy written in Java: reads the context, calls the
 * policy, and gives its decision as JSON (the empty string for a plain allow, {@code null} when
 * it returned {@code null}); what the policy throws goes through to the library.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class HostPolicyAdapter {
    private final Policy<PolicyContext> policy;
    private final InterceptionPoint point;

    /**
     * An adapter.
     *
     * @param policy the policy
     * @param point its point
     */
    @SuppressWarnings("unchecked")
    public HostPolicyAdapter(Policy<? extends PolicyContext> policy, InterceptionPoint point) {
        this.policy = (Policy<PolicyContext>) policy;
        this.point = point;
    }

    /**
     * The policy's decision on a context.
     *
     * @param contextJson the context as JSON
     * @return the decision as JSON ({@code ""} for a plain allow), or {@code null}
     */
    public String evaluate(String contextJson) {
        return decide(PolicyContext.fromJson(point, contextJson));
    }

    /**
     * The policy's decision on the caller's own context object (no policy changed it).
     *
     * @param context the context the caller gave the engine
     * @return the decision as JSON ({@code ""} for a plain allow), or {@code null}
     */
    public String evaluateCaller(Object context) {
        return decide((PolicyContext) context);
    }

    private String decide(PolicyContext context) {
        PolicyDecision decision = policy.evaluate(context);
        if (decision == null) {
            return null;
        }
        // A plain allow, the usual answer, crosses as the empty string.
        return decision == AllowDecision.allow() ? "" : decision.toJson();
    }
}
