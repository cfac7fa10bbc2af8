package dev.portcullis.regorest;

import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.ToolResultPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code tool_result} point whose decision is a document on a Rego policy server (the OPA
 * REST API). No request is made until the first evaluation.
 */
public final class RegoServerToolResultPolicy extends NativePolicy<ToolResultContext> implements ToolResultPolicy {
    /**
     * The policy of a package on a server.
     *
     * @param id the policy's id
     * @param options how to reach the server
     * @param packagePath the package's path ({@code portcullis/tool_result})
     * @throws IllegalArgumentException when the options or the path are invalid
     */
    public RegoServerToolResultPolicy(String id, RegoServerClientOptions options, String packagePath) {
        super(Native.regoServerPolicy(2, id, options.toJson(), packagePath));
    }
}
