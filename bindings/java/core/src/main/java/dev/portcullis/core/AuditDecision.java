package dev.portcullis.core;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The call proceeds; the audit record is the point.
 *
 * @param reason why, or {@code null}
 */
public record AuditDecision(String reason) implements PolicyDecision {
    /**
     * Audit, saying why.
     *
     * @param reason why
     * @return the decision
     */
    public static AuditDecision audit(String reason) {
        return new AuditDecision(reason);
    }

    @Override
    public String decision() {
        return "audit";
    }

    @Override
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "audit");
        if (reason != null) {
            map.put("reason", reason);
        }
        return map;
    }
}
