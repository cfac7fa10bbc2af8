package dev.portcullis.core;

import java.util.Optional;

/** A policy denied the call: its message is the reason (or a fixed text when none was given). */
public class PolicyDenialError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String policyId;
    private final InterceptionPoint interceptionPoint;
    private final String reason;

    /**
     * A denial.
     *
     * @param policyId the policy that denied (or the id its decision named)
     * @param interceptionPoint where
     * @param reason why, or {@code null}
     * @param message the message (the reason, or a fixed text)
     */
    public PolicyDenialError(
            String policyId, InterceptionPoint interceptionPoint, String reason, String message) {
        super(message);
        this.policyId = policyId;
        this.interceptionPoint = interceptionPoint;
        this.reason = reason;
    }

    /**
     * The policy that denied (the id its decision named, if it named one).
     *
     * @return the policy id
     */
    public String policyId() {
        return policyId;
    }

    /**
     * Where the call was denied.
     *
     * @return the point
     */
    public InterceptionPoint interceptionPoint() {
        return interceptionPoint;
    }

    /**
     * Why, when the policy said.
     *
     * @return the reason
     */
    public Optional<String> reason() {
        return Optional.ofNullable(reason);
    }
}
