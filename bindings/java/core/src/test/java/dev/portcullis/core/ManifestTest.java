package dev.portcullis.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.testing.Fixtures;
import dev.portcullis.testing.Fixtures.JsonServer;
import dev.portcullis.testing.RedisServer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code PolicyEngine.fromManifest(Path)}: a manifest naming DSL rules, bundles and a remote endpoint. */
class ManifestTest {
    @TempDir
    Path dir;

    @Test
    void aManifestBuildsItsEngine() throws Exception {
        try (JsonServer server = new JsonServer((path, body) -> new Object[] {200,
                body.contains("\"rm\"") ? "{\"decision\":\"deny\",\"reason\":\"remote: no rm\"}" : "{\"decision\":\"allow\"}"})) {
            Path manifest = dir.resolve("portcullis.yaml");
            Files.writeString(manifest, String.join("\n",
                    "on_error: deny",
                    "input:",
                    "  - dsl: " + Fixtures.table().resolve("dsl/input/no_ssn.json"),
                    "  - rego: " + Fixtures.bundle("no-ssn-input.tar.gz"),
                    "tool_call:",
                    "  - http: " + server.baseUrl(),
                    "    id: remote-tools",
                    "  - rego: " + Fixtures.bundle("approved-tools.tar.gz"),
                    ""));
            List<String> records = Collections.synchronizedList(new ArrayList<>());
            PolicyEngine engine = PolicyEngine.fromManifest(manifest, record -> records.add(record.policyId()));
            InputContext hello = Fixtures.input("hello");
            assertSame(hello, engine.evaluateInput(hello));
            assertEquals(List.of("no_ssn", "no-ssn-input"), records);
            assertEquals("no_ssn",
                    assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("my ssn"))).policyId());
            assertEquals("no-ssn-input", assertThrows(PolicyDenialError.class,
                    () -> engine.evaluateInput(Fixtures.input("123-45-6789"))).policyId());
            assertEquals("remote: no rm", assertThrows(PolicyDenialError.class,
                    () -> engine.evaluateToolCall(Fixtures.toolCall("rm"))).getMessage());
            ToolCallContext search = Fixtures.toolCall("web_search");
            assertSame(search, PolicyEngine.fromManifest(manifest).evaluateToolCall(search));
        }
    }

    @Test
    void approvalsKeptInRedisReachEveryReplicaAndAGrantIsUsedOnce() throws Exception {
        Optional<RedisServer> started = RedisServer.start();
        Assumptions.assumeTrue(started.isPresent(), "redis-server is not installed");
        try (RedisServer redis = started.get()) {
            Files.writeString(dir.resolve("pay.json"), "{\"condition\": {\"field\": \"tool_name\", \"equals\": \"pay\"},"
                    + " \"action\": \"escalate\", \"reason\": \"money moves\"}");
            Path manifest = dir.resolve("replicas.yaml");
            Files.writeString(manifest, String.join("\n",
                    "tool_call:",
                    "  - dsl: pay.json",
                    "approvals: { store: '" + redis.url() + "', timeout: 5m }",
                    "sessions: { store: '" + redis.url() + "', ttl: 1h }",
                    ""));
            // Two replicas of one service: one store.
            PolicyEngine first = PolicyEngine.fromManifest(manifest);
            PolicyEngine second = PolicyEngine.fromManifest(manifest);
            ApprovalRequiredError asked =
                    assertThrows(ApprovalRequiredError.class, () -> first.evaluateToolCall(Fixtures.toolCall("pay")));
            ApprovalRequiredError again =
                    assertThrows(ApprovalRequiredError.class, () -> second.evaluateToolCall(Fixtures.toolCall("pay")));
            assertEquals(asked.request().get("id"), again.request().get("id"),
                    "the retry on the other replica is the same request");

            first.grant((String) asked.request().get("action_digest"), "erin", Duration.ofMinutes(1));
            ToolCallContext call = Fixtures.toolCall("pay");
            assertSame(call, second.evaluateToolCall(call));
            for (PolicyEngine engine : List.of(first, second)) {
                assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(Fixtures.toolCall("pay")),
                        "a grant is used once");
            }
        }
    }

    @Test
    void aManifestWithProblemsIsRefusedWithEveryOne() throws Exception {
        Path manifest = dir.resolve("broken.yaml");
        Files.writeString(manifest, "inptu:\n  - dsl: nowhere.json\noutput:\n  - dsl: missing.json\n");
        IllegalArgumentException error =
                assertThrows(IllegalArgumentException.class, () -> PolicyEngine.fromManifest(manifest));
        assertTrue(error.getMessage().contains("inptu"), error.getMessage());
        assertTrue(error.getMessage().contains("missing.json"), error.getMessage());
        assertThrows(IllegalArgumentException.class, () -> PolicyEngine.fromManifest(dir.resolve("absent.yaml")));
    }
}
