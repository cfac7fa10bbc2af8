//! Time and memory limits, traps, `opa_abort` and host builtins, on a hand-written OPA-ABI module.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use portcullis_rego::{
    DEFAULT_MEMORY_LIMIT, DEFAULT_TIME_LIMIT, RegoBundle, RegoError, RegoEvaluationError,
};
use serde_json::json;

fn bundle() -> RegoBundle {
    RegoBundle::from_bytes(&common::test_module(r#"{"sprintf":0}"#, ""))
        .expect("the test module opens")
}

#[tokio::test]
async fn an_infinite_loop_stops_at_the_time_limit() {
    let bundle = bundle()
        .with_time_limit(Duration::from_millis(30))
        .expect("limit");
    assert_eq!(bundle.time_limit(), Duration::from_millis(30));
    let started = Instant::now();
    let error = bundle
        .evaluate("test/loop", &json!({}))
        .await
        .expect_err("the loop must be stopped");
    assert_eq!(
        error,
        RegoEvaluationError::TimeLimit(Duration::from_millis(30))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("time limit"), "{error}");
    // The bundle still works afterwards (the stopped instance was dropped).
    assert_eq!(
        bundle.evaluate("test/ok", &json!({})).await,
        Ok(Some(json!(true)))
    );
}

/// Evaluates `entrypoint` of the test module on another thread, and fails the test if no answer
/// comes within a minute (instead of hanging when the time limit does not hold).
fn evaluate_or_hang(bundle: &RegoBundle, entrypoint: &'static str) -> RegoEvaluationError {
    let (send, receive) = std::sync::mpsc::channel();
    let bundle = bundle.clone();
    std::thread::spawn(move || {
        let _ = send.send(bundle.evaluate_blocking(entrypoint, &json!({})));
    });
    match receive.recv_timeout(Duration::from_secs(60)) {
        Ok(result) => result.expect_err("the evaluation must be stopped"),
        Err(_) => panic!("{entrypoint} was not stopped by the time limit"),
    }
}

#[test]
fn runs_without_a_loop_stop_at_the_time_limit_too() {
    // Recursion is the other way to run for long: without a loop, through the table, and as
    // tail calls that never overflow the stack.
    let limit = Duration::from_millis(30);
    let bundle = bundle().with_time_limit(limit).expect("limit");
    for entrypoint in ["test/recurse", "test/indirect", "test/tail"] {
        let started = Instant::now();
        assert_eq!(
            evaluate_or_hang(&bundle, entrypoint),
            RegoEvaluationError::TimeLimit(limit),
            "{entrypoint}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{entrypoint} took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn the_default_time_limit_applies() {
    let bundle = bundle();
    assert_eq!(bundle.time_limit(), DEFAULT_TIME_LIMIT);
    let error = bundle
        .evaluate("test/loop", &json!({}))
        .await
        .expect_err("stopped");
    assert_eq!(error, RegoEvaluationError::TimeLimit(DEFAULT_TIME_LIMIT));
}

#[tokio::test]
async fn growing_past_the_memory_limit_is_an_evaluation_error() {
    let limit = 4 * 1024 * 1024;
    let bundle = bundle().with_memory_limit(limit).expect("limit");
    assert_eq!(bundle.memory_limit(), limit);
    let error = bundle
        .evaluate("test/grow", &json!({}))
        .await
        .expect_err("out of memory");
    match &error {
        RegoEvaluationError::MemoryLimit {
            limit: reported,
            detail,
        } => {
            assert_eq!(*reported, limit);
            assert!(detail.contains("opa_malloc: failed"), "{detail}");
        }
        other => panic!("expected a memory-limit error, got {other:?}"),
    }
    assert_eq!(
        bundle.evaluate("test/ok", &json!({})).await,
        Ok(Some(json!(true)))
    );
}

#[tokio::test]
async fn the_default_memory_limit_applies() {
    let bundle = bundle();
    assert_eq!(bundle.memory_limit(), DEFAULT_MEMORY_LIMIT);
    let error = bundle
        .evaluate("test/grow", &json!({}))
        .await
        .expect_err("out of memory");
    assert!(
        matches!(error, RegoEvaluationError::MemoryLimit { limit, .. } if limit == DEFAULT_MEMORY_LIMIT),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_input_larger_than_the_memory_limit_is_refused() {
    let bundle = bundle().with_memory_limit(1024 * 1024).expect("limit");
    let big = json!({"text": "x".repeat(2 * 1024 * 1024)});
    let error = bundle.evaluate("test/ok", &big).await.expect_err("too big");
    assert!(
        matches!(error, RegoEvaluationError::MemoryLimit { .. }),
        "{error:?}"
    );
}

#[test]
fn a_memory_limit_below_the_initial_memory_fails_at_construction() {
    let error = bundle()
        .with_memory_limit(64 * 1024)
        .expect_err("2 pages do not fit in 1");
    assert!(matches!(error, RegoError::Instantiate { .. }), "{error:?}");
    assert!(error.to_string().contains("memory limit"), "{error}");
}

#[tokio::test]
async fn a_trap_is_an_evaluation_error_with_the_guest_message() {
    let bundle = bundle();
    let error = bundle
        .evaluate("test/trap", &json!({}))
        .await
        .expect_err("trap");
    match &error {
        RegoEvaluationError::Trap(message) => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_eq!(
        bundle.evaluate("test/ok", &json!({})).await,
        Ok(Some(json!(true)))
    );
}

#[tokio::test]
async fn opa_abort_is_an_evaluation_error_with_the_guest_message() {
    let error = bundle()
        .evaluate("test/abort", &json!({}))
        .await
        .expect_err("abort");
    assert_eq!(
        error,
        RegoEvaluationError::Aborted("var assignment conflict".to_owned())
    );
    assert_eq!(error.to_string(), "policy aborted: var assignment conflict");
}

#[tokio::test]
async fn host_builtins_are_called_with_their_operands() {
    let bundle = bundle();
    assert_eq!(bundle.host_builtins(), vec!["sprintf".to_owned()]);
    for _ in 0..3 {
        assert_eq!(
            bundle.evaluate("test/sprintf", &json!({})).await,
            Ok(Some(json!("x-5")))
        );
    }
}

#[tokio::test]
async fn undefined_and_unknown_entrypoints() {
    let bundle = bundle();
    assert_eq!(
        bundle.evaluate("test/undefined", &json!({})).await,
        Ok(None)
    );
    let error = bundle
        .evaluate("test/nope", &json!({}))
        .await
        .expect_err("unknown");
    assert!(
        matches!(&error, RegoEvaluationError::UnknownEntrypoint { available, .. } if available.contains(&"test/ok".to_owned())),
        "{error:?}"
    );
}

#[test]
fn a_builtin_the_host_lacks_fails_at_open_naming_it() {
    let error = RegoBundle::from_bytes(&common::test_module(
        r#"{"http.send":0,"sprintf":1,"crypto.x509.parse_certificates":2}"#,
        "",
    ))
    .expect_err("http.send is not provided");
    match &error {
        RegoError::MissingBuiltins { builtins, .. } => {
            assert_eq!(
                builtins,
                &[
                    "crypto.x509.parse_certificates".to_owned(),
                    "http.send".to_owned()
                ]
            );
        }
        other => panic!("expected missing builtins, got {other:?}"),
    }
    assert!(error.to_string().contains("http.send"), "{error}");
}

#[test]
fn a_module_with_foreign_imports_is_refused() {
    let wasm = common::test_module(
        "{}",
        r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
    );
    let error = RegoBundle::from_bytes(&wasm).expect_err("wasi import");
    assert!(matches!(error, RegoError::NotOpaModule { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("wasi_snapshot_preview1.fd_write"),
        "{error}"
    );
}

#[test]
fn a_module_that_could_outlast_the_time_limit_is_refused() {
    // Imports of the host's own module name, a shared memory of its own, and a wait on one.
    for (extra, why) in [
        (
            r#"(import "portcullis" "clock" (memory 1 1 shared))"#,
            "portcullis.clock",
        ),
        (
            r#"(import "portcullis" "deadline" (global (mut i64)))"#,
            "portcullis.deadline",
        ),
    ] {
        let error = RegoBundle::from_bytes(&common::test_module("{}", extra)).expect_err(why);
        assert!(matches!(error, RegoError::NotOpaModule { .. }), "{error:?}");
        assert!(error.to_string().contains(why), "{error}");
    }
    let waits = wat::parse_str(
        r#"(module
          (import "env" "memory" (memory 1))
          (memory $shared 1 1 shared)
          (func (export "wait") (result i32)
            (memory.atomic.wait32 $shared (i32.const 0) (i32.const 0) (i64.const -1))))"#,
    )
    .expect("wat");
    let error = RegoBundle::from_bytes(&waits).expect_err("waits");
    assert!(matches!(error, RegoError::NotOpaModule { .. }), "{error:?}");
    assert!(error.to_string().contains("shared memory"), "{error}");
}

#[test]
fn a_module_without_opa_exports_is_refused() {
    let wasm =
        wat::parse_str(r#"(module (import "env" "memory" (memory 1)) (func (export "main")))"#)
            .expect("wat");
    let error = RegoBundle::from_bytes(&wasm).expect_err("not OPA");
    assert!(matches!(error, RegoError::NotOpaModule { .. }), "{error:?}");
    assert!(error.to_string().contains("opa_"), "{error}");
}
