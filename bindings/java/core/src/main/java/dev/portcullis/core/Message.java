package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * One message of a conversation.
 *
 * @param role who wrote it
 * @param content its text
 */
public record Message(Role role, String content) {
    /**
     * A message.
     *
     * @param role who wrote it
     * @param content its text
     */
    public Message {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(content, "content");
    }

    /**
     * A message from the end user.
     *
     * @param content its text
     * @return the message
     */
    public static Message user(String content) {
        return new Message(Role.USER, content);
    }

    /**
     * A message from the model.
     *
     * @param content its text
     * @return the message
     */
    public static Message assistant(String content) {
        return new Message(Role.ASSISTANT, content);
    }

    /**
     * Instructions from the application.
     *
     * @param content its text
     * @return the message
     */
    public static Message system(String content) {
        return new Message(Role.SYSTEM, content);
    }

    /**
     * The message as a JSON object's members.
     *
     * @return {@code role} and {@code content}
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("role", role.wireName());
        map.put("content", content);
        return map;
    }

    /**
     * Appends the message as JSON.
     *
     * @param out where to write
     */
    void writeJson(StringBuilder out) {
        out.append("{\"role\":\"").append(role.wireName()).append("\",\"content\":");
        Json.string(out, content);
        out.append('}');
    }

    /**
     * A message from a JSON value.
     *
     * @param value the value ({@code {"role": .., "content": ..}})
     * @return the message
     * @throws IllegalArgumentException when it is not one
     */
    public static Message fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "a message");
        return new Message(
                Role.fromWireName(Fields.string(map, "role", "a message")),
                Fields.string(map, "content", "a message"));
    }
}
