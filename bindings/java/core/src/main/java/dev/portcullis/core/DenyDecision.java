package dev.portcullis.core;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

/**
 * The call is blocked: the engine throws a {@link PolicyDenialError}.
 *
 * @param reason why, or {@code null}
 * @param policyId the policy id the denial names instead of the policy's own, or {@code null}
 */
public record DenyDecision(String reason, String policyId) implements PolicyDecision {
    /**
     * Deny, saying why.
     *
     * @param reason why
     * @return the decision
     */
    public static DenyDecision deny(String reason) {
        return new DenyDecision(reason, null);
    }

    /**
     * Deny without a reason.
     *
     * @return the decision
     */
    public static DenyDecision deny() {
        return new DenyDecision(null, null);
    }

    /**
     * Why, when a reason was given.
     *
     * @return the reason
     */
    public Optional<String> reasonText() {
        return Optional.ofNullable(reason);
    }

    @Override
    public String decision() {
        return "deny";
    }

    @Override
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "deny");
        if (reason != null) {
            map.put("reason", reason);
        }
        if (policyId != null) {
            map.put("policy_id", policyId);
        }
        return map;
    }
}
