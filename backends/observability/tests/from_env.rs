//! `from_env`. Each scenario runs in a child process (this test binary again, running the
//! ignored `child` test) with an environment of its own: nothing here changes the
//! environment of this process, so the scenarios cannot race each other or other tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use portcullis_observability::{
    BASE_URL_VAR, ObservabilityAuditHandler, ObservabilityError, ObservabilityOptions,
    PUBLIC_KEY_VAR, SECRET_KEY_VAR,
};
use support::receiver::{Behaviour, Receiver};

const SCENARIO: &str = "PORTCULLIS_OBSERVABILITY_TEST_SCENARIO";

/// Variables that would change the exporter's behaviour if the caller's environment had them.
const EXPORTER_VARIABLES: &[&str] = &[
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
];

/// Runs the `child` test in a fresh process with `scenario` and the given variables set (and
/// the observability and exporter variables otherwise cleared).
async fn run_child(scenario: &str, variables: &[(&str, &str)]) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command.env(SCENARIO, scenario);
    for name in [PUBLIC_KEY_VAR, SECRET_KEY_VAR, BASE_URL_VAR]
        .iter()
        .chain(EXPORTER_VARIABLES)
    {
        command.env_remove(name);
    }
    for (name, value) in variables {
        command.env(name, value);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scenario {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "scenario {scenario} did not run:\n{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_env_exports_with_the_variables() {
    let receiver = Receiver::start(Behaviour::status(200)).await;
    let base_url = receiver.base_url();
    run_child(
        "export",
        &[
            (PUBLIC_KEY_VAR, "pk-env"),
            (SECRET_KEY_VAR, "sk-env"),
            (BASE_URL_VAR, &base_url),
        ],
    )
    .await;
    assert_credentials(&receiver, "pk-env:sk-env", 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_header_variables_cannot_replace_the_credentials() {
    let receiver = Receiver::start(Behaviour::status(200)).await;
    let base_url = receiver.base_url();
    let intruder = format!(
        "authorization=Basic%20{},x-langfuse-ingestion-version=1",
        base64::engine::general_purpose::STANDARD.encode("intruder:x")
    );
    run_child(
        "export",
        &[
            (PUBLIC_KEY_VAR, "pk-env"),
            (SECRET_KEY_VAR, "sk-env"),
            (BASE_URL_VAR, &base_url),
            ("OTEL_EXPORTER_OTLP_HEADERS", &intruder),
        ],
    )
    .await;
    assert_credentials(&receiver, "pk-env:sk-env", 7);
}

fn assert_credentials(receiver: &Receiver, credentials: &str, spans: usize) {
    let requests = receiver.requests();
    assert!(!requests.is_empty());
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    );
    for request in &requests {
        assert_eq!(request.path, "/api/public/otel/v1/traces");
        assert_eq!(request.header("authorization"), Some(expected.as_str()));
        assert_eq!(request.header("x-langfuse-ingestion-version"), Some("4"));
    }
    let received = support::spans(&requests);
    assert_eq!(received.len(), spans);
    for (_, _, span) in &received {
        assert_eq!(
            support::string(&span.attributes, "session.id").as_deref(),
            Some("session-42")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_env_without_keys_names_the_variables() {
    run_child("no keys", &[]).await;
    run_child(
        "public key only",
        &[(PUBLIC_KEY_VAR, "pk-env"), (SECRET_KEY_VAR, "")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_env_defaults_to_the_hosted_cloud() {
    run_child(
        "default base",
        &[(PUBLIC_KEY_VAR, "pk-env"), (SECRET_KEY_VAR, "sk-env")],
    )
    .await;
}

/// The child side of the scenarios above; it only does something when started by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by the from_env tests"]
async fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    match scenario.as_str() {
        "export" => {
            let handler = ObservabilityAuditHandler::from_env().unwrap();
            let engine = support::policies::every_decision(handler.clone());
            support::policies::run_every_decision(&engine).await;
            handler.flush().await.unwrap();
        }
        "no keys" => {
            let error = ObservabilityAuditHandler::from_env().unwrap_err();
            assert_eq!(
                error,
                ObservabilityError::MissingKeys {
                    missing: vec!["OBS_PUBLIC_KEY", "OBS_SECRET_KEY"]
                }
            );
            assert_eq!(
                error.to_string(),
                "observability platform keys are missing: set OBS_PUBLIC_KEY and OBS_SECRET_KEY"
            );
        }
        "public key only" => {
            let error = ObservabilityOptions::from_env().unwrap_err();
            assert_eq!(
                error.to_string(),
                "observability platform keys are missing: set OBS_SECRET_KEY"
            );
        }
        "default base" => {
            let options = ObservabilityOptions::from_env().unwrap();
            assert_eq!(options.base_url(), "https://cloud.langfuse.com");
            assert_eq!(options.public_key(), Some("pk-env"));
            assert_eq!(options.timeout(), Duration::from_secs(10));
            let handler = ObservabilityAuditHandler::from_env().unwrap();
            assert_eq!(
                handler.endpoint(),
                "https://cloud.langfuse.com/api/public/otel/v1/traces"
            );
        }
        other => panic!("unknown scenario {other}"),
    }
}
