package dev.portcullis.dsl;

import dev.portcullis.core.InputContext;
import dev.portcullis.core.InputPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A JSON rule policy of the {@code input} point: the rule file {@code <dir>/<id>.json}, evaluated by
 * the native engine. A rule that cannot be loaded does not throw here: {@link #problems()} lists
 * why, and each evaluation fails with it.
 */
public final class DslInputPolicy extends NativePolicy<InputContext> implements InputPolicy {
    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslInputPolicy(String id, String dir) {
        super(Native.dslPolicy(0, id, dir));
    }

    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslInputPolicy(String id, Path dir) {
        this(id, dir.toString());
    }
}
