//! Behaviour of code-first policies (`#[input_policy]` and friends) and `policy_set!` inside
//! a real engine.
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt;
use std::sync::{Arc, Mutex};

use portcullis::{
    BoxError, EngineError, InputContext, InputPolicy, Message, Metadata, OnError, OutputContext,
    Policy, PolicyDecision, PolicyEngine, PolicySet, Redaction, ToolCallContext, input_policy,
    output_policy, policy_set, tool_call_policy,
};
use serde_json::{Map, json};

/// Denies any message mentioning a social security number.
#[input_policy]
fn no_ssn(context: &InputContext) -> PolicyDecision {
    if context
        .messages
        .iter()
        .any(|message| message.content.contains("SSN"))
    {
        PolicyDecision::deny("no SSNs")
    } else {
        PolicyDecision::allow()
    }
}

#[input_policy(id = "polite-input")]
async fn polite(context: &InputContext) -> PolicyDecision {
    tokio::task::yield_now().await;
    if context.messages.iter().any(|m| m.content.contains("darn")) {
        PolicyDecision::audit("impolite")
    } else {
        PolicyDecision::allow()
    }
}

#[derive(Debug)]
struct ArgumentsMissing(&'static str);

impl fmt::Display for ArgumentsMissing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "argument `{}` is missing", self.0)
    }
}

impl std::error::Error for ArgumentsMissing {}

#[tool_call_policy]
fn bounded_refund(context: &ToolCallContext) -> Result<PolicyDecision, ArgumentsMissing> {
    if context.tool_name != "refund" {
        return Ok(PolicyDecision::allow());
    }
    let amount = context
        .arguments
        .get("amount")
        .and_then(|amount| amount.as_f64())
        .ok_or(ArgumentsMissing("amount"))?;
    Ok(if amount > 100.0 {
        PolicyDecision::deny("refund too large")
    } else {
        PolicyDecision::allow()
    })
}

#[output_policy]
async fn mask_secrets(context: &OutputContext) -> Result<PolicyDecision, BoxError> {
    if context.response.content.contains("secret") {
        Ok(PolicyDecision::redact([Redaction::replace(
            "response.content",
            "secret",
        )
        .with_replacement("[hidden]")]))
    } else {
        Ok(PolicyDecision::allow())
    }
}

mod nested {
    use portcullis::{OutputContext, PolicyDecision, output_policy};

    /// Public policies stay public, with their docs.
    #[output_policy(id = "never")]
    pub(crate) fn never_deny(_: &OutputContext) -> PolicyDecision {
        PolicyDecision::allow()
    }
}

fn metadata() -> Metadata {
    Metadata::new("agent", "session")
}

fn input(text: &str) -> InputContext {
    InputContext::new(vec![Message::user(text)], metadata())
}

fn tool_call(name: &str, arguments: serde_json::Value) -> ToolCallContext {
    let arguments: Map<String, serde_json::Value> = match arguments {
        serde_json::Value::Object(map) => map,
        _ => Map::new(),
    };
    ToolCallContext::new(name, arguments, Message::assistant("calling"), metadata())
}

fn output(text: &str) -> OutputContext {
    OutputContext::new(Message::assistant(text), metadata())
}

#[test]
fn the_function_name_is_a_policy_value_with_that_id() {
    assert_eq!(no_ssn.id(), "no_ssn");
    assert_eq!(polite.id(), "polite-input");
    assert_eq!(bounded_refund.id(), "bounded_refund");
    assert_eq!(mask_secrets.id(), "mask_secrets");
    assert_eq!(nested::never_deny.id(), "never");
    // The function itself stays callable.
    assert!(no_ssn::decide(&input("my SSN is 1")).is_deny());
}

#[tokio::test]
async fn annotated_functions_run_inside_an_engine() {
    let records = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&records);
    let engine = PolicyEngine::builder()
        .policy_set(policy_set! {
            on_error: deny,
            input: [no_ssn, polite],
            tool_call: [bounded_refund],
            output: [mask_secrets, nested::never_deny],
        })
        .on_audit(move |record: &portcullis::AuditRecord<'_>| {
            if let Ok(mut seen) = seen.lock() {
                seen.push((record.policy_id.to_string(), record.decision));
            }
        })
        .build();

    // Sync policy denies.
    let error = engine
        .evaluate_input(&input("my SSN is 078-05-1120"))
        .await
        .err()
        .and_then(|error| error.as_denial().cloned());
    let denial = error.expect("the SSN must be denied");
    assert_eq!(denial.policy_id(), "no_ssn");
    assert_eq!(denial.reason(), Some("no SSNs"));

    // Async policy audits, and both policies ran.
    let impolite = input("darn it");
    let evaluation = engine
        .evaluate_input(&impolite)
        .await
        .expect("an audit does not block");
    let ids: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|entry| entry.policy_id.as_str())
        .collect();
    assert_eq!(ids, ["no_ssn", "polite-input"]);
    assert_eq!(
        evaluation.decisions()[1].decision,
        PolicyDecision::audit("impolite")
    );

    // Fallible policy: Ok(deny), Ok(allow), Err -> evaluation error with the cause.
    let large = tool_call("refund", json!({ "amount": 500 }));
    let denied = engine.evaluate_tool_call(&large).await;
    assert!(matches!(denied, Err(EngineError::Denied(_))));
    assert!(
        engine
            .evaluate_tool_call(&tool_call("refund", json!({ "amount": 5 })))
            .await
            .is_ok()
    );
    let Err(EngineError::Evaluation(failed)) = engine
        .evaluate_tool_call(&tool_call("refund", json!({})))
        .await
    else {
        panic!("a failing policy fails the call under on_error: deny");
    };
    assert_eq!(failed.policy_id(), "bounded_refund");
    assert!(
        failed
            .cause_chain()
            .contains("argument `amount` is missing")
    );

    // Async fallible policy redacts.
    let secret = output("the secret is 42");
    let evaluation = engine
        .evaluate_output(&secret)
        .await
        .expect("a redaction does not block");
    assert_eq!(evaluation.context().response.content, "the [hidden] is 42");
    assert_eq!(evaluation.decisions().len(), 2);

    let records = records.lock().map(|records| records.len()).unwrap_or(0);
    assert!(records >= 7, "every decision is audited, got {records}");
}

#[tokio::test]
async fn policy_set_keys_are_optional_and_on_error_allow_skips_failures() {
    let empty: PolicySet = policy_set! {};
    assert!(empty.input().is_empty());
    assert_eq!(empty.on_error(), OnError::Deny);

    let set = policy_set! {
        tool_call: [bounded_refund, Arc::new(bounded_refund),],
        on_error: allow,
    };
    assert_eq!(set.on_error(), OnError::Allow);
    assert_eq!(set.tool_call().len(), 2);
    let engine = PolicyEngine::builder().policy_set(set).build();
    let context = tool_call("refund", json!({}));
    let evaluation = engine
        .evaluate_tool_call(&context)
        .await
        .expect("on_error: allow skips a failing policy");
    assert!(evaluation.decisions().is_empty());

    // Any expression is an element, and the builder accepts the same values.
    let built = PolicySet::builder()
        .input(no_ssn)
        .output(mask_secrets)
        .build();
    assert_eq!(built.input().len(), 1);
    let dynamic: Box<dyn InputPolicy> = Box::new(polite);
    let set = policy_set! { input: [if true { dynamic } else { Box::new(no_ssn) }] };
    let ids: Vec<_> = set
        .input()
        .policies()
        .map(|policy| policy.id().to_owned())
        .collect();
    assert_eq!(ids, ["polite-input"]);
}

#[tokio::test]
async fn direct_evaluation_through_the_traits() {
    let decision =
        Policy::<ToolCallContext>::evaluate(&bounded_refund, &tool_call("other", json!({})))
            .await
            .expect("an allowed tool");
    assert_eq!(decision, PolicyDecision::allow());
    let decision = Policy::<OutputContext>::evaluate(&nested::never_deny, &output("x"))
        .await
        .expect("never fails");
    assert_eq!(decision, PolicyDecision::allow());
}
