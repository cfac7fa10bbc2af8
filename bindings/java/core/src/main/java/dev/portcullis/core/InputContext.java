package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The context of the {@code input} point: the messages about to be sent to the model.
 *
 * @param messages the conversation, unmodifiable
 * @param metadata who is calling, and when
 */
public record InputContext(List<Message> messages, Metadata metadata) implements PolicyContext {
    /**
     * An input context.
     *
     * @param messages the conversation
     * @param metadata who is calling, and when
     */
    public InputContext {
        messages = List.copyOf(Objects.requireNonNull(messages, "messages"));
        Objects.requireNonNull(metadata, "metadata");
    }

    @Override
    public InterceptionPoint interceptionPoint() {
        return InterceptionPoint.INPUT;
    }

    /**
     * The context as a JSON object's members.
     *
     * @return {@code messages} and {@code metadata}
     */
    public Map<String, Object> toMap() {
        List<Object> list = new ArrayList<>(messages.size());
        for (Message message : messages) {
            list.add(message.toMap());
        }
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("messages", list);
        map.put("metadata", metadata.toMap());
        return map;
    }

    @Override
    public String toJson() {
        StringBuilder out = new StringBuilder(128 + 64 * messages.size());
        out.append("{\"messages\":[");
        for (int i = 0; i < messages.size(); i++) {
            if (i > 0) {
                out.append(',');
            }
            messages.get(i).writeJson(out);
        }
        out.append("],\"metadata\":");
        metadata.writeJson(out);
        return out.append('}').toString();
    }

    /**
     * An input context from its JSON.
     *
     * @param json the JSON text
     * @return the context
     * @throws IllegalArgumentException when it is not a valid input context
     */
    public static InputContext fromJson(String json) {
        return fromMap(Json.parse(json));
    }

    /**
     * An input context from a JSON value.
     *
     * @param value the value
     * @return the context
     * @throws IllegalArgumentException when it is not a valid input context
     */
    public static InputContext fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "an input context");
        List<Message> messages = new ArrayList<>();
        for (Object message : Fields.list(map, "messages", "an input context")) {
            messages.add(Message.fromMap(message));
        }
        return new InputContext(messages, Metadata.fromMap(map.get("metadata")));
    }
}
