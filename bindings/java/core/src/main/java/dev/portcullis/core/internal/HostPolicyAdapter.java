package dev.portcullis.core.internal;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.InterceptionPoint;
import dev.portcullis.core.Policy;
import dev.portcullis.core.PolicyContext;
import dev.portcullis.core.PolicyDecision;
import java.nio.charset.StandardCharsets;

/**
 * What the native library calls for a policy written in Java: reads the context, calls the
 * policy, and gives its decision as JSON in UTF-8 (no bytes for a plain allow, {@code null}
 * when it returned {@code null}); what the policy throws goes through to the library.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class HostPolicyAdapter {
    /** A plain allow, the usual answer: no bytes to write or read. */
    private static final byte[] ALLOW = new byte[0];

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
     * @param contextJson the context as JSON in UTF-8
     * @return the decision as JSON in UTF-8 (no bytes for a plain allow), or {@code null}
     */
    public byte[] evaluate(byte[] contextJson) {
        return decide(PolicyContext.fromJson(point, new String(contextJson, StandardCharsets.UTF_8)));
    }

    /**
     * The policy's decision on the caller's own context object (no policy changed it).
     *
     * @param context the context the caller gave the engine
     * @return the decision as JSON in UTF-8 (no bytes for a plain allow), or {@code null}
     */
    public byte[] evaluateCaller(Object context) {
        return decide((PolicyContext) context);
    }

    private byte[] decide(PolicyContext context) {
        PolicyDecision decision = policy.evaluate(context);
        if (decision == null) {
            return null;
        }
        return decision == AllowDecision.allow() ? ALLOW : decision.toJson().getBytes(StandardCharsets.UTF_8);
    }
}
