package dev.portcullis.rego;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.DenyDecision;
import dev.portcullis.core.Message;
import dev.portcullis.core.Metadata;
import dev.portcullis.core.PolicyDecision;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.dsl.DslToolCallPolicy;
import dev.portcullis.testing.Fixtures;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * What a Java caller pays per call, in nanoseconds: a DSL rule, the approved-tools Rego bundle
 * and ten Java allow policies through {@code evaluateToolCall}, beside the ten Java policies
 * called directly in a loop (the floor); then the approved-tools bundle through the engine
 * beside the same bundle on Styra's opa-java-wasm, a pure-Java OPA WebAssembly runtime, and the
 * ratio of the two. Run it with {@code bindings/java/scripts/bench.sh}, which builds the native
 * library optimised.
 */
public final class Bench {
    private Bench() {}

    /** A Java policy that allows everything. */
    static final class Allow implements ToolCallPolicy {
        private final String id;

        Allow(int n) {
            this.id = "allow-" + n;
        }

        @Override
        public String id() {
            return id;
        }

        @Override
        public PolicyDecision evaluate(ToolCallContext ctx) {
            return AllowDecision.allow();
        }
    }

    interface Call {
        void run(ToolCallContext ctx);
    }

    /** The best of five runs of {@code calls} calls, in nanoseconds per call. */
    static double perCall(Call call, ToolCallContext ctx, int calls) {
        double best = Double.MAX_VALUE;
        for (int round = 0; round < 5; round++) {
            long start = System.nanoTime();
            for (int i = 0; i < calls; i++) {
                call.run(ctx);
            }
            best = Math.min(best, (System.nanoTime() - start) / (double) calls);
        }
        return best;
    }

    static volatile Object sink;

    /**
     * Runs the benchmark.
     *
     * @param args the number of calls per run (default 200000)
     * @throws Exception when the rule file cannot be written
     */
    public static void main(String[] args) throws Exception {
        int calls = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        Path rules = Files.createTempDirectory("portcullis-bench");
        Files.writeString(rules.resolve("approved.json"),
                "{\"condition\":{\"field\":\"tool_name\",\"not_in\":[\"web_search\",\"read_file\",\"summarize\"]},"
                        + "\"action\":\"deny\",\"reason\":\"Tool is not in the approved list.\"}");
        List<ToolCallPolicy> tenJava = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            tenJava.add(new Allow(i));
        }
        PolicyEngine dsl = PolicyEngine.builder()
                .policySet(PolicySet.builder().toolCall(List.of(new DslToolCallPolicy("approved", rules))).build())
                .build();
        PolicyEngine rego = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .toolCall(List.of(new RegoToolCallPolicy("approved-tools", Fixtures.bundle("approved-tools.tar.gz"))))
                        .build())
                .build();
        PolicyEngine java = PolicyEngine.builder()
                .policySet(PolicySet.builder().toolCall(tenJava).build())
                .build();
        PolicyEngine all = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .toolCall(concat(List.of(new DslToolCallPolicy("approved", rules),
                                new RegoToolCallPolicy("approved-tools", Fixtures.bundle("approved-tools.tar.gz"))), tenJava))
                        .build())
                .build();
        ToolCallContext allowed = new ToolCallContext("web_search", Map.of("query", "weather"),
                Message.assistant("calling"), Metadata.of("agent-1", "session-1"));
        ToolCallContext refused = new ToolCallContext("delete_everything", Map.of("query", "weather"),
                Message.assistant("calling"), Metadata.of("agent-1", "session-1"));

        Call direct = ctx -> {
            for (ToolCallPolicy policy : tenJava) {
                sink = policy.evaluate(ctx);
            }
        };
        Call deniedByDsl = ctx -> {
            try {
                dsl.evaluateToolCall(ctx);
            } catch (PolicyDenialError expected) {
                sink = expected;
            }
        };
        // Warm up the JIT and the engines.
        for (Call call : List.<Call>of(direct, c -> dsl.evaluateToolCall(c), c -> rego.evaluateToolCall(c),
                c -> java.evaluateToolCall(c), c -> all.evaluateToolCall(c))) {
            perCall(call, allowed, calls / 10);
        }
        double floor = perCall(direct, allowed, calls);
        double tenThroughEngine = perCall(c -> sink = java.evaluateToolCall(c), allowed, calls);
        Object[][] rows = {
            {"10 Java allow policies called directly (the floor)", floor},
            {"10 Java allow policies through evaluateToolCall", tenThroughEngine},
            {"DSL rule, evaluateToolCall (allow)", perCall(c -> sink = dsl.evaluateToolCall(c), allowed, calls)},
            {"DSL rule, evaluateToolCall (deny)", perCall(deniedByDsl, refused, calls)},
            {"approved-tools bundle, evaluateToolCall (allow)", perCall(c -> sink = rego.evaluateToolCall(c), allowed, calls)},
            {"DSL rule + bundle + 10 Java policies (allow)", perCall(c -> sink = all.evaluateToolCall(c), allowed, calls)},
        };
        for (Object[] row : rows) {
            System.out.printf("%-55s %10.0f ns/call%n", row[0], (Double) row[1]);
        }
        System.out.printf("engine / direct, 10 Java policies: %.1fx%n", tenThroughEngine / floor);
        againstOpaJavaWasm(rego, allowed, refused, calls / 4);
    }

    /**
     * The approved-tools bundle through the engine beside the same bundle on Styra's
     * opa-java-wasm (pure Java, on Chicory, its WebAssembly compiled to JVM bytecode, the
     * library's default), from the same context to a decision: for opa-java-wasm, the context's
     * JSON (the input document the engine writes for a Rego policy), {@code evaluate} on the
     * bundle's entrypoint, and the result set read as a decision. Both are checked to decide
     * the same before anything is timed; the rounds alternate between the two, and each figure
     * is the median of the rounds.
     */
    static void againstOpaJavaWasm(PolicyEngine rego, ToolCallContext allowed, ToolCallContext refused, int calls) {
        OpaJavaWasm opa = new OpaJavaWasm(Fixtures.bundle("approved-tools.tar.gz"));
        if (rego.evaluateToolCall(allowed) != allowed || !opa.decide(allowed).decision().equals("allow")) {
            throw new IllegalStateException("the two runtimes do not both allow " + allowed.toJson());
        }
        PolicyDecision theirs = opa.decide(refused);
        try {
            rego.evaluateToolCall(refused);
            throw new IllegalStateException("the engine allows " + refused.toJson());
        } catch (PolicyDenialError denial) {
            if (!(theirs instanceof DenyDecision) || !denial.reason().equals(((DenyDecision) theirs).reasonText())) {
                throw new IllegalStateException("the two runtimes decide differently on " + refused.toJson()
                        + ": " + denial.getMessage() + " / " + theirs.toJson());
            }
        }
        String input = allowed.toJson();
        Call ours = c -> sink = rego.evaluateToolCall(c);
        Call oursDenied = c -> {
            try {
                rego.evaluateToolCall(c);
            } catch (PolicyDenialError expected) {
                sink = expected;
            }
        };
        Call opaDecides = c -> sink = opa.decide(c);
        Call opaEvaluates = c -> sink = opa.evaluate(input);
        Object[][] rows = {
            {"portcullis, evaluateToolCall (allow)", ours, allowed},
            {"opa-java-wasm, context to decision (allow)", opaDecides, allowed},
            {"opa-java-wasm, evaluate alone, input prepared (allow)", opaEvaluates, allowed},
            {"portcullis, evaluateToolCall (deny)", oursDenied, refused},
            {"opa-java-wasm, context to decision (deny)", opaDecides, refused},
        };
        int rounds = 7;
        double[][] times = new double[rows.length][rounds];
        for (int warm = 0; warm < 3; warm++) {
            for (Object[] row : rows) {
                once((Call) row[1], (ToolCallContext) row[2], calls);
            }
        }
        for (int round = 0; round < rounds; round++) {
            for (int i = 0; i < rows.length; i++) {
                times[i][round] = once((Call) rows[i][1], (ToolCallContext) rows[i][2], calls);
            }
        }
        System.out.printf("%napproved-tools bundle, portcullis against opa-java-wasm %s (median of %d rounds of %d calls)%n",
                OpaJavaWasm.version(), rounds, calls);
        double[] medians = new double[rows.length];
        for (int i = 0; i < rows.length; i++) {
            medians[i] = median(times[i]);
            System.out.printf("%-55s %10.0f ns/call%n", rows[i][0], medians[i]);
        }
        System.out.printf("opa-java-wasm ns / portcullis ns, allow: %.1fx (evaluate alone: %.1fx); deny: %.1fx%n",
                medians[1] / medians[0], medians[2] / medians[0], medians[4] / medians[3]);
    }

    /** One run of {@code calls} calls, in nanoseconds per call. */
    static double once(Call call, ToolCallContext ctx, int calls) {
        long start = System.nanoTime();
        for (int i = 0; i < calls; i++) {
            call.run(ctx);
        }
        return (System.nanoTime() - start) / (double) calls;
    }

    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int mid = sorted.length / 2;
        return sorted.length % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    }

    private static List<ToolCallPolicy> concat(List<ToolCallPolicy> first, List<ToolCallPolicy> rest) {
        List<ToolCallPolicy> all = new ArrayList<>(first);
        all.addAll(rest);
        return all;
    }
}
