package dev.portcullis.dsl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.ApprovalRequiredError;
import dev.portcullis.core.DenyDecision;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.InterceptionPoint;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicyEvaluationError;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.testing.Fixtures;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** JSON rule policies, as the seed writes them: {@code new DslInputPolicy("no-pii", "./policies")}. */
class DslPolicyTest {
    private static String dir(String point) {
        return Fixtures.table().resolve("dsl").resolve(point).toString();
    }

    @Test
    void aRuleDeniesThroughTheEngine() {
        DslInputPolicy noSsn = new DslInputPolicy("no_ssn", dir("input"));
        assertEquals("no_ssn", noSsn.id());
        assertEquals(InterceptionPoint.INPUT, noSsn.interceptionPoint());
        assertTrue(noSsn.problems().isEmpty(), noSsn.problems().toString());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(noSsn)).build())
                .build();
        InputContext clean = Fixtures.input("hello there");
        assertSame(clean, engine.evaluateInput(clean));
        PolicyDenialError denied =
                assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("My SSN is 1")));
        assertEquals("no_ssn", denied.policyId());
        assertEquals("No social security numbers.", denied.getMessage());
        DenyDecision alone = assertInstanceOf(DenyDecision.class, noSsn.evaluate(Fixtures.input("my ssn")));
        assertEquals("No social security numbers.", alone.reason());
    }

    @Test
    void aRuleThatCannotBeLoadedFailsEachEvaluation() {
        DslInputPolicy missing = new DslInputPolicy("missing", dir("input"));
        assertFalse(missing.problems().isEmpty());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(missing)).build())
                .build();
        PolicyEvaluationError error =
                assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Fixtures.input("x")));
        assertTrue(error.getMessage().startsWith("Policy evaluation failed for 'missing' at 'input'"),
                error.getMessage());
        assertThrows(PolicyEvaluationError.class, () -> missing.evaluate(Fixtures.input("x")));
    }

    @Test
    void anEscalatingRuleLetsAGrantedCallThroughOnce(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("email_needs_approval.json"),
                "{\"condition\": {\"field\": \"tool_name\", \"equals\": \"send_email\"},"
                        + " \"action\": \"escalate\", \"reason\": \"email leaves the company\"}");
        DslToolCallPolicy rule = new DslToolCallPolicy("email_needs_approval", dir.toString());
        assertTrue(rule.problems().isEmpty(), rule.problems().toString());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().toolCall(List.of(rule)).build())
                .build();
        ToolCallContext call = Fixtures.toolCall("send_email");
        ApprovalRequiredError error = assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
        assertEquals(List.of("email_needs_approval"), error.request().get("policy_ids"));
        assertEquals(List.of("email leaves the company"), error.request().get("reasons"));
        engine.grant((String) error.request().get("action_digest"), "erin", Duration.ofMinutes(1));
        assertSame(call, engine.evaluateToolCall(call));
        assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
        ToolCallContext search = Fixtures.toolCall("web_search");
        assertSame(search, engine.evaluateToolCall(search));
    }

    @Test
    void aRuleIsReadForThePointItWasMadeFor() {
        ToolCallPolicy shell = new DslToolCallPolicy("no_shell", dir("tool_call"));
        assertEquals(InterceptionPoint.TOOL_CALL, ((DslToolCallPolicy) shell).interceptionPoint());
        assertThrows(IllegalArgumentException.class, () -> new DslInputPolicy("x", (String) null));
    }
}
