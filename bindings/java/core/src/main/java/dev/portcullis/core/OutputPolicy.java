package dev.portcullis.core;

/** A policy of the {@code output} point: {@code String id()} and {@code PolicyDecision evaluate(OutputContext ctx)}. */
public interface OutputPolicy extends Policy<OutputContext> {}
