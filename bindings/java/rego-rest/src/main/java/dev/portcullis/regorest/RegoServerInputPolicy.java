package dev.portcullis.regorest;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;

/**
 * A policy of the {@code input} point whose decision is a document on a Rego policy server (the OPA
 * REST API). No request is made until the first evaluation.
 */
public final class RegoServerInputPolicy extends NativePolicy<InputContext> implements InputPolicy {
    /**
     * The policy of a package on a server.
     *
     * @param id the policy's id
     * @param options how to reach the server
     * @param packagePath the package's path ({@code portcullis/input})
     * @throws IllegalArgumentException when the options or the path are invalid
     */
    public RegoServerInputPolicy(String id, RegoServerClientOptions options, String packagePath) {
        super(Native.regoServerPolicy(0, id, options.toJson(), packagePath));
    }
}
