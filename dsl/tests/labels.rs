//! The `labels` extension: a rule's decision carries its labels when the condition holds,
//! and the checker refuses labels that are not a list of non-empty strings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{InputContext, Message, Metadata, PolicyDecision, ToolCallContext};
use serde_json::Map;

fn input(text: &str) -> InputContext {
    InputContext::new(vec![Message::user(text)], Metadata::new("a", "s"))
}

#[test]
fn a_rule_carries_its_labels_only_when_its_condition_holds() {
    let policy = DslInputPolicy::from_source(
        "mark_untrusted",
        r#"{"condition": {"field": "messages.0.content", "contains": ["<html"]},
            "action": "audit", "reason": "web content", "labels": ["untrusted", "web"]}"#,
        "mark_untrusted.json",
    )
    .expect("loads");
    assert_eq!(
        policy.decide(&input("here is <html> from a page")),
        PolicyDecision::audit("web content").with_labels(["untrusted", "web"])
    );
    assert_eq!(policy.decide(&input("hello")), PolicyDecision::allow());
}

#[test]
fn labels_ride_on_allow_redact_and_transform() {
    for (action, extra) in [
        ("allow", ""),
        (
            "redact",
            r#", "redactions": [{"field": "arguments.q", "strategy": "mask"}]"#,
        ),
        ("transform", r#", "transformation": {"arguments.q": "x"}"#),
    ] {
        let source = format!(
            r#"{{"condition": {{"always": true}}, "action": "{action}", "labels": ["seen"]{extra}}}"#
        );
        let policy = DslToolCallPolicy::from_source("p", &source, "p.json").expect("loads");
        let mut arguments = Map::new();
        arguments.insert("q".into(), "text".into());
        let context = ToolCallContext::new(
            "search",
            arguments,
            Message::assistant("calling"),
            Metadata::new("a", "s"),
        );
        let decision = policy.decide(&context);
        assert_eq!(decision.name(), action);
        assert_eq!(decision.labels(), ["seen"], "{action}");
    }
}

#[test]
fn bad_labels_are_errors_and_labels_on_deny_a_warning() {
    for (labels, expected) in [
        (r#""untrusted""#, "must be a list of strings"),
        ("[3]", "a label is a string"),
        (r#"[""]"#, "a label cannot be empty"),
    ] {
        let source = format!(
            r#"{{"condition": {{"always": true}}, "action": "allow", "labels": {labels}}}"#
        );
        let error = DslInputPolicy::from_source("p", &source, "p.json")
            .expect_err("refused")
            .to_string();
        assert!(error.contains(expected), "{labels}: {error}");
    }
    let policy = DslInputPolicy::from_source(
        "p",
        r#"{"condition": {"always": true}, "action": "deny", "labels": ["x"]}"#,
        "p.json",
    )
    .expect("a warning only");
    assert_eq!(policy.warnings().len(), 1);
    assert!(policy.decide(&input("x")).labels().is_empty());
}
