//! The handler against a real OTLP/HTTP receiver on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use portcullis_observability::{
    ObservabilityAuditHandler, ObservabilityError, ObservabilityOptions, TRACES_PATH,
};
use support::policies::{self, Seen};
use support::receiver::{Behaviour, Receiver};
use tokio::sync::Semaphore;

fn options(base_url: String) -> ObservabilityOptions {
    ObservabilityOptions::builder()
        .public_key("pk-lf-test")
        .secret_key("sk-lf-secret")
        .base_url(base_url)
        .timeout(Duration::from_secs(5))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_as_otlp_protobuf_with_credentials_attributes_and_timestamps() {
    let receiver = Receiver::start(Behaviour::status(200)).await;
    // A trailing slash on the base URL must not double the one of the path.
    let handler =
        ObservabilityAuditHandler::new(options(format!("{}/", receiver.base_url()))).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let engine = policies::every_decision(policies::noting(handler.clone(), Arc::clone(&seen)));
    let records = policies::run_every_decision(&engine).await;

    handler.flush().await.unwrap();

    let requests = receiver.requests();
    assert!(!requests.is_empty());
    let credentials = base64::engine::general_purpose::STANDARD.encode("pk-lf-test:sk-lf-secret");
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/api/public/otel/v1/traces");
        assert_eq!(request.path, TRACES_PATH);
        assert_eq!(
            request.header("content-type"),
            Some("application/x-protobuf")
        );
        assert_eq!(
            request.header("authorization"),
            Some(format!("Basic {credentials}").as_str())
        );
        assert_eq!(request.header("x-langfuse-ingestion-version"), Some("4"));
    }

    let spans = support::spans(&requests);
    let seen: Vec<Seen> = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), records);
    assert_eq!(spans.len(), records);
    for record in &seen {
        let policy = record.policy_id.as_str();
        let (service, scope, span) = spans
            .iter()
            .find(|(_, _, span)| {
                support::string(&span.attributes, "engine.policy_id").as_deref() == Some(policy)
            })
            .unwrap_or_else(|| panic!("no span for {policy}"));
        assert_eq!(service, "portcullis");
        assert_eq!(scope, "portcullis");
        assert_eq!(span.name, "engine.policy.evaluate");
        assert_eq!(span.kind, SpanKind::Internal as i32);
        assert!(span.parent_span_id.is_empty(), "{policy}: a root span");
        assert_eq!(span.trace_id.len(), 16);
        assert_eq!(
            span.start_time_unix_nano,
            support::nanos(record.timestamp),
            "{policy}"
        );
        assert_eq!(
            span.end_time_unix_nano,
            support::nanos(record.timestamp),
            "{policy}"
        );

        let attributes = &span.attributes;
        assert_eq!(
            support::string(attributes, "engine.decision").as_deref(),
            Some(record.decision)
        );
        let point = if policy == "broken" {
            "tool_call"
        } else {
            "input"
        };
        assert_eq!(
            support::string(attributes, "engine.interception_point").as_deref(),
            Some(point)
        );
        assert_eq!(
            support::string(attributes, "engine.reason"),
            record.reason,
            "{policy}"
        );
        assert_eq!(
            support::value(attributes, "engine.enforced"),
            Some(&Value::BoolValue(record.enforced))
        );
        assert_eq!(
            support::string(attributes, "session.id").as_deref(),
            Some("session-42")
        );
        assert_eq!(
            support::string(attributes, "user.id").as_deref(),
            Some("agent-7")
        );

        let status = span.status.as_ref().expect("a status");
        if matches!(record.decision, "deny" | "evaluation_error") {
            assert_eq!(status.code, StatusCode::Error as i32, "{policy}");
            assert_eq!(
                Some(status.message.as_str()),
                record.reason.as_deref(),
                "{policy}"
            );
        } else {
            assert_eq!(status.code, StatusCode::Ok as i32, "{policy}");
        }
    }
    // The decisions cover every kind, enforced or not.
    let decisions: Vec<&str> = seen.iter().map(|record| record.decision).collect();
    for kind in [
        "allow",
        "audit",
        "redact",
        "transform",
        "deny",
        "evaluation_error",
    ] {
        assert!(
            decisions.contains(&kind),
            "{kind} missing from {decisions:?}"
        );
    }
    assert!(seen.iter().any(|record| !record.enforced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_clone_exports_what_is_left() {
    let receiver = Receiver::start(Behaviour::status(200)).await;
    let handler = ObservabilityAuditHandler::new(options(receiver.base_url())).unwrap();
    let engine = policies::every_decision(handler.clone());
    let records = policies::run_every_decision(&engine).await;
    drop(engine);
    assert!(
        receiver.requests().is_empty(),
        "nothing exported before the batch is due"
    );

    // The shutdown blocks the dropping thread until the export is answered.
    tokio::task::spawn_blocking(move || drop(handler))
        .await
        .unwrap();
    assert_eq!(support::spans(&receiver.requests()).len(), records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluations_do_not_wait_for_an_export_in_flight() {
    let gate = Arc::new(Semaphore::new(0));
    let receiver = Receiver::start(Behaviour {
        status: 200,
        gate: Some(Arc::clone(&gate)),
    })
    .await;
    let handler = ObservabilityAuditHandler::new(options(receiver.base_url())).unwrap();
    let engine = policies::every_decision(handler.clone());
    let first = policies::run_every_decision(&engine).await;

    let flushing = {
        let handler = handler.clone();
        tokio::spawn(async move { handler.flush().await })
    };
    // The export has reached the receiver, which holds it unanswered.
    receiver.wait_for_arrivals(1).await;

    let mut more = 0;
    for _ in 0..50 {
        more += policies::run_every_decision(&engine).await;
    }
    assert_eq!(
        receiver.answered(),
        0,
        "every evaluation returned while the export was held"
    );
    assert!(!flushing.is_finished());

    gate.add_permits(100);
    flushing.await.unwrap().unwrap();
    handler.flush().await.unwrap();
    assert_eq!(support::spans(&receiver.requests()).len(), first + more);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_receiver_fails_the_flush_not_the_evaluations() {
    let port = support::dead_port();
    let handler = ObservabilityAuditHandler::new(
        ObservabilityOptions::builder()
            .public_key("pk")
            .secret_key("sk")
            .base_url(format!("http://127.0.0.1:{port}"))
            .timeout(Duration::from_secs(1))
            .build(),
    )
    .unwrap();
    let engine = policies::every_decision(handler.clone());
    let mut records = 0;
    for _ in 0..20 {
        records += policies::run_every_decision(&engine).await;
    }

    let error = handler.flush().await.unwrap_err();
    let ObservabilityError::Export {
        endpoint,
        lost_spans,
        reason,
    } = &error
    else {
        panic!("not an export error: {error:?}");
    };
    assert_eq!(
        endpoint,
        &format!("http://127.0.0.1:{port}/api/public/otel/v1/traces")
    );
    assert_eq!(*lost_spans, records as u64);
    assert!(reason.contains("network error"), "{reason}");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );

    // The failure is reported once; a flush with nothing new succeeds.
    handler.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_export_is_reported_and_not_retried() {
    let receiver = Receiver::start(Behaviour::status(401)).await;
    let handler = ObservabilityAuditHandler::new(options(receiver.base_url())).unwrap();
    let engine = policies::every_decision(handler.clone());
    let records = policies::run_every_decision(&engine).await;

    let error = handler.flush().await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");
    assert!(
        matches!(error, ObservabilityError::Export { lost_spans, .. } if lost_spans == records as u64)
    );
    assert_eq!(receiver.requests().len(), 1, "a 401 is not retried");

    policies::run_every_decision(&engine).await;
    assert!(handler.flush().await.is_err());
    assert_eq!(receiver.requests().len(), 2);
}

#[test]
fn missing_keys_are_named() {
    let error =
        ObservabilityAuditHandler::new(ObservabilityOptions::builder().build()).unwrap_err();
    assert_eq!(
        error,
        ObservabilityError::MissingKeys {
            missing: vec!["public_key", "secret_key"]
        }
    );
    let error = ObservabilityAuditHandler::new(
        ObservabilityOptions::builder()
            .public_key("pk")
            .secret_key("")
            .build(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "observability platform keys are missing: set secret_key"
    );
}

#[test]
fn base_urls_are_checked_up_front() {
    for (url, expected) in [
        ("cloud.langfuse.com", "relative URL without a base"),
        ("ftp://cloud.langfuse.com", "the scheme is `ftp`"),
        ("https://cloud.langfuse.com/?project=1", "query or fragment"),
    ] {
        let error = ObservabilityAuditHandler::new(
            ObservabilityOptions::builder()
                .public_key("pk")
                .secret_key("sk")
                .base_url(url)
                .build(),
        )
        .unwrap_err();
        assert!(
            matches!(error, ObservabilityError::InvalidBaseUrl { .. }),
            "{url}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(url) && message.contains(expected),
            "{message}"
        );
    }
}

#[test]
fn options_keep_the_secret_out_of_debug_output() {
    let options = options("https://langfuse.example.com".into());
    let debug = format!("{options:?}");
    assert!(debug.contains("pk-lf-test"));
    assert!(!debug.contains("sk-lf-secret"), "{debug}");
}

// A single-threaded runtime serves the receiver: a flush that blocked this thread would never
// see its answer.
#[tokio::test(flavor = "current_thread")]
async fn flush_on_a_current_thread_runtime_lets_that_runtime_serve_the_receiver() {
    let receiver = Receiver::start(Behaviour::status(200)).await;
    let handler = ObservabilityAuditHandler::new(options(receiver.base_url())).unwrap();
    let engine = policies::every_decision(handler.clone());
    let records = policies::run_every_decision(&engine).await;

    handler.flush().await.unwrap();
    assert_eq!(support::spans(&receiver.requests()).len(), records);
}

// The https path goes through rustls: a server that answers in plain HTTP fails the TLS
// handshake, which shows TLS was attempted (a client without TLS would refuse the scheme).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_goes_through_tls() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello).await;
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let handler =
        ObservabilityAuditHandler::new(options(format!("https://127.0.0.1:{port}"))).unwrap();
    let engine = policies::every_decision(handler.clone());
    policies::run_every_decision(&engine).await;

    let error = handler
        .flush()
        .await
        .unwrap_err()
        .to_string()
        .to_lowercase();
    server.abort();
    assert!(!error.contains("scheme"), "{error}");
    assert!(
        error.contains("network error") && error.contains("https://127.0.0.1"),
        "{error}"
    );
    assert!(
        ["tls", "ssl", "handshake", "invalid", "corrupt"]
            .iter()
            .any(|word| error.contains(word)),
        "{error}"
    );
}
