//! Generates the rules of the differential test: for each interception point, rules drawn by
//! proptest strategies from a seed (`PORTCULLIS_DSL_DIFFERENTIAL_SEED`, a number; a fixed one
//! otherwise), kept when the checker loads them (warnings included), written as rule files
//! under `OUT_DIR/rules/<point>/`, and `OUT_DIR/pairs.rs`, which compiles each of them with
//! `dsl_policy!` next to the same file loaded at run time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;

use portcullis_dsl::{
    Action, Condition, Rule, RuleMode, RuleRedaction, RuleStrategy, check_source,
};
use portcullis_engine::InterceptionPoint;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Number, Value, json};

/// Rules kept per point.
const RULES_PER_POINT: usize = 48;

/// Paths a condition or a template reads, per point: text, roles, lengths, numbers below open
/// maps, and whole lists and objects (which make `contains` and `greater_than` warnings).
fn read_paths(point: InterceptionPoint) -> &'static [&'static str] {
    match point {
        InterceptionPoint::Input => &[
            "messages.0.content",
            "messages.-1.content",
            "messages.*.content",
            "messages.1.content",
            "messages.0.role",
            "messages.*.role",
            "messages.length",
            "messages.-1.content.length",
            "metadata.agent_id",
            "metadata.priority",
            "metadata.flags",
            "messages",
            "metadata",
        ],
        InterceptionPoint::ToolCall => &[
            "tool_name",
            "tool_name.length",
            "arguments.query",
            "arguments.amount",
            "arguments.*",
            "arguments",
            "calling_message.content",
            "calling_message.role",
            "metadata.agent_id",
            "metadata.priority",
        ],
        InterceptionPoint::ToolResult => &[
            "tool_name",
            "content",
            "content.length",
            "arguments.query",
            "structured.rows",
            "structured.*",
            "is_error",
            "metadata.agent_id",
        ],
        InterceptionPoint::Output => &[
            "response.content",
            "response.content.length",
            "response.role",
            "metadata.agent_id",
            "metadata.priority",
            "metadata.ticket",
            "response",
        ],
    }
}

/// Paths a redaction or a transformation writes, per point (some of them required parts of
/// the context, or not text: warnings).
fn write_paths(point: InterceptionPoint) -> &'static [&'static str] {
    match point {
        InterceptionPoint::Input => &[
            "messages.0.content",
            "messages.-1.content",
            "messages.*.content",
            "messages.0",
            "messages.0.role",
            "metadata.agent_id",
            "metadata.ticket",
            "metadata.tier",
        ],
        InterceptionPoint::ToolCall => &[
            "arguments.query",
            "arguments.*",
            "tool_name",
            "calling_message.content",
            "calling_message",
            "metadata.session_id",
            "metadata.note",
        ],
        InterceptionPoint::ToolResult => &[
            "content",
            "structured.rows",
            "structured.*",
            "arguments.query",
            "tool_name",
            "metadata.note",
        ],
        InterceptionPoint::Output => &[
            "response.content",
            "response.role",
            "metadata.agent_id",
            "metadata.note",
            "metadata.ticket",
        ],
    }
}

const WORDS: &[&str] = &[
    "password",
    "API key",
    "hello",
    "search",
    "refund",
    "USER",
    "user",
    "assistant",
    "system",
    "Search",
    "sk-live",
    "support",
    "ÄÖÜ",
    "",
    " ",
    "1",
    "vip",
];

const PATTERNS: &[&str] = &[
    r"\d{3}-\d{2}-\d{4}",
    r"(?i)pass\w*",
    r"[^\s\S]",
    r"key",
    r"\s+",
];

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(WORDS).prop_map(str::to_owned)
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => word().prop_map(Value::String),
        1 => prop::sample::select(&[0.0, 1.0, 3.0, 100.0, 100.5, -5.0][..]).prop_map(|n| json!(n)),
        1 => (-5i64..120).prop_map(|n| json!(n)),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
        1 => Just(json!(["vip", 1])),
    ]
}

fn leaf(point: InterceptionPoint) -> impl Strategy<Value = Condition> {
    let field = prop::sample::select(read_paths(point)).prop_map(str::to_owned);
    prop_oneof![
        3 => (field.clone(), prop::collection::vec(word(), 1..4))
            .prop_map(|(field, contains)| Condition::Contains { field, contains }),
        3 => (field.clone(), value()).prop_map(|(field, equals)| Condition::Equals { field, equals }),
        2 => (field.clone(), prop::collection::vec(value(), 0..4))
            .prop_map(|(field, not_in)| Condition::NotIn { field, not_in }),
        2 => (field, prop::sample::select(&[0.0, 1.0, 2.0, 3.5, 10.0, 100.0, 8000.0][..]))
            .prop_map(|(field, threshold)| Condition::GreaterThan {
                field,
                greater_than: Number::from_f64(threshold).unwrap_or_else(|| Number::from(0)),
            }),
        1 => Just(Condition::Always { always: true }),
    ]
}

fn condition(point: InterceptionPoint) -> impl Strategy<Value = Condition> {
    leaf(point).prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(|all| Condition::All { all }),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|any| Condition::Any { any }),
            inner.prop_map(|not| Condition::Not { not: Box::new(not) }),
        ]
    })
}

fn redaction(point: InterceptionPoint) -> impl Strategy<Value = RuleRedaction> {
    (
        prop::sample::select(write_paths(point)),
        prop::sample::select(
            &[
                RuleStrategy::Mask,
                RuleStrategy::Remove,
                RuleStrategy::Replace,
            ][..],
        ),
        prop::option::of(prop::sample::select(&["***", "[hidden]"][..])),
        prop::option::weighted(0.8, prop::sample::select(PATTERNS)),
    )
        .prop_map(|(field, strategy, replacement, pattern)| RuleRedaction {
            field: field.to_owned(),
            strategy,
            replacement: replacement.map(str::to_owned),
            // Patterns mostly with `replace`, sometimes where they are ignored (a warning).
            pattern: match strategy {
                RuleStrategy::Replace => pattern.map(str::to_owned),
                _ => pattern.filter(|p| p.starts_with('k')).map(str::to_owned),
            },
        })
}

fn template(point: InterceptionPoint) -> impl Strategy<Value = String> {
    let placeholder = prop::sample::select(read_paths(point))
        .prop_filter("one value", |path| !path.contains('*'))
        .prop_map(|path| format!("{{{{{path}}}}}"));
    prop::collection::vec(
        prop_oneof![
            3 => word(),
            3 => placeholder,
            1 => Just("{{ }}".to_owned()),
            1 => Just("{{unclosed".to_owned()),
        ],
        0..4,
    )
    .prop_map(|parts| parts.join(" "))
}

/// Several keys, in the order drawn (not sorted), each once.
fn transformation(point: InterceptionPoint) -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(
        (prop::sample::select(write_paths(point)), template(point)),
        0..5,
    )
    .prop_map(|entries| {
        let mut unique: Vec<(String, String)> = Vec::new();
        for (field, template) in entries {
            if !unique.iter().any(|(known, _)| known == field) {
                unique.push((field.to_owned(), template));
            }
        }
        unique
    })
}

fn rule(point: InterceptionPoint) -> impl Strategy<Value = Rule> {
    (
        condition(point),
        // The reference implementation knows the schema's five actions (not the `escalate`
        // extension).
        prop::sample::select(
            Action::ALL
                .into_iter()
                .filter(|action| *action != Action::Escalate)
                .collect::<Vec<_>>(),
        ),
        prop::option::of(word()),
        prop::option::weighted(0.5, prop::collection::vec(redaction(point), 0..3)),
        prop::option::weighted(0.5, transformation(point)),
        prop::option::weighted(
            0.2,
            prop::sample::select(&[RuleMode::Monitor, RuleMode::Enforce][..]),
        ),
    )
        .prop_map(
            |(condition, action, reason, redactions, transformation, mode)| Rule {
                condition,
                action,
                reason,
                // Empty lists are refused by the schema: drop them instead.
                redactions: redactions.filter(|list| !list.is_empty()),
                transformation,
                mode,
                // An extension the reference implementation does not know.
                labels: Vec::new(),
            },
        )
}

fn seed() -> [u8; 32] {
    let number: u64 = std::env::var("PORTCULLIS_DSL_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0x5eed_2026);
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&number.to_le_bytes());
    seed
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PORTCULLIS_DSL_DIFFERENTIAL_SEED");
    let out = std::env::var("OUT_DIR").expect("set by Cargo");
    let out = Path::new(&out);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed()),
    );
    let mut pairs = String::new();
    for (point, policy, runtime) in [
        (InterceptionPoint::Input, "InputPolicy", "DslInputPolicy"),
        (
            InterceptionPoint::ToolCall,
            "ToolCallPolicy",
            "DslToolCallPolicy",
        ),
        (InterceptionPoint::Output, "OutputPolicy", "DslOutputPolicy"),
        (
            InterceptionPoint::ToolResult,
            "ToolResultPolicy",
            "DslToolResultPolicy",
        ),
    ] {
        let dir = out.join("rules").join(point.as_str());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("a clean rule directory");
        }
        std::fs::create_dir_all(&dir).expect("a rule directory");
        let name = point.as_str();
        let _ = writeln!(
            pairs,
            "pub(crate) fn {name}_pairs() -> Vec<Pair<dyn ::portcullis::{policy}>> {{\n    vec!["
        );
        let strategy = rule(point);
        let mut kept = 0;
        let mut drawn = 0;
        while kept < RULES_PER_POINT {
            drawn += 1;
            assert!(
                drawn < 100 * RULES_PER_POINT,
                "the strategies give too few valid rules"
            );
            let Ok(tree) = strategy.new_tree(&mut runner) else {
                continue;
            };
            let rule = tree.current();
            let text = serde_json::to_string_pretty(&rule).expect("a rule serializes");
            if check_source(&text, "generated.json", point).is_err() {
                continue;
            }
            let file = dir.join(format!("rule_{kept:03}.json"));
            std::fs::write(&file, &text).expect("a rule file");
            let file = file.to_str().expect("a UTF-8 path");
            let _ = writeln!(
                pairs,
                "        Pair {{ file: {file:?}, source: {text:?}, compiled: Box::new(::portcullis::dsl_policy!({name}, {file:?})), \
                 runtime: Box::new(::portcullis::dsl::{runtime}::new(\"rule_{kept:03}\", {dir:?}).expect({file:?})) }},",
                dir = dir.to_str().expect("a UTF-8 path"),
            );
            kept += 1;
        }
        let _ = writeln!(pairs, "    ]\n}}");
    }
    std::fs::write(out.join("pairs.rs"), pairs).expect("pairs.rs");
}
