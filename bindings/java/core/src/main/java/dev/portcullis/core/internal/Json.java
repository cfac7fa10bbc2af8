package dev.portcullis.core.internal;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * JSON as the binding carries it across to the native library: objects are {@code Map<String,
 * Object>} (in key order), arrays {@code List<Object>}, and strings, numbers ({@code Long},
 * {@code BigInteger}, {@code Double} or {@code BigDecimal}), booleans and {@code null}.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class Json {
    /** How deep a document may nest: deeper ones are refused, never a stack overflow. */
    public static final int MAX_DEPTH = 256;

    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /**
     * Reads a JSON document.
     *
     * @param text the document
     * @return its value
     * @throws IllegalArgumentException when it is not JSON, saying where
     */
    public static Object parse(String text) {
        if (text == null) {
            throw new IllegalArgumentException("not JSON: null");
        }
        Json reader = new Json(text);
        reader.space();
        Object value = reader.value(0);
        reader.space();
        if (reader.at != text.length()) {
            throw reader.error("unexpected text after the value");
        }
        return value;
    }

    /**
     * Reads a JSON object.
     *
     * @param text the document
     * @return its members
     * @throws IllegalArgumentException when it is not a JSON object
     */
    public static Map<String, Object> parseObject(String text) {
        Object value = parse(text);
        if (!(value instanceof Map)) {
            throw new IllegalArgumentException("not a JSON object: " + text);
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> object = (Map<String, Object>) value;
        return object;
    }

    /**
     * Reads a JSON object from its UTF-8 text.
     *
     * @param utf8 the document, in UTF-8
     * @return its members
     * @throws IllegalArgumentException when it is not a JSON object
     */
    public static Map<String, Object> parseObject(byte[] utf8) {
        if (utf8 == null) {
            throw new IllegalArgumentException("not JSON: null");
        }
        return parseObject(new String(utf8, StandardCharsets.UTF_8));
    }

    /**
     * Writes a value as JSON.
     *
     * @param value a map with string keys, an iterable, a string, a number, a boolean or null
     * @return the JSON text
     * @throws IllegalArgumentException for a value JSON cannot carry (or nested too deep)
     */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, 0);
        return out.toString();
    }

    /**
     * Appends a value as JSON.
     *
     * @param out where to write
     * @param value the value (as {@link #write(Object)} takes it)
     * @param depth how deep it is already
     */
    public static void write(StringBuilder out, Object value, int depth) {
        if (depth > MAX_DEPTH) {
            throw new IllegalArgumentException("a value nested deeper than " + MAX_DEPTH + " levels");
        }
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            string(out, (String) value);
        } else if (value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Double || value instanceof Float) {
            double number = ((Number) value).doubleValue();
            if (Double.isNaN(number) || Double.isInfinite(number)) {
                throw new IllegalArgumentException("JSON has no " + number);
            }
            if (number == Math.rint(number) && Math.abs(number) < 1e15) {
                out.append((long) number).append(".0");
            } else {
                out.append(number);
            }
        } else if (value instanceof Number) {
            out.append(value);
        } else if (value instanceof JsonValue) {
            ((JsonValue) value).writeJson(out, depth);
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                if (!(entry.getKey() instanceof String)) {
                    throw new IllegalArgumentException("a JSON object's keys are strings, not " + entry.getKey());
                }
                if (!first) {
                    out.append(',');
                }
                first = false;
                string(out, (String) entry.getKey());
                out.append(':');
                write(out, entry.getValue(), depth + 1);
            }
            out.append('}');
        } else if (value instanceof Iterable) {
            out.append('[');
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item, depth + 1);
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException(
                    "JSON cannot carry a " + value.getClass().getName() + " (" + value + ")");
        }
    }

    /**
     * Appends a string as a JSON string.
     *
     * @param out where to write
     * @param value the string
     */
    public static void string(StringBuilder out, String value) {
        int plain = 0;
        while (plain < value.length()) {
            char c = value.charAt(plain);
            if (c == '"' || c == '\\' || c < 0x20 || Character.isSurrogate(c)) {
                break;
            }
            plain++;
        }
        out.append('"');
        if (plain == value.length()) {
            out.append(value).append('"');
            return;
        }
        out.append(value, 0, plain);
        for (int i = plain; i < value.length(); i++) {
            char c = value.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                default:
                    if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(value, i)) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    private static boolean validSurrogate(String value, int i) {
        char c = value.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < value.length() && Character.isLowSurrogate(value.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(value.charAt(i - 1));
    }

    /** A value that writes itself as JSON. */
    public interface JsonValue {
        /**
         * Appends this value as JSON.
         *
         * @param out where to write
         * @param depth how deep it is
         */
        void writeJson(StringBuilder out, int depth);
    }

    private IllegalArgumentException error(String problem) {
        return new IllegalArgumentException("invalid JSON at offset " + at + ": " + problem);
    }

    private void space() {
        while (at < text.length()) {
            char c = text.charAt(at);
            if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                at++;
            } else {
                break;
            }
        }
    }

    private Object value(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nested deeper than " + MAX_DEPTH + " levels");
        }
        if (at >= text.length()) {
            throw error("unexpected end");
        }
        char c = text.charAt(at);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, at)) {
            throw error("expected " + word);
        }
        at += word.length();
        return value;
    }

    private Map<String, Object> object(int depth) {
        at++;
        Map<String, Object> members = new LinkedHashMap<>();
        space();
        if (at < text.length() && text.charAt(at) == '}') {
            at++;
            return members;
        }
        while (true) {
            space();
            if (at >= text.length() || text.charAt(at) != '"') {
                throw error("expected a key");
            }
            String key = string();
            space();
            expect(':');
            space();
            members.put(key, value(depth + 1));
            space();
            if (at < text.length() && text.charAt(at) == ',') {
                at++;
                continue;
            }
            expect('}');
            return members;
        }
    }

    private List<Object> array(int depth) {
        at++;
        List<Object> items = new ArrayList<>();
        space();
        if (at < text.length() && text.charAt(at) == ']') {
            at++;
            return items;
        }
        while (true) {
            space();
            items.add(value(depth + 1));
            space();
            if (at < text.length() && text.charAt(at) == ',') {
                at++;
                continue;
            }
            expect(']');
            return items;
        }
    }

    private void expect(char c) {
        if (at >= text.length() || text.charAt(at) != c) {
            throw error("expected '" + c + "'");
        }
        at++;
    }

    private String string() {
        at++;
        StringBuilder out = null;
        int start = at;
        while (true) {
            if (at >= text.length()) {
                throw error("unterminated string");
            }
            char c = text.charAt(at);
            if (c == '"') {
                String plain = text.substring(start, at);
                at++;
                return out == null ? plain : out.append(plain).toString();
            }
            if (c < 0x20) {
                throw error("a control character in a string");
            }
            if (c == '\\') {
                if (out == null) {
                    out = new StringBuilder();
                }
                out.append(text, start, at);
                at++;
                if (at >= text.length()) {
                    throw error("unterminated string");
                }
                char escaped = text.charAt(at);
                switch (escaped) {
                    case '"':
                    case '\\':
                    case '/':
                        out.append(escaped);
                        break;
                    case 'b':
                        out.append('\b');
                        break;
                    case 'f':
                        out.append('\f');
                        break;
                    case 'n':
                        out.append('\n');
                        break;
                    case 'r':
                        out.append('\r');
                        break;
                    case 't':
                        out.append('\t');
                        break;
                    case 'u':
                        if (at + 5 > text.length()) {
                            throw error("a short \\u escape");
                        }
                        try {
                            out.append((char) Integer.parseInt(text.substring(at + 1, at + 5), 16));
                        } catch (NumberFormatException e) {
                            throw error("an invalid \\u escape");
                        }
                        at += 4;
                        break;
                    default:
                        throw error("an invalid escape \\" + escaped);
                }
                at++;
                start = at;
                continue;
            }
            at++;
        }
    }

    private Object number() {
        int start = at;
        boolean decimal = false;
        if (text.charAt(at) == '-') {
            at++;
        }
        while (at < text.length()) {
            char c = text.charAt(at);
            if (c >= '0' && c <= '9') {
                at++;
            } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
                decimal = true;
                at++;
            } else {
                break;
            }
        }
        String number = text.substring(start, at);
        try {
            if (!decimal) {
                BigInteger big = new BigInteger(number);
                return big.bitLength() < 64 ? (Object) big.longValue() : big;
            }
            double value = Double.parseDouble(number);
            if (Double.isInfinite(value)) {
                return new BigDecimal(number);
            }
            return value;
        } catch (NumberFormatException e) {
            throw error("an invalid number " + number);
        }
    }

    /**
     * An unmodifiable deep copy of a JSON value (maps, lists and scalars as {@link #parse}
     * gives them).
     *
     * @param value the value
     * @return the copy
     */
    public static Object freeze(Object value) {
        if (value instanceof Map) {
            Map<String, Object> copy = new LinkedHashMap<>();
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                copy.put(String.valueOf(entry.getKey()), freeze(entry.getValue()));
            }
            return Collections.unmodifiableMap(copy);
        }
        if (value instanceof List) {
            List<Object> copy = new ArrayList<>();
            for (Object item : (List<?>) value) {
                copy.add(freeze(item));
            }
            return Collections.unmodifiableList(copy);
        }
        return value;
    }
}
