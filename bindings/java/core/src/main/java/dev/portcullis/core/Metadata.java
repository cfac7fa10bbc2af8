package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Who is calling, and when: the agent, its session, the time of the interception, and any
 * further keys (kept as they came).
 *
 * @param agentId the agent that owns the session
 * @param sessionId the current session
 * @param timestamp when the interception happened (RFC 3339)
 * @param extra further keys (JSON values), unmodifiable
 */
public record Metadata(String agentId, String sessionId, String timestamp, Map<String, Object> extra) {
    /**
     * Metadata.
     *
     * @param agentId the agent that owns the session
     * @param sessionId the current session
     * @param timestamp when the interception happened (RFC 3339)
     * @param extra further keys (JSON values)
     */
    public Metadata {
        Objects.requireNonNull(agentId, "agentId");
        Objects.requireNonNull(sessionId, "sessionId");
        Objects.requireNonNull(timestamp, "timestamp");
        @SuppressWarnings("unchecked")
        Map<String, Object> frozen = (Map<String, Object>) Json.freeze(extra == null ? Map.of() : extra);
        extra = frozen;
    }

    /**
     * Metadata for an agent and a session, stamped with the current time.
     *
     * @param agentId the agent
     * @param sessionId the session
     * @return the metadata
     */
    public static Metadata of(String agentId, String sessionId) {
        return new Metadata(
                agentId, sessionId, Instant.now().truncatedTo(ChronoUnit.MILLIS).toString(), Map.of());
    }

    /**
     * The metadata as a JSON object's members.
     *
     * @return {@code agent_id}, {@code session_id}, {@code timestamp} and the further keys
     */
    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("agent_id", agentId);
        map.put("session_id", sessionId);
        map.put("timestamp", timestamp);
        map.putAll(extra);
        return map;
    }

    /**
     * Appends the metadata as JSON.
     *
     * @param out where to write
     */
    void writeJson(StringBuilder out) {
        out.append("{\"agent_id\":");
        Json.string(out, agentId);
        out.append(",\"session_id\":");
        Json.string(out, sessionId);
        out.append(",\"timestamp\":");
        Json.string(out, timestamp);
        for (Map.Entry<String, Object> entry : extra.entrySet()) {
            out.append(',');
            Json.string(out, entry.getKey());
            out.append(':');
            Json.write(out, entry.getValue(), 2);
        }
        out.append('}');
    }

    /**
     * Metadata from a JSON value.
     *
     * @param value the value
     * @return the metadata
     * @throws IllegalArgumentException when it is not metadata
     */
    public static Metadata fromMap(Object value) {
        Map<String, Object> map = Fields.object(value, "metadata");
        Map<String, Object> extra = new LinkedHashMap<>(map);
        extra.remove("agent_id");
        extra.remove("session_id");
        extra.remove("timestamp");
        return new Metadata(
                Fields.string(map, "agent_id", "metadata"),
                Fields.string(map, "session_id", "metadata"),
                Fields.string(map, "timestamp", "metadata"),
                extra);
    }
}
