package dev.portcullis.core;

/** A policy of the {@code tool_result} point: {@code String id()} and {@code PolicyDecision evaluate(ToolResultContext ctx)}. */
public interface ToolResultPolicy extends Policy<ToolResultContext> {}
