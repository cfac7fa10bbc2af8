//! The bindings' shared fixture table (`bindings/fixtures/table.json`) through the Rust engine:
//! every case's policy, built from the same files, decides as the table says. The Node
//! binding's `test/fixtures.test.mjs` runs the same table through the packages.

use std::path::{Path, PathBuf};

use portcullis_dsl::{DslInputPolicy, DslOutputPolicy, DslToolCallPolicy};
use portcullis_engine::{
    EngineError, InputContext, OutputContext, PolicyContext, PolicyEngine, PolicySet,
    PolicySetBuilder, ToolCallContext,
};
use portcullis_rego::{RegoInputPolicy, RegoOutputPolicy, RegoToolCallPolicy};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The OPA fixtures: `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures` beside the repository.
fn opa_fixtures() -> PathBuf {
    std::env::var_os("PORTCULLIS_OPA_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
        PathBuf::from,
    )
}

/// The set of one case: its one policy at its point.
fn policy_set(case: &Value) -> PolicySet {
    let policy = &case["policy"];
    let id = policy["id"].as_str().expect("a policy id");
    let point = case["point"].as_str().expect("a point");
    let builder = PolicySet::builder();
    let builder: PolicySetBuilder = if let Some(dir) = policy["dsl"].as_str() {
        let dir = fixtures().join(dir);
        match point {
            "input" => builder.input(DslInputPolicy::new(id, &dir).expect("the rule loads")),
            "tool_call" => {
                builder.tool_call(DslToolCallPolicy::new(id, &dir).expect("the rule loads"))
            }
            "output" => builder.output(DslOutputPolicy::new(id, &dir).expect("the rule loads")),
            other => panic!("unknown point {other}"),
        }
    } else {
        let bundle = opa_fixtures().join(policy["rego"].as_str().expect("a dsl or rego policy"));
        match point {
            "input" => builder.input(RegoInputPolicy::new(id, &bundle).expect("the bundle opens")),
            "tool_call" => {
                builder.tool_call(RegoToolCallPolicy::new(id, &bundle).expect("the bundle opens"))
            }
            "output" => {
                builder.output(RegoOutputPolicy::new(id, &bundle).expect("the bundle opens"))
            }
            other => panic!("unknown point {other}"),
        }
    };
    builder.build()
}

/// What the engine did with the case's context, in the table's terms.
async fn outcome<C: PolicyContext>(engine: &PolicyEngine, context: &Value) -> Value {
    let context: C = serde_json::from_value(context.clone()).expect("a valid context");
    match engine.evaluate(&context).await {
        Ok(evaluation) if evaluation.is_modified() => {
            json!({ "forwarded": serde_json::to_value(evaluation.context()).unwrap() })
        }
        Ok(_) => json!({ "forwarded": null }),
        Err(EngineError::Denied(denial)) => json!({
            "denied": { "policy_id": denial.policy_id(), "reason": denial.reason() }
        }),
        Err(other) => json!({ "error": other.to_string() }),
    }
}

#[tokio::test]
async fn the_rust_engine_gives_the_tables_answers() {
    let table: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("table.json")).expect("the table"),
    )
    .expect("the table is JSON");
    let cases = table["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let engine = PolicyEngine::builder().policy_set(policy_set(case)).build();
        let context = &case["context"];
        let got = match case["point"].as_str().unwrap() {
            "input" => outcome::<InputContext>(&engine, context).await,
            "tool_call" => outcome::<ToolCallContext>(&engine, context).await,
            _ => outcome::<OutputContext>(&engine, context).await,
        };
        assert_eq!(got, case["expect"], "case {}", case["name"]);
    }
}
