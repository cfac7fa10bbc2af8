package dev.portcullis.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.core.internal.HostPolicyAdapter;
import dev.portcullis.core.internal.Json;
import dev.portcullis.core.internal.Native;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The native methods called as a careless or hostile caller would: every bad argument is a
 * Java exception saying what is wrong, and the JVM keeps running.
 */
class NativeBoundaryTest {
    @Test
    void closedHandlesAndBadArgumentsAreExceptions() {
        byte[] context = Contexts.input("x").toJson().getBytes(StandardCharsets.UTF_8);
        IllegalStateException closed = assertThrows(IllegalStateException.class,
                () -> Native.engineEvaluate(0, 0, null, context, new Throwable[1]));
        assertTrue(closed.getMessage().contains("closed"), closed.getMessage());
        assertThrows(IllegalStateException.class, () -> Native.policyInfo(0));
        IllegalStateException closedGrant =
                assertThrows(IllegalStateException.class, () -> Native.engineGrant(0, "d", "erin", 1));
        assertTrue(closedGrant.getMessage().contains("closed"), closedGrant.getMessage());
        assertThrows(IllegalStateException.class, () -> Native.policySetAddNative(0, 0, 0));
        assertThrows(IllegalArgumentException.class, () -> Native.policySetNew("maybe"));
        assertThrows(IllegalArgumentException.class, () -> Native.policySetNew(null));
        assertThrows(IllegalArgumentException.class, () -> Native.dslPolicy(9, "id", "."));
        assertThrows(IllegalArgumentException.class, () -> Native.dslPolicy(-1, null, null));
        assertThrows(IllegalArgumentException.class, () -> Native.httpPolicy(0, "id", "{not json"));
        assertThrows(IllegalArgumentException.class, () -> Native.regoServerPolicy(0, "id", "{\"base_url\":1}", "p"));
        assertThrows(IllegalArgumentException.class, () -> Native.observabilitySink("[]"));
        assertThrows(IllegalArgumentException.class, () -> Native.engineFromManifest(null, false, 0));

        long set = Native.policySetNew("deny");
        try {
            assertThrows(IllegalArgumentException.class, () -> Native.policySetAddJava(set, 0, "p", null, 0));
            assertThrows(IllegalArgumentException.class, () -> Native.policySetAddJava(set, 7, "p", new Object(), 0));
            long engine = Native.engineNew(set, false, 0);
            try {
                assertThrows(IllegalStateException.class, () -> Native.engineNew(set, false, 0));
                assertThrows(IllegalArgumentException.class, () -> Native.engineGrant(engine, null, "erin", 1));
                assertThrows(IllegalArgumentException.class, () -> Native.engineGrant(engine, "d", null, 1));
                assertThrows(IllegalArgumentException.class, () -> Native.engineGrant(engine, "d", "erin", 0));
                assertThrows(IllegalArgumentException.class, () -> Native.engineGrant(engine, "d", "erin", -1));
                Native.engineGrant(engine, "d", "erin", Long.MAX_VALUE);
                assertThrows(IllegalArgumentException.class,
                        () -> Native.engineEvaluate(engine, 0, null, null, new Throwable[1]));
                Map<String, Object> invalid = Json.parseObject(Native.engineEvaluate(
                        engine, 0, null, "{\"messages\":".getBytes(StandardCharsets.UTF_8), null));
                assertEquals("invalid_context", invalid.get("outcome"));
                Map<String, Object> deep = Json.parseObject(Native.engineEvaluate(
                        engine, 0, null, "[".repeat(100_000).getBytes(StandardCharsets.UTF_8), null));
                assertEquals("invalid_context", deep.get("outcome"));
            } finally {
                Native.engineFree(engine);
            }
        } finally {
            Native.policySetFree(set);
        }
    }

    @Test
    void aCallerObjectOfTheWrongKindFailsThePolicyNotTheJvm() {
        InputPolicy allow = Contexts.input("allow", ctx -> AllowDecision.allow());
        long set = Native.policySetNew("deny");
        try {
            Native.policySetAddJava(set, 0, "allow", new HostPolicyAdapter(allow, InterceptionPoint.INPUT), 0);
            long engine = Native.engineNew(set, false, 0);
            try {
                Throwable[] thrown = new Throwable[1];
                Map<String, Object> outcome = Json.parseObject(Native.engineEvaluate(
                        engine, 0, "not a context", Contexts.input("x").toJson().getBytes(StandardCharsets.UTF_8), thrown));
                assertEquals("evaluation_error", outcome.get("outcome"));
                assertTrue(thrown[0] instanceof ClassCastException, String.valueOf(thrown[0]));
                // A policy whose adapter is no adapter is refused.
                long other = Native.policySetNew("deny");
                try {
                    IllegalArgumentException odd = assertThrows(IllegalArgumentException.class,
                            () -> Native.policySetAddJava(other, 0, "odd", new Object(), 0));
                    assertTrue(odd.getMessage().contains("HostPolicyAdapter"), odd.getMessage());
                } finally {
                    Native.policySetFree(other);
                }
            } finally {
                Native.engineFree(engine);
            }
        } finally {
            Native.policySetFree(set);
        }
    }
}
