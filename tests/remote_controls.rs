//! Production controls with remote policies: deadlines against a server that stalls, and
//! concurrent evaluation of slow remote checks.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::error::{DeadlineScope, PolicyTimedOut};
use portcullis::http::{HttpClientOptions, HttpInputPolicy};
use portcullis::{
    AuditRecord, InputContext, InterceptionPoint, Message, Metadata, OnError, PolicyDecision,
    PolicyEngine, PolicyExt, PolicySet,
};
use portcullis_testing::{EvaluateServer, Reply};

fn context() -> InputContext {
    InputContext::new(
        vec![Message::user("hello")],
        Metadata::new("agent", "session"),
    )
}

fn remote(id: &str, server: &EvaluateServer) -> HttpInputPolicy {
    HttpInputPolicy::new(id, HttpClientOptions::new(server.url())).expect("a valid URL")
}

#[tokio::test]
async fn a_remote_policy_that_stalls_is_cancelled_at_its_deadline() {
    let server = EvaluateServer::replying(Reply::stall()).await.unwrap();
    let records = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&records);
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(remote("stalling", &server).with_deadline(Duration::from_millis(100)))
                .build(),
        )
        .on_audit(move |record: &AuditRecord<'_>| {
            kept.lock()
                .unwrap()
                .push(record.reason.as_deref().unwrap_or_default().to_owned());
        })
        .build();
    let started = Instant::now();
    let error = engine.evaluate_input(&context()).await.unwrap_err();
    // Well before the client's own 5 s time-out.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let timed_out = error
        .as_evaluation()
        .and_then(|error| error.cause().downcast_ref::<PolicyTimedOut>())
        .unwrap_or_else(|| panic!("not a time-out: {error}"));
    assert_eq!(timed_out.scope(), DeadlineScope::Policy);
    assert!(records.lock().unwrap()[0].contains("timed out"));
    server.shutdown().await;
}

#[tokio::test]
async fn a_remote_policy_within_its_deadline_decides() {
    let server = EvaluateServer::replying(
        Reply::decision(&PolicyDecision::deny("remote says no")).after(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(remote("slow_but_fine", &server))
                .policy_deadline(InterceptionPoint::Input, Duration::from_secs(2))
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&context()).await.unwrap_err();
    assert_eq!(error.as_denial().unwrap().reason(), Some("remote says no"));
    server.shutdown().await;
}

#[tokio::test]
async fn the_call_deadline_bounds_remote_checks_under_on_error_allow() {
    let fast = EvaluateServer::start().await.unwrap();
    let stalled = EvaluateServer::replying(Reply::stall()).await.unwrap();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .on_error(OnError::Allow)
                .input(remote("fast", &fast))
                .input(remote("stalled", &stalled))
                .call_deadline(InterceptionPoint::Input, Duration::from_millis(200))
                .build(),
        )
        .build();
    let started = Instant::now();
    let context = context();
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    let ids: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|entry| entry.policy_id.as_str())
        .collect();
    assert_eq!(ids, ["fast"]);
    fast.shutdown().await;
    stalled.shutdown().await;
}

#[tokio::test]
async fn concurrent_remote_checks_run_at_once_and_keep_declared_order() {
    let servers = [
        EvaluateServer::replying(
            Reply::decision(&PolicyDecision::audit("first")).after(Duration::from_millis(120)),
        )
        .await
        .unwrap(),
        EvaluateServer::replying(
            Reply::decision(&PolicyDecision::deny("second")).after(Duration::from_millis(60)),
        )
        .await
        .unwrap(),
        EvaluateServer::replying(Reply::stall()).await.unwrap(),
    ];
    let records = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&records);
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(remote("a", &servers[0]))
                .input(remote("b", &servers[1]))
                .input(remote("c", &servers[2]))
                .concurrent(InterceptionPoint::Input)
                .build(),
        )
        .on_audit(move |record: &AuditRecord<'_>| {
            kept.lock().unwrap().push(record.policy_id.to_owned());
        })
        .build();
    let started = Instant::now();
    let error = engine.evaluate_input(&context()).await.unwrap_err();
    // `b` denies; the stalled `c` is cancelled instead of holding the call for 5 s.
    assert_eq!(error.policy_id(), "b");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The cancelled `c` ran too: it is audited (as an evaluation error saying it was
    // cancelled), after the winner.
    assert_eq!(*records.lock().unwrap(), ["a", "b", "c"]);
    // All three requests were sent at once.
    for server in &servers {
        assert_eq!(server.requests().len(), 1);
    }
    for server in servers {
        server.shutdown().await;
    }
}
