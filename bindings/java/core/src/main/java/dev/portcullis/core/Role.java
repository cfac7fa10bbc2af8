package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;

/** Who wrote a message. */
public enum Role {
    /** Instructions set by the application ({@code system}). */
    SYSTEM("system"),
    /** Text from the end user ({@code user}). */
    USER("user"),
    /** Text produced by the model ({@code assistant}). */
    ASSISTANT("assistant");

    private final String wireName;

    Role(String wireName) {
        this.wireName = wireName;
    }

    /**
     * The role's wire name.
     *
     * @return {@code system}, {@code user} or {@code assistant}
     */
    public String wireName() {
        return wireName;
    }

    /**
     * The role with a wire name.
     *
     * @param wireName {@code system}, {@code user} or {@code assistant}
     * @return the role
     * @throws IllegalArgumentException for another name
     */
    public static Role fromWireName(String wireName) {
        return Fields.byWireName(values(), Role::wireName, wireName, "role");
    }
}
