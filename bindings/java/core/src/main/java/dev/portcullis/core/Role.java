package dev.portcullis.core;

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
        for (Role role : values()) {
            if (role.wireName.equals(wireName)) {
                return role;
            }
        }
        throw new IllegalArgumentException(
                "unknown role " + wireName + ": expected system, user or assistant");
    }
}
