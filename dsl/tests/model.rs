//! The typed model: rule files deserialize into it, serialize back to the same JSON, and a
//! rule built in Rust goes through the same checker. Random JSON never panics the checker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use portcullis_dsl::{Action, Condition, Rule, RuleMode, check_rule, check_value};
use portcullis_engine::InterceptionPoint;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::rule_files;

#[test]
fn rule_files_round_trip_through_the_model() {
    for dir in [
        "tests/rules/input",
        "tests/rules/tool_call",
        "tests/rules/output",
        "../examples/rules",
    ] {
        for (_, path) in rule_files(Path::new(dir)) {
            let text = std::fs::read_to_string(&path).expect("read");
            let value: Value = serde_json::from_str(&text).expect("json");
            let rule: Rule = serde_json::from_value(value.clone())
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            assert_eq!(
                serde_json::to_value(&rule).expect("serialize"),
                value,
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn serde_rejects_unknown_operators_too() {
    let error = serde_json::from_value::<Rule>(json!({
        "condition": { "field": "tool_name", "contians": ["x"] },
        "action": "deny"
    }));
    assert!(error.is_err());
}

#[test]
fn rules_built_in_rust_are_checked() {
    let rule = Rule {
        condition: Condition::All {
            all: vec![
                Condition::Equals {
                    field: "tool_name".into(),
                    equals: json!("shell"),
                },
                Condition::Not {
                    not: Box::new(Condition::GreaterThan {
                        field: "arguments.timeout".into(),
                        greater_than: 30.into(),
                    }),
                },
            ],
        },
        action: Action::Audit,
        reason: Some("shell call".into()),
        redactions: None,
        transformation: None,
        mode: Some(RuleMode::Monitor),
        labels: vec!["seen".into()],
    };
    let checked = check_rule(&rule, "built.json", InterceptionPoint::ToolCall).expect("valid");
    assert_eq!(checked.rule(), &rule);
    assert_eq!(checked.mode(), portcullis_engine::PolicyMode::Monitor);
    let problems = check_rule(&rule, "built.json", InterceptionPoint::Input)
        .expect_err("no tool_name in input");
    let paths: Vec<_> = problems
        .iter()
        .filter_map(|problem| problem.json_path())
        .collect();
    assert_eq!(
        paths,
        ["condition.all[0].field", "condition.all[1].not.field"]
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        prop::sample::select(vec![
            "condition",
            "action",
            "field",
            "contains",
            "equals",
            "not_in",
            "greater_than",
            "always",
            "all",
            "any",
            "not",
            "deny",
            "redact",
            "transform",
            "messages.*.content",
            "messages.-1.content",
            "tool_name",
            "response.content",
            "metadata.x",
            "arguments.q",
            "{{tool_name}}",
            "{{",
            "(",
            "mask",
            "replace",
            "remove",
            "messages.length",
            "",
        ])
        .prop_map(|text| Value::String(text.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "condition",
                    "action",
                    "reason",
                    "redactions",
                    "transformation",
                    "mode",
                    "field",
                    "contains",
                    "equals",
                    "not_in",
                    "greater_than",
                    "always",
                    "all",
                    "any",
                    "not",
                    "strategy",
                    "pattern",
                    "replacement",
                    "messages.0.content",
                ])
                .prop_map(str::to_owned),
                inner,
                0..4,
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn the_checker_never_panics(value in json_value()) {
        for point in [InterceptionPoint::Input, InterceptionPoint::ToolCall, InterceptionPoint::Output] {
            if let Err(problems) = check_value(&value, "random.json", point) {
                prop_assert!(!problems.is_empty());
                for problem in &problems {
                    prop_assert!(problem.to_string().starts_with("random.json"));
                }
            }
        }
    }
}
