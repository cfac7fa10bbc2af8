package dev.portcullis.core;

import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.portcullis.testing.Fixtures;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * A million evaluations with the heap and the native memory flat: the heap in use after a
 * collection, and the process's resident memory less the heap the JVM has committed (what the
 * native library and the JVM's own structures hold), at the start, half-way and at the end;
 * the second half may not grow them. The figures are printed; the bounds are generous.
 */
class MemoryTest {
    static final int CALLS = 1_000_000;

    private static long rssKiB() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        return -1;
    }

    private static long heapBytes() {
        Runtime runtime = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
        }
        return runtime.totalMemory() - runtime.freeMemory();
    }

    /** Resident memory less the committed heap, in KiB. */
    private static long nativeKiB() throws IOException {
        return rssKiB() - Runtime.getRuntime().totalMemory() / 1024;
    }

    @Test
    void aMillionEvaluationsLeaveMemoryFlat() throws Exception {
        PolicyEngine engine = PolicyEngine.builder()
                .policySet(PolicySet.builder()
                        .input(List.of(Contexts.input("allow", ctx -> AllowDecision.allow())))
                        .build())
                .onAudit(record -> {})
                .build();
        InputContext ctx = Fixtures.input("hello");
        for (int i = 0; i < 50_000; i++) {
            engine.evaluateInput(ctx);
        }
        // The JVM settles (the JIT compiles the hot path, the collector sizes its structures)
        // during the first half; the second half must add nothing that stays.
        long heapStart = heapBytes();
        long nativeStart = nativeKiB();
        long start = System.nanoTime();
        long heapHalf = 0;
        long nativeHalf = 0;
        for (int i = 0; i < CALLS; i++) {
            if (i == CALLS / 2) {
                heapHalf = heapBytes();
                nativeHalf = nativeKiB();
            }
            assertSame(ctx, engine.evaluateInput(ctx));
        }
        long elapsed = System.nanoTime() - start;
        long heapEnd = heapBytes();
        long nativeEnd = nativeKiB();
        System.out.printf(
                "MemoryTest: %d evaluations, %.1f µs each; heap in use %d / %d / %d KiB;"
                        + " resident less committed heap %d / %d / %d KiB (start / half-way / end)%n",
                CALLS, elapsed / 1e3 / CALLS, heapStart / 1024, heapHalf / 1024, heapEnd / 1024,
                nativeStart, nativeHalf, nativeEnd);
        assertTrue(heapEnd - heapHalf < 16L * 1024 * 1024, "the heap grew by more than 16 MiB in the second half");
        assertTrue(nativeEnd - nativeHalf < 32L * 1024, "native memory grew by more than 32 MiB in the second half");
    }
}
