//! The service's memory under a crowd of slow senders, measured: each declares a large body,
//! sends most of it at once and trickles the rest, for longer than the body read time. Bodies
//! are read only under an evaluation slot, so the process holds at most `max_concurrent`
//! bodies however many senders there are; the others wait in the queue or are refused (503)
//! before a byte of their body is read.
//!
//! Alone in its test binary, so that the resident memory measured is this test's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{input, post, start_engine};
use portcullis_engine::PolicyEngine;
use portcullis_server::{DecisionService, Limits, ServeOptions};
use portcullis_testing::load::{PeakResident, SlowRequest, resident_bytes};

const MIB: u64 = 1024 * 1024;

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_senders_of_large_bodies_hold_no_more_than_the_slots_allow() {
    const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
    const MAX_CONCURRENT: usize = 2;
    const MAX_QUEUED: usize = 6;
    const SENDERS: usize = 32;
    // Allocator and buffer overhead the bound allows beyond the bodies themselves: a body is
    // gathered in a growing buffer (up to twice its size while it grows), the tasks and
    // connection buffers of the crowd, the runtime's own.
    const SLACK: u64 = 24 * MIB;
    let read_timeout = Duration::from_millis(1500);
    let server = start_engine(
        DecisionService::builder().limits(
            Limits::new()
                .max_body_bytes(MAX_BODY_BYTES)
                .max_concurrent(MAX_CONCURRENT)
                .max_queued(MAX_QUEUED)
                .queue_timeout(Duration::from_secs(30))
                .request_deadline(Duration::from_secs(30))
                .header_read_timeout(read_timeout)
                .body_read_timeout(read_timeout),
        ),
        PolicyEngine::builder().policy_set(common::policies()),
        ServeOptions::new()
            .header_read_timeout(read_timeout)
            .max_connections(SENDERS + 8),
    )
    .await;
    let url = format!("{}/v1/evaluate/input", server.url);
    // Warm: the first evaluation allocates what every later one reuses.
    assert_eq!(post(&url, &input("hello")).await.0, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(resident_bytes(None).is_some(), "no VmRSS to measure");

    let memory = PeakResident::start(None);
    let head = format!(
        "POST /v1/evaluate/input HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES}\r\n\r\n"
    );
    let addr = server.addr;
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let request = SlowRequest::new(head.clone())
                .burst(MAX_BODY_BYTES - 4096)
                .for_at_most(Duration::from_secs(20));
            tokio::spawn(async move { request.send(addr).await })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let mut sent = 0;
    for sender in senders {
        let answer = sender.await.expect("the sender ran");
        assert!(
            answer.cut,
            "a slow sender was let send to the end: {answer:?}"
        );
        sent += answer.sent;
        let status = answer
            .status()
            .map_or("closed".to_owned(), |status| status.to_string());
        *statuses.entry(status).or_default() += 1;
    }
    let memory = memory.stop();
    let bound = (MAX_CONCURRENT * MAX_BODY_BYTES) as u64 + SLACK;
    let declared = (SENDERS * MAX_BODY_BYTES) as u64;
    eprintln!(
        "serve, {SENDERS} slow senders declaring {} MiB bodies each ({} MiB in all; {} MiB sent), \
         max_concurrent {MAX_CONCURRENT}, max_queued {MAX_QUEUED}: {memory}; bound \
         max_concurrent x body cap + {} MiB slack = {} MiB; answers {statuses:?}",
        MAX_BODY_BYTES as u64 / MIB,
        declared / MIB,
        sent as u64 / MIB,
        SLACK / MIB,
        bound / MIB,
    );
    assert!(
        declared > 2 * bound,
        "the crowd must be able to exceed the bound"
    );
    assert!(
        memory.growth() <= bound,
        "{memory}: over the {} MiB the limits allow",
        bound / MIB
    );
    // Bodies read under a slot were cut off when their read time ran out (408); the others
    // waited, or were refused before their body was read (503, or the connection closed
    // under a client still sending).
    let timed_out = statuses.get("408").copied().unwrap_or(0);
    assert!(
        timed_out >= 1,
        "no body was read under a slot: {statuses:?}"
    );
    assert!(
        timed_out < SENDERS,
        "every sender's body was read: {statuses:?}"
    );
    for status in statuses.keys() {
        assert!(
            ["408", "503", "closed"].contains(&status.as_str()),
            "a slow sender got {status}: {statuses:?}"
        );
    }
    // The service still answers.
    let (status, outcome) = post(&url, &input("the secret")).await;
    assert_eq!(
        (status, &outcome["outcome"]),
        (200, &serde_json::json!("denied"))
    );
    server.stop().await;
}
