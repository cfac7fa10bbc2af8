package dev.portcullis.rego;

import dev.portcullis.core.AllowDecision;
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
import java.util.List;
import java.util.Map;

/**
 * What a Java caller pays per call, in nanoseconds: a DSL rule, the approved-tools Rego bundle
 * and ten Java allow policies through {@code evaluateToolCall}, beside the ten Java policies
 * called directly in a loop (the floor). Run it with {@code bindings/java/scripts/bench.sh},
 * which builds the native library optimised.
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
    }

    private static List<ToolCallPolicy> concat(List<ToolCallPolicy> first, List<ToolCallPolicy> rest) {
        List<ToolCallPolicy> all = new ArrayList<>(first);
        all.addAll(rest);
        return all;
    }
}
