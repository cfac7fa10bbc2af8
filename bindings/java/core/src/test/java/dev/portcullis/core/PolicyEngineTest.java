package dev.portcullis.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;

/** The seed's Java API, as a Java user writes it (§17.2). */
class PolicyEngineTest {
    /** The seed's example: a code policy denying on a word, with an audit handler. */
    static final class NoSecrets implements InputPolicy {
        @Override
        public String id() {
            return "no-secrets";
        }

        @Override
        public PolicyDecision evaluate(InputContext ctx) {
            for (Message message : ctx.messages()) {
                if (message.content().contains("secret")) {
                    return DenyDecision.deny("Secrets are not allowed.");
                }
            }
            return AllowDecision.allow();
        }
    }

    @Test
    void theSeedsExampleAllowsAndDenies() {
        List<AuditRecord> records = Collections.synchronizedList(new ArrayList<>());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(new NoSecrets()))
                        .onError(OnErrorBehavior.DENY)
                        .build())
                .onAudit(record -> records.add(record))
                .build();

        InputContext ctx = Contexts.input("hello");
        assertSame(ctx, engine.evaluateInput(ctx), "unchanged: the same instance");

        PolicyDenialError denied =
                assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Contexts.input("my secret")));
        assertEquals("no-secrets", denied.policyId());
        assertEquals(InterceptionPoint.INPUT, denied.interceptionPoint());
        assertEquals("Secrets are not allowed.", denied.getMessage());
        assertEquals("Secrets are not allowed.", denied.reason().orElseThrow());

        assertEquals(2, records.size());
        AuditRecord allow = records.get(0);
        assertEquals("no-secrets", allow.policyId());
        assertEquals("allow", allow.decision());
        assertEquals(InterceptionPoint.INPUT, allow.interceptionPoint());
        assertTrue(allow.reason().isEmpty());
        assertEquals(ctx, allow.context());
        assertTrue(allow.timestamp().isAfter(Instant.now().minusSeconds(60)));
        AuditRecord deny = records.get(1);
        assertEquals("deny", deny.decision());
        assertEquals("Secrets are not allowed.", deny.reason().orElseThrow());
    }

    @Test
    void everyDecisionKindAtEveryPoint() {
        ToolCallPolicy audit = new ToolCallPolicy() {
            @Override
            public String id() {
                return "audit-tools";
            }

            @Override
            public PolicyDecision evaluate(ToolCallContext ctx) {
                return AuditDecision.audit("tool " + ctx.toolName());
            }
        };
        OutputPolicy redact = new OutputPolicy() {
            @Override
            public String id() {
                return "redact-ssn";
            }

            @Override
            public PolicyDecision evaluate(OutputContext ctx) {
                return RedactDecision.redact(List.of(new Redaction(
                        "response.content", RedactionStrategy.REPLACE, "[SSN]", "[0-9]{3}-[0-9]{2}-[0-9]{4}")));
            }
        };
        ToolResultPolicy transform = new ToolResultPolicy() {
            @Override
            public String id() {
                return "mark-untrusted";
            }

            @Override
            public PolicyDecision evaluate(ToolResultContext ctx) {
                return TransformDecision.transform(List.of(Operation.prepend("content", "[untrusted] ")));
            }
        };
        InputPolicy mask = Contexts.input("mask-first", ctx -> RedactDecision.redact(Redaction.mask("messages[0].content")));
        List<AuditRecord> records = Collections.synchronizedList(new ArrayList<>());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(mask))
                        .toolCall(List.of(audit))
                        .toolResult(List.of(transform))
                        .output(List.of(redact))
                        .build())
                .onAudit(records::add)
                .build();

        InputContext input = engine.evaluateInput(Contexts.input("secret", "kept"));
        assertEquals("[REDACTED]", input.messages().get(0).content());
        assertEquals("kept", input.messages().get(1).content());
        assertEquals("acme", input.metadata().extra().get("tenant"), "extra metadata round-trips");

        ToolCallContext call = Contexts.toolCall("web_search");
        assertSame(call, engine.evaluateToolCall(call));
        assertEquals("tool web_search", records.get(1).reason().orElseThrow());

        ToolResultContext result = engine.evaluateToolResult(Contexts.toolResult("sunny"));
        assertEquals("[untrusted] sunny", result.content());

        OutputContext output = Contexts.output("call 123-45-6789");
        OutputContext forwarded = engine.evaluateOutput(output);
        assertNotSame(output, forwarded);
        assertEquals("call [SSN]", forwarded.content());
        assertEquals(List.of("redact", "audit", "transform", "redact"),
                records.stream().map(AuditRecord::decision).toList());
    }

    @Test
    void recordsOfTheCallsOwnContextReadItAndALaterRecordHasTheChangedOne() {
        List<AuditRecord> records = Collections.synchronizedList(new ArrayList<>());
        InputPolicy first = Contexts.input("first", ctx -> AllowDecision.allow());
        InputPolicy second = Contexts.input("second", ctx -> AllowDecision.allow());
        InputPolicy mask = Contexts.input("mask", ctx -> RedactDecision.redact(Redaction.mask("messages[0].content")));
        InputPolicy after = Contexts.input("after", ctx -> AllowDecision.allow());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(first, second, mask, after)).build())
                .onAudit(records::add)
                .build();

        InputContext ctx = Contexts.input("secret", "kept");
        InputContext forwarded = engine.evaluateInput(ctx);
        assertEquals("[REDACTED]", forwarded.messages().get(0).content());
        assertEquals(List.of("first", "second", "mask", "after"),
                records.stream().map(AuditRecord::policyId).toList());
        for (AuditRecord record : records.subList(0, 3)) {
            assertEquals(ctx, record.context(), record.policyId() + " evaluated the context as given");
        }
        assertEquals(forwarded, records.get(3).context(), "after evaluated the masked context");
    }

    @Test
    void aJavaPolicySeesTheCallersObjectUntilAPolicyChangesIt() {
        List<InputContext> seen = Collections.synchronizedList(new ArrayList<>());
        InputPolicy first = Contexts.input("first", ctx -> {
            seen.add(ctx);
            return AllowDecision.allow();
        });
        InputPolicy mask = Contexts.input("mask", ctx -> RedactDecision.redact(Redaction.mask("messages.0.content")));
        InputPolicy last = Contexts.input("last", ctx -> {
            seen.add(ctx);
            return AllowDecision.allow();
        });
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(first, mask, last)).build())
                .build();
        InputContext ctx = Contexts.input("secret");
        InputContext forwarded = engine.evaluateInput(ctx);
        assertSame(ctx, seen.get(0), "unchanged: the caller's own object");
        assertNotSame(ctx, seen.get(1), "changed: a new object");
        assertEquals("[REDACTED]", seen.get(1).messages().get(0).content());
        assertEquals(seen.get(1), forwarded);
        assertEquals("secret", ctx.messages().get(0).content(), "the caller's object is never changed");
    }

    @Test
    void aPolicyThatThrowsIsAnEvaluationErrorWithTheExceptionAsCause() {
        IllegalStateException boom = new IllegalStateException("boom");
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(Contexts.input("thrower", ctx -> {
                    throw boom;
                }))).build())
                .build();
        PolicyEvaluationError error =
                assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Contexts.input("x")));
        assertEquals("thrower", error.policyId());
        assertEquals(InterceptionPoint.INPUT, error.interceptionPoint());
        assertSame(boom, error.getCause());
        assertTrue(error.causeText().contains("java.lang.IllegalStateException: boom"), error.causeText());
        assertTrue(error.getMessage().startsWith("Policy evaluation failed for 'thrower' at 'input'"));
    }

    @Test
    void aPolicyThatReturnsNullIsAnEvaluationErrorSayingSo() {
        List<AuditRecord> records = Collections.synchronizedList(new ArrayList<>());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(Contexts.input("nothing", ctx -> null))).build())
                .onAudit(records::add)
                .build();
        PolicyEvaluationError error =
                assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Contexts.input("x")));
        assertNull(error.getCause());
        assertTrue(error.causeText().contains("returned null"), error.causeText());
        assertEquals("evaluation_error", records.get(0).decision());
    }

    @Test
    void aPolicyPastItsDeadlineIsAnEvaluationError() {
        InputPolicy slow = new InputPolicy() {
            @Override
            public String id() {
                return "slow";
            }

            @Override
            public PolicyDecision evaluate(InputContext ctx) {
                try {
                    Thread.sleep(300);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return AllowDecision.allow();
            }

            @Override
            public Duration deadline() {
                return Duration.ofMillis(50);
            }
        };
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(slow)).build())
                .build();
        PolicyEvaluationError error =
                assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Contexts.input("x")));
        assertEquals("slow", error.policyId());
        assertTrue(error.causeText().contains("deadline") || error.causeText().contains("time"), error.causeText());
    }

    @Test
    void onErrorAllowSkipsAFailingPolicy() {
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(
                                Contexts.input("thrower", ctx -> {
                                    throw new RuntimeException("no");
                                }),
                                Contexts.input("nothing", ctx -> null),
                                new NoSecrets()))
                        .onError(OnErrorBehavior.ALLOW)
                        .build())
                .build();
        InputContext ctx = Contexts.input("fine");
        assertSame(ctx, engine.evaluateInput(ctx));
        assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Contexts.input("secret")));
    }

    @Test
    void theFirstDenyStopsLaterPolicies() {
        List<String> ran = Collections.synchronizedList(new ArrayList<>());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(
                        Contexts.input("first", ctx -> {
                            ran.add("first");
                            return DenyDecision.deny();
                        }),
                        Contexts.input("second", ctx -> {
                            ran.add("second");
                            return AllowDecision.allow();
                        }))).build())
                .build();
        PolicyDenialError denied =
                assertThrows(PolicyDenialError.class, () -> engine.evaluateInput(Contexts.input("x")));
        assertTrue(denied.reason().isEmpty());
        assertEquals(List.of("first"), ran);
    }

    @Test
    void aPolicyThatReturnsAnInvalidDecisionFailsClosed() {
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(Contexts.input("bad-path",
                        ctx -> RedactDecision.redact(Redaction.remove("messages"))))).build())
                .build();
        assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Contexts.input("x")));
    }

    @Test
    void aPolicyCallingTheEngineFromInsideAnEvaluationFailsClosed() {
        assertReentryFailsClosed("reentrant", (engine, ctx) -> engine.evaluateInput(ctx));
    }

    /**
     * An engine whose input policy does {@code reenter} on that same engine while it evaluates:
     * the evaluation fails closed, with the refusal ({@code IllegalStateException}) as its cause.
     */
    private static void assertReentryFailsClosed(String id, BiConsumer<PolicyEngine, InputContext> reenter) {
        PolicyEngine[] holder = new PolicyEngine[1];
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(Contexts.input(id, ctx -> {
                    reenter.accept(holder[0], ctx);
                    return AllowDecision.allow();
                }))).build())
                .build();
        holder[0] = engine;
        PolicyEvaluationError error =
                assertThrows(PolicyEvaluationError.class, () -> engine.evaluateInput(Contexts.input("x")));
        assertInstanceOf(IllegalStateException.class, error.getCause());
    }

    @Test
    void anEscalationNeedsAnApproval() {
        PolicyEngine engine = escalating("ask", "a person decides", ctx -> true);
        ApprovalRequiredError error = assertThrows(
                ApprovalRequiredError.class, () -> engine.evaluateToolCall(Contexts.toolCall("rm")));
        assertEquals("ask", error.policyId());
        assertInstanceOf(String.class, error.request().get("action_digest"));
    }

    /** A code policy escalating every {@code send_email} call. */
    private static PolicyEngine emailNeedsApproval() {
        return escalating(
                "email_needs_approval",
                "email leaves the company",
                ctx -> ctx.toolName().equals("send_email"));
    }

    /** An engine whose one tool-call policy, {@code id}, escalates the calls {@code when} holds for. */
    private static PolicyEngine escalating(String id, String reason, Predicate<ToolCallContext> when) {
        return PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .toolCall(List.of(new ToolCallPolicy() {
                            @Override
                            public String id() {
                                return id;
                            }

                            @Override
                            public PolicyDecision evaluate(ToolCallContext ctx) {
                                return when.test(ctx)
                                        ? EscalateDecision.escalate(reason)
                                        : AllowDecision.allow();
                            }
                        }))
                        .build())
                .build();
    }

    private static ToolCallContext email(String to) {
        return new ToolCallContext(
                "send_email", Map.of("to", to), Message.assistant("sending"), Contexts.metadata());
    }

    @Test
    void aGrantLetsTheSameCallThroughOnce() {
        PolicyEngine engine = emailNeedsApproval();
        ToolCallContext call = email("bob@example.com");
        ApprovalRequiredError error = assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
        assertEquals("email_needs_approval", error.policyId());
        assertEquals(InterceptionPoint.TOOL_CALL, error.interceptionPoint());
        assertEquals(List.of("email leaves the company"), error.request().get("reasons"));
        String digest = (String) error.request().get("action_digest");

        engine.grant(digest, "erin", Duration.ofMinutes(1));
        assertSame(call, engine.evaluateToolCall(call));
        ApprovalRequiredError again =
                assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
        assertEquals(digest, again.request().get("action_digest"));

        engine.grant(digest, "erin", Duration.ofMinutes(1));
        ApprovalRequiredError other = assertThrows(
                ApprovalRequiredError.class, () -> engine.evaluateToolCall(email("mallory@example.com")));
        assertNotEquals(digest, other.request().get("action_digest"));
        assertSame(call, engine.evaluateToolCall(call));
    }

    @Test
    void aGrantIsOnlyForTheEngineThatRecordedIt() {
        PolicyEngine engine = emailNeedsApproval();
        PolicyEngine another = emailNeedsApproval();
        ToolCallContext call = email("bob@example.com");
        ApprovalRequiredError error = assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
        another.grant((String) error.request().get("action_digest"), "erin", Duration.ofMinutes(1));
        assertThrows(ApprovalRequiredError.class, () -> engine.evaluateToolCall(call));
    }

    @Test
    void aGrantRefusesBadArguments() {
        PolicyEngine engine = emailNeedsApproval();
        Duration minute = Duration.ofMinutes(1);
        assertThrows(NullPointerException.class, () -> engine.grant(null, "erin", minute));
        assertThrows(NullPointerException.class, () -> engine.grant("d", null, minute));
        assertThrows(NullPointerException.class, () -> engine.grant("d", "erin", null));
        assertThrows(IllegalArgumentException.class, () -> engine.grant("", "erin", minute));
        assertThrows(IllegalArgumentException.class, () -> engine.grant(" \t", "erin", minute));
        assertThrows(IllegalArgumentException.class, () -> engine.grant("d", " ", minute));
        assertThrows(IllegalArgumentException.class, () -> engine.grant("d", "erin", Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> engine.grant("d", "erin", Duration.ofSeconds(-1)));
        assertThrows(IllegalArgumentException.class,
                () -> engine.grant("d", "erin", Duration.ofDays(30).plusNanos(1)));
        engine.grant("d", "erin", Duration.ofDays(30));
        engine.grant("d", "erin", Duration.ofNanos(1));
    }

    @Test
    void aGrantFromInsideAnEvaluationIsAnExceptionNotADeadlock() {
        assertReentryFailsClosed("granting", (engine, ctx) -> engine.grant("d", "erin", Duration.ofMinutes(1)));
    }

    @Test
    void anEmptyEngineForwardsEverything() {
        PolicyEngine engine = PolicyEngine.builder().build();
        OutputContext ctx = Contexts.output("hi");
        assertSame(ctx, engine.evaluateOutput(ctx));
    }

    @Test
    void contextsAndDecisionsRoundTripTheirJson() {
        InputContext input = Contexts.input("a", "b");
        assertEquals(input, InputContext.fromJson(input.toJson()));
        ToolCallContext call = new ToolCallContext("t", Map.of("n", 1L, "nested", Map.of("list", List.of(true, "x"))),
                Message.assistant("c"), Contexts.metadata());
        assertEquals(call, ToolCallContext.fromJson(call.toJson()));
        ToolResultContext result = new ToolResultContext("t", Map.of(), "r", Map.of("k", "v"), true, Contexts.metadata());
        assertEquals(result, ToolResultContext.fromJson(result.toJson()));
        OutputContext output = Contexts.output("o");
        assertEquals(output, OutputContext.fromJson(output.toJson()));
        for (PolicyDecision decision : List.of(AllowDecision.allow(), DenyDecision.deny("r"), AuditDecision.audit("a"),
                RedactDecision.redact(Redaction.mask("x")), TransformDecision.transform(Operation.set("x", 1L)),
                EscalateDecision.escalate("e"))) {
            assertEquals(decision, PolicyDecision.fromJson(decision.toJson()));
        }
    }

    /**
     * Text crosses to the native library and back as UTF-8, never as the JVM's modified UTF-8:
     * characters outside the basic plane (an emoji, a musical symbol), NUL and other control
     * characters come back exactly, in the context a transform changed, in the context a Java
     * policy reads after it, and in a denial's reason.
     */
    @Test
    void textOutsideTheBasicPlaneAndNulCrossExactly() {
        String text = "emoji \uD83D\uDE00, clef \uD834\uDD1E, nul \u0000, bell \u0007, caf\u00e9, \u4e2d\u6587,"
                + " quote \" backslash \\ end";
        List<String> seen = Collections.synchronizedList(new ArrayList<>());
        ToolResultPolicy read = Contexts.toolResult("read", ctx -> {
            seen.add(ctx.content());
            seen.add((String) ctx.arguments().get("query"));
            seen.add((String) ctx.metadata().extra().get("note \uD834\uDD1E"));
            return AllowDecision.allow();
        });
        ToolResultPolicy mark = Contexts.toolResult(
                "mark", ctx -> TransformDecision.transform(List.of(Operation.prepend("content", "\uD83D\uDE00 "))));
        ToolResultPolicy refuse = Contexts.toolResult("refuse",
                ctx -> ctx.content().contains("deny") ? DenyDecision.deny("no: " + text) : AllowDecision.allow());
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().toolResult(List.of(mark, read, refuse)).build())
                .build();
        Metadata metadata = new Metadata("agent \uD83D\uDE00", "s\u0000", "2026-01-01T00:00:00Z",
                Map.of("note \uD834\uDD1E", text));
        ToolResultContext ctx = new ToolResultContext("web_search", Map.of("query", text), text, null, false, metadata);

        ToolResultContext forwarded = engine.evaluateToolResult(ctx);
        assertEquals("\uD83D\uDE00 " + text, forwarded.content());
        assertEquals(text, forwarded.arguments().get("query"));
        assertEquals(metadata, forwarded.metadata());
        assertEquals(List.of("\uD83D\uDE00 " + text, text, text), seen);

        PolicyDenialError denied = assertThrows(PolicyDenialError.class, () -> engine.evaluateToolResult(
                new ToolResultContext("web_search", Map.of(), "deny " + text, null, false, metadata)));
        assertEquals("no: " + text, denied.reason().orElseThrow());
        assertEquals("no: " + text, denied.getMessage());
    }

    @Test
    void badInputIsAClearExceptionNeverACrash() {
        assertThrows(IllegalArgumentException.class, () -> InputContext.fromJson("{"));
        assertThrows(IllegalArgumentException.class, () -> InputContext.fromJson("{\"messages\": 3}"));
        assertThrows(IllegalArgumentException.class, () -> InputContext.fromJson("[".repeat(100_000)));
        assertThrows(IllegalArgumentException.class, () -> RedactDecision.redact(List.of()));
        assertThrows(NullPointerException.class, () -> PolicySet.builder().input(null));
        PolicyEngine engine = PolicyEngine.builder().build();
        assertThrows(NullPointerException.class, () -> engine.evaluateInput(null));
        // A timestamp the engine cannot read: refused by the engine, as an IllegalArgumentException.
        InputContext badTime = new InputContext(List.of(), new Metadata("a", "s", "yesterday", Map.of()));
        PolicyEngine withPolicy = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(new NoSecrets())).build())
                .build();
        try {
            withPolicy.evaluateInput(badTime);
        } catch (IllegalArgumentException expected) {
            assertTrue(expected.getMessage().contains("input"), expected.getMessage());
        }
        // A metadata key JSON cannot carry.
        assertThrows(IllegalArgumentException.class,
                () -> new InputContext(List.of(), new Metadata("a", "s", "t", Map.of("x", new Object()))).toJson());
    }
}
