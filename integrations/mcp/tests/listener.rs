//! The guard's own HTTP listener as an attacker meets it: no token, a wrong token, slow
//! clients holding connections, bodies that dribble or overflow; and a graceful stop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use portcullis_mcp::{ListenerOptions, check_exposure};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use support::TestError;
use support::listener::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` on a new connection and returns the answer's status (`None` when the
/// connection closed without one).
async fn raw(address: SocketAddr, request: &[u8]) -> Result<Option<u16>, TestError> {
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(request).await?;
    Ok(status(&mut stream).await)
}

/// Reads an answer's status line (`None` when the connection closes first), within 10 s.
async fn status(stream: &mut TcpStream) -> Option<u16> {
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
            if answer.windows(2).any(|w| w == b"\r\n") {
                return;
            }
        }
    })
    .await;
    read.ok()?;
    let line = String::from_utf8_lossy(&answer);
    line.split(' ').nth(1)?.parse().ok()
}

fn post(authorization: Option<&str>, body: &str) -> Vec<u8> {
    let authorization = authorization
        .map(|value| format!("Authorization: {value}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{authorization}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[tokio::test]
async fn clients_without_the_token_are_refused() -> Result<(), TestError> {
    let running = Running::start(ListenerOptions::new().bearer_token("s3cret-token")).await?;
    for authorization in [
        None,
        Some("Bearer "),
        Some("Bearer wrong"),
        Some("Bearer s3cret-toke"),
        Some("Bearer s3cret-tokenX"),
        Some("Basic czNjcmV0LXRva2Vu"),
    ] {
        let answer = raw(running.address, &post(authorization, INITIALIZE)).await?;
        assert_eq!(answer, Some(401), "{authorization:?}");
    }
    assert_eq!(running.stats.unauthorized_requests(), 6);
    assert!(running.client(None).await.is_err());
    assert!(running.client(Some("wrong")).await.is_err());
    assert_eq!(running.upstream.calls(), []);

    let client = running.client(Some("s3cret-token")).await?;
    let record = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(serde_json::Map::from_iter([("path".into(), "/x".into())])),
        )
        .await?;
    assert_eq!(record.is_error, Some(false));
    Ok(())
}

#[tokio::test]
async fn listening_beyond_loopback_needs_a_token() {
    let open = ListenerOptions::new();
    let closed = ListenerOptions::new().bearer_token("t");
    for address in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:8080"] {
        let address: SocketAddr = address.parse().expect("an address");
        assert!(check_exposure(address, &open, false).is_err(), "{address}");
        assert!(check_exposure(address, &closed, false).is_ok());
        assert!(check_exposure(address, &open, true).is_ok());
    }
    for address in ["127.0.0.1:8080", "[::1]:8080"] {
        let address: SocketAddr = address.parse().expect("an address");
        assert!(check_exposure(address, &open, false).is_ok());
    }
}

#[tokio::test]
async fn slow_clients_stay_within_the_limits() -> Result<(), TestError> {
    const MAX_CONNECTIONS: usize = 4;
    let running = Running::start(
        ListenerOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .header_read_timeout(Duration::from_millis(300))
            .body_read_timeout(Duration::from_millis(300))
            .max_body_bytes(2048),
    )
    .await?;
    let address = running.address;

    // Slow heads: a byte every 50 ms, never finished.
    let mut slow = Vec::new();
    for _ in 0..24 {
        slow.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(address).await else {
                return None;
            };
            for byte in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            status(&mut stream).await
        }));
    }
    // Slow bodies: the head at once, then the body a byte every 50 ms.
    for _ in 0..8 {
        slow.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(address).await else {
                return None;
            };
            let request = post(None, INITIALIZE);
            let head = request.len() - INITIALIZE.len();
            if stream.write_all(&request[..head]).await.is_err() {
                return None;
            }
            for byte in INITIALIZE.as_bytes() {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            status(&mut stream).await
        }));
    }
    let mut timed_out = 0;
    for client in slow {
        // A slow head is cut off (closed, or 408); a slow body is answered 408.
        match client.await? {
            None | Some(408) => timed_out += 1,
            other => panic!("a slow client was served: {other:?}"),
        }
    }
    assert_eq!(timed_out, 32);
    assert!(running.stats.refused_connections() > 0);
    assert!(
        running.stats.peak_connections() <= MAX_CONNECTIONS,
        "{} connections open at once",
        running.stats.peak_connections()
    );

    // A body over the limit: 413, and nothing reaches the upstream.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{"pad":"{}"}}}}}}"#,
        "x".repeat(4096)
    );
    assert_eq!(raw(address, &post(None, &huge)).await?, Some(413));

    // Once the slow clients are gone, a real client is served.
    let client = running.client(None).await?;
    let tools = client.list_all_tools().await?;
    assert!(!tools.is_empty());
    assert!(running.stats.peak_connections() <= MAX_CONNECTIONS);
    assert_eq!(running.upstream.calls(), []);
    Ok(())
}

/// Sends `request` on a new connection (asking to close it after the answer) and returns the
/// answer's status and body, within 10 s.
async fn exchange(address: SocketAddr, request: &[u8]) -> Result<(Option<u16>, String), TestError> {
    let request =
        String::from_utf8_lossy(request).replacen("\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1);
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|code| code.parse().ok());
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Over HTTP as on stdio, a request whose `params` is not an object is answered with a
/// JSON-RPC error carrying its id (rmcp alone answers 415 with no JSON-RPC answer at all), and
/// it never reaches the upstream.
#[tokio::test]
async fn a_request_whose_params_are_not_an_object_is_answered_with_its_id() -> Result<(), TestError>
{
    let running = Running::start(ListenerOptions::new()).await?;
    for (id, params) in [
        (json!(7), json!("read_file")),
        (json!("eight"), json!(["read_file", {"path": "/hr"}])),
        (json!(9), json!(5)),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            .to_string();
        let (status, answer) = exchange(running.address, &post(None, &body)).await?;
        assert_eq!(status, Some(200), "{params}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer)?;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
    // What is not JSON at all has no id to answer: refused as before.
    let (status, _) = exchange(running.address, &post(None, "{not json")).await?;
    assert_eq!(status, Some(415));
    // A notification that does not fit has no answer: refused as before.
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": 5});
    let (status, _) = exchange(running.address, &post(None, &notification.to_string())).await?;
    assert_eq!(status, Some(415));
    assert_eq!(running.upstream.calls(), []);
    assert_eq!(running.upstream.custom_requests(), []);
    Ok(())
}

#[tokio::test]
async fn a_stop_lets_calls_in_flight_finish() -> Result<(), TestError> {
    let mut running = Running::start(ListenerOptions::new()).await?;
    let client = running.client(None).await?;
    let call = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(CallToolRequestParams::new("pause")).await }
    });
    let mut waited = Duration::ZERO;
    while running.upstream.count("pause") == 0 {
        assert!(waited < Duration::from_secs(10), "the call did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
    if let Some(stop) = running.stop.take() {
        let _ = stop.send(());
    }
    let answer = call.await??;
    assert_eq!(answer.is_error, Some(false));
    (&mut running.served).await??;
    // Stopped: no new connection is served.
    assert!(running.client(None).await.is_err());
    Ok(())
}
