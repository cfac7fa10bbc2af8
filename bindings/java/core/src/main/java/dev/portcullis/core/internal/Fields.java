package dev.portcullis.core.internal;

import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * Reading the members of a JSON object with errors that say which member of what is wrong.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class Fields {
    private Fields() {}

    /**
     * A JSON value as an object.
     *
     * @param value the value
     * @param what what it is, for the error
     * @return its members
     * @throws IllegalArgumentException when it is not an object
     */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> object(Object value, String what) {
        if (!(value instanceof Map)) {
            throw new IllegalArgumentException(what + " must be a JSON object, not " + describe(value));
        }
        return (Map<String, Object>) value;
    }

    /**
     * A member that must be a string.
     *
     * @param object the object
     * @param key the member's name
     * @param what what the object is, for the error
     * @return the string
     * @throws IllegalArgumentException when it is missing or not a string
     */
    public static String string(Map<String, Object> object, String key, String what) {
        Object value = object.get(key);
        if (!(value instanceof String)) {
            throw new IllegalArgumentException(
                    what + "'s " + key + " must be a string, not " + describe(value));
        }
        return (String) value;
    }

    /**
     * A member that must be an object.
     *
     * @param object the object
     * @param key the member's name
     * @param what what the object is, for the error
     * @return the member's members
     * @throws IllegalArgumentException when it is missing or not an object
     */
    public static Map<String, Object> object(Map<String, Object> object, String key, String what) {
        return object(object.get(key), what + "'s " + key);
    }

    /**
     * A member that must be an array.
     *
     * @param object the object
     * @param key the member's name
     * @param what what the object is, for the error
     * @return the items
     * @throws IllegalArgumentException when it is missing or not an array
     */
    @SuppressWarnings("unchecked")
    public static List<Object> list(Map<String, Object> object, String key, String what) {
        Object value = object.get(key);
        if (!(value instanceof List)) {
            throw new IllegalArgumentException(
                    what + "'s " + key + " must be an array, not " + describe(value));
        }
        return (List<Object>) value;
    }

    /**
     * A value, described for an error message (cut short when long).
     *
     * @param value the value
     * @return its description
     */
    public static String describe(Object value) {
        if (value == null) {
            return "null";
        }
        String text;
        try {
            text = Json.write(value);
        } catch (IllegalArgumentException e) {
            text = value.getClass().getName();
        }
        return text.length() > 200 ? text.substring(0, 200) + "…" : text;
    }

    /**
     * The constant of an enum with a wire name.
     *
     * @param <E> the enum
     * @param values its constants
     * @param wireName how a constant names itself on the wire
     * @param wire the name read
     * @param what what the enum is, for the error ({@code "redaction strategy"})
     * @return the constant
     * @throws IllegalArgumentException for a name no constant has, listing those there are
     */
    public static <E extends Enum<E>> E byWireName(
            E[] values, Function<E, String> wireName, String wire, String what) {
        StringBuilder names = new StringBuilder();
        for (E value : values) {
            String name = wireName.apply(value);
            if (name.equals(wire)) {
                return value;
            }
            names.append(names.length() == 0 ? "" : ", ").append(name);
        }
        throw new IllegalArgumentException("unknown " + what + " " + wire + ": expected one of " + names);
    }
}
