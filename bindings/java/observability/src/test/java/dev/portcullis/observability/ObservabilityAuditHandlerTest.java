package dev.portcullis.observability;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.PolicyDecision;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicySet;
import dev.portcullis.testing.Fixtures;
import dev.portcullis.testing.Fixtures.JsonServer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Audit records exported over OTLP/HTTP to a loopback server standing in for the platform. */
class ObservabilityAuditHandlerTest {
    @Test
    void recordsAreExportedWithBasicAuthOnFlush() throws Exception {
        try (JsonServer server = new JsonServer((path, body) -> new Object[] {200, ""})) {
            try (ObservabilityAuditHandler handler = ObservabilityAuditHandlers.create(ObservabilityOptions.builder()
                    .publicKey("pk-test")
                    .secretKey("sk-test")
                    .baseUrl(server.baseUrl())
                    .build())) {
                assertEquals(server.baseUrl() + "/api/public/otel/v1/traces", handler.endpoint());
                PolicyEngine engine = PolicyEngine.builder()
                        .policySet(PolicySet.builder().input(List.of(new InputPolicy() {
                            @Override
                            public String id() {
                                return "allow-all";
                            }

                            @Override
                            public PolicyDecision evaluate(InputContext ctx) {
                                return AllowDecision.allow();
                            }
                        })).build())
                        .onAudit(handler)
                        .build();
                engine.evaluateInput(Fixtures.input("hello"));
                handler.flush();
            }
            assertFalse(server.requests.isEmpty(), "a span was posted");
            String[] request = server.requests.get(0);
            assertEquals("/api/public/otel/v1/traces", request[0]);
            String expected = "Basic " + Base64.getEncoder().encodeToString("pk-test:sk-test".getBytes(StandardCharsets.UTF_8));
            assertEquals(expected, request[2]);
            assertTrue(request[1].contains("allow-all"), "the span names the policy");
        }
    }

    @Test
    void aMissingKeyIsAClearError() {
        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> ObservabilityAuditHandlers.create(ObservabilityOptions.builder().publicKey("pk").build()));
        assertTrue(error.getMessage().toLowerCase().contains("secret"), error.getMessage());
    }
}
