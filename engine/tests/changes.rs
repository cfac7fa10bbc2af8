//! Redactions and transforms applied by the engine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use portcullis_engine::error::ApplyError;
use portcullis_engine::{
    EngineError, OnError, PolicyDecision, PolicyEngine, PolicySet, Redaction, TransformOperation,
};
use serde_json::json;
use support::*;

fn engine_with_input(decisions: Vec<PolicyDecision>) -> PolicyEngine {
    let mut builder = PolicySet::builder();
    for (at, decision) in decisions.into_iter().enumerate() {
        builder = builder.input(Scripted::returning(&format!("p{at}"), decision));
    }
    PolicyEngine::builder().policy_set(builder.build()).build()
}

fn engine_with_tool_call(decisions: Vec<PolicyDecision>) -> PolicyEngine {
    let mut builder = PolicySet::builder();
    for (at, decision) in decisions.into_iter().enumerate() {
        builder = builder.tool_call(Scripted::returning(&format!("p{at}"), decision));
    }
    PolicyEngine::builder().policy_set(builder.build()).build()
}

async fn apply_error(engine: &PolicyEngine, context: &portcullis_engine::InputContext) -> String {
    match engine.evaluate_input(context).await {
        Err(EngineError::Evaluation(error)) => {
            let cause = error
                .cause()
                .downcast_ref::<ApplyError>()
                .expect("an ApplyError");
            cause.to_string()
        }
        other => panic!("expected an evaluation error, got {other:?}"),
    }
}

#[tokio::test]
async fn mask_replaces_the_whole_value() {
    let engine = engine_with_input(vec![
        PolicyDecision::redact([Redaction::mask("messages.1.content")]),
        PolicyDecision::redact([Redaction::mask("metadata.tenant").with_replacement("***")]),
    ]);
    let context = input(&["system", "my card is 4111"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(evaluation.is_modified());
    assert_eq!(evaluation.context().messages[1].content, "[REDACTED]");
    assert_eq!(evaluation.context().metadata.extra["tenant"], json!("***"));
    assert_eq!(
        context.messages[1].content, "my card is 4111",
        "the original is untouched"
    );
}

#[tokio::test]
async fn replace_substitutes_every_match() {
    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::replace(
        "messages.*.content",
        r"\b\d{3}-\d{2}-\d{4}\b",
    )
    .with_replacement("<ssn>")])]);
    let context = input(&["ids: 123-45-6789", "mine is 987-65-4321 and 111-22-3333"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    let texts: Vec<_> = evaluation
        .context()
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(texts, ["ids: <ssn>", "mine is <ssn> and <ssn>"]);
}

#[tokio::test]
async fn a_redaction_that_matches_nothing_forwards_the_original() {
    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::replace(
        "messages.*.content",
        r"\b\d{3}-\d{2}-\d{4}\b",
    )])]);
    let context = input(&["no numbers here"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(!evaluation.is_modified());
    assert!(std::ptr::eq(evaluation.context(), &context));
    // The decision is still recorded as taken.
    assert_eq!(evaluation.decisions().len(), 1);
}

#[tokio::test]
async fn replace_inserts_the_replacement_literally() {
    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::replace(
        "messages.0.content",
        "(secret)",
    )
    .with_replacement("$1")])]);
    let context = input(&["a secret"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(evaluation.context().messages[0].content, "a $1");
}

#[tokio::test]
async fn remove_deletes_keys_and_drops_list_elements() {
    let engine = engine_with_input(vec![PolicyDecision::redact([
        Redaction::remove("messages.0"),
        Redaction::remove("metadata.tenant"),
    ])]);
    let context = input(&["system prompt", "question"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(evaluation.context().messages.len(), 1);
    assert_eq!(evaluation.context().messages[0].content, "question");
    assert!(!evaluation.context().metadata.extra.contains_key("tenant"));

    let engine = engine_with_tool_call(vec![PolicyDecision::redact([Redaction::remove(
        "arguments.options",
    )])]);
    let context = tool_call("search", sample_arguments());
    let evaluation = engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(
        serde_json::Value::Object(evaluation.context().arguments.clone()),
        json!({"query": "weather in Paris", "limit": 3})
    );
}

#[tokio::test]
async fn removing_a_required_field_is_an_evaluation_error() {
    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::remove(
        "metadata.agent_id",
    )])]);
    let message = apply_error(&engine, &input(&["x"])).await;
    assert!(message.contains("no longer a valid input"), "{message}");
    assert!(message.contains("agent_id"), "{message}");

    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::remove(
        "messages.0.content",
    )])]);
    let message = apply_error(&engine, &input(&["x"])).await;
    assert!(message.contains("content"), "{message}");
}

#[tokio::test]
async fn transform_operations_apply_in_order() {
    let engine = engine_with_input(vec![PolicyDecision::transform([
        TransformOperation::set("messages.0.content", "Be brief."),
        TransformOperation::prepend("messages.-1.content", "[user] "),
        TransformOperation::append("messages.-1.content", " (answer in French)"),
        TransformOperation::set("metadata.policy_version", 3),
    ])]);
    let context = input(&["old system", "hello"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    let forwarded = evaluation.context();
    assert_eq!(forwarded.messages[0].content, "Be brief.");
    assert_eq!(
        forwarded.messages[1].content,
        "[user] hello (answer in French)"
    );
    assert_eq!(forwarded.metadata.extra["policy_version"], json!(3));
}

#[tokio::test]
async fn later_policies_see_earlier_changes() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen_by_policy = std::sync::Arc::clone(&seen);
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::returning(
                    "mask",
                    PolicyDecision::redact([Redaction::replace("messages.0.content", "blue")]),
                ))
                .input(Scripted::new(
                    "look",
                    move |context: &portcullis_engine::InputContext| {
                        *seen_by_policy.lock().unwrap() = context.messages[0].content.clone();
                        Ok(PolicyDecision::transform([TransformOperation::append(
                            "messages.0.content",
                            "!",
                        )]))
                    },
                ))
                .build(),
        )
        .build();
    let context = input(&["the sky is blue"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), "the sky is [REDACTED]");
    assert_eq!(
        evaluation.context().messages[0].content,
        "the sky is [REDACTED]!"
    );
    assert_eq!(evaluation.decisions().len(), 2);
}

#[tokio::test]
async fn tool_arguments_can_be_set_and_added() {
    let engine = engine_with_tool_call(vec![PolicyDecision::transform([
        TransformOperation::set("arguments.limit", 1),
        TransformOperation::set("arguments.safe_search", true),
        TransformOperation::set("arguments.options.lang", "fr"),
    ])]);
    let context = tool_call("search", sample_arguments());
    let evaluation = engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(
        serde_json::Value::Object(evaluation.into_context().arguments),
        json!({"query": "weather in Paris", "limit": 1, "safe_search": true, "options": {"lang": "fr"}})
    );
}

#[tokio::test]
async fn a_path_that_does_not_exist_is_an_evaluation_error() {
    for (decision, expected) in [
        (
            PolicyDecision::redact([Redaction::mask("messages.5.content")]),
            "messages.5.content",
        ),
        (
            PolicyDecision::redact([Redaction::mask("messages.0.contnet")]),
            "contnet",
        ),
        (
            PolicyDecision::redact([Redaction::remove("metadata.nope")]),
            "nope",
        ),
        (
            PolicyDecision::transform([TransformOperation::append("messages.9.content", "x")]),
            "messages.9.content",
        ),
        (
            PolicyDecision::transform([TransformOperation::set("missing.deeper", 1)]),
            "missing",
        ),
        (
            PolicyDecision::redact([Redaction::mask("messages..content")]),
            "invalid field path",
        ),
    ] {
        let engine = engine_with_input(vec![decision]);
        let message = apply_error(&engine, &input(&["x"])).await;
        assert!(
            message.contains(expected),
            "{message} should mention {expected}"
        );
    }
}

#[tokio::test]
async fn a_result_that_is_no_longer_a_valid_context_is_an_evaluation_error() {
    for (decision, expected) in [
        (
            PolicyDecision::transform([TransformOperation::set("messages.0.role", "robot")]),
            "robot",
        ),
        (
            PolicyDecision::transform([TransformOperation::set("messages", "flat text")]),
            "no longer a valid input",
        ),
        (
            PolicyDecision::transform([TransformOperation::set("messages.0.extra", 1)]),
            "extra",
        ),
        (
            PolicyDecision::transform([TransformOperation::prepend("messages", "x")]),
            "needs a string field",
        ),
        (
            PolicyDecision::transform([TransformOperation::set("messages.0.content", 5)]),
            "no longer a valid input",
        ),
        (
            PolicyDecision::transform([TransformOperation {
                op: portcullis_engine::TransformOp::Append,
                field: "messages.0.content".into(),
                value: json!(5),
            }]),
            "needs a string value",
        ),
        (
            PolicyDecision::redact([Redaction {
                field: "messages.0.content".into(),
                strategy: portcullis_engine::RedactionStrategy::Replace,
                replacement: None,
                pattern: None,
            }]),
            "needs a `pattern`",
        ),
        (
            PolicyDecision::redact([Redaction::replace("messages.0.content", "(unclosed")]),
            "invalid pattern",
        ),
        (
            PolicyDecision::redact([Redaction::replace("messages", "x")]),
            "needs a string",
        ),
    ] {
        let engine = engine_with_input(vec![decision]);
        let message = apply_error(&engine, &input(&["x"])).await;
        assert!(
            message.contains(expected),
            "{message} should mention {expected}"
        );
    }

    // Output and tool-call contexts keep their assistant role.
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(Scripted::returning(
                    "p",
                    PolicyDecision::transform([TransformOperation::set("response.role", "user")]),
                ))
                .build(),
        )
        .build();
    let error = engine.evaluate_output(&output("x")).await.unwrap_err();
    let text = portcullis_engine::error::error_chain(&error);
    assert!(text.contains("assistant"), "{text}");
}

#[tokio::test]
async fn a_failed_change_under_on_error_allow_leaves_the_context_as_it_was() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .on_error(OnError::Allow)
                .input(Scripted::returning(
                    "bad",
                    PolicyDecision::transform([
                        TransformOperation::set("messages.0.content", "changed"),
                        TransformOperation::set("messages.7.content", "boom"),
                    ]),
                ))
                .build(),
        )
        .build();
    let context = input(&["original"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(!evaluation.is_modified());
    assert_eq!(evaluation.context().messages[0].content, "original");
    assert!(evaluation.decisions().is_empty());
}

#[tokio::test]
async fn wildcards_that_select_nothing_change_nothing() {
    let engine = engine_with_input(vec![PolicyDecision::redact([Redaction::mask(
        "messages.*.content",
    )])]);
    let context = portcullis_engine::InputContext::new(vec![], metadata());
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(evaluation.context().messages.is_empty());
}

#[tokio::test]
async fn a_timestamp_changed_to_something_that_is_not_rfc_3339_is_an_evaluation_error() {
    for (name, decision) in [
        (
            "set",
            PolicyDecision::transform([TransformOperation::set("metadata.timestamp", "yesterday")]),
        ),
        (
            "append",
            PolicyDecision::transform([TransformOperation::append("metadata.timestamp", "!")]),
        ),
        (
            "mask",
            PolicyDecision::redact([Redaction::mask("metadata.timestamp")]),
        ),
        (
            "February 30",
            PolicyDecision::transform([TransformOperation::set(
                "metadata.timestamp",
                "2026-02-30T10:00:00Z",
            )]),
        ),
    ] {
        let engine = engine_with_input(vec![decision]);
        let error = apply_error(&engine, &input(&["hello"])).await;
        assert!(error.contains("RFC 3339"), "{name}: {error}");
    }
}

#[tokio::test]
async fn a_timestamp_changed_to_another_rfc_3339_time_is_applied() {
    let engine = engine_with_input(vec![PolicyDecision::transform([TransformOperation::set(
        "metadata.timestamp",
        "2026-01-02T03:04:05.678+01:00",
    )])]);
    let context = input(&["hello"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(
        evaluation.context().metadata.timestamp,
        "2026-01-02T03:04:05.678+01:00"
    );
}
