package dev.portcullis.core;

/** A policy of the {@code tool_call} point: {@code String id()} and {@code PolicyDecision evaluate(ToolCallContext ctx)}. */
public interface ToolCallPolicy extends Policy<ToolCallContext> {}
