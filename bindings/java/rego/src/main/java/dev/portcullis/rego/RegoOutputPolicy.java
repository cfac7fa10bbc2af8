package dev.portcullis.rego;

import dev.portcullis.core.OutputContext;
import dev.portcullis.core.OutputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A Rego policy of the {@code output} point: an OPA bundle compiled to WebAssembly (entrypoint
 * {@code <prefix>/output/decision}), evaluated in process by the native engine.
 */
public final class RegoOutputPolicy extends NativePolicy<OutputContext> implements OutputPolicy {
    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoOutputPolicy(String id, String bundlePath) {
        super(Native.regoPolicy(3, id, bundlePath));
    }

    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoOutputPolicy(String id, Path bundlePath) {
        this(id, bundlePath.toString());
    }
}
