//! The listener's memory under a crowd, measured, while a real client is served: slow senders
//! that declare bodies up to the cap, send most at once and trickle the rest; senders of
//! bodies over the cap; and slow readers of event streams that carry large results, reading a
//! kilobyte now and then. The listener holds at most one body (or one answer) per open
//! connection, and no body over its cap: the process's resident memory grows by no more than
//! `max_connections` x body cap (the results here are no larger than the cap) and a slack.
//!
//! Alone in its test binary, so that the resident memory measured is this test's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis_mcp::ListenerOptions;
use portcullis_testing::load::{PeakResident, SlowRequest, resident_bytes};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use support::TestError;
use support::listener::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
const MAX_CONNECTIONS: usize = 32;
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// How long the crowd keeps at it.
const CROWD_FOR: Duration = Duration::from_secs(5);

/// The head of a POST to the MCP endpoint declaring a body of `length` bytes.
fn head(length: usize, session: Option<&str>) -> String {
    let session = session.map_or(String::new(), |id| {
        format!("Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-06-18\r\n")
    });
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session}Content-Length: {length}\r\n\r\n"
    )
}

/// Sends `body` to the MCP endpoint on a connection of its own and reads the whole answer
/// (within 10 s): its head and its body.
async fn exchange(
    address: SocketAddr,
    session: Option<&str>,
    body: &str,
) -> Result<(String, String), TestError> {
    let mut stream = TcpStream::connect(address).await?;
    let request = head(body.len(), session).replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no answer")?;
    Ok((head.to_owned(), body.to_owned()))
}

/// A session of its own: initialized, its id.
async fn session(address: SocketAddr) -> Result<String, TestError> {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "slow-reader", "version": "1"}}});
    let (head, _) = exchange(address, None, &initialize.to_string()).await?;
    let id = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .ok_or_else(|| format!("no session id in {head}"))?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    exchange(address, Some(&id), &initialized.to_string()).await?;
    Ok(id)
}

/// Asks for a result as large as the body cap in a session of its own, and reads its event
/// stream a kilobyte every 100 ms until `until`; the bytes it read.
async fn slow_reader(address: SocketAddr, until: Instant) -> Result<usize, TestError> {
    let id = session(address).await?;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "big_result", "arguments": {"bytes": MAX_BODY_BYTES}}})
    .to_string();
    let mut stream = TcpStream::connect(address).await?;
    stream
        .write_all(head(call.len(), Some(&id)).as_bytes())
        .await?;
    stream.write_all(call.as_bytes()).await?;
    let mut read = 0;
    let mut buffer = [0_u8; 1024];
    while Instant::now() < until {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(bytes) => read += bytes,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(read)
}

/// Sends `request` to `address` again and again until `until`, counting the answers by status.
async fn again_and_again(
    address: SocketAddr,
    request: SlowRequest,
    until: Instant,
    answers: Arc<Mutex<BTreeMap<String, usize>>>,
) {
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        let answer = request.clone().for_at_most(left).send(address).await;
        let status = answer
            .status()
            .map_or("closed".to_owned(), |status| status.to_string());
        *answers.lock().unwrap().entry(status).or_default() += 1;
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_slow_clients_stays_within_the_limits_while_a_client_is_served()
-> Result<(), TestError> {
    // What the bound allows beyond a body (or an answer) per connection: the buffers of the
    // connections and of their event streams, the sessions, the runtime.
    const SLACK: u64 = 32 * MIB;
    let read_timeout = Duration::from_millis(1500);
    let running = Running::start_on(
        ListenerOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .header_read_timeout(read_timeout)
            .body_read_timeout(read_timeout)
            .max_body_bytes(MAX_BODY_BYTES),
        support::unrecorded_engine(),
    )
    .await?;
    let address = running.address;
    // Warm: a session, a call and a large result, as the crowd will make.
    let warm = running.client(None).await?;
    let result = warm
        .call_tool(CallToolRequestParams::new("big_result").with_arguments(
            serde_json::Map::from_iter([("bytes".into(), json!(MAX_BODY_BYTES))]),
        ))
        .await?;
    assert_eq!(result.is_error, Some(false));
    warm.cancel().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    resident_bytes(None).ok_or("no VmRSS to measure")?;

    let memory = PeakResident::start(None);
    let started = Instant::now();
    let until = started + CROWD_FOR;
    let answers = Arc::new(Mutex::new(BTreeMap::new()));
    let mut crowd = Vec::new();
    // Bodies up to the cap, most of each at once, the rest a byte at a time.
    for _ in 0..12 {
        let request = SlowRequest::new(head(MAX_BODY_BYTES, None)).burst(MAX_BODY_BYTES - 4096);
        crowd.push(tokio::spawn(again_and_again(
            address,
            request,
            until,
            Arc::clone(&answers),
        )));
    }
    // Bodies of 64 MiB, as fast as the listener takes them.
    for _ in 0..4 {
        let request = SlowRequest::new(head(64 << 20, None)).burst(64 << 20);
        crowd.push(tokio::spawn(again_and_again(
            address,
            request,
            until,
            Arc::clone(&answers),
        )));
    }
    let readers: Vec<_> = (0..6)
        .map(|_| tokio::spawn(slow_reader(address, until)))
        .collect();

    // A real client, while the crowd is at it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let client = running.client(None).await?;
    let record = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(serde_json::Map::from_iter([("path".into(), json!("/hr"))])),
        )
        .await?;
    assert_eq!(
        support::text(&record),
        "Employee: Jane Roe\nSSN: [REDACTED]"
    );
    let served_at = started.elapsed();
    let open_meanwhile = running.stats.open_connections();
    client.cancel().await?;

    for task in crowd {
        task.await?;
    }
    let mut read = Vec::new();
    for reader in readers {
        read.push(reader.await??);
    }
    let memory = memory.stop();
    let answers = answers.lock().unwrap().clone();

    let bound = (MAX_CONNECTIONS * MAX_BODY_BYTES) as u64 + SLACK;
    eprintln!(
        "MCP listener, max_connections {MAX_CONNECTIONS}, body cap {} MiB: 12 slow senders of \
         {} MiB bodies and 4 senders of 64 MiB bodies, again and again for {} s, and 6 slow \
         readers of {} MiB results (bytes read: {read:?}): {memory}; bound max_connections x \
         body cap + {} MiB slack = {} MiB; answers {answers:?}; a client served after {} ms \
         with {open_meanwhile} connections open; peak connections {}, refused {}",
        MAX_BODY_BYTES as u64 / MIB,
        MAX_BODY_BYTES as u64 / MIB,
        CROWD_FOR.as_secs(),
        MAX_BODY_BYTES as u64 / MIB,
        SLACK / MIB,
        bound / MIB,
        served_at.as_millis(),
        running.stats.peak_connections(),
        running.stats.refused_connections(),
    );
    assert!(
        memory.growth() <= bound,
        "{memory}: over the {} MiB the limits allow",
        bound / MIB
    );
    // The crowd was there while the client was served, and was held to the limits: bodies
    // over the cap refused (413), slow ones cut off (408).
    assert!(open_meanwhile >= 6, "{open_meanwhile} connections open");
    assert!(answers.get("413").copied().unwrap_or(0) >= 4, "{answers:?}");
    assert!(
        answers.get("408").copied().unwrap_or(0) >= 12,
        "{answers:?}"
    );
    assert!(running.stats.peak_connections() <= MAX_CONNECTIONS);
    // Without the limits the crowd would have held far more than the bound.
    let declared = 12 * MAX_BODY_BYTES as u64 + 4 * (64 * MIB) + 6 * MAX_BODY_BYTES as u64;
    assert!(
        declared > 2 * bound,
        "the crowd must be able to exceed the bound"
    );
    Ok(())
}
