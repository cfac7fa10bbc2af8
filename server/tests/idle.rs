//! The header read time-out, as a client meets it: a connection left silent, or kept alive and
//! left idle, is closed once the time-out has passed (and not before); a connection whose
//! request takes longer than the time-out to answer is answered; a client that keeps sending
//! requests is never cut.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Slow, input, start_engine};
use portcullis_engine::{PolicyEngine, PolicySet};
use portcullis_server::{DecisionService, ServeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_millis(400);

async fn server(set: PolicySet) -> common::Running {
    start_engine(
        DecisionService::builder(),
        PolicyEngine::builder().policy_set(set),
        ServeOptions::new().header_read_timeout(TIMEOUT),
    )
    .await
}

/// Reads until the server closes the connection; returns what it wrote and when it closed.
async fn read_until_closed(stream: &mut TcpStream) -> (String, Instant) {
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("the server closes the connection in time");
        match read {
            Ok(0) | Err(_) => {
                return (
                    String::from_utf8_lossy(&answer).into_owned(),
                    Instant::now(),
                );
            }
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_once_the_time_out_has_passed() {
    let server = server(common::policies()).await;
    let opened = Instant::now();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let (answer, closed) = read_until_closed(&mut stream).await;
    let after = closed - opened;
    assert!(answer.is_empty(), "{answer}");
    assert!(
        after >= TIMEOUT - Duration::from_millis(50),
        "closed after {after:?}"
    );
    assert!(after < TIMEOUT * 3, "closed after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_its_last_answer() {
    let server = server(common::policies()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // Requests within the time-out keep the connection open well past it.
    let started = Instant::now();
    let mut answered = 0;
    let last = loop {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0; 1024];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(
            String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"),
            "request {answered} was not answered"
        );
        answered += 1;
        if started.elapsed() >= TIMEOUT * 3 {
            break Instant::now();
        }
        tokio::time::sleep(TIMEOUT / 4).await;
    };
    // Then nothing: closed once the time-out has passed since the last answer.
    let (answer, closed) = read_until_closed(&mut stream).await;
    assert!(answer.is_empty(), "{answer}");
    let after = closed - last;
    assert!(
        after >= TIMEOUT - Duration::from_millis(100),
        "closed after {after:?}"
    );
    assert!(after < TIMEOUT * 3, "closed after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_takes_longer_than_the_time_out_is_answered() {
    let server = server(PolicySet::builder().input(Slow(TIMEOUT * 3)).build()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let body = input("hello").to_string();
    let request = format!(
        "POST /v1/evaluate/input HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (answer, _) = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""outcome":"allowed""#), "{answer}");
}
