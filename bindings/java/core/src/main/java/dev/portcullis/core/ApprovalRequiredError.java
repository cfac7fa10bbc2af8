package dev.portcullis.core;

import java.util.Map;

/** A policy escalated: the call proceeds only once a person approves this exact action. */
public class ApprovalRequiredError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String policyId;
    private final InterceptionPoint interceptionPoint;
    private final transient Map<String, Object> request;

    /**
     * An escalation.
     *
     * @param policyId the policy that escalated
     * @param interceptionPoint where
     * @param request the approval request (JSON members: {@code action_digest}, ...)
     */
    public ApprovalRequiredError(
            String policyId, InterceptionPoint interceptionPoint, Map<String, Object> request) {
        super("approval required by '" + policyId + "' at '" + interceptionPoint + "'");
        this.policyId = policyId;
        this.interceptionPoint = interceptionPoint;
        this.request = request;
    }

    /**
     * The policy that escalated.
     *
     * @return the policy id
     */
    public String policyId() {
        return policyId;
    }

    /**
     * Where.
     *
     * @return the point
     */
    public InterceptionPoint interceptionPoint() {
        return interceptionPoint;
    }

    /**
     * The approval request.
     *
     * @return its JSON members, unmodifiable
     */
    public Map<String, Object> request() {
        return request;
    }
}
