//! Slow clients against the service's limits: a bounded crowd that sends its heads and bodies
//! a byte at a time is cut off, the open connections never pass the cap, and a well-behaved
//! client is still answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{get, input, post, start_engine};
use portcullis_engine::PolicyEngine;
use portcullis_server::{DecisionService, Limits, ServeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long an attacker keeps dripping at most: far longer than the read time-outs.
const DRIP_FOR: Duration = Duration::from_secs(10);

/// Connects, sends `head`, then one byte of `drip` every 100 ms until the server ends the
/// connection or [`DRIP_FOR`] passes. Returns what the server answered and whether it cut the
/// client off before the client stopped dripping.
async fn slow_client(addr: SocketAddr, head: String, drip: u8) -> (String, bool) {
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return (String::new(), true);
    };
    let (mut reader, mut writer) = stream.into_split();
    let reading = tokio::spawn(async move {
        let mut answer = Vec::new();
        let _ = reader.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    });
    let started = Instant::now();
    let mut cut = false;
    if writer.write_all(head.as_bytes()).await.is_ok() {
        while started.elapsed() < DRIP_FOR {
            if reading.is_finished() || writer.write_all(&[drip]).await.is_err() {
                cut = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        cut = true;
    }
    let _ = writer.shutdown().await;
    drop(writer);
    let answer = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (answer, cut)
}

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
        let head = "POST /v1/evaluate/input HTTP/1.1\r\nHost: t\r\nX-Pad: ".to_owned();
        attackers.push(tokio::spawn(slow_client(addr, head, b'a')));
    }
    // Whole heads, then bodies that never end.
    for _ in 0..6 {
        let head = "POST /v1/evaluate/input HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n".to_owned();
        attackers.push(tokio::spawn(slow_client(addr, head, b' ')));
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
        let (answer, cut) = attacker.await.expect("the attacker ran");
        assert!(cut, "a slow client was let drip to the end: {answer:?}");
        if answer.starts_with("HTTP/1.1 408") {
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
