package dev.portcullis.core;

import dev.portcullis.core.internal.Fields;

/** How a {@link Redaction} changes its field. */
public enum RedactionStrategy {
    /** The whole value becomes the replacement ({@code mask}). */
    MASK("mask"),
    /** The field is removed ({@code remove}). */
    REMOVE("remove"),
    /** Every match of the pattern in the string becomes the replacement ({@code replace}). */
    REPLACE("replace");

    private final String wireName;

    RedactionStrategy(String wireName) {
        this.wireName = wireName;
    }

    /**
     * The strategy's wire name.
     *
     * @return {@code mask}, {@code remove} or {@code replace}
     */
    public String wireName() {
        return wireName;
    }

    /**
     * The strategy with a wire name.
     *
     * @param wireName {@code mask}, {@code remove} or {@code replace}
     * @return the strategy
     * @throws IllegalArgumentException for another name
     */
    public static RedactionStrategy fromWireName(String wireName) {
        return Fields.byWireName(values(), RedactionStrategy::wireName, wireName, "redaction strategy");
    }
}
