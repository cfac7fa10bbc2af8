package dev.portcullis.http;

import dev.portcullis.core.OutputContext;
import dev.portcullis.core.OutputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code output} point evaluated by a remote endpoint
 * ({@code POST <baseUrl>/engine/evaluate}). No request is made until the first evaluation.
 */
public final class HttpOutputPolicy extends NativePolicy<OutputContext> implements OutputPolicy {
    /**
     * The policy of an endpoint.
     *
     * @param id the policy's id
     * @param options how to reach the endpoint
     * @throws IllegalArgumentException when the options are invalid
     */
    public HttpOutputPolicy(String id, HttpClientOptions options) {
        super(Native.httpPolicy(3, id, options.toJson()));
    }
}
