//! Soak: evaluations mixing code, DSL, Rego and remote policies through one engine, in batches
//! of 1,000 concurrent ones, with resident memory flat. 20,000 evaluations by default;
//! `PORTCULLIS_SOAK=1` makes it 1,000,000 and it prints resident memory at the start, the
//! middle and the end (run it in release: `PORTCULLIS_SOAK=1 cargo test --release
//! --all-features --test soak -- --nocapture`). A test binary of its own: resident memory is
//! the process's, and no other test may run beside it.
#![cfg(all(feature = "dsl", feature = "rego", feature = "http"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::{mixed_engine, remote_service, resident_bytes, run_concurrently};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_keeps_resident_memory_flat() {
    let heavy = std::env::var_os("PORTCULLIS_SOAK").is_some();
    let total: usize = if heavy { 1_000_000 } else { 20_000 };
    const BATCH: usize = 1_000;
    let server = remote_service().await;
    let engine = mixed_engine(&server);
    // Warm up: pools of connections and Rego instances, caches, the allocator's arenas.
    let problems = run_concurrently(&engine, 0..5_000).await;
    assert!(
        problems.is_empty(),
        "{:?}",
        &problems[..problems.len().min(5)]
    );
    server.take_requests();
    let Some(start) = resident_bytes() else {
        eprintln!("no /proc/self/statm: resident memory is not measured here");
        return;
    };
    let started = Instant::now();
    let mut middle = start;
    let mut done = 0;
    while done < total {
        let problems = run_concurrently(&engine, done..done + BATCH).await;
        assert!(
            problems.is_empty(),
            "{:?}",
            &problems[..problems.len().min(5)]
        );
        // The test server records requests; forget them so that only the engine is measured.
        server.take_requests();
        done += BATCH;
        if done == total / 2 {
            middle = resident_bytes().unwrap_or(0);
        }
    }
    let end = resident_bytes().unwrap_or(0);
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    eprintln!(
        "soak: {total} evaluations in {:?}; resident memory start {:.1} MiB, middle {:.1} MiB, end {:.1} MiB",
        started.elapsed(),
        mib(start),
        mib(middle),
        mib(end)
    );
    // Generous: allocator fragmentation may add a little; a leak of even 100 bytes per
    // evaluation would show in the heavy run (100 MB), and the second half must not grow
    // much more than the first.
    let bound = 64 * 1024 * 1024;
    assert!(
        end.saturating_sub(start) < bound,
        "resident memory grew from {:.1} MiB to {:.1} MiB over {total} evaluations",
        mib(start),
        mib(end)
    );
    server.shutdown().await;
}
