//! Output rules with a streaming form run incrementally in the engine's streaming guard, and
//! the guard releases what the whole-text evaluation forwards, or denies as it does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_dsl::DslOutputPolicy;
use portcullis_engine::stream::StreamMode;
use portcullis_engine::{
    EngineError, Message, Metadata, OutputContext, Policy, PolicyEngine, PolicySet, StreamItem,
};

fn engine(policy: DslOutputPolicy) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(PolicySet::builder().output(policy).build())
        .build()
}

/// Streams `text` in small deltas; returns the released text and whether it was denied.
async fn stream(engine: &PolicyEngine, text: &str) -> (String, bool) {
    let mut guard = engine.output_stream(Metadata::new("agent", "session"));
    let mut released = String::new();
    let mut denied = false;
    let chars: Vec<char> = text.chars().collect();
    let mut items = Vec::new();
    for chunk in chars.chunks(3) {
        items.extend(guard.push(&chunk.iter().collect::<String>()).await);
    }
    items.extend(guard.finish().await);
    for item in items {
        match item {
            StreamItem::Text(text) => released.push_str(&text),
            StreamItem::Denied(_) => denied = true,
            StreamItem::Error(error) => panic!("stream error: {error}"),
            StreamItem::ApprovalRequired(request) => panic!("unexpected escalation: {request}"),
        }
    }
    (released, denied)
}

async fn whole(engine: &PolicyEngine, text: &str) -> (String, bool) {
    let context = OutputContext::new(Message::assistant(text), Metadata::new("agent", "session"));
    match engine.evaluate_output(&context).await {
        Ok(evaluation) => (evaluation.context().response.content.clone(), false),
        Err(EngineError::Denied(_)) => (String::new(), true),
        Err(error) => panic!("{error}"),
    }
}

#[tokio::test]
async fn contains_deny_streams_incrementally_and_agrees() {
    let policy = DslOutputPolicy::from_source(
        "no_secrets",
        r#"{ "condition": { "any": [
                { "field": "response.content", "contains": ["api key", "password"] },
                { "field": "response.content", "contains": ["hi"] } ] },
             "action": "deny", "reason": "secret" }"#,
        "no_secrets.json",
    )
    .expect("valid");
    assert!(policy.streaming().is_some());
    let engine = engine(policy);
    assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
    for text in [
        "nothing to see here",
        "my API KEY is 42",
        "the PassWord",
        "\u{212A}ey api \u{212A}ey",
        "ſpace H\u{0130}",
        "H\u{0130}x and more",
    ] {
        let (released, denied) = stream(&engine, text).await;
        let (forwarded, whole_denied) = whole(&engine, text).await;
        assert_eq!(denied, whole_denied, "{text:?}");
        if denied {
            // Released text is a prefix of the answer and holds no complete needle.
            assert!(text.starts_with(&released), "{text:?}");
            let lowered = released.to_lowercase();
            for needle in ["api key", "password", "hi"] {
                assert!(!lowered.contains(needle), "{text:?} released {released:?}");
            }
        } else {
            assert_eq!(released, forwarded, "{text:?}");
        }
    }
}

#[tokio::test]
async fn always_replace_streams_and_agrees() {
    let policy = DslOutputPolicy::from_source(
        "digits",
        r##"{ "condition": { "always": true }, "action": "redact",
             "redactions": [{ "field": "response.content", "strategy": "replace", "pattern": "\\d{3}-\\d{4}", "replacement": "#" }] }"##,
        "digits.json",
    )
    .expect("valid");
    let engine = engine(policy);
    assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
    let text = "call 555-1234 or 555-9876 now";
    let (released, denied) = stream(&engine, text).await;
    assert!(!denied);
    assert_eq!(released, "call # or # now");
    assert_eq!(whole(&engine, text).await.0, released);
}

#[test]
fn rules_without_an_exact_streaming_form_have_none() {
    for source in [
        // Non-ASCII needle: lower-casing and regex case folding differ.
        r#"{ "condition": { "field": "response.content", "contains": ["straße"] }, "action": "deny" }"#,
        // A condition on something else.
        r#"{ "condition": { "field": "metadata.tier", "equals": "free" }, "action": "deny" }"#,
        // A conditional redaction.
        r#"{ "condition": { "field": "response.content", "contains": ["x"] }, "action": "redact",
             "redactions": [{ "field": "response.content", "strategy": "replace", "pattern": "x" }] }"#,
        // A mask.
        r#"{ "condition": { "always": true }, "action": "redact",
             "redactions": [{ "field": "response.content", "strategy": "mask" }] }"#,
        r#"{ "condition": { "always": true }, "action": "audit" }"#,
    ] {
        let policy = DslOutputPolicy::from_source("p", source, "p.json").expect("valid");
        assert_eq!(policy.streaming(), None, "{source}");
    }
}
