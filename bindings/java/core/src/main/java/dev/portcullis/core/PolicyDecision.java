package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What a policy decides: {@link AllowDecision}, {@link DenyDecision}, {@link AuditDecision},
 * {@link RedactDecision}, {@link TransformDecision} or {@link EscalateDecision}.
 */
public sealed interface PolicyDecision
        permits AllowDecision, DenyDecision, AuditDecision, RedactDecision, TransformDecision,
                EscalateDecision {
    /**
     * The decision's wire name.
     *
     * @return {@code allow}, {@code deny}, {@code audit}, {@code redact}, {@code transform} or
     *     {@code escalate}
     */
    String decision();

    /**
     * The decision as a JSON object's members (§2 of the contract).
     *
     * @return the members
     */
    Map<String, Object> toMap();

    /**
     * The decision as JSON.
     *
     * @return the JSON text
     */
    default String toJson() {
        return Json.write(toMap());
    }

    /**
     * A decision from its JSON.
     *
     * @param json the JSON text
     * @return the decision
     * @throws IllegalArgumentException when it is not a decision
     */
    static PolicyDecision fromJson(String json) {
        return fromMap(Json.parse(json));
    }

    /**
     * A decision from a JSON value.
     *
     * @param value the value
     * @return the decision
     * @throws IllegalArgumentException when it is not a decision
     */
    static PolicyDecision fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "a decision");
        String decision = Fields.string(map, "decision", "a decision");
        Object reason = map.get("reason");
        String text = reason instanceof String ? (String) reason : null;
        switch (decision) {
            case "allow":
                return new AllowDecision(Boolean.TRUE.equals(map.get("audit")));
            case "deny":
                Object policyId = map.get("policy_id");
                return new DenyDecision(text, policyId instanceof String ? (String) policyId : null);
            case "audit":
                return new AuditDecision(text);
            case "escalate":
                return new EscalateDecision(text);
            case "redact":
                List<Redaction> redactions = new ArrayList<>();
                for (Object item : Fields.list(map, "redactions", "a redact decision")) {
                    redactions.add(Redaction.fromMap(item));
                }
                return new RedactDecision(redactions);
            case "transform":
                Map<String, Object> transformation =
                        Fields.object(map, "transformation", "a transform decision");
                List<Operation> operations = new ArrayList<>();
                for (Object item : Fields.list(transformation, "operations", "a transformation")) {
                    operations.add(Operation.fromMap(item));
                }
                return new TransformDecision(operations);
            default:
                throw new IllegalArgumentException("unknown decision " + decision);
        }
    }
}
