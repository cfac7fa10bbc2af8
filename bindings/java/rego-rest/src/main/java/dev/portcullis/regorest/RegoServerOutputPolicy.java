package dev.portcullis.regorest;

import dev.portcullis.core.OutputContext;
import dev.portcullis.core.OutputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code output} point whose decision is a document on a Rego policy server (the OPA
 * REST API). No request is made until the first evaluation.
 */
public final class RegoServerOutputPolicy extends NativePolicy<OutputContext> implements OutputPolicy {
    /**
     * The policy of a package on a server.
     *
     * @param id the policy's id
     * @param options how to reach the server
     * @param packagePath the package's path ({@code portcullis/output})
     * @throws IllegalArgumentException when the options or the path are invalid
     */
    public RegoServerOutputPolicy(String id, RegoServerClientOptions options, String packagePath) {
        super(Native.regoServerPolicy(3, id, options.toJson(), packagePath));
    }
}
