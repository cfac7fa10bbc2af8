package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import java.time.Instant;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/** The record of one decision of one policy (§5 of the contract). */
public final class AuditRecord {
    private final String policyId;
    private final String decision;
    private final InterceptionPoint interceptionPoint;
    private final String reason;
    private final Instant timestamp;
    private final Object contextJson;
    private volatile PolicyContext context;

    /**
     * A record.
     *
     * @param policyId the policy that decided
     * @param decision the decision's name ({@code allow}, {@code deny}, ..., or
     *     {@code evaluation_error})
     * @param interceptionPoint where
     * @param reason why, or {@code null}
     * @param context the context evaluated
     * @param timestamp when
     */
    public AuditRecord(
            String policyId,
            String decision,
            InterceptionPoint interceptionPoint,
            String reason,
            PolicyContext context,
            Instant timestamp) {
        this.policyId = Objects.requireNonNull(policyId, "policyId");
        this.decision = Objects.requireNonNull(decision, "decision");
        this.interceptionPoint = Objects.requireNonNull(interceptionPoint, "interceptionPoint");
        this.reason = reason;
        this.context = Objects.requireNonNull(context, "context");
        this.contextJson = null;
        this.timestamp = Objects.requireNonNull(timestamp, "timestamp");
    }

    private AuditRecord(Map<String, Object> map) {
        String what = "an audit record";
        this.policyId = Fields.string(map, "policy_id", what);
        this.decision = Fields.string(map, "decision", what);
        this.interceptionPoint =
                InterceptionPoint.fromWireName(Fields.string(map, "interception_point", what));
        Object reason = map.get("reason");
        this.reason = reason instanceof String ? (String) reason : null;
        this.timestamp = Instant.parse(Fields.string(map, "timestamp", what));
        this.contextJson = map.get("context");
    }

    /**
     * A record from its JSON members (as the engine gives them).
     *
     * @param map the members
     * @return the record
     * @throws IllegalArgumentException when they are not a record's
     */
    public static AuditRecord fromMap(Map<String, Object> map) {
        return new AuditRecord(map);
    }

    /**
     * The policy that decided.
     *
     * @return its id
     */
    public String policyId() {
        return policyId;
    }

    /**
     * The decision's name.
     *
     * @return {@code allow}, {@code deny}, {@code audit}, {@code redact}, {@code transform},
     *     {@code escalate} or {@code evaluation_error}
     */
    public String decision() {
        return decision;
    }

    /**
     * Where the decision was taken.
     *
     * @return the point
     */
    public InterceptionPoint interceptionPoint() {
        return interceptionPoint;
    }

    /**
     * Why, when there is a reason (an evaluation error's is its cause).
     *
     * @return the reason
     */
    public Optional<String> reason() {
        return Optional.ofNullable(reason);
    }

    /**
     * The context the policy evaluated (read when first asked for).
     *
     * @return the context
     */
    public PolicyContext context() {
        PolicyContext read = context;
        if (read == null) {
            switch (interceptionPoint) {
                case INPUT:
                    read = InputContext.fromMap(contextJson);
                    break;
                case TOOL_CALL:
                    read = ToolCallContext.fromMap(contextJson);
                    break;
                case TOOL_RESULT:
                    read = ToolResultContext.fromMap(contextJson);
                    break;
                default:
                    read = OutputContext.fromMap(contextJson);
            }
            context = read;
        }
        return read;
    }

    /**
     * When the decision was taken (UTC).
     *
     * @return the time
     */
    public Instant timestamp() {
        return timestamp;
    }

    @Override
    public String toString() {
        return "AuditRecord[policyId=" + policyId + ", decision=" + decision + ", interceptionPoint="
                + interceptionPoint + ", reason=" + reason + ", timestamp=" + timestamp + "]";
    }
}
