package dev.portcullis.core;

import java.time.Duration;

/**
 * A policy of one point: an id, and a decision on each context. Implement {@link InputPolicy},
 * {@link ToolCallPolicy}, {@link ToolResultPolicy} or {@link OutputPolicy}.
 *
 * <p>The engine may call {@link #evaluate} from any thread, at the same time from several: a
 * policy must be thread-safe. An exception it throws, or a {@code null} it returns, is an
 * evaluation error (the policy set's {@link OnErrorBehavior} applies).
 *
 * @param <C> the context of its point
 */
public interface Policy<C extends PolicyContext> {
    /**
     * The policy's id.
     *
     * @return the id
     */
    String id();

    /**
     * The policy's decision on a context.
     *
     * @param ctx the context
     * @return the decision
     */
    PolicyDecision evaluate(C ctx);

    /**
     * How long one evaluation may take: a decision that comes later is an evaluation error.
     * A Java policy runs on the calling thread and is not interrupted: its late answer is not
     * used. {@code null} (the default) is no deadline, and costs nothing.
     *
     * @return the deadline, or {@code null} for none
     */
    default Duration deadline() {
        return null;
    }
}
