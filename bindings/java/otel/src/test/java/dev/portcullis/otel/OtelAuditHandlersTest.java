package dev.portcullis.otel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.portcullis.core.AllowDecision;
import dev.portcullis.core.DenyDecision;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.PolicyDecision;
import dev.portcullis.core.PolicyDenialError;
import dev.portcullis.core.PolicyEngine;
import dev.portcullis.core.PolicySet;
import dev.portcullis.testing.Fixtures;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Audit records as OpenTelemetry spans, read back from the SDK's in-memory exporter. */
class OtelAuditHandlersTest {
    static final class Gate implements InputPolicy {
        @Override
        public String id() {
            return "gate";
        }

        @Override
        public PolicyDecision evaluate(InputContext ctx) {
            return ctx.messages().get(0).content().equals("no") ? DenyDecision.deny("closed") : AllowDecision.allow();
        }
    }

    @Test
    void eachRecordBecomesASpan() {
        InMemorySpanExporter exporter = InMemorySpanExporter.create();
        SdkTracerProvider provider =
                SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(exporter)).build();
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(new Gate())).build())
                .onAudit(OtelAuditHandlers.create(provider.get("test")))
                .build();
        engine.evaluateInput(Fixtures.input("yes"));
        assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("no")));

        List<SpanData> spans = exporter.getFinishedSpanItems();
        assertEquals(2, spans.size());
        SpanData allow = spans.get(0);
        assertEquals("engine.policy.evaluate", allow.getName());
        assertEquals("gate", allow.getAttributes().get(AttributeKey.stringKey("engine.policy_id")));
        assertEquals("allow", allow.getAttributes().get(AttributeKey.stringKey("engine.decision")));
        assertEquals("input", allow.getAttributes().get(AttributeKey.stringKey("engine.interception_point")));
        assertNull(allow.getAttributes().get(AttributeKey.stringKey("engine.reason")));
        assertEquals(StatusCode.OK, allow.getStatus().getStatusCode());
        SpanData deny = spans.get(1);
        assertEquals("deny", deny.getAttributes().get(AttributeKey.stringKey("engine.decision")));
        assertEquals("closed", deny.getAttributes().get(AttributeKey.stringKey("engine.reason")));
        assertEquals(StatusCode.ERROR, deny.getStatus().getStatusCode());
        provider.close();
    }

    @Test
    void theGlobalTracerIsTheDefault() {
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(new Gate())).build())
                .onAudit(OtelAuditHandlers.create())
                .build();
        InputContext ctx = Fixtures.input("yes");
        assertEquals(ctx, engine.evaluateInput(ctx));
    }
}
