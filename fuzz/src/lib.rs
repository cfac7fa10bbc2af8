//! The checks behind the fuzz targets, shared with the workspace's regression test
//! (`tests/fuzz_inputs.rs`, which includes this file and runs every input of `corpus/` and
//! `regressions/` through it on stable Rust).
//!
//! Each check takes arbitrary bytes and panics only when an invariant breaks: a public function
//! panicking, or a result that contradicts another. Errors are fine; they are what hostile input
//! should get.

#![allow(missing_docs, unreachable_pub, dead_code)]

use portcullis::apply::apply_decision;
use portcullis::dsl::{DslInputPolicy, DslOutputPolicy, DslToolCallPolicy, check_source};
use portcullis::path::FieldPath;
use portcullis::{
    InputContext, InterceptionPoint, Message, Metadata, OutputContext, PolicyContext,
    PolicyDecision, Role, ToolCallContext,
};
use serde_json::{Value, json};

fn input_context() -> InputContext {
    InputContext::new(
        vec![
            Message::new(Role::System, "be brief"),
            Message::new(Role::User, "my ssn is 123-45-6789, mail a@example.com"),
            Message::new(Role::Assistant, "ok"),
        ],
        Metadata::new("agent", "session").with_extra("tenant", "acme"),
    )
}

fn tool_call_context() -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("path".into(), json!("/etc/passwd"));
    arguments.insert(
        "options".into(),
        json!({"depth": [1, 2, {"x": "y"}], "force": true}),
    );
    ToolCallContext::new(
        "read_file",
        arguments,
        Message::new(Role::Assistant, "reading"),
        Metadata::new("agent", "session"),
    )
}

fn output_context() -> OutputContext {
    OutputContext::new(
        Message::new(
            Role::Assistant,
            "see https://malicious.example/x and 123-45-6789",
        ),
        Metadata::new("agent", "session"),
    )
}

/// Applying `decision` to `context` gives a context that passes its own checks, or an error.
fn apply_checked<C: PolicyContext>(context: &C, decision: &PolicyDecision) {
    if let Ok(Some(changed)) = apply_decision(context, decision) {
        assert!(
            changed.check().is_ok(),
            "a changed context fails its checks"
        );
    }
}

/// DSL rule text: checked for each point; a rule that checks compiles into a policy whose
/// decision on a sample context applies cleanly or is refused with an error.
pub fn dsl_rule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for point in [
        InterceptionPoint::Input,
        InterceptionPoint::ToolCall,
        InterceptionPoint::Output,
    ] {
        let Ok(rule) = check_source(text, "fuzz.json", point) else {
            continue;
        };
        match point {
            InterceptionPoint::Input => {
                let policy = DslInputPolicy::from_checked("fuzz", rule).expect("checked for input");
                let context = input_context();
                apply_checked(&context, &policy.decide(&context));
            }
            InterceptionPoint::ToolCall => {
                let policy =
                    DslToolCallPolicy::from_checked("fuzz", rule).expect("checked for tool calls");
                let context = tool_call_context();
                apply_checked(&context, &policy.decide(&context));
            }
            _ => {
                let policy =
                    DslOutputPolicy::from_checked("fuzz", rule).expect("checked for output");
                let context = output_context();
                apply_checked(&context, &policy.decide(&context));
            }
        }
    }
}

/// A field path: parses to itself, and selecting it on a sample document agrees with `first`.
pub fn field_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(path) = FieldPath::parse(text) else {
        return;
    };
    assert_eq!(path.as_str(), text);
    let document: Value = json!({
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
        "arguments": {"a": {"b": [1, 2, {"c": null}]}, "": 0, "*": 1, "-1": 2},
        "metadata": {"agent_id": "x", "extra": {}}
    });
    let mut count = 0;
    path.select(&document, &mut |_| count += 1);
    assert_eq!(count == 0, path.first(&document).is_none());
}

/// A decision as JSON: whatever parses serializes back to the same decision, and applies to
/// each kind of context or is refused with an error.
pub fn decision(data: &[u8]) {
    let Ok(decision) = serde_json::from_slice::<PolicyDecision>(data) else {
        return;
    };
    let again = serde_json::to_vec(&decision).expect("a decision serializes");
    let back: PolicyDecision = serde_json::from_slice(&again).expect("and parses back");
    assert_eq!(back, decision);
    apply_checked(&input_context(), &decision);
    apply_checked(&tool_call_context(), &decision);
    apply_checked(&output_context(), &decision);
}

/// Bundle bytes (with the `rego` feature): the first byte chooses how the rest is used, as the file itself or as the
/// contents of a gzip stream (so that the tar reader is reached without guessing a CRC). A
/// bundle that opens has an object as its data document.
#[cfg(feature = "rego")]
pub fn bundle(data: &[u8]) {
    use std::io::Write;

    use portcullis::rego::RegoBundle;

    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(rest).expect("gzip in memory");
        encoder.finish().expect("gzip in memory")
    };
    match RegoBundle::from_bytes(&bytes) {
        Ok(bundle) => assert!(bundle.data().is_object()),
        Err(error) => assert!(!error.to_string().is_empty()),
    }
}
