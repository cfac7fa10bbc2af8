package dev.portcullis.rego;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.DenyDecision;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.OutputContext;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicySet;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.testing.Fixtures;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The real OPA-built bundles of ../shared/fixtures, evaluated in process. */
class RegoPolicyTest {
    @Test
    void theThreeBundlesDecideAsOpaBuiltThem() {
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(new RegoInputPolicy("no-ssn", Fixtures.bundle("no-ssn-input.tar.gz").toString())))
                        .toolCall(List.of(new RegoToolCallPolicy("approved-tools", Fixtures.bundle("approved-tools.tar.gz"))))
                        .output(List.of(new RegoOutputPolicy("no-blocked-domain", Fixtures.bundle("no-blocked-domain-output.tar.gz"))))
                        .build())
                .build();

        InputContext clean = Fixtures.input("hello");
        assertSame(clean, engine.evaluateInput(clean));
        PolicyDenialError ssn = assertThrows(PolicyDenialError.class,
                () -> engine.evaluateInput(Fixtures.input("hi", "my SSN is 123-45-6789")));
        assertEquals("no-ssn", ssn.policyId());
        assertEquals("Message contains a potential SSN.", ssn.getMessage());

        ToolCallContext search = Fixtures.toolCall("web_search");
        assertSame(search, engine.evaluateToolCall(search));
        PolicyDenialError tool = assertThrows(PolicyDenialError.class,
                () -> engine.evaluateToolCall(Fixtures.toolCall("Web_Search")));
        assertEquals("Tool is not in the approved list.", tool.getMessage());

        OutputContext fine = Fixtures.output("see example.com");
        assertSame(fine, engine.evaluateOutput(fine));
        assertThrows(PolicyDenialError.class, () -> engine.evaluateOutput(Fixtures.output("go to phishing.example")));
    }

    @Test
    void aBundleEvaluatesAloneToo() {
        RegoToolCallPolicy policy = new RegoToolCallPolicy("approved-tools", Fixtures.bundle("approved-tools.tar.gz"));
        assertEquals("approved-tools", policy.id());
        assertEquals(AllowDecision.allow(), policy.evaluate(Fixtures.toolCall("read_file")));
        DenyDecision denied = assertInstanceOf(DenyDecision.class, policy.evaluate(Fixtures.toolCall("rm")));
        assertEquals("Tool is not in the approved list.", denied.reason());
    }

    @Test
    void aBundleThatCannotBeOpenedIsRefusedSayingWhy() {
        IllegalArgumentException missing = assertThrows(IllegalArgumentException.class,
                () -> new RegoInputPolicy("missing", "/nonexistent/bundle.tar.gz"));
        assertTrue(missing.getMessage().contains("/nonexistent/bundle.tar.gz"), missing.getMessage());
        assertThrows(IllegalArgumentException.class,
                () -> new RegoInputPolicy("not-a-bundle", Fixtures.table().resolve("table.json").toString()));
    }
}
