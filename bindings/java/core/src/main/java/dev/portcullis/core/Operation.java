package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * One change a {@link TransformDecision} makes to the context.
 *
 * @param op what it does
 * @param field the field's dotted path
 * @param value the value set, or the text put before or after a string field
 */
public record Operation(Op op, String field, Object value) {
    /** What an operation does. */
    public enum Op {
        /** The field becomes the value ({@code set}). */
        SET("set"),
        /** The text goes before the string field's ({@code prepend}). */
        PREPEND("prepend"),
        /** The text goes after the string field's ({@code append}). */
        APPEND("append");

        private final String wireName;

        Op(String wireName) {
            this.wireName = wireName;
        }

        /**
         * The operation's wire name.
         *
         * @return {@code set}, {@code prepend} or {@code append}
         */
        public String wireName() {
            return wireName;
        }

        /**
         * The operation with a wire name.
         *
         * @param wireName {@code set}, {@code prepend} or {@code append}
         * @return the operation
         * @throws IllegalArgumentException for another name
         */
        public static Op fromWireName(String wireName) {
            return Fields.byWireName(values(), Op::wireName, wireName, "operation");
        }
    }

    /**
     * An operation.
     *
     * @param op what it does
     * @param field the field's dotted path
     * @param value the value (a JSON value)
     */
    public Operation {
        Objects.requireNonNull(op, "op");
        Objects.requireNonNull(field, "field");
        value = Json.freeze(value);
    }

    /**
     * A field becomes a value.
     *
     * @param field the field's dotted path
     * @param value the value (a JSON value)
     * @return the operation
     */
    public static Operation set(String field, Object value) {
        return new Operation(Op.SET, field, value);
    }

    /**
     * Text goes before a string field's.
     *
     * @param field the field's dotted path
     * @param text the text
     * @return the operation
     */
    public static Operation prepend(String field, String text) {
        return new Operation(Op.PREPEND, field, text);
    }

    /**
     * Text goes after a string field's.
     *
     * @param field the field's dotted path
     * @param text the text
     * @return the operation
     */
    public static Operation append(String field, String text) {
        return new Operation(Op.APPEND, field, text);
    }

    /**
     * The operation as a JSON object's members.
     *
     * @return {@code op}, {@code field} and {@code value}
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("op", op.wireName());
        map.put("field", field);
        map.put("value", value);
        return map;
    }

    /**
     * An operation from a JSON value.
     *
     * @param value the value
     * @return the operation
     * @throws IllegalArgumentException when it is not one
     */
    public static Operation fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "an operation");
        return new Operation(
                Op.fromWireName(Fields.string(map, "op", "an operation")),
                Fields.string(map, "field", "an operation"),
                map.get("value"));
    }
}
