package dev.portcullis.rego;

import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A Rego policy of the {@code tool_call} point: an OPA bundle compiled to WebAssembly (entrypoint
 * {@code <prefix>/tool_call/decision}), evaluated in process by the native engine.
 */
public final class RegoToolCallPolicy extends NativePolicy<ToolCallContext> implements ToolCallPolicy {
    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoToolCallPolicy(String id, String bundlePath) {
        super(Native.regoPolicy(1, id, bundlePath));
    }

    /**
     * The policy of a bundle.
     *
     * @param id the policy's id
     * @param bundlePath the bundle ({@code .tar.gz})
     * @throws IllegalArgumentException when the bundle cannot be opened, saying why
     */
    public RegoToolCallPolicy(String id, Path bundlePath) {
        this(id, bundlePath.toString());
    }
}
