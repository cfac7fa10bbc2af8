package dev.portcullis.core;

import dev.portcullis.core.internal.Json;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * How a native policy reaches its server: its address, and optionally a timeout and headers.
 * The base of {@code RegoServerClientOptions} and {@code HttpClientOptions}.
 */
public abstract class ClientOptions {
    private final String baseUrl;
    private final Duration timeout;
    private final Map<String, String> headers;

    /**
     * Options.
     *
     * @param baseUrl the server's address ({@code http://127.0.0.1:8181})
     * @param timeout how long one request may take, or {@code null} for the default
     * @param headers headers sent with every request (an {@code Authorization} header, say)
     */
    protected ClientOptions(String baseUrl, Duration timeout, Map<String, String> headers) {
        this.baseUrl = Objects.requireNonNull(baseUrl, "baseUrl");
        this.timeout = timeout;
        this.headers = Map.copyOf(Objects.requireNonNull(headers, "headers"));
    }

    /**
     * The server's address.
     *
     * @return the base URL
     */
    public String baseUrl() {
        return baseUrl;
    }

    /**
     * How long one request may take.
     *
     * @return the timeout, or {@code null} for the default
     */
    public Duration timeout() {
        return timeout;
    }

    /**
     * The headers sent with every request.
     *
     * @return them, unmodifiable
     */
    public Map<String, String> headers() {
        return headers;
    }

    /**
     * The options as the native library reads them.
     *
     * @return {@code base_url}, {@code timeout_ms} and {@code headers}, as JSON
     */
    public String toJson() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("base_url", baseUrl);
        if (timeout != null) {
            map.put("timeout_ms", Math.max(1, timeout.toMillis()));
        }
        List<Object> pairs = new ArrayList<>();
        for (Map.Entry<String, String> header : headers.entrySet()) {
            pairs.add(List.of(header.getKey(), header.getValue()));
        }
        map.put("headers", pairs);
        return Json.write(map);
    }
}
