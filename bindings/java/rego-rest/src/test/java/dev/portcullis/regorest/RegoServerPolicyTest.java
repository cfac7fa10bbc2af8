package dev.portcullis.regorest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicyEvaluationError;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.internal.Json;
import dev.portcullis.testing.Fixtures;
import dev.portcullis.testing.Fixtures.JsonServer;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** A policy on a Rego policy server: a loopback server speaking the OPA REST API's data endpoint. */
class RegoServerPolicyTest {
    @Test
    void theServersDocumentDecides() throws Exception {
        try (JsonServer server = new JsonServer((path, body) -> {
            if (path.equals("/v1/data/portcullis/tool_call")) {
                Map<String, Object> input = (Map<String, Object>) Json.parseObject(body).get("input");
                boolean allowed = List.of("search", "read_file").contains(input.get("tool_name"));
                return new Object[] {200, "{\"result\":{\"decision\":\"" + (allowed ? "allow" : "deny")
                        + "\",\"reason\":\"not approved\"}}"};
            }
            if (path.equals("/v1/data/portcullis/input")) {
                return new Object[] {200, "{\"result\":{\"decision\":\"deny\",\"reason\":\"from opa\"}}"};
            }
            return new Object[] {404, "{\"code\":\"undefined\",\"message\":\"no such package\"}"};
        })) {
            RegoServerClientOptions options = new RegoServerClientOptions(server.baseUrl());
            PolicyEngine engine = PolicyEngine.builder()
                    .policySet(PolicySet.builder()
                            .input(List.of(new RegoServerInputPolicy("opa-input", options, "portcullis/input")))
                            .toolCall(List.of(new RegoServerToolCallPolicy("opa-tools", options, "portcullis/tool_call")))
                            .build())
                    .build();
            ToolCallContext ctx = Fixtures.toolCall("search");
            assertSame(ctx, engine.evaluateToolCall(ctx));
            PolicyDenialError denied =
                    assertThrows(PolicyDenialError.class, () -> engine.evaluateToolCall(Fixtures.toolCall("rm")));
            assertEquals("opa-tools", denied.policyId());
            assertEquals("not approved", denied.getMessage());
            assertEquals("from opa",
                    assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("x"))).getMessage());
            assertEquals("/v1/data/portcullis/tool_call", server.requests.get(0)[0]);
            assertEquals(Json.parse(ctx.toJson()), Json.parseObject(server.requests.get(0)[1]).get("input"));

            PolicyEngine missing = PolicyEngine.builder()
                    .policySet(PolicySet.builder()
                            .input(List.of(new RegoServerInputPolicy("opa", options, "nowhere")))
                            .build())
                    .build();
            PolicyEvaluationError failed =
                    assertThrows(PolicyEvaluationError.class, () -> missing.evaluateInput(Fixtures.input("x")));
            assertTrue(failed.causeText().contains("no such package"), failed.causeText());
        }
    }
}
