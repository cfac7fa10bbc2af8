//! The `escalate` action: a rule that asks for a person's approval, through the engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use portcullis_dsl::DslToolCallPolicy;
use portcullis_engine::{
    EngineError, Message, Metadata, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext,
};
use serde_json::json;

const RULE: &str = r#"{
  "condition": { "field": "tool_name", "equals": "send_email" },
  "action": "escalate",
  "reason": "e-mail leaves the company"
}"#;

fn call(tool: &str) -> ToolCallContext {
    let serde_json::Value::Object(arguments) = json!({"to": "a@example.com"}) else {
        unreachable!()
    };
    ToolCallContext::new(
        tool,
        arguments,
        Message::assistant("sending"),
        Metadata::new("agent", "session"),
    )
}

#[test]
fn an_escalate_rule_decides_escalate_when_its_condition_holds() {
    let policy = DslToolCallPolicy::from_source("ask_first", RULE, "ask_first.json").unwrap();
    assert!(policy.warnings().is_empty());
    assert_eq!(
        policy.decide(&call("send_email")),
        PolicyDecision::escalate("e-mail leaves the company")
    );
    assert_eq!(policy.decide(&call("search")), PolicyDecision::allow());
}

#[tokio::test]
async fn an_escalate_rule_needs_an_approval_in_the_engine() {
    let policy = DslToolCallPolicy::from_source("ask_first", RULE, "ask_first.json").unwrap();
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(policy).build())
        .build();
    let context = call("send_email");
    let error = engine.evaluate_tool_call(&context).await.unwrap_err();
    let EngineError::ApprovalRequired(request) = error else {
        panic!("expected an approval request, got {error:?}")
    };
    assert_eq!(request.policy_ids, ["ask_first"]);
    assert_eq!(request.reasons, ["e-mail leaves the company"]);
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    engine.evaluate_tool_call(&context).await.unwrap();
}
