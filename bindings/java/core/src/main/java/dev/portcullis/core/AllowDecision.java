package dev.portcullis.core;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The call proceeds.
 *
 * @param audit whether the decision asks for its audit record to stand out
 */
public record AllowDecision(boolean audit) implements PolicyDecision {
    private static final AllowDecision ALLOW = new AllowDecision(false);

    /**
     * Allow.
     *
     * @return the decision
     */
    public static AllowDecision allow() {
        return ALLOW;
    }

    @Override
    public String decision() {
        return "allow";
    }

    @Override
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "allow");
        if (audit) {
            map.put("audit", true);
        }
        return map;
    }

    @Override
    public String toJson() {
        return audit ? "{\"decision\":\"allow\",\"audit\":true}" : "{\"decision\":\"allow\"}";
    }
}
