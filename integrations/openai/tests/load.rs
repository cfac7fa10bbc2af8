//! The OpenAI proxy under a crowd of slow and greedy clients, in a process of its own so that
//! its resident memory is the proxy's: slow heads, slow bodies, slow stream readers and fast
//! readers of answers far longer than the proxy's stream bound. The proxy's memory grows by
//! no more than its limits allow, and a well-behaved client is answered while the crowd is
//! there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use portcullis_engine::PolicyEngine;
use portcullis_openai::proxy::OpenAIProxy;
use serde_json::json;
use support::{Reply, ScriptedServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_CONNECTIONS: usize = 16;
const MAX_STREAMS: usize = 6;
const MAX_STREAM_BYTES: usize = 1024 * 1024;
const MAX_BODY_BYTES: usize = 256 * 1024;
/// What the process may hold beyond the proxy's limits: the runtime's threads, connection
/// buffers, allocator slack.
const SLACK: usize = 24 * 1024 * 1024;

/// The process's resident memory, in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A stream of `count` events of `size` bytes of text each.
fn long_stream(count: usize, size: usize) -> Vec<String> {
    let piece = "x".repeat(size);
    let pieces: Vec<&str> = (0..count).map(|_| piece.as_str()).collect();
    support::streamed_text(&pieces)
}

fn request(body: &str, extra: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_slow_and_greedy_clients_stays_within_the_limits_and_a_good_client_is_served() {
    // Six answers of 8 MiB of text each: without the stream bound, a guard keeps what it
    // reads, so two fast readers alone would hold tens of MiB.
    let replies = (0..MAX_STREAMS)
        .map(|_| Reply::Sse(long_stream(1024, 8 * 1024)))
        .collect();
    let server = ScriptedServer::start(replies).await;
    let upstream = server.base_url().trim_end_matches("/v1").to_owned();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(portcullis_testing::agent::policy_set())
            .build(),
    );
    let proxy = OpenAIProxy::new(engine, &upstream)
        .expect("a valid upstream")
        .max_connections(MAX_CONNECTIONS)
        .max_streams(MAX_STREAMS)
        .max_stream_bytes(MAX_STREAM_BYTES)
        .max_body_bytes(MAX_BODY_BYTES)
        .header_read_timeout(Duration::from_secs(2))
        .body_read_timeout(Duration::from_secs(2));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let serving = proxy.clone();
    let task = tokio::spawn(async move {
        let _ = serving.serve(listener).await;
    });

    let baseline = resident();
    let peak = Arc::new(AtomicUsize::new(baseline));
    let crowd_done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, crowd_done) = (Arc::clone(&peak), Arc::clone(&crowd_done));
        tokio::spawn(async move {
            while !crowd_done.load(Ordering::Relaxed) {
                peak.fetch_max(resident(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let stream_body = json!({ "model": "m", "stream": true,
        "messages": [{ "role": "user", "content": "hi" }] })
    .to_string();
    let mut crowd = Vec::new();
    // Readers: three take every byte as fast as they can, three a few bytes now and then.
    for fast in [true, true, true, false, false, false] {
        let request = request(&stream_body, "");
        crowd.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            stream.write_all(request.as_bytes()).await.expect("write");
            let mut buffer = vec![0u8; 64 * 1024];
            let mut total = 0usize;
            for _ in 0..if fast { usize::MAX } else { 100 } {
                if !fast {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
                let want = if fast { buffer.len() } else { 256 };
                match tokio::time::timeout(
                    Duration::from_secs(10),
                    stream.read(&mut buffer[..want]),
                )
                .await
                {
                    Ok(Ok(0) | Err(_)) | Err(_) => break,
                    Ok(Ok(read)) => total += read,
                }
            }
            total
        }));
    }
    // Slow senders: a head a byte at a time, or a body that declares far more than it sends.
    for index in 0..12 {
        crowd.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(address).await else {
                return 0;
            };
            let text = if index % 2 == 0 {
                "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ".to_owned()
            } else {
                format!(
                    "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {MAX_BODY_BYTES}\r\n\r\n{{\"model\":"
                )
            };
            if stream.write_all(text.as_bytes()).await.is_err() {
                return 0;
            }
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if stream.write_all(b"x").await.is_err() {
                    break;
                }
            }
            0
        }));
    }

    // A well-behaved client, while the crowd is there: its denied prompt is answered by the
    // proxy itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let denied = json!({ "model": "m",
        "messages": [{ "role": "user", "content": "What is the admin password?" }] })
    .to_string();
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream
            .write_all(request(&denied, "connection: close\r\n").as_bytes())
            .await
            .expect("write");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .expect("the good client is answered");
    assert!(answered.starts_with("HTTP/1.1 403"), "{answered}");
    let served_after = started.elapsed();

    let mut read = Vec::new();
    for client in crowd {
        read.push(client.await.unwrap_or(0));
    }
    crowd_done.store(true, Ordering::Relaxed);
    sampler.await.expect("the sampler");
    let grown = peak.load(Ordering::Relaxed).saturating_sub(baseline);
    let figures = proxy.figures();
    let bound = MAX_STREAM_BYTES + MAX_CONNECTIONS * MAX_BODY_BYTES + SLACK;
    eprintln!(
        "resident memory grew by {:.1} MiB at the peak (bound {:.1} MiB); the good client was answered after {served_after:?}; fast readers got {:?} bytes; {figures:?}",
        grown as f64 / 1048576.0,
        bound as f64 / 1048576.0,
        &read[..3],
    );
    assert!(grown <= bound, "grew by {grown} bytes, more than {bound}");
    assert!(figures.peak_connections <= MAX_CONNECTIONS, "{figures:?}");
    assert!(figures.peak_streams <= MAX_STREAMS, "{figures:?}");
    assert!(
        figures.peak_held_stream_bytes <= MAX_STREAM_BYTES,
        "{figures:?}"
    );
    // Each fast reader's stream ended at the bound, far short of its 8 MiB.
    for total in &read[..3] {
        assert!(*total < 2 * MAX_STREAM_BYTES, "{read:?}");
    }
    task.abort();
}
