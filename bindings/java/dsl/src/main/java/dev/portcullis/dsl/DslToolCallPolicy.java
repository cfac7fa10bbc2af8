package dev.portcullis.dsl;

import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolCallPolicy;
import dev.portcullis.core.NativePolicy;
import dev.portcullis.core.internal.Native;
import java.nio.file.Path;

/**
 * A JSON rule policy of the {@code tool_call} point: the rule file {@code <dir>/<id>.json}, evaluated by
 * the native engine. A rule that cannot be loaded does not throw here: {@link #problems()} lists
 * why, and each evaluation fails with it.
 */
public final class DslToolCallPolicy extends NativePolicy<ToolCallContext> implements ToolCallPolicy {
    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslToolCallPolicy(String id, String dir) {
        super(Native.dslPolicy(1, id, dir));
    }

    /**
     * The policy of a rule file.
     *
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     */
    public DslToolCallPolicy(String id, Path dir) {
        this(id, dir.toString());
    }
}
