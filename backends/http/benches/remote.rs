//! `remote`: evaluations through `HttpInputPolicy` to a trivial decision endpoint on loopback.
//!
//! - `round_trip`: one evaluation at a time (goal: median under 150 µs);
//! - `concurrent_64`: 64 evaluations at once through one client; the connections the server
//!   accepted are printed at the end (goal: far fewer than 64 per round, as the pool reuses
//!   kept-alive connections).
//!
//! Run with `cargo bench -p portcullis-http --bench remote`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{InputContext, Message, Metadata, Policy, PolicyDecision};
use portcullis_http::{HttpClientOptions, HttpInputPolicy};
use portcullis_testing::{EvaluateServer, Reply};

fn context() -> InputContext {
    InputContext::new(
        vec![
            Message::system("You are a helpful assistant."),
            Message::user("What is the capital of France?"),
        ],
        Metadata::new("agent-1", "session-1").with_timestamp("2026-01-01T00:00:00.000Z"),
    )
}

fn remote(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = runtime
        .block_on(EvaluateServer::replying(Reply::decision(
            &PolicyDecision::allow(),
        )))
        .expect("a loopback server");
    let policy = Arc::new(
        HttpInputPolicy::new("bench", HttpClientOptions::new(server.url()))
            .expect("a valid base URL"),
    );
    let context = Arc::new(context());

    let mut group = c.benchmark_group("remote");
    group.bench_function("round_trip", |b| {
        b.to_async(&runtime).iter(|| async {
            let decision = policy.evaluate(&context).await.expect("a decision");
            assert_eq!(decision, PolicyDecision::allow());
        });
    });
    let round_trip_connections = server.connections_accepted();

    let rounds = Arc::new(AtomicUsize::new(0));
    group.bench_function("concurrent_64", |b| {
        b.to_async(&runtime).iter(|| {
            let policy = Arc::clone(&policy);
            let context = Arc::clone(&context);
            let rounds = Arc::clone(&rounds);
            async move {
                rounds.fetch_add(1, Ordering::Relaxed);
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..64 {
                    let policy = Arc::clone(&policy);
                    let context = Arc::clone(&context);
                    tasks.spawn(async move { policy.evaluate(&context).await.is_ok() });
                }
                while let Some(done) = tasks.join_next().await {
                    assert!(done.expect("the task ran"), "an evaluation failed");
                }
            }
        });
    });
    group.finish();

    let total = server.connections_accepted();
    let rounds = rounds.load(Ordering::Relaxed);
    println!(
        "remote: connections accepted by the server: {round_trip_connections} during round_trip; \
         {} during concurrent_64 over {rounds} rounds of 64 evaluations ({} evaluations)",
        total - round_trip_connections,
        rounds * 64,
    );
    runtime.block_on(server.shutdown());
}

criterion_group!(benches, remote);
criterion_main!(benches);
