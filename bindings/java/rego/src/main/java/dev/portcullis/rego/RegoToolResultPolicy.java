package dev.portcullis.rego;

import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.ToolResultPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A Rego policy of the {@code tool_result} point: an OPA bundle compiled to WebAssembly (entrypoint
 * {@code <prefix>/tool_result/decision}), evaluated in process by the native engine.
 */
public final class RegoToolResultPolicy extends NativePolicy<ToolResultContext> implements ToolResultPolicy {
    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoToolResultPolicy(String id, String bundlePath) {
        super(Native.regoPolicy(2, id, bundlePath));
    }

    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoToolResultPolicy(String id, Path bundlePath) {
        this(id, bundlePath.toString());
    }
}
