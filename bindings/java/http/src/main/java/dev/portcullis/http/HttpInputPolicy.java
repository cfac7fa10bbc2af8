package dev.portcullis.http;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code input} point evaluated by a remote endpoint
 * ({@code POST <baseUrl>/engine/evaluate}). No request is made until the first evaluation.
 */
public final class HttpInputPolicy extends NativePolicy<InputContext> implements InputPolicy {
    /**
     * The policy of an endpoint.
     *
     * @param id the policy's id
     * @param options how to reach the endpoint
     * @throws IllegalArgumentException when the options are invalid
     */
    public HttpInputPolicy(String id, HttpClientOptions options) {
        super(Native.httpPolicy(0, id, options.toJson()));
    }
}
