//! Strategies for contexts of every point, made to make DSL rules both hold and not hold:
//! shared by the facade's `tests/dsl_equivalence.rs` (the repository's rule files) and the
//! differential test of generated rules (`tests/dsl-differential`).

#![allow(dead_code, unreachable_pub)]

use portcullis::{
    InputContext, Message, Metadata, OutputContext, PolicyDecision, Role, ToolCallContext,
    ToolResultContext,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

pub const WORDS: &[&str] = &[
    "hello",
    "API key",
    "api KEY",
    "password",
    "Password: hunter2",
    "secret key",
    "BEGIN PRIVATE KEY",
    "my SSN is 078-05-1120",
    "Social Security",
    "refund",
    "site:",
    "site:docs.example.com",
    "search",
    "ÄÖÜ straße",
    "",
    " ",
    "passwort",
    "{{x}}",
    "support",
    "sk-live-123",
    "card 4111 1111 1111 1111",
    "4111-1111-1111-11112",
];

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(prop::sample::select(WORDS), 0..4).prop_map(|w| w.join(" ")),
        1 => "[a-zA-Z0-9 :.-]{0,24}",
        1 => prop::sample::select(&[7999usize, 8000, 8001][..]).prop_map(|n| "x".repeat(n)),
    ]
}

pub fn role() -> impl Strategy<Value = Role> {
    prop::sample::select(&[Role::System, Role::User, Role::Assistant][..])
}

pub fn message() -> impl Strategy<Value = Message> {
    (role(), text()).prop_map(|(role, content)| Message::new(role, content))
}

pub fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(&[0.0, 1.0, 3.0, 4.0, 99.5, 100.0, 100.5, 101.0, 1e9, -5.0][..])
            .prop_map(|n| json!(n)),
        (-200i64..200).prop_map(|n| json!(n)),
        text().prop_map(Value::String),
        Just(json!(["vip", 1])),
        Just(json!(["vip", 1.0])),
        Just(json!({ "nested": "password" })),
    ]
}

pub fn metadata() -> impl Strategy<Value = Metadata> {
    (
        prop::sample::select(&["support", "sales", "Support", ""][..]),
        prop::sample::select(&["s1", "s2"][..]),
        prop::option::of(json_leaf()),
        prop::option::of(json_leaf()),
        prop::option::of(json_leaf()),
    )
        .prop_map(|(agent, session, priority, flags, ticket)| {
            let mut metadata = Metadata::new(agent, session);
            for (key, value) in [("priority", priority), ("flags", flags), ("ticket", ticket)] {
                if let Some(value) = value {
                    metadata = metadata.with_extra(key, value);
                }
            }
            metadata
        })
}

pub fn input_context() -> impl Strategy<Value = InputContext> {
    let messages = prop_oneof![
        8 => prop::collection::vec(message(), 0..6),
        1 => prop::collection::vec(message(), 48..53),
    ];
    (messages, metadata()).prop_map(|(messages, metadata)| InputContext::new(messages, metadata))
}

pub fn tool_call_context() -> impl Strategy<Value = ToolCallContext> {
    let tool = prop::sample::select(
        &[
            "search",
            "calculator",
            "weather",
            "calendar",
            "shell",
            "refund",
            "Search",
        ][..],
    );
    let arguments = prop::collection::btree_map(
        prop::sample::select(&["query", "amount", "currency", "path"][..]),
        json_leaf(),
        0..4,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect::<Map<String, Value>>()
    });
    (tool, arguments, text(), metadata()).prop_map(|(tool, arguments, calling, metadata)| {
        ToolCallContext::new(tool, arguments, Message::assistant(calling), metadata)
    })
}

pub fn tool_result_context() -> impl Strategy<Value = ToolResultContext> {
    let tool =
        prop::sample::select(&["web_fetch", "read_email", "search", "calendar", "Web_Fetch"][..]);
    let arguments = prop::collection::btree_map(
        prop::sample::select(&["query", "url"][..]),
        json_leaf(),
        0..3,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect::<Map<String, Value>>()
    });
    let structured = prop_oneof![
        2 => Just(None),
        1 => prop::collection::vec(json_leaf(), 0..4)
            .prop_map(|rows| Some(json!({ "rows": rows, "note": "from the tool" }))),
    ];
    (
        tool,
        arguments,
        text(),
        structured,
        any::<bool>(),
        metadata(),
    )
        .prop_map(
            |(tool, arguments, content, structured, is_error, metadata)| {
                let mut context = ToolResultContext::new(tool, arguments, content, metadata);
                context.structured = structured;
                context.is_error = is_error;
                context
            },
        )
}

pub fn output_context() -> impl Strategy<Value = OutputContext> {
    (text(), metadata())
        .prop_map(|(content, metadata)| OutputContext::new(Message::assistant(content), metadata))
}

/// A runtime for the async `evaluate` of the policies compared.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

/// Whether a compiled rule and the same rule loaded at run time decided alike (a DSL rule
/// never fails, so an error on either side is a failure too).
pub fn same(
    file: &str,
    compiled: Result<PolicyDecision, portcullis::BoxError>,
    runtime: Result<PolicyDecision, portcullis::BoxError>,
) -> Result<(), TestCaseError> {
    match (compiled, runtime) {
        (Ok(compiled), Ok(runtime)) => {
            prop_assert_eq!(compiled, runtime, "{}", file);
            Ok(())
        }
        (compiled, runtime) => Err(TestCaseError::fail(format!(
            "{file}: a DSL rule never fails, got {compiled:?} and {runtime:?}"
        ))),
    }
}
