package dev.portcullis.http;

import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.ToolResultPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code tool_result} point evaluated by a remote endpoint
 * ({@code POST <baseUrl>/engine/evaluate}). No request is made until the first evaluation.
 */
public final class HttpToolResultPolicy extends NativePolicy<ToolResultContext> implements ToolResultPolicy {
    /**
     * The policy of an endpoint.
     *
     * @param id the policy's id
     * @param options how to reach the endpoint
     * @throws IllegalArgumentException when the options are invalid
     */
    public HttpToolResultPolicy(String id, HttpClientOptions options) {
        super(Native.httpPolicy(2, id, options.toJson()));
    }
}
