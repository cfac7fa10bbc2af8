package dev.portcullis.observability;

import dev.portcullis.core.AuditRecord;
import dev.portcullis.core.internal.Native;
import dev.portcullis.core.internal.NativeAuditSink;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;

/**
 * An audit handler that exports every record as a span to an observability platform over
 * OTLP/HTTP (protobuf), on a thread of its own in the native library, with {@code session.id}
 * and {@code user.id} from the context's metadata. An engine built with it hands it every
 * record in the native library, without a call into Java; export never blocks or fails an
 * evaluation. Call {@link #flush()} before shutting down; {@link #close()} flushes and
 * releases it.
 */
public final class ObservabilityAuditHandler implements NativeAuditSink, AutoCloseable {
    private final long handle;
    private final Cleaner.Cleanable cleanable;

    ObservabilityAuditHandler(long handle) {
        this.handle = handle;
        this.cleanable = Native.CLEANER.register(this, () -> Native.sinkFree(handle));
    }

    /**
     * Does nothing: an engine built with this handler gives it the records in the native library.
     *
     * @param record the record
     */
    @Override
    public void handle(AuditRecord record) {}

    @Override
    public long sinkHandle() {
        return handle;
    }

    /**
     * Where spans are posted.
     *
     * @return the endpoint ({@code <baseUrl>/api/public/otel/v1/traces})
     */
    public String endpoint() {
        try {
            return Native.sinkEndpoint(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Exports every span buffered so far, waiting for the platform's answer.
     *
     * @throws IllegalStateException when an export failed, saying why
     */
    public void flush() {
        try {
            Native.sinkFlush(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Flushes, then releases this handler's own native memory (engines built with it keep
     * exporting).
     */
    @Override
    public void close() {
        try {
            flush();
        } finally {
            cleanable.clean();
        }
    }
}
