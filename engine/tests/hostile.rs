//! Hostile input: arbitrary paths, patterns, decisions and contexts never panic, and every
//! change either yields a valid context or an evaluation error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use portcullis_engine::apply::{apply_decision, apply_operations, apply_redactions};
use portcullis_engine::path::FieldPath;
use portcullis_engine::{
    InputContext, Message, Metadata, PolicyContext, PolicyDecision, Redaction, RedactionStrategy,
    Role, ToolCallContext, TransformOp, TransformOperation,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn cases() -> u32 {
    // `PORTCULLIS_HEAVY_PROPTEST=1` runs a much longer search.
    if std::env::var_os("PORTCULLIS_HEAVY_PROPTEST").is_some() {
        20_000
    } else {
        256
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("allow"),
            Just("deny"),
            Just("redact"),
            Just("transform"),
            Just("audit"),
            Just("user"),
            Just("assistant"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("decision".to_owned()),
                    Just("reason".to_owned()),
                    Just("redactions".to_owned()),
                    Just("field".to_owned()),
                    Just("strategy".to_owned()),
                    Just("operations".to_owned()),
                    Just("transformation".to_owned()),
                    Just("op".to_owned()),
                    Just("value".to_owned()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..5,
            )
            .prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("messages".to_owned()),
        Just("content".to_owned()),
        Just("role".to_owned()),
        Just("metadata".to_owned()),
        Just("arguments".to_owned()),
        Just("agent_id".to_owned()),
        Just("*".to_owned()),
        Just("".to_owned()),
        "-?[0-9]{1,3}",
        "[a-z.]{1,6}",
    ];
    proptest::collection::vec(segment, 0..6).prop_map(|segments| segments.join("."))
}

fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r"\d+".to_owned()),
        Just("(a|b)*c".to_owned()),
        Just("(".to_owned()),
        Just(r"(?i)secret".to_owned()),
        Just(r"((a+)+)+$".to_owned()),
        Just(r"\p{Greek}".to_owned()),
        Just("a{100000}".to_owned()),
        ".{0,10}",
    ]
}

fn redaction() -> impl Strategy<Value = Redaction> {
    (
        path(),
        prop_oneof![
            Just(RedactionStrategy::Mask),
            Just(RedactionStrategy::Remove),
            Just(RedactionStrategy::Replace)
        ],
        proptest::option::of(".{0,6}"),
        proptest::option::of(pattern()),
    )
        .prop_map(|(field, strategy, replacement, pattern)| Redaction {
            field,
            strategy,
            replacement,
            pattern,
        })
}

fn operation() -> impl Strategy<Value = TransformOperation> {
    (
        path(),
        prop_oneof![
            Just(TransformOp::Set),
            Just(TransformOp::Prepend),
            Just(TransformOp::Append)
        ],
        json_value(),
    )
        .prop_map(|(field, op, value)| TransformOperation { op, field, value })
}

fn input_context() -> impl Strategy<Value = InputContext> {
    (
        proptest::collection::vec(
            (
                prop_oneof![Just(Role::System), Just(Role::User), Just(Role::Assistant)],
                ".{0,30}",
            ),
            0..4,
        ),
        proptest::collection::btree_map("[a-z]{1,5}", json_value(), 0..3),
    )
        .prop_map(|(messages, extra)| {
            let mut metadata = Metadata::new("agent", "session");
            metadata.extra = extra
                .into_iter()
                .filter(|(key, _)| !["agent_id", "session_id", "timestamp"].contains(&key.as_str()))
                .collect();
            InputContext::new(
                messages
                    .into_iter()
                    .map(|(role, text)| Message::new(role, text))
                    .collect(),
                metadata,
            )
        })
}

fn tool_call_context() -> impl Strategy<Value = ToolCallContext> {
    (
        "[a-z_]{1,10}",
        proptest::collection::btree_map("[a-z]{1,5}", json_value(), 0..4),
    )
        .prop_map(|(tool, arguments)| {
            ToolCallContext::new(
                tool,
                arguments.into_iter().collect(),
                Message::assistant("calling"),
                Metadata::new("agent", "session"),
            )
        })
}

/// A changed context must still be a context: serialize, parse back, same value, checks pass.
fn assert_valid<C: PolicyContext + PartialEq>(context: &C) {
    let value = serde_json::to_value(context).expect("serializable");
    let back: C = serde_json::from_value(value).expect("a changed context parses back");
    assert_eq!(&back, context);
    context
        .check()
        .expect("a changed context passes its checks");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn decision_parsing_never_panics(value in json_value()) {
        if let Ok(decision) = serde_json::from_value::<PolicyDecision>(value) {
            // Whatever parses serializes back to something that parses to the same decision.
            let again = serde_json::to_value(&decision).unwrap();
            prop_assert_eq!(serde_json::from_value::<PolicyDecision>(again).unwrap(), decision);
        }
    }

    #[test]
    fn path_parsing_and_selection_never_panic(text in path(), root in json_value()) {
        if let Ok(path) = FieldPath::parse(&text) {
            prop_assert_eq!(path.as_str(), text.as_str());
            let mut count = 0;
            path.select(&root, &mut |_| count += 1);
            prop_assert!(count > 0 || path.first(&root).is_none());
        }
    }

    #[test]
    fn redactions_give_a_valid_context_or_an_error(
        context in input_context(),
        redactions in proptest::collection::vec(redaction(), 1..4),
    ) {
        if let Ok(changed) = apply_redactions(&context, &redactions) {
            assert_valid(&changed);
        }
    }

    #[test]
    fn transforms_give_a_valid_context_or_an_error(
        context in input_context(),
        operations in proptest::collection::vec(operation(), 1..4),
    ) {
        if let Ok(changed) = apply_operations(&context, &operations) {
            assert_valid(&changed);
        }
    }

    #[test]
    fn tool_call_changes_give_a_valid_context_or_an_error(
        context in tool_call_context(),
        redactions in proptest::collection::vec(redaction(), 1..3),
        operations in proptest::collection::vec(operation(), 1..3),
    ) {
        for decision in [PolicyDecision::redact(redactions), PolicyDecision::transform(operations)] {
            match apply_decision(&context, &decision) {
                Ok(Some(changed)) => assert_valid(&changed),
                Ok(None) => prop_assert!(false, "a change decision changed nothing"),
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
        }
    }
}

#[test]
fn deeply_nested_arguments_are_a_clear_error() {
    let depth = 10_000;
    let text = format!(
        r#"{{"tool_name":"t","arguments":{{"a":{}1{}}},"calling_message":{{"role":"assistant","content":""}},"metadata":{{"agent_id":"a","session_id":"s","timestamp":"2026-01-01T00:00:00Z"}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let error = serde_json::from_str::<ToolCallContext>(&text).unwrap_err();
    assert!(error.to_string().contains("recursion limit"), "{error}");
}

#[tokio::test]
async fn arguments_built_too_deep_are_rejected_before_any_policy_runs() {
    let mut value = json!(1);
    for _ in 0..1_000 {
        value = json!([value]);
    }
    let context = support::tool_call("deep", json!({ "nested": value }));
    let policy = support::Scripted::returning("p", PolicyDecision::allow());
    let calls = policy.calls();
    let engine = portcullis_engine::PolicyEngine::builder()
        .policy_set(
            portcullis_engine::PolicySet::builder()
                .tool_call(policy)
                .build(),
        )
        .build();
    let error = engine.evaluate_tool_call(&context).await.unwrap_err();
    let text = portcullis_engine::error::error_chain(&error);
    assert!(text.contains("nested deeper than"), "{text}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Dropping a deep value recurses too: unwind it iteratively here.
    let mut arguments = context.arguments;
    let mut next = arguments.remove("nested");
    while let Some(Value::Array(mut items)) = next {
        next = items.pop();
    }
}
