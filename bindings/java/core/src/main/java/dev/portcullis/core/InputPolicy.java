package dev.portcullis.core;

/** A policy of the {@code input} point: {@code String id()} and {@code PolicyDecision evaluate(InputContext ctx)}. */
public interface InputPolicy extends Policy<InputContext> {}
