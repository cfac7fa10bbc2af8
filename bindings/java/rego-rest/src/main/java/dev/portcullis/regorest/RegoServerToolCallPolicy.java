package dev.portcullis.regorest;

import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code tool_call} point whose decision is a document on a Rego policy server (the OPA
 * REST API). No request is made until the first evaluation.
 */
public final class RegoServerToolCallPolicy extends NativePolicy<ToolCallContext> implements ToolCallPolicy {
    /**
     * The policy of a package on a server.
     *
     * @param id the policy's id
     * @param options how to reach the server
     * @param packagePath the package's path ({@code portcullis/tool_call})
     * @throws IllegalArgumentException when the options or the path are invalid
     */
    public RegoServerToolCallPolicy(String id, RegoServerClientOptions options, String packagePath) {
        super(Native.regoServerPolicy(1, id, options.toJson(), packagePath));
    }
}
