package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * One change a {@link RedactDecision} makes to the context.
 *
 * @param field the field's dotted path ({@code messages.0.content}, or {@code messages[0].content})
 * @param strategy how it changes
 * @param replacement the text put in its place ({@code null}: {@code [REDACTED]})
 * @param pattern the regular expression {@link RedactionStrategy#REPLACE} replaces, else {@code null}
 */
public record Redaction(String field, RedactionStrategy strategy, String replacement, String pattern) {
    /**
     * A redaction.
     *
     * @param field the field's dotted path
     * @param strategy how it changes
     * @param replacement the text put in its place, or {@code null}
     * @param pattern the regular expression to replace, or {@code null}
     */
    public Redaction {
        Objects.requireNonNull(field, "field");
        Objects.requireNonNull(strategy, "strategy");
    }

    /**
     * The whole value of a field becomes {@code [REDACTED]}.
     *
     * @param field the field's dotted path
     * @return the redaction
     */
    public static Redaction mask(String field) {
        return new Redaction(field, RedactionStrategy.MASK, null, null);
    }

    /**
     * A field is removed.
     *
     * @param field the field's dotted path
     * @return the redaction
     */
    public static Redaction remove(String field) {
        return new Redaction(field, RedactionStrategy.REMOVE, null, null);
    }

    /**
     * Every match of a pattern in a string field becomes a replacement.
     *
     * @param field the field's dotted path
     * @param pattern the regular expression
     * @param replacement the text put in its place
     * @return the redaction
     */
    public static Redaction replace(String field, String pattern, String replacement) {
        return new Redaction(field, RedactionStrategy.REPLACE, replacement, pattern);
    }

    /**
     * The redaction as a JSON object's members.
     *
     * @return {@code field}, {@code strategy}, and {@code replacement} and {@code pattern} when set
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("field", field);
        map.put("strategy", strategy.wireName());
        if (replacement != null) {
            map.put("replacement", replacement);
        }
        if (pattern != null) {
            map.put("pattern", pattern);
        }
        return map;
    }

    /**
     * A redaction from a JSON value.
     *
     * @param value the value
     * @return the redaction
     * @throws IllegalArgumentException when it is not one
     */
    public static Redaction fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "a redaction");
        Object replacement = map.get("replacement");
        Object pattern = map.get("pattern");
        return new Redaction(
                Fields.string(map, "field", "a redaction"),
                RedactionStrategy.fromWireName(Fields.string(map, "strategy", "a redaction")),
                replacement instanceof String ? (String) replacement : null,
                pattern instanceof String ? (String) pattern : null);
    }
}
