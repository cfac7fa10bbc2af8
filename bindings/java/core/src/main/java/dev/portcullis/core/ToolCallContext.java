package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The context of the {@code tool_call} point: a tool about to run.
 *
 * @param toolName the tool's name
 * @param arguments its arguments (JSON values), unmodifiable
 * @param callingMessage the model's message that called it
 * @param metadata who is calling, and when
 */
public record ToolCallContext(
        String toolName, Map<String, Object> arguments, Message callingMessage, Metadata metadata)
        implements PolicyContext {
    /**
     * A tool-call context.
     *
     * @param toolName the tool's name
     * @param arguments its arguments (JSON values)
     * @param callingMessage the model's message that called it
     * @param metadata who is calling, and when
     */
    public ToolCallContext {
        Objects.requireNonNull(toolName, "toolName");
        @SuppressWarnings("unchecked")
        Map<String, Object> frozen =
                (Map<String, Object>) Json.freeze(Objects.requireNonNull(arguments, "arguments"));
        arguments = frozen;
        Objects.requireNonNull(callingMessage, "callingMessage");
        Objects.requireNonNull(metadata, "metadata");
    }

    @Override
    public InterceptionPoint interceptionPoint() {
        return InterceptionPoint.TOOL_CALL;
    }

    /**
     * The context as a JSON object's members.
     *
     * @return {@code tool_name}, {@code arguments}, {@code calling_message} and {@code metadata}
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("tool_name", toolName);
        map.put("arguments", arguments);
        map.put("calling_message", callingMessage.toMap());
        map.put("metadata", metadata.toMap());
        return map;
    }

    @Override
    public String toJson() {
        StringBuilder out = new StringBuilder(256);
        out.append("{\"tool_name\":");
        Json.string(out, toolName);
        out.append(",\"arguments\":");
        Json.write(out, arguments, 1);
        out.append(",\"calling_message\":");
        callingMessage.writeJson(out);
        out.append(",\"metadata\":");
        metadata.writeJson(out);
        return out.append('}').toString();
    }

    /**
     * A tool-call context from its JSON.
     *
     * @param json the JSON text
     * @return the context
     * @throws IllegalArgumentException when it is not a valid tool-call context
     */
    public static ToolCallContext fromJson(String json) {
        return fromMap(Json.parse(json));
    }

    /**
     * A tool-call context from a JSON value.
     *
     * @param value the value
     * @return the context
     * @throws IllegalArgumentException when it is not a valid tool-call context
     */
    public static ToolCallContext fromMap(Object value) {
        String what = "a tool-call context";
        Map<String, Object> map = Fields.object(value, what);
        return new ToolCallContext(
                Fields.string(map, "tool_name", what),
                Fields.object(map, "arguments", what),
                Message.fromMap(map.get("calling_message")),
                Metadata.fromMap(map.get("metadata")));
    }
}
