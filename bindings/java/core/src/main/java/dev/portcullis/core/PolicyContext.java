package dev.portcullis.core;

/**
 * What a policy sees at its point: an {@link InputContext}, {@link ToolCallContext},
 * {@link ToolResultContext} or {@link OutputContext}.
 */
public sealed interface PolicyContext
        permits InputContext, ToolCallContext, ToolResultContext, OutputContext {
    /**
     * The point this context is evaluated at.
     *
     * @return the point
     */
    InterceptionPoint interceptionPoint();

    /**
     * Who is calling, and when.
     *
     * @return the metadata
     */
    Metadata metadata();

    /**
     * The context as its JSON (snake_case keys).
     *
     * @return the JSON text
     */
    String toJson();

    /**
     * A context of a point from its JSON.
     *
     * @param point the point
     * @param json the JSON text
     * @return the context
     * @throws IllegalArgumentException when it is not a valid context of the point
     */
    static PolicyContext fromJson(InterceptionPoint point, String json) {
        switch (point) {
            case INPUT:
                return InputContext.fromJson(json);
            case TOOL_CALL:
                return ToolCallContext.fromJson(json);
            case TOOL_RESULT:
                return ToolResultContext.fromJson(json);
            default:
                return OutputContext.fromJson(json);
        }
    }
}
