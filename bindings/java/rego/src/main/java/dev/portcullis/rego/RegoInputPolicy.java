package dev.portcullis.rego;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A Rego policy of the {@code input} point: an OPA bundle compiled to WebAssembly (entrypoint
 * {@code <prefix>/input/decision}), evaluated in process by the native engine.
 */
public final class RegoInputPolicy extends NativePolicy<InputContext> implements InputPolicy {
    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoInputPolicy(String id, String bundlePath) {
        super(Native.regoPolicy(0, id, bundlePath));
    }

    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoInputPolicy(String id, Path bundlePath) {
        this(id, bundlePath.toString());
    }
}
