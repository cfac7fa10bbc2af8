package dev.portcullis.rego;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.InterceptionPoint;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.PolicyContext;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import dev.portcullis.dsl.DslInputPolicy;
import dev.portcullis.dsl.DslOutputPolicy;
import dev.portcullis.dsl.DslToolCallPolicy;
import dev.portcullis.dsl.DslToolResultPolicy;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.OutputPolicy;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.core.ToolResultPolicy;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.OutputContext;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolResultContext;
import dev.portcullis.testing.Fixtures;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The bindings' shared fixture table (bindings/fixtures/table.json) through the Java API: every
 * case decides as the table says, which is what the Rust engine decides on the same files and
 * contexts (bindings/node/tests/fixture_table.rs checks the table against the engine).
 */
class FixtureTableTest {
    @TestFactory
    Stream<DynamicTest> theBindingGivesTheTablesAnswers() throws IOException {
        Map<String, Object> table = Json.parseObject(Files.readString(Fixtures.table().resolve("table.json")));
        List<Object> cases = Fields.list(table, "cases", "the table");
        assertTrue(cases.size() >= 10, "the table has cases");
        return cases.stream().map(item -> {
            Map<String, Object> c = Fields.object(item, "a case");
            return DynamicTest.dynamicTest(Fields.string(c, "name", "a case"), () -> run(c));
        });
    }

    private static void run(Map<String, Object> c) {
        InterceptionPoint point = InterceptionPoint.fromWireName(Fields.string(c, "point", "a case"));
        Map<String, Object> policy = Fields.object(c, "policy", "a case");
        String id = Fields.string(policy, "id", "a policy");
        NativePolicy<?> made = policy.containsKey("dsl")
                ? dsl(point, id, Fixtures.table().resolve(Fields.string(policy, "dsl", "a policy")))
                : rego(point, id, Fixtures.opa().resolve(Fields.string(policy, "rego", "a policy")));
        PolicySet.Builder set = PolicySet.builder();
        switch (point) {
            case INPUT:
                set.input(List.of((InputPolicy) made));
                break;
            case TOOL_CALL:
                set.toolCall(List.of((ToolCallPolicy) made));
                break;
            case TOOL_RESULT:
                set.toolResult(List.of((ToolResultPolicy) made));
                break;
            default:
                set.output(List.of((OutputPolicy) made));
        }
        PolicyEngine engine = PolicyEngine.builder().policySet(set.build()).build();
        PolicyContext ctx = PolicyContext.fromJson(point, Json.write(c.get("context")));
        Map<String, Object> got = new LinkedHashMap<>();
        try {
            PolicyContext forwarded = evaluate(engine, ctx);
            got.put("forwarded", forwarded == ctx ? null : Json.parse(forwarded.toJson()));
        } catch (PolicyDenialError denial) {
            Map<String, Object> denied = new LinkedHashMap<>();
            denied.put("policy_id", denial.policyId());
            denied.put("reason", denial.reason().orElse(null));
            got.put("denied", denied);
        }
        assertEquals(Json.write(c.get("expect")), Json.write(got));
    }

    private static PolicyContext evaluate(PolicyEngine engine, PolicyContext ctx) {
        if (ctx instanceof InputContext) {
            return engine.evaluateInput((InputContext) ctx);
        } else if (ctx instanceof ToolCallContext) {
            return engine.evaluateToolCall((ToolCallContext) ctx);
        } else if (ctx instanceof ToolResultContext) {
            return engine.evaluateToolResult((ToolResultContext) ctx);
        }
        return engine.evaluateOutput((OutputContext) ctx);
    }

    private static NativePolicy<?> dsl(InterceptionPoint point, String id, Path dir) {
        switch (point) {
            case INPUT:
                return new DslInputPolicy(id, dir);
            case TOOL_CALL:
                return new DslToolCallPolicy(id, dir);
            case TOOL_RESULT:
                return new DslToolResultPolicy(id, dir);
            default:
                return new DslOutputPolicy(id, dir);
        }
    }

    private static NativePolicy<?> rego(InterceptionPoint point, String id, Path bundle) {
        switch (point) {
            case INPUT:
                return new RegoInputPolicy(id, bundle);
            case TOOL_CALL:
                return new RegoToolCallPolicy(id, bundle);
            case TOOL_RESULT:
                return new RegoToolResultPolicy(id, bundle);
            default:
                return new RegoOutputPolicy(id, bundle);
        }
    }
}
