package dev.portcullis.rego;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.InterceptionPoint;
import dev.portcullis.core.Message;
import dev.portcullis.core.Metadata;
import dev.portcullis.core.OutputContext;
import dev.portcullis.core.PolicyContext;
import dev.portcullis.core.PolicyDecision;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import dev.portcullis.testing.Fixtures;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The engine and Styra's opa-java-wasm (the pure-Java runtime Bench compares the engine with)
 * decide the same on the real OPA-built bundles of ../shared/fixtures, given the same context:
 * the benchmark compares the same work.
 */
class OpaJavaWasmTest {
    @Test
    void theApprovedToolsBundleDecidesTheSameOnBoth() {
        Path bundle = Fixtures.bundle("approved-tools.tar.gz");
        RegoToolCallPolicy ours = new RegoToolCallPolicy("approved-tools", bundle);
        OpaJavaWasm theirs = new OpaJavaWasm(bundle);
        assertEquals("aps/tool_call/decision", theirs.entrypoint);
        List<ToolCallContext> contexts = new ArrayList<>();
        for (String tool : List.of("web_search", "read_file", "summarize", "Web_Search", "rm", "delete_everything")) {
            contexts.add(Fixtures.toolCall(tool));
        }
        // The benchmark's two contexts.
        contexts.add(new ToolCallContext("web_search", Map.of("query", "weather"),
                Message.assistant("calling"), Metadata.of("agent-1", "session-1")));
        contexts.add(new ToolCallContext("delete_everything", Map.of("query", "weather"),
                Message.assistant("calling"), Metadata.of("agent-1", "session-1")));
        int allowed = 0;
        int denied = 0;
        for (ToolCallContext ctx : contexts) {
            PolicyDecision decision = ours.evaluate(ctx);
            assertEquals(decision.toJson(), theirs.decide(ctx).toJson(), ctx.toolName());
            if (decision.decision().equals("allow")) {
                allowed++;
            } else {
                assertEquals("{\"decision\":\"deny\",\"reason\":\"Tool is not in the approved list.\"}", decision.toJson());
                denied++;
            }
        }
        assertEquals(4, allowed);
        assertEquals(4, denied);
    }

    /** Every Rego case of the bindings' shared fixture table (bindings/fixtures/table.json). */
    @TestFactory
    Stream<DynamicTest> theTablesRegoCasesDecideTheSameOnBoth() throws IOException {
        Map<String, Object> table = Json.parseObject(Files.readString(Fixtures.table().resolve("table.json")));
        List<DynamicTest> tests = new ArrayList<>();
        for (Object item : Fields.list(table, "cases", "the table")) {
            Map<String, Object> c = Fields.object(item, "a case");
            Map<String, Object> policy = Fields.object(c, "policy", "a case");
            if (!policy.containsKey("rego")) {
                continue;
            }
            tests.add(DynamicTest.dynamicTest(Fields.string(c, "name", "a case"), () -> {
                InterceptionPoint point = InterceptionPoint.fromWireName(Fields.string(c, "point", "a case"));
                Path bundle = Fixtures.opa().resolve(Fields.string(policy, "rego", "a policy"));
                PolicyContext ctx = PolicyContext.fromJson(point, Json.write(c.get("context")));
                PolicyDecision ours = ours(point, bundle, ctx);
                assertEquals(ours.toJson(), new OpaJavaWasm(bundle).decide(ctx).toJson());
                // And both as the table expects: denied with its reason, or let through.
                Map<String, Object> expect = Fields.object(c, "expect", "a case");
                assertEquals(expect.containsKey("denied") ? "deny" : "allow", ours.decision());
            }));
        }
        assertTrue(tests.size() >= 6, "the table has the three bundles' cases");
        return tests.stream();
    }

    private static PolicyDecision ours(InterceptionPoint point, Path bundle, PolicyContext ctx) {
        switch (point) {
            case INPUT:
                return new RegoInputPolicy("p", bundle).evaluate((InputContext) ctx);
            case TOOL_CALL:
                return new RegoToolCallPolicy("p", bundle).evaluate((ToolCallContext) ctx);
            case TOOL_RESULT:
                return new RegoToolResultPolicy("p", bundle).evaluate((ToolResultContext) ctx);
            default:
                return new RegoOutputPolicy("p", bundle).evaluate((OutputContext) ctx);
        }
    }
}
