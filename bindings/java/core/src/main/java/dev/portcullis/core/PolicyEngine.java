package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.HostPolicyAdapter;
import dev.portcullis.core.internal.Json;
import dev.portcullis.core.internal.Native;
import dev.portcullis.core.internal.NativeAuditSink;
import java.lang.ref.Reference;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Function;

/**
 * The policy engine: built once, shared by every thread, called at each interception point.
 * Each {@code evaluate*} method runs the point's policies (in the native engine, on the calling
 * thread) and returns the context to forward: the same instance when nothing changed, a new
 * one when a redaction or transform applied. It throws {@link PolicyDenialError} when a policy
 * denies, {@link PolicyEvaluationError} when one cannot be evaluated (and the set's
 * {@code onError} is {@code DENY}), and {@link ApprovalRequiredError} when one escalates.
 *
 * <p>The audit handler receives every record of a call on the calling thread before the call
 * returns or throws. Native memory is freed once the engine is unreachable.
 */
public final class PolicyEngine {
    /** The longest lifetime of a grant. */
    private static final java.time.Duration MAX_GRANT_TTL = java.time.Duration.ofDays(30);

    private final long handle;
    private final AuditHandler onAudit;

    private PolicyEngine(long handle, AuditHandler onAudit) {
        this.handle = handle;
        this.onAudit = onAudit;
        Native.CLEANER.register(this, () -> Native.engineFree(handle));
    }

    /**
     * A builder of an engine.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The engine a manifest describes (§10 of the contract).
     *
     * @param path the manifest (YAML or JSON)
     * @return the engine
     * @throws IllegalArgumentException with every problem of the manifest
     */
    public static PolicyEngine fromManifest(Path path) {
        return fromManifest(path, null);
    }

    /**
     * The engine a manifest describes, with an audit handler (the manifest's own audit sinks
     * receive the records too).
     *
     * @param path the manifest (YAML or JSON)
     * @param onAudit the audit handler, or {@code null}
     * @return the engine
     * @throws IllegalArgumentException with every problem of the manifest
     */
    public static PolicyEngine fromManifest(Path path, AuditHandler onAudit) {
        Objects.requireNonNull(path, "path");
        long sink = onAudit instanceof NativeAuditSink ? ((NativeAuditSink) onAudit).sinkHandle() : 0;
        AuditHandler kept = onAudit instanceof NativeAuditSink ? null : onAudit;
        try {
            long engine = Native.engineFromManifest(path.toString(), kept != null, sink);
            return new PolicyEngine(engine, kept);
        } finally {
            Reference.reachabilityFence(onAudit);
        }
    }

    /**
     * Evaluates the {@code input} policies.
     *
     * @param ctx the context
     * @return the context to forward
     */
    public InputContext evaluateInput(InputContext ctx) {
        return evaluate(InterceptionPoint.INPUT, ctx, InputContext::fromMap);
    }

    /**
     * Evaluates the {@code tool_call} policies.
     *
     * @param ctx the context
     * @return the context to forward
     */
    public ToolCallContext evaluateToolCall(ToolCallContext ctx) {
        return evaluate(InterceptionPoint.TOOL_CALL, ctx, ToolCallContext::fromMap);
    }

    /**
     * Evaluates the {@code tool_result} policies.
     *
     * @param ctx the context
     * @return the context to forward
     */
    public ToolResultContext evaluateToolResult(ToolResultContext ctx) {
        return evaluate(InterceptionPoint.TOOL_RESULT, ctx, ToolResultContext::fromMap);
    }

    /**
     * Evaluates the {@code output} policies.
     *
     * @param ctx the context
     * @return the context to forward
     */
    public OutputContext evaluateOutput(OutputContext ctx) {
        return evaluate(InterceptionPoint.OUTPUT, ctx, OutputContext::fromMap);
    }

    /**
     * Records that a person approved an escalated action, so that the same call, retried,
     * proceeds. The grant is for the action whose digest is {@code actionDigest} (the
     * {@code action_digest} of {@link ApprovalRequiredError#request()}): the same context (its
     * timestamp aside) at the same point, so a call with other arguments still escalates. It is
     * used once: the first call it lets through consumes it, and it expires after {@code ttl}
     * when unused. The grant is kept in this engine's grant store (in memory), for this engine
     * only.
     *
     * <pre>{@code
     * try {
     *     engine.evaluateToolCall(ctx);
     * } catch (ApprovalRequiredError e) {
     *     // ... a person approves ...
     *     engine.grant((String) e.request().get("action_digest"), "erin", Duration.ofMinutes(5));
     *     engine.evaluateToolCall(ctx); // proceeds, once
     * }
     * }</pre>
     *
     * @param actionDigest the approved action's digest
     * @param by who approved (recorded in the audit trail)
     * @param ttl how long the grant may wait for its call: positive, at most 30 days
     * @throws NullPointerException when an argument is {@code null}
     * @throws IllegalArgumentException when {@code actionDigest} or {@code by} is blank, or
     *     {@code ttl} is not positive or longer than 30 days
     * @throws IllegalStateException when the grant store fails to record the grant, or when
     *     called from inside one of this engine's evaluations
     */
    public void grant(String actionDigest, String by, java.time.Duration ttl) {
        Objects.requireNonNull(actionDigest, "actionDigest");
        Objects.requireNonNull(by, "by");
        Objects.requireNonNull(ttl, "ttl");
        if (actionDigest.isBlank()) {
            throw new IllegalArgumentException("actionDigest must not be blank");
        }
        if (by.isBlank()) {
            throw new IllegalArgumentException("by must not be blank");
        }
        if (ttl.isNegative() || ttl.isZero()) {
            throw new IllegalArgumentException("ttl must be positive, not " + ttl);
        }
        if (ttl.compareTo(MAX_GRANT_TTL) > 0) {
            throw new IllegalArgumentException("ttl must be at most " + MAX_GRANT_TTL + ", not " + ttl);
        }
        try {
            Native.engineGrant(handle, actionDigest, by, ttl.toNanos());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    private <C extends PolicyContext> C evaluate(InterceptionPoint point, C ctx, Function<Object, C> read) {
        Objects.requireNonNull(ctx, "ctx");
        Throwable[] thrown = new Throwable[1];
        byte[] text;
        try {
            text = Native.engineEvaluate(
                    handle, point.ordinal(), ctx, ctx.toJson().getBytes(StandardCharsets.UTF_8), thrown);
        } finally {
            Reference.reachabilityFence(this);
        }
        if (text == null) {
            // Forwarded unchanged, and no audit records.
            return ctx;
        }
        Map<String, Object> outcome = Json.parseObject(text);
        if (onAudit != null) {
            Object records = outcome.get("records");
            if (records instanceof List) {
                // A record whose context is 0 evaluated the call's own context, which the
                // outcome carries once: such records share that one reading of it.
                Object callContext = outcome.get("call_context");
                for (Object record : (List<?>) records) {
                    Map<String, Object> members = Fields.object(record, "an audit record");
                    if (callContext != null && Long.valueOf(0).equals(members.get("context"))) {
                        members.put("context", callContext);
                    }
                    onAudit.handle(AuditRecord.fromMap(members));
                }
            }
        }
        String kind = Fields.string(outcome, "outcome", "an outcome");
        switch (kind) {
            case "forward":
                Object changed = outcome.get("context");
                return changed == null ? ctx : read.apply(changed);
            case "denied":
                throw new PolicyDenialError(
                        Fields.string(outcome, "policy_id", "a denial"),
                        InterceptionPoint.fromWireName(Fields.string(outcome, "interception_point", "a denial")),
                        outcome.get("reason") instanceof String ? (String) outcome.get("reason") : null,
                        Fields.string(outcome, "message", "a denial"));
            case "evaluation_error":
                throw new PolicyEvaluationError(
                        Fields.string(outcome, "policy_id", "an evaluation error"),
                        InterceptionPoint.fromWireName(
                                Fields.string(outcome, "interception_point", "an evaluation error")),
                        Fields.string(outcome, "cause", "an evaluation error"),
                        thrown[0]);
            case "approval_required":
                Object policyId = outcome.get("policy_id");
                return approvalRequired(
                        policyId instanceof String ? (String) policyId : "",
                        InterceptionPoint.fromWireName(
                                Fields.string(outcome, "interception_point", "an approval request")),
                        Fields.object(outcome, "request", "an approval request"));
            case "invalid_context":
                throw new IllegalArgumentException(Fields.string(outcome, "message", "an outcome"));
            default:
                throw new IllegalStateException("unknown outcome " + kind);
        }
    }

    private static <C> C approvalRequired(
            String policyId, InterceptionPoint point, Map<String, Object> request) {
        @SuppressWarnings("unchecked")
        Map<String, Object> frozen = (Map<String, Object>) Json.freeze(request);
        throw new ApprovalRequiredError(policyId, point, frozen);
    }

    /** Builds a {@link PolicyEngine}. */
    public static final class Builder {
        private PolicySet policySet = PolicySet.builder().build();
        private AuditHandler onAudit;

        private Builder() {}

        /**
         * Sets the policies.
         *
         * @param policySet the policy set
         * @return this builder
         */
        public Builder policySet(PolicySet policySet) {
            this.policySet = Objects.requireNonNull(policySet, "policySet");
            return this;
        }

        /**
         * Sets the handler of the audit records.
         *
         * @param onAudit the handler (a lambda, {@code OtelAuditHandlers.create()},
         *     {@code ObservabilityAuditHandlers.create()}), or {@code null} for none
         * @return this builder
         */
        public Builder onAudit(AuditHandler onAudit) {
            this.onAudit = onAudit;
            return this;
        }

        /**
         * The engine.
         *
         * @return the engine
         * @throws IllegalArgumentException when a policy cannot go where it was put
         */
        public PolicyEngine build() {
            long set = Native.policySetNew(policySet.onError() == OnErrorBehavior.ALLOW ? "allow" : "deny");
            try {
                add(set, InterceptionPoint.INPUT, policySet.input());
                add(set, InterceptionPoint.TOOL_CALL, policySet.toolCall());
                add(set, InterceptionPoint.TOOL_RESULT, policySet.toolResult());
                add(set, InterceptionPoint.OUTPUT, policySet.output());
                long sink = onAudit instanceof NativeAuditSink ? ((NativeAuditSink) onAudit).sinkHandle() : 0;
                AuditHandler kept = onAudit instanceof NativeAuditSink ? null : onAudit;
                long engine = Native.engineNew(set, kept != null, sink);
                return new PolicyEngine(engine, kept);
            } finally {
                Native.policySetFree(set);
                Reference.reachabilityFence(onAudit);
            }
        }

        private static void add(long set, InterceptionPoint point, List<? extends Policy<?>> policies) {
            for (Policy<?> policy : policies) {
                if (policy instanceof NativePolicy) {
                    NativePolicy<?> own = (NativePolicy<?>) policy;
                    try {
                        Native.policySetAddNative(set, point.ordinal(), own.handle());
                    } finally {
                        Reference.reachabilityFence(own);
                    }
                } else {
                    String id = Objects.requireNonNull(policy.id(), "a policy's id() returned null");
                    java.time.Duration deadline = policy.deadline();
                    long millis = deadline == null ? 0 : Math.max(1, deadline.toMillis());
                    @SuppressWarnings("unchecked")
                    Policy<? extends PolicyContext> typed = (Policy<? extends PolicyContext>) policy;
                    Native.policySetAddJava(set, point.ordinal(), id, new HostPolicyAdapter(typed, point), millis);
                }
            }
        }
    }
}
