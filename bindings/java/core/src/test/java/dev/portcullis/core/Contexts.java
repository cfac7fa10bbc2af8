package dev.portcullis.core;

import java.util.List;
import java.util.Map;

/** Contexts the tests evaluate. */
final class Contexts {
    private Contexts() {}

    static Metadata metadata() {
        return new Metadata("agent-1", "s-1", "2026-01-01T00:00:00Z", Map.of("tenant", "acme"));
    }

    static InputContext input(String... contents) {
        List<Message> messages = new java.util.ArrayList<>();
        for (String content : contents) {
            messages.add(Message.user(content));
        }
        return new InputContext(messages, metadata());
    }

    static ToolCallContext toolCall(String tool) {
        return new ToolCallContext(
                tool, Map.of("query", "weather"), Message.assistant("calling " + tool), metadata());
    }

    static ToolResultContext toolResult(String content) {
        return new ToolResultContext("web_search", Map.of("query", "weather"), content, null, false, metadata());
    }

    static OutputContext output(String content) {
        return new OutputContext(Message.assistant(content), metadata());
    }

    /** An input policy written as a lambda. */
    static InputPolicy input(String id, java.util.function.Function<InputContext, PolicyDecision> evaluate) {
        return new InputPolicy() {
            @Override
            public String id() {
                return id;
            }

            @Override
            public PolicyDecision evaluate(InputContext ctx) {
                return evaluate.apply(ctx);
            }
        };
    }

    /** A tool-result policy written as a lambda. */
    static ToolResultPolicy toolResult(
            String id, java.util.function.Function<ToolResultContext, PolicyDecision> evaluate) {
        return new ToolResultPolicy() {
            @Override
            public String id() {
                return id;
            }

            @Override
            public PolicyDecision evaluate(ToolResultContext ctx) {
                return evaluate.apply(ctx);
            }
        };
    }
}
