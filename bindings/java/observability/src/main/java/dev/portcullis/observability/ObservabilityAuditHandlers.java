package dev.portcullis.observability;

import dev.portcullis.core.internal.Native;
import java.util.Objects;

/** Creates {@link ObservabilityAuditHandler}s. */
public final class ObservabilityAuditHandlers {
    private ObservabilityAuditHandlers() {}

    /**
     * A handler with options.
     *
     * @param options the keys and the address
     * @return the handler
     * @throws IllegalArgumentException when a key is missing or the address is invalid
     */
    public static ObservabilityAuditHandler create(ObservabilityOptions options) {
        Objects.requireNonNull(options, "options");
        return new ObservabilityAuditHandler(Native.observabilitySink(options.toJson()));
    }

    /**
     * A handler from the {@code OBS_PUBLIC_KEY}, {@code OBS_SECRET_KEY} and {@code OBS_BASE_URL}
     * environment variables.
     *
     * @return the handler
     * @throws IllegalArgumentException when a key is missing or the address is invalid
     */
    public static ObservabilityAuditHandler create() {
        return new ObservabilityAuditHandler(Native.observabilitySink(null));
    }
}
