package dev.portcullis.dsl;

import dev.portcullis.core.ToolResultContext;
import dev.portcullis.core.ToolResultPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A JSON rule policy of the {@code tool_result} point: the rule file {@code <dir>/<id>.json}, evaluated by
 * the native engine. A rule that cannot be loaded does not throw here: {@link #problems()} lists
 * why, and each evaluation fails with it.
 */
public final class DslToolResultPolicy extends NativePolicy<ToolResultContext> implements ToolResultPolicy {
    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslToolResultPolicy(String id, String dir) {
        super(Native.dslPolicy(2, id, dir));
    }

    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslToolResultPolicy(String id, Path dir) {
        this(id, dir.toString());
    }
}
