package dev.portcullis.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.testing.Fixtures;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Eight threads on one engine: each gets its own answers, Java policies run on every thread at once. */
class ConcurrencyTest {
    @Test
    void eightThreadsShareOneEngine() throws Exception {
        int threads = 8;
        int calls = 2_000;
        Set<String> callers = ConcurrentHashMap.newKeySet();
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        CountDownLatch together = new CountDownLatch(threads);
        InputPolicy gate = Contexts.input("gate", ctx -> {
            callers.add(Thread.currentThread().getName());
            int now = inside.incrementAndGet();
            most.accumulateAndGet(now, Math::max);
            inside.decrementAndGet();
            String content = ctx.messages().get(0).content();
            return content.startsWith("deny") ? DenyDecision.deny(content) : AllowDecision.allow();
        });
        InputPolicy mask = Contexts.input("mask", ctx -> ctx.messages().get(0).content().startsWith("mask")
                ? RedactDecision.redact(Redaction.mask("messages.0.content"))
                : AllowDecision.allow());
        AtomicInteger records = new AtomicInteger();
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder().input(List.of(gate, mask)).build())
                .onAudit(record -> records.incrementAndGet())
                .build();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<Integer>> done = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int thread = t;
                done.add(pool.submit(() -> {
                    together.countDown();
                    together.await();
                    for (int i = 0; i < calls; i++) {
                        String tag = thread + "-" + i;
                        InputContext plain = Fixtures.input("allow " + tag);
                        assertSame(plain, engine.evaluateInput(plain));
                        PolicyDenialError denied = assertThrows(
                                PolicyDenialError.class, () -> engine.evaluateInput(Fixtures.input("deny " + tag)));
                        assertEquals("deny " + tag, denied.getMessage());
                        InputContext masked = engine.evaluateInput(Fixtures.input("mask " + tag));
                        assertEquals("[REDACTED]", masked.messages().get(0).content());
                    }
                    return calls;
                }));
            }
            for (Future<Integer> future : done) {
                assertEquals(calls, future.get(120, TimeUnit.SECONDS));
            }
        } finally {
            pool.shutdownNow();
        }
        assertEquals(threads, callers.size(), "the policy ran on each calling thread");
        assertEquals(threads * calls * 5, records.get());
        System.out.println("ConcurrencyTest: at most " + most.get() + " evaluations of one Java policy at once");
        assertTrue(most.get() >= 1);
    }
}
