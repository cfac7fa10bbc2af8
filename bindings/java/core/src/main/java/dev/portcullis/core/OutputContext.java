package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The context of the {@code output} point: the model's answer.
 *
 * @param response the model's message
 * @param metadata who is calling, and when
 */
public record OutputContext(Message response, Metadata metadata) implements PolicyContext {
    /**
     * An output context.
     *
     * @param response the model's message
     * @param metadata who is calling, and when
     */
    public OutputContext {
        Objects.requireNonNull(response, "response");
        Objects.requireNonNull(metadata, "metadata");
    }

    /**
     * The text of the model's answer.
     *
     * @return {@code response().content()}
     */
    public String content() {
        return response.content();
    }

    @Override
    public InterceptionPoint interceptionPoint() {
        return InterceptionPoint.OUTPUT;
    }

    /**
     * The context as a JSON object's members.
     *
     * @return {@code response} and {@code metadata}
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("response", response.toMap());
        map.put("metadata", metadata.toMap());
        return map;
    }

    @Override
    public String toJson() {
        StringBuilder out = new StringBuilder(128 + response.content().length());
        out.append("{\"response\":");
        response.writeJson(out);
        out.append(",\"metadata\":");
        metadata.writeJson(out);
        return out.append('}').toString();
    }

    /**
     * An output context from its JSON.
     *
     * @param json the JSON text
     * @return the context
     * @throws IllegalArgumentException when it is not a valid output context
     */
    public static OutputContext fromJson(String json) {
        return fromMap(Json.parse(json));
    }

    /**
     * An output context from a JSON value.
     *
     * @param value the value
     * @return the context
     * @throws IllegalArgumentException when it is not a valid output context
     */
    public static OutputContext fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "an output context");
        return new OutputContext(Message.fromMap(map.get("response")), Metadata.fromMap(map.get("metadata")));
    }
}
