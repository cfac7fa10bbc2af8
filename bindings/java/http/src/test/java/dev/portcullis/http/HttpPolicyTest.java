package dev.portcullis.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicyEvaluationError;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.internal.Json;
import dev.portcullis.testing.Fixtures;
import dev.portcullis.testing.Fixtures.JsonServer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** A remote HTTP policy against a real server on loopback. */
class HttpPolicyTest {
    @Test
    void theEndpointDecides() throws Exception {
        try (JsonServer server = new JsonServer((path, body) -> {
            Map<String, Object> request = Json.parseObject(body);
            String text = Json.write(request.get("context"));
            if (text.contains("forbidden")) {
                return new Object[] {200, "{\"decision\":\"deny\",\"reason\":\"remote says no\"}"};
            }
            return new Object[] {200, "{\"decision\":\"allow\"}"};
        })) {
            PolicyEngine engine = PolicyEngine.builder()
                    .policySet(PolicySet.builder()
                            .input(List.of(new HttpInputPolicy("remote", new HttpClientOptions(server.baseUrl()))))
                            .toolResult(List.of(new HttpToolResultPolicy("remote-results",
                                    new HttpClientOptions(server.baseUrl(), Duration.ofSeconds(5), Map.of("Authorization", "Bearer t")))))
                            .build())
                    .build();
            InputContext fine = Fixtures.input("hello");
            assertSame(fine, engine.evaluateInput(fine));
            PolicyDenialError denied =
                    assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("forbidden")));
            assertEquals("remote", denied.policyId());
            assertEquals("remote says no", denied.getMessage());
            ToolResultContext result = Fixtures.toolResult("sunny");
            assertSame(result, engine.evaluateToolResult(result));

            String[] first = server.requests.get(0);
            assertEquals("/engine/evaluate", first[0]);
            Map<String, Object> body = Json.parseObject(first[1]);
            assertEquals("remote", body.get("policy_id"));
            assertEquals("input", body.get("interception_point"));
            assertEquals(Json.parse(fine.toJson()), body.get("context"));
            String[] last = server.requests.get(server.requests.size() - 1);
            assertEquals("tool_result", Json.parseObject(last[1]).get("interception_point"));
            assertEquals("Bearer t", last[2]);
        }
    }

    @Test
    void remoteFailuresAreEvaluationErrors() throws Exception {
        try (JsonServer server = new JsonServer((path, body) -> new Object[] {500, "{\"error\":\"down\"}"})) {
            PolicyEngine engine = PolicyEngine.builder()
                    .policySet(PolicySet.builder()
                            .input(List.of(new HttpInputPolicy("remote", new HttpClientOptions(server.baseUrl()))))
                            .build())
                    .build();
            PolicyEvaluationError error =
                    assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Fixtures.input("x")));
            assertEquals("remote", error.policyId());
            assertTrue(error.causeText().contains("500"), error.causeText());
        }
        PolicyEngine nobody = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(new HttpInputPolicy("remote", new HttpClientOptions("http://127.0.0.1:9"))))
                        .build())
                .build();
        assertThrows(PolicyEvaluationError.class, () -> nobody.evaluateInput(Fixtures.input("x")));
        assertThrows(IllegalArgumentException.class,
                () -> new HttpInputPolicy("bad", new HttpClientOptions("not a url")));
    }
}
