package dev.portcullis.otel;

import dev.portcullis.core.AuditHandler;
import dev.portcullis.core.AuditRecord;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * Audit handlers that turn each audit record into one OpenTelemetry span named
 * {@code engine.policy.evaluate}, started at the record's time, with the attributes
 * {@code engine.policy_id}, {@code engine.decision}, {@code engine.interception_point} and
 * {@code engine.reason} (when there is a reason); its status is an error for {@code deny} and
 * {@code evaluation_error}, ok otherwise.
 */
public final class OtelAuditHandlers {
    /** The instrumentation scope of the spans. */
    public static final String INSTRUMENTATION_NAME = "dev.portcullis";

    private OtelAuditHandlers() {}

    /**
     * A handler on the global {@code OpenTelemetry}'s tracer (looked up for each record, so a
     * global instance set later is used).
     *
     * @return the handler
     */
    public static AuditHandler create() {
        return handler(() -> GlobalOpenTelemetry.getTracer(INSTRUMENTATION_NAME));
    }

    /**
     * A handler on a tracer.
     *
     * @param tracer the tracer
     * @return the handler
     */
    public static AuditHandler create(Tracer tracer) {
        Objects.requireNonNull(tracer, "tracer");
        return handler(() -> tracer);
    }

    private static AuditHandler handler(Supplier<Tracer> tracer) {
        return record -> span(tracer.get(), record);
    }

    private static void span(Tracer tracer, AuditRecord record) {
        Span span = tracer.spanBuilder("engine.policy.evaluate")
                .setStartTimestamp(record.timestamp())
                .setAttribute("engine.policy_id", record.policyId())
                .setAttribute("engine.decision", record.decision())
                .setAttribute("engine.interception_point", record.interceptionPoint().wireName())
                .startSpan();
        record.reason().ifPresent(reason -> span.setAttribute("engine.reason", reason));
        boolean failed = record.decision().equals("deny") || record.decision().equals("evaluation_error");
        if (failed) {
            span.setStatus(StatusCode.ERROR, record.reason().orElse(record.decision()));
        } else {
            span.setStatus(StatusCode.OK);
        }
        span.end();
    }
}
