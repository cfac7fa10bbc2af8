//! Slow clients against the service's limits: a bounded crowd that sends its heads and bodies
//! a byte at a time is cut off, the open connections never pass the cap, and a well-behaved
//! client is still answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{get, input, post, start_engine};
use portcullis_engine::PolicyEngine;
use portcullis_server::{DecisionService, Limits, ServeOptions};
use portcullis_testing::load::SlowRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_a_well_behaved_client_is_answered() {
    const MAX_CONNECTIONS: usize = 6;
    let read_timeout = Duration::from_millis(400);
    let server = start_engine(
        DecisionService::builder().limits(
            Limits::new()
                .max_concurrent(2)
                .queue_timeout(Duration::from_secs(10))
                .header_read_timeout(read_timeout)
                .body_read_timeout(read_timeout),
        ),
        PolicyEngine::builder().policy_set(common::policies()),
        ServeOptions::new()
            .header_read_timeout(read_timeout)
            .max_connections(MAX_CONNECTIONS),
    )
    .await;
    let addr = server.addr;
    let mut attackers = Vec::new();
    // Heads that never end.
    for _ in 0..12 {
        let head =
            SlowRequest::new("POST /v1/evaluate/input HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ");
        attackers.push(tokio::spawn(
            async move { head.fill(b'a').send(addr).await },
        ));
    }
    // Whole heads, then bodies that never end.
    for _ in 0..6 {
        let body = SlowRequest::new(
            "POST /v1/evaluate/input HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n",
        );
        attackers.push(tokio::spawn(async move { body.send(addr).await }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A client that sends its request at once is answered while the crowd is at it.
    let (status, outcome) = post(
        &format!("{}/v1/evaluate/input", server.url),
        &input("the secret"),
    )
    .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "denied");

    let mut timed_out_bodies = 0;
    for attacker in attackers {
        let answer = attacker.await.expect("the attacker ran");
        assert!(
            answer.cut,
            "a slow client was let drip to the end: {answer:?}"
        );
        if answer.status() == Some(408) {
            timed_out_bodies += 1;
        }
    }
    // The bodies that were being read were cut with 408 (a client whose head was not read yet
    // when it was cut may see the connection closed instead).
    assert!(timed_out_bodies >= 1, "no slow body was answered 408");

    let (status, metrics) = get(&format!("{}/metrics", server.url)).await;
    assert_eq!(status, 200);
    let peak: usize = metrics
        .lines()
        .find_map(|line| line.strip_prefix("portcullis_connections_open_peak "))
        .and_then(|value| value.trim().parse().ok())
        .expect("the peak of open connections");
    assert!(
        (1..=MAX_CONNECTIONS).contains(&peak),
        "{peak} connections were open at once, over the cap of {MAX_CONNECTIONS}"
    );
    server.stop().await;
}
