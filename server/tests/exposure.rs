//! What the service shows and to whom: anonymous callers learn whether it is ready and nothing
//! else; reload errors (file paths, bundle URLs) go to callers with the token, with URLs cut
//! down to host and path; a POST a browser page could forge (not JSON) is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;

use common::{input, policies, start};
use portcullis_server::{DecisionService, ReloadStatus};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `request` as it is and returns the status and the body.
async fn raw(addr: SocketAddr, request: String) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a connection");
    stream.write_all(request.as_bytes()).await.expect("sent");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn get_as(path: &str, token: Option<&str>) -> String {
    let authorization = token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    });
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}Connection: close\r\n\r\n")
}

/// A POST of `body` with the header lines `headers` (each ending in `\r\n`).
fn post_with(path: &str, headers: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn post_as(path: &str, content_type: Option<&str>, body: &str) -> String {
    let content_type =
        content_type.map_or(String::new(), |value| format!("Content-Type: {value}\r\n"));
    post_with(path, &content_type, body)
}

const FAILURE: &str = "portcullis.yaml:4:5: error: GET \
     https://bot:hunter2@bundles.example/authz.tar.gz?X-Signature=abcdef: 500; the bundle in use stays";

/// A service with the token `s3cret`, whose last reload failed with [`FAILURE`].
async fn after_a_failed_reload() -> common::Running {
    let server = start(
        DecisionService::builder().bearer_token("s3cret"),
        Some(policies()),
    )
    .await;
    server
        .service
        .record_reload(ReloadStatus::Failed(FAILURE.to_owned()));
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_tells_anonymous_callers_the_status_only() {
    let server = after_a_failed_reload().await;
    for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
        let (status, body) = raw(server.addr, get_as("/readyz", token)).await;
        assert_eq!(status, 200, "{body}");
        let body: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(body, json!({"ready": true}), "{token:?}");
    }
    let (status, body) = raw(server.addr, get_as("/readyz", Some("s3cret"))).await;
    assert_eq!(status, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).expect("JSON");
    let message = ready["last_reload"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("portcullis.yaml:4:5")
            && message.contains("https://bundles.example/authz.tar.gz"),
        "{message}"
    );
    for secret in ["hunter2", "bot:", "X-Signature", "abcdef"] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    let (status, body) = raw(server.addr, get_as("/healthz", None)).await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_no_caller_sees_reload_errors() {
    let server = start(DecisionService::builder(), None).await;
    server
        .service
        .record_reload(ReloadStatus::Failed(FAILURE.to_owned()));
    let (status, body) = raw(server.addr, get_as("/readyz", None)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"ready": false})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_body_is_not_declared_json_is_415() {
    let server = start(DecisionService::builder(), Some(policies())).await;
    let evaluation = input("the secret").to_string();
    let remote = json!({"policy_id": "block_secret", "interception_point": "input", "context": input("the secret")})
        .to_string();
    for (path, body) in [
        ("/v1/evaluate/input", &evaluation),
        ("/engine/evaluate", &remote),
    ] {
        // What a browser page may send to any origin without asking first, and no type at all.
        for content_type in [
            Some("text/plain"),
            Some("text/plain; charset=utf-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonx"),
            Some("text/json"),
            None,
        ] {
            let (status, answer) = raw(server.addr, post_as(path, content_type, body)).await;
            assert_eq!(status, 415, "{path} {content_type:?}: {answer}");
            let answer: Value = serde_json::from_str(&answer).expect("JSON");
            assert_eq!(answer["error"]["code"], "unsupported_media_type");
        }
        for content_type in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.portcullis+json",
        ] {
            let (status, answer) = raw(server.addr, post_as(path, Some(content_type), body)).await;
            assert_eq!(status, 200, "{path} {content_type}: {answer}");
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_use_a_service_without_a_token() {
    // A page whose name an attacker re-points at 127.0.0.1 is, to the browser, the same
    // origin as the service: its requests carry its own name in Host. A cross-site page's
    // requests carry Origin. Neither may evaluate (tainting sessions, filling the audit log)
    // or read the counters; probes still see the status.
    let server = start(
        DecisionService::builder().allow_host("Portcullis.Internal"),
        Some(policies()),
    )
    .await;
    let body = input("hello").to_string();
    let json = "Content-Type: application/json\r\n";
    let as_host = |host: &str, extra: &str, path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\n{extra}{json}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    for (request, code) in [
        (
            as_host("evil.example:8080", "", "/v1/evaluate/input"),
            "unknown_host",
        ),
        (
            as_host("localhost.evil.example", "", "/v1/evaluate/input"),
            "unknown_host",
        ),
        (
            as_host(
                "127.0.0.1",
                "Origin: https://evil.example\r\n",
                "/v1/evaluate/input",
            ),
            "browser_request",
        ),
        (
            as_host("localhost", "Origin: null\r\n", "/engine/evaluate"),
            "browser_request",
        ),
        (
            "GET /metrics HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned(),
            "unknown_host",
        ),
    ] {
        let (status, answer) = raw(server.addr, request.clone()).await;
        assert_eq!(status, 403, "{request}: {answer}");
        let answer: Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["error"]["code"], code, "{request}");
    }
    // Probes answer any host; loopback names and the allowed name are served.
    let (status, _) = raw(
        server.addr,
        "GET /readyz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned(),
    )
    .await;
    assert_eq!(status, 200);
    for host in ["localhost:8080", "[::1]", "portcullis.internal:443"] {
        let (status, answer) = raw(server.addr, as_host(host, "", "/v1/evaluate/input")).await;
        assert_eq!(status, 200, "{host}: {answer}");
    }
    server.stop().await;

    // With a token, the caller is known: the host and the origin do not matter.
    let server = start(
        DecisionService::builder().bearer_token("s3cret"),
        Some(policies()),
    )
    .await;
    let request = as_host(
        "decisions.example",
        "Authorization: Bearer s3cret\r\nOrigin: https://console.example\r\n",
        "/v1/evaluate/input",
    );
    let (status, answer) = raw(server.addr, request).await;
    assert_eq!(status, 200, "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_exact_token_opens_the_evaluations() {
    let server = start(
        DecisionService::builder().bearer_token("s3cret"),
        Some(policies()),
    )
    .await;
    let body = input("hello").to_string();
    for (authorization, expected) in [
        ("", 401),
        ("Authorization: Bearer \r\n", 401),
        ("Authorization: Bearer s3cre\r\n", 401),
        ("Authorization: Bearer s3cret0\r\n", 401),
        ("Authorization: Bearer S3CRET\r\n", 401),
        ("Authorization: Basic s3cret\r\n", 401),
        ("Authorization: Bearer s3cret\r\n", 200),
        ("Authorization: bearer s3cret\r\n", 200),
    ] {
        let headers = format!("{authorization}Content-Type: application/json\r\n");
        let request = post_with("/v1/evaluate/input", &headers, &body);
        let (status, answer) = raw(server.addr, request).await;
        assert_eq!(status, expected, "{authorization:?}: {answer}");
    }
    server.stop().await;
}

/// `/metrics` lists every policy's decision counts and every reload's outcome: with a token
/// configured, only the token opens it (401 as the evaluations, and not one metric line in the
/// answer); without a token it stays open (the service then listens on loopback only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_when_one_is_configured() {
    let server = after_a_failed_reload().await;
    for token in [
        None,
        Some(""),
        Some("wrong"),
        Some("s3cre"),
        Some("s3cret2"),
    ] {
        let (status, body) = raw(server.addr, get_as("/metrics", token)).await;
        assert_eq!(status, 401, "{token:?}: {body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(answer["error"]["code"], "unauthorized", "{token:?}");
        for secret in ["portcullis_", "block_secret", "reload"] {
            assert!(!body.contains(secret), "{token:?}: {secret} in {body}");
        }
    }
    let (status, body) = raw(server.addr, get_as("/metrics", Some("s3cret"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("portcullis_reloads_total{outcome=\"failed\"} 1\n"),
        "{body}"
    );
    server.stop().await;

    let open = start(DecisionService::builder(), Some(policies())).await;
    let (status, body) = raw(open.addr, get_as("/metrics", None)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("portcullis_policy_set_loaded 1\n"), "{body}");
    open.stop().await;
}
