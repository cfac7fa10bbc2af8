package dev.portcullis.core;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The call proceeds only with a person's approval of this exact action: the engine throws an
 * {@link ApprovalRequiredError} until one is granted.
 *
 * @param reason why, or {@code null}
 */
public record EscalateDecision(String reason) implements PolicyDecision {
    /**
     * Escalate, saying why.
     *
     * @param reason why
     * @return the decision
     */
    public static EscalateDecision escalate(String reason) {
        return new EscalateDecision(reason);
    }

    @Override
    public String decision() {
        return "escalate";
    }

    @Override
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "escalate");
        if (reason != null) {
            map.put("reason", reason);
        }
        return map;
    }
}
