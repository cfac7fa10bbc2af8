//! A Rego decision `escalate` makes the engine ask for an approval. The module is a minimal
//! one following the OPA WebAssembly ABI 1.2 whose one entrypoint answers
//! `{"decision": "escalate", "reason": "ask a person"}`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use portcullis_engine::{
    EngineError, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet,
    ToolCallContext,
};
use portcullis_rego::{RegoBundle, RegoToolCallPolicy};

fn context() -> ToolCallContext {
    ToolCallContext::new(
        "send_email",
        serde_json::Map::new(),
        Message::assistant("sending"),
        Metadata::new("agent", "session"),
    )
}

#[tokio::test]
async fn a_rego_escalation_needs_an_approval() {
    let wasm = common::document_module(
        &["aps/tool_call/decision"],
        &[r#"{"decision":"escalate","reason":"ask a person"}"#],
    );
    let bundle = RegoBundle::from_bytes(&wasm).expect("the module opens");
    let policy = RegoToolCallPolicy::from_bundle("rego_gate", bundle).expect("one entrypoint");
    let context = context();
    assert_eq!(
        policy.evaluate(&context).await.expect("evaluates"),
        PolicyDecision::escalate("ask a person")
    );

    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(policy).build())
        .build();
    let error = engine.evaluate_tool_call(&context).await.unwrap_err();
    let EngineError::ApprovalRequired(request) = error else {
        panic!("expected an approval request, got {error:?}")
    };
    assert_eq!(request.policy_ids, ["rego_gate"]);
    assert_eq!(request.reasons, ["ask a person"]);
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    engine.evaluate_tool_call(&context).await.unwrap();
}
