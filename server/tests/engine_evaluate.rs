//! `POST /engine/evaluate` goes through the engine, as `/v1/evaluate` does: the one policy
//! named is audited, monitored, bounded by the point's deadlines, subject to `on_error`, and
//! sees (and feeds) the session store. An attacker who asks the remote protocol for one
//! policy's decision gets no way around any of them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Failing, Slow, dsl_input, input, post, start_engine};
use portcullis_engine::{
    AuditRecord, InterceptionPoint, MemorySessionStore, OnError, PolicyEngine, PolicySet,
};
use portcullis_server::{DecisionService, ServeOptions};
use serde_json::{Value, json};

fn request(policy_id: &str, context: Value) -> Value {
    json!({"policy_id": policy_id, "interception_point": "input", "context": context})
}

fn deny_secrets() -> portcullis_dsl::DslInputPolicy {
    dsl_input(
        "block_secret",
        &json!({
            "condition": {"field": "messages.0.content", "contains": ["secret"]},
            "action": "deny",
            "reason": "no secrets",
        }),
    )
}

/// (policy id, decision, enforced) of every record.
type Records = Arc<Mutex<Vec<(String, String, bool)>>>;

/// A service on `set` whose audit records are kept, and the `/engine/evaluate` URL.
async fn start_recorded(set: PolicySet) -> (common::Running, String, Records) {
    let records = Records::default();
    let kept = Arc::clone(&records);
    let handler = move |record: &AuditRecord<'_>| {
        kept.lock().unwrap_or_else(|e| e.into_inner()).push((
            record.policy_id.to_owned(),
            record.decision.as_str().to_owned(),
            record.enforced,
        ));
    };
    let server = start_engine(
        DecisionService::builder().audit(handler),
        PolicyEngine::builder().policy_set(set),
        ServeOptions::new(),
    )
    .await;
    let url = format!("{}/engine/evaluate", server.url);
    (server, url, records)
}

fn taken(records: &Records) -> Vec<(String, String, bool)> {
    records.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_audited() {
    let set = PolicySet::builder().input(deny_secrets()).build();
    let (server, url, records) = start_recorded(set).await;
    let (status, decision) = post(&url, &request("block_secret", input("the secret"))).await;
    assert_eq!(status, 200);
    assert_eq!(decision["decision"], "deny");
    let (status, _) = post(&url, &request("block_secret", input("hello"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        taken(&records),
        [
            ("block_secret".to_owned(), "deny".to_owned(), true),
            ("block_secret".to_owned(), "allow".to_owned(), true),
        ]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitored_denial_is_audited_and_does_not_take_effect() {
    let set = PolicySet::builder()
        .input(deny_secrets())
        .monitor(InterceptionPoint::Input)
        .build();
    let (server, url, records) = start_recorded(set).await;
    let (status, decision) = post(&url, &request("block_secret", input("the secret"))).await;
    assert_eq!(status, 200);
    // What takes effect: the call goes on. The record says what enforcing would have done.
    assert_eq!(decision, json!({"decision": "allow"}));
    assert_eq!(
        taken(&records),
        [("block_secret".to_owned(), "deny".to_owned(), false)]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_decides_what_a_failing_policy_does() {
    let set = PolicySet::builder()
        .input(Failing)
        .on_error(OnError::Allow)
        .build();
    let (server, url, records) = start_recorded(set).await;
    let (status, decision) = post(&url, &request("failing", input("hello"))).await;
    assert_eq!(status, 200, "{decision}");
    assert_eq!(decision, json!({"decision": "allow"}));
    assert_eq!(
        taken(&records),
        [("failing".to_owned(), "evaluation_error".to_owned(), true)]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_points_call_deadline_bounds_the_one_policy() {
    let set = PolicySet::builder()
        .input(Slow(Duration::from_secs(30)))
        .call_deadline(InterceptionPoint::Input, Duration::from_millis(100))
        .build();
    let (server, url, _) = start_recorded(set).await;
    let (status, body) = post(&url, &request("slow", input("hello"))).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "evaluation_error");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_sees_the_session_and_its_labels_are_recorded() {
    let taint = dsl_input(
        "taint_on_web",
        &json!({
            "condition": {"field": "messages.0.content", "contains": ["web page"]},
            "action": "allow",
            "labels": ["untrusted"],
        }),
    );
    let gate = dsl_input(
        "deny_tainted",
        &json!({
            "condition": {"field": "metadata.session.labels", "contains": ["untrusted"]},
            "action": "deny",
            "reason": "the session read untrusted text",
        }),
    );
    let set = PolicySet::builder().input(taint).input(gate).build();
    let server = start_engine(
        DecisionService::builder(),
        PolicyEngine::builder()
            .policy_set(set)
            .sessions(MemorySessionStore::new()),
        ServeOptions::new(),
    )
    .await;
    let url = format!("{}/engine/evaluate", server.url);
    // The caller claims a clean session: the engine puts the store's facts in its place.
    let mut clean = input("hello");
    clean["metadata"]["session"] = json!({"labels": []});
    let (status, decision) = post(&url, &request("deny_tainted", clean.clone())).await;
    assert_eq!((status, &decision["decision"]), (200, &json!("allow")));

    let (status, decision) = post(&url, &request("taint_on_web", input("a web page said"))).await;
    assert_eq!(status, 200);
    assert_eq!(decision["labels"], json!(["untrusted"]));

    let (status, decision) = post(&url, &request("deny_tainted", clean)).await;
    assert_eq!(status, 200);
    assert_eq!(
        decision,
        json!({"decision": "deny", "reason": "the session read untrusted text"})
    );
    server.stop().await;
}

/// An audit handler that keeps no record: an audit log under `on_failure: deny` that cannot
/// write.
struct Refusing;

impl portcullis_engine::AuditHandler for Refusing {
    fn handle(&self, _: &AuditRecord<'_>) {}

    fn try_handle(&self, _: &AuditRecord<'_>) -> Result<(), portcullis_engine::BoxError> {
        Err("the audit log cannot be written".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_audit_record_fails_the_call_behind_the_service_too() {
    let set = PolicySet::builder().input(deny_secrets()).build();
    let server = start_engine(
        DecisionService::builder().audit(Refusing),
        PolicyEngine::builder().policy_set(set),
        ServeOptions::new(),
    )
    .await;
    let (status, outcome) = post(
        &format!("{}/v1/evaluate/input", server.url),
        &input("hello"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(outcome["outcome"], "error", "{outcome}");
    assert_eq!(
        outcome["error"]["policy_id"], "portcullis.audit",
        "{outcome}"
    );
    let (status, _) = post(
        &format!("{}/engine/evaluate", server.url),
        &request("block_secret", input("hello")),
    )
    .await;
    assert_ne!(
        status, 200,
        "an allow whose record was refused must not be answered"
    );
    server.stop().await;
}
