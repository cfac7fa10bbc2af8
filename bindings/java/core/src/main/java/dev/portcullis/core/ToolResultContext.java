package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * The context of the {@code tool_result} point: what a tool returned, before the model reads it.
 *
 * @param toolName the tool's name
 * @param arguments the arguments it was called with (JSON values), unmodifiable
 * @param content the result's text
 * @param structured a structured result (a JSON value), or {@code null}
 * @param isError whether the tool reported an error
 * @param metadata who is calling, and when
 */
public record ToolResultContext(
        String toolName,
        Map<String, Object> arguments,
        String content,
        Object structured,
        boolean isError,
        Metadata metadata)
        implements PolicyContext {
    /**
     * A tool-result context.
     *
     * @param toolName the tool's name
     * @param arguments the arguments it was called with (JSON values)
     * @param content the result's text
     * @param structured a structured result (a JSON value), or {@code null}
     * @param isError whether the tool reported an error
     * @param metadata who is calling, and when
     */
    public ToolResultContext {
        Objects.requireNonNull(toolName, "toolName");
        @SuppressWarnings("unchecked")
        Map<String, Object> frozen =
                (Map<String, Object>) Json.freeze(Objects.requireNonNull(arguments, "arguments"));
        arguments = frozen;
        Objects.requireNonNull(content, "content");
        structured = Json.freeze(structured);
        Objects.requireNonNull(metadata, "metadata");
    }

    /**
     * The structured result, when there is one.
     *
     * @return the JSON value
     */
    public Optional<Object> structuredResult() {
        return Optional.ofNullable(structured);
    }

    @Override
    public InterceptionPoint interceptionPoint() {
        return InterceptionPoint.TOOL_RESULT;
    }

    /**
     * The context as a JSON object's members.
     *
     * @return {@code tool_name}, {@code arguments}, {@code content}, {@code structured} (when
     *     there is one), {@code is_error} and {@code metadata}
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("tool_name", toolName);
        map.put("arguments", arguments);
        map.put("content", content);
        if (structured != null) {
            map.put("structured", structured);
        }
        map.put("is_error", isError);
        map.put("metadata", metadata.toMap());
        return map;
    }

    @Override
    public String toJson() {
        StringBuilder out = new StringBuilder(256 + content.length());
        out.append("{\"tool_name\":");
        Json.string(out, toolName);
        out.append(",\"arguments\":");
        Json.write(out, arguments, 1);
        out.append(",\"content\":");
        Json.string(out, content);
        if (structured != null) {
            out.append(",\"structured\":");
            Json.write(out, structured, 1);
        }
        out.append(",\"is_error\":").append(isError).append(",\"metadata\":");
        metadata.writeJson(out);
        return out.append('}').toString();
    }

    /**
     * A tool-result context from its JSON.
     *
     * @param json the JSON text
     * @return the context
     * @throws IllegalArgumentException when it is not a valid tool-result context
     */
    public static ToolResultContext fromJson(String json) {
        return fromMap(Json.parse(json));
    }

    /**
     * A tool-result context from a JSON value.
     *
     * @param value the value
     * @return the context
     * @throws IllegalArgumentException when it is not a valid tool-result context
     */
    public static ToolResultContext fromMap(Object value) {
        String what = "a tool-result context";
        Map<String, Object> map = Fields.object(value, what);
        Object isError = map.getOrDefault("is_error", Boolean.FALSE);
        if (!(isError instanceof Boolean)) {
            throw new IllegalArgumentException(what + "'s is_error must be a boolean, not " + Fields.describe(isError));
        }
        return new ToolResultContext(
                Fields.string(map, "tool_name", what),
                Fields.object(map, "arguments", what),
                Fields.string(map, "content", what),
                map.get("structured"),
                (Boolean) isError,
                Metadata.fromMap(map.get("metadata")));
    }
}
