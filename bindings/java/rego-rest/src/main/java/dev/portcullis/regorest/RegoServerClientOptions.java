package dev.portcullis.regorest;

import dev.portcullis.core.ClientOptions;
import java.time.Duration;
import java.util.Map;

/** How to reach a Rego policy server: its address, and optionally a timeout and headers. */
public final class RegoServerClientOptions extends ClientOptions {
    /**
     * Options with an address.
     *
     * @param baseUrl the server's address ({@code http://127.0.0.1:8181})
     */
    public RegoServerClientOptions(String baseUrl) {
        super(baseUrl, null, Map.of());
    }

    /**
     * Options with an address, a timeout and headers.
     *
     * @param baseUrl the server's address
     * @param timeout how long one request may take, or {@code null} for the default
     * @param headers headers sent with every request
     */
    public RegoServerClientOptions(String baseUrl, Duration timeout, Map<String, String> headers) {
        super(baseUrl, timeout, headers);
    }
}
