package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import dev.portcullis.core.internal.Native;
import java.lang.ref.Reference;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A policy evaluated by the native engine rather than by Java: the base of
 * {@code DslInputPolicy}, {@code RegoInputPolicy}, {@code RegoServerInputPolicy},
 * {@code HttpInputPolicy} and their twins. Its native memory is freed once it is unreachable
 * (an engine built with it keeps what it needs).
 *
 * @param <C> the context of its point
 */
public abstract class NativePolicy<C extends PolicyContext> implements Policy<C> {
    private final long handle;
    private final String id;
    private final InterceptionPoint interceptionPoint;
    private final List<String> problems;
    private final List<String> warnings;

    /**
     * A native policy on a handle the native library gave.
     *
     * @param handle the handle (owned by this object from now on)
     */
    protected NativePolicy(long handle) {
        this.handle = handle;
        Native.CLEANER.register(this, () -> Native.policyFree(handle));
        Map<String, Object> info = Json.parseObject(Native.policyInfo(handle));
        this.id = Fields.string(info, "id", "a policy");
        this.interceptionPoint = InterceptionPoint.fromWireName(Fields.string(info, "point", "a policy"));
        this.problems = strings(Fields.list(info, "problems", "a policy"));
        this.warnings = strings(Fields.list(info, "warnings", "a policy"));
    }

    private static List<String> strings(List<Object> items) {
        List<String> strings = new ArrayList<>();
        for (Object item : items) {
            strings.add(String.valueOf(item));
        }
        return List.copyOf(strings);
    }

    @Override
    public String id() {
        return id;
    }

    /**
     * The point the policy decides at.
     *
     * @return the point
     */
    public InterceptionPoint interceptionPoint() {
        return interceptionPoint;
    }

    /**
     * Why the policy could not be loaded (empty when it loaded): each evaluation fails with these.
     *
     * @return the problems
     */
    public List<String> problems() {
        return problems;
    }

    /**
     * What the rule checker warns about in a rule that loaded.
     *
     * @return the warnings
     */
    public List<String> warnings() {
        return warnings;
    }

    /**
     * The policy's decision alone, outside an engine.
     *
     * @param ctx the context
     * @return the decision
     * @throws PolicyEvaluationError when it cannot decide
     */
    @Override
    public PolicyDecision evaluate(C ctx) {
        String decided;
        try {
            decided = Native.policyEvaluate(handle, ctx.toJson());
        } finally {
            Reference.reachabilityFence(this);
        }
        Map<String, Object> outcome = Json.parseObject(decided);
        if (outcome.containsKey("error")) {
            throw new PolicyEvaluationError(id, interceptionPoint, String.valueOf(outcome.get("error")), null);
        }
        return PolicyDecision.fromMap(outcome.get("decision"));
    }

    /** The handle, for an engine being built (the caller keeps this object reachable). */
    long handle() {
        return handle;
    }
}
