package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;

/** Where the engine is called: the seed's three points, and {@code tool_result}. */
public enum InterceptionPoint {
    /** Before the request is sent to the model ({@code input}). */
    INPUT("input"),
    /** Before a tool runs ({@code tool_call}). */
    TOOL_CALL("tool_call"),
    /** After a tool ran, before its result reaches the model ({@code tool_result}). */
    TOOL_RESULT("tool_result"),
    /** After the model has answered ({@code output}). */
    OUTPUT("output");

    private final String wireName;

    InterceptionPoint(String wireName) {
        this.wireName = wireName;
    }

    /**
     * The point's wire name.
     *
     * @return {@code input}, {@code tool_call}, {@code tool_result} or {@code output}
     */
    public String wireName() {
        return wireName;
    }

    /**
     * The point with a wire name.
     *
     * @param wireName {@code input}, {@code tool_call}, {@code tool_result} or {@code output}
     * @return the point
     * @throws IllegalArgumentException for another name
     */
    public static InterceptionPoint fromWireName(String wireName) {
        return Fields.byWireName(values(), InterceptionPoint::wireName, wireName, "interception point");
    }

    /** The wire name. */
    @Override
    public String toString() {
        return wireName;
    }
}
