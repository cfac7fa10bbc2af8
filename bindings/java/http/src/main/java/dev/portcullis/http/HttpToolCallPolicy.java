package dev.portcullis.http;

import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code tool_call} point evaluated by a remote endpoint
 * ({@code POST <baseUrl>/engine/evaluate}). No request is made until the first evaluation.
 */
public final class HttpToolCallPolicy extends NativePolicy<ToolCallContext> implements ToolCallPolicy {
    /**
     * The policy of an endpoint.
     *
     * @param id the policy's id
     * @param options how to reach the endpoint
     * @throws IllegalArgumentException when the options are invalid
     */
    public HttpToolCallPolicy(String id, HttpClientOptions options) {
        super(Native.httpPolicy(1, id, options.toJson()));
    }
}
