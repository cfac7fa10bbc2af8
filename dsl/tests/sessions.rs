//! Rules over the session's facts: the checker knows `metadata.session.*`, and `contains` on
//! `metadata.session.labels` matches labels exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{InputContext, Message, Metadata, ToolCallContext};
use serde_json::{Map, Value, json};

fn tool_call(tool: &str, session: Value) -> ToolCallContext {
    let mut metadata = Metadata::new("a", "s");
    metadata.extra.insert("session".into(), session);
    ToolCallContext::new(tool, Map::new(), Message::assistant("x"), metadata)
}

fn facts(labels: &[&str], shell: u64) -> Value {
    json!({"labels": labels, "counters": {"input": {"total": 0}, "output": {"total": 0},
           "tool_call": {"total": shell, "by_tool": {"shell": shell}}}})
}

fn rule(source: &str) -> DslToolCallPolicy {
    DslToolCallPolicy::from_source("r", source, "r.json").expect("loads")
}

#[test]
fn labels_match_exactly() {
    let policy = rule(
        r#"{"condition": {"field": "metadata.session.labels", "contains": ["untrusted"]},
            "action": "deny", "reason": "tainted"}"#,
    );
    assert!(policy.warnings().is_empty(), "{:?}", policy.warnings());
    let decide = |labels: &[&str]| policy.decide(&tool_call("send_email", facts(labels, 0)));
    assert!(decide(&["web", "untrusted"]).is_deny());
    for other in [&["UNTRUSTED"][..], &["untrusted-ish"], &["trust"], &[]] {
        assert!(!decide(other).is_deny(), "{other:?}");
    }
    // No facts at all (no store): the path does not resolve, the condition is false.
    let bare = ToolCallContext::new(
        "send_email",
        Map::new(),
        Message::assistant("x"),
        Metadata::new("a", "s"),
    );
    assert!(!policy.decide(&bare).is_deny());
}

#[test]
fn counters_are_numbers() {
    let policy = rule(
        r#"{"condition": {"field": "metadata.session.counters.tool_call.by_tool.shell", "greater_than": 4},
            "action": "deny"}"#,
    );
    assert!(!policy.decide(&tool_call("shell", facts(&[], 4))).is_deny());
    assert!(policy.decide(&tool_call("shell", facts(&[], 5))).is_deny());
    for path in [
        "metadata.session.counters.input.total",
        "metadata.session.counters.output.total",
        "metadata.session.counters.tool_call.total",
        "metadata.session.counters.tool_call.by_tool.*",
        "metadata.session.labels.length",
    ] {
        let source = format!(
            r#"{{"condition": {{"field": "{path}", "greater_than": 1}}, "action": "deny"}}"#
        );
        let policy = DslInputPolicy::from_source_strict("r", &source, "r.json");
        assert!(
            policy.is_ok(),
            "{path}: {:?}",
            policy.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn paths_that_cannot_exist_in_the_session_are_errors() {
    for (path, expected) in [
        (
            "metadata.session.lables",
            "did you mean \"metadata.session.labels\"",
        ),
        ("metadata.session.counters.tool.total", "tool_call"),
        ("metadata.session.counters.input.count", "\"total\""),
        (
            "metadata.session.counters.tool_call.by_tool.shell.x",
            "is a number",
        ),
        ("metadata.session.labels.first", "list of labels"),
    ] {
        let source =
            format!(r#"{{"condition": {{"field": "{path}", "equals": 1}}, "action": "deny"}}"#);
        let error = DslInputPolicy::from_source("r", &source, "r.json")
            .expect_err(path)
            .to_string();
        assert!(error.contains(expected), "{path}: {error}");
    }
    // Other extra metadata keys stay open.
    let open = InputContext::new(vec![Message::user("x")], Metadata::new("a", "s"));
    let policy = DslInputPolicy::from_source(
        "r",
        r#"{"condition": {"field": "metadata.tenant.plan", "equals": "free"}, "action": "deny"}"#,
        "r.json",
    )
    .expect("open metadata");
    assert!(!policy.decide(&open).is_deny());
}

#[test]
fn the_example_session_rules_load_without_warnings() {
    for stem in ["no_email_after_untrusted", "shell_rate_limit"] {
        DslToolCallPolicy::new_strict(stem, "../examples/rules/sessions").expect(stem);
    }
    DslInputPolicy::new_strict("mark_untrusted", "../examples/rules/sessions").expect("input rule");
}
