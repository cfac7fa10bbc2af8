//! Load: 10,000 concurrent evaluations mixing code, DSL, Rego and remote policies through one
//! engine, every result checked, no deadlock. (The soak is in `soak.rs`, a process of its own so
//! that its memory figures are its own.)
#![cfg(all(feature = "dsl", feature = "rego", feature = "http"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{mixed_engine, remote_service, run_concurrently};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_concurrent_mixed_evaluations_are_all_correct() {
    let server = remote_service().await;
    let engine = mixed_engine(&server);
    let started = Instant::now();
    // A generous bound: a deadlock fails the test instead of hanging it.
    let problems = tokio::time::timeout(
        Duration::from_secs(300),
        run_concurrently(&engine, 0..10_000),
    )
    .await
    .expect("10,000 evaluations finish (no deadlock)");
    assert!(
        problems.is_empty(),
        "{} of 10,000 wrong, the first: {:?}",
        problems.len(),
        &problems[..problems.len().min(5)]
    );
    // Cases 0-4 of every 8 are inputs: the remote policy saw those the code policy let
    // through (1 in 8 is denied before it), and every tool call the Rego and DSL rules allowed.
    let requests = server.requests().len();
    assert_eq!(
        requests,
        10_000 / 8 * (4 + 2),
        "requests to the remote service"
    );
    // At most 64 requests are in flight; a slot is free again as soon as its answer is read,
    // a moment before the connection is back in the pool, so a few more connections may open,
    // but never one per evaluation.
    let limit = portcullis::http::DEFAULT_MAX_CONNECTIONS;
    assert!(
        server.connections_accepted() <= 2 * limit,
        "{} connections for a pool of {limit} requests in flight",
        server.connections_accepted(),
    );
    eprintln!(
        "10,000 concurrent mixed evaluations in {:?} over {} connections",
        started.elapsed(),
        server.connections_accepted()
    );
    server.shutdown().await;
}
