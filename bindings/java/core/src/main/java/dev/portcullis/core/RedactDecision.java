package dev.portcullis.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The call proceeds with the redactions applied to the context, in order.
 *
 * @param redactions the redactions (at least one), unmodifiable
 */
public record RedactDecision(List<Redaction> redactions) implements PolicyDecision {
    /**
     * A redact decision.
     *
     * @param redactions the redactions (at least one)
     */
    public RedactDecision {
        redactions = List.copyOf(Objects.requireNonNull(redactions, "redactions"));
        if (redactions.isEmpty()) {
            throw new IllegalArgumentException("a redact decision needs at least one redaction");
        }
    }

    /**
     * Redact.
     *
     * @param redactions the redactions (at least one)
     * @return the decision
     */
    public static RedactDecision redact(List<Redaction> redactions) {
        return new RedactDecision(redactions);
    }

    /**
     * Redact.
     *
     * @param redactions the redactions (at least one)
     * @return the decision
     */
    public static RedactDecision redact(Redaction... redactions) {
        return new RedactDecision(List.of(redactions));
    }

    @Override
    public String decision() {
        return "redact";
    }

    @Override
    public Map<String, Object> toMap() {
        List<Object> list = new ArrayList<>();
        for (Redaction redaction : redactions) {
            list.add(redaction.toMap());
        }
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "redact");
        map.put("redactions", list);
        return map;
    }
}
