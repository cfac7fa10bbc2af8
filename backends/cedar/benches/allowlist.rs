//! `allowlist`: the tool allowlist (web_search, read_file, summarize) decided four ways, for an
//! allowed call and a denied one:
//!
//! - `cedar_is_authorized`: `cedar-policy`'s `Authorizer::is_authorized` on a request prepared
//!   once, the floor;
//! - `cedar_engine`: the same policy as a `CedarToolCallPolicy` through `evaluate_tool_call`
//!   (building the request from the context, reading the decision, the engine's audit and
//!   bookkeeping; goal: at most 1.3 times the floor);
//! - `dsl_engine`: the allowlist as a DSL rule (`tool_name` `not_in` the list: deny), through
//!   the engine;
//! - `rego_engine`: the approved-tools bundle built by OPA (`rego-wasm/approved-tools.tar.gz`
//!   of the shared fixtures, read from `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures`
//!   beside the workspace), through the engine.
//!
//! Run with `cargo bench -p portcullis-cedar --bench allowlist`; the ratios to the floor are
//! printed at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_cedar::CedarToolCallPolicy;
use portcullis_cedar::cedar_policy::{Authorizer, Decision};
use portcullis_dsl::DslPolicy;
use portcullis_engine::{Message, Metadata, PolicyEngine, PolicySet, Role, ToolCallContext};
use portcullis_rego::RegoToolCallPolicy;

const CEDAR: &str = r#"
permit(principal, action == Action::"tool_call", resource)
when { [Tool::"web_search", Tool::"read_file", Tool::"summarize"].contains(resource) };
"#;

const DSL: &str = r#"{
  "condition": { "field": "tool_name", "not_in": ["web_search", "read_file", "summarize"] },
  "action": "deny",
  "reason": "Tool is not in the approved list."
}"#;

fn call(tool: &str) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("query".to_owned(), serde_json::json!("capital of France"));
    ToolCallContext::new(
        tool,
        arguments,
        Message::new(Role::Assistant, "Let me look that up."),
        Metadata::new("agent-1", "session-1").with_timestamp("2026-01-01T00:00:00.000Z"),
    )
}

fn bundle() -> PathBuf {
    let dir = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let path = dir.join("rego-wasm/approved-tools.tar.gz");
    assert!(
        path.is_file(),
        "fixture {} is missing: set PORTCULLIS_OPA_FIXTURES to the folder holding rego-wasm/",
        path.display()
    );
    path
}

/// Runs per round of the medians printed at the end.
const BATCH: u32 = 1000;

/// Rounds of the medians printed at the end.
const ROUNDS: usize = 41;

fn engine_with(set: PolicySet) -> PolicyEngine {
    PolicyEngine::builder().policy_set(set).build()
}

/// The median time of one run of `f`, over `rounds` rounds of `batch` runs, for the ratios
/// printed at the end (criterion's own figures are the reference).
fn median(rounds: usize, batch: u32, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed() / batch
        })
        .collect();
    times.sort();
    times[rounds / 2]
}

fn allowlist(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let cedar = CedarToolCallPolicy::new("approved-tools", CEDAR).unwrap();
    let authorizer = Authorizer::new();
    let cedar_engine = engine_with(PolicySet::builder().tool_call(cedar.clone()).build());
    let dsl = DslPolicy::<ToolCallContext>::from_source("approved-tools", DSL, "bench").unwrap();
    let dsl_engine = engine_with(PolicySet::builder().tool_call(dsl).build());
    let rego = RegoToolCallPolicy::new("approved-tools", bundle()).unwrap();
    let rego_engine = engine_with(PolicySet::builder().tool_call(rego).build());

    let mut ratios = Vec::new();
    for (case, tool, allowed) in [
        ("allowed", "web_search", true),
        ("denied", "delete_database", false),
    ] {
        let context = call(tool);
        let request = cedar.request_for(&context).unwrap();
        let expected = if allowed {
            Decision::Allow
        } else {
            Decision::Deny
        };
        for engine in [&cedar_engine, &dsl_engine, &rego_engine] {
            assert_eq!(
                runtime
                    .block_on(engine.evaluate_tool_call(&context))
                    .is_ok(),
                allowed
            );
        }

        let mut group = c.benchmark_group(format!("allowlist/{case}"));
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));
        group.bench_function("cedar_is_authorized", |b| {
            b.iter(|| {
                let response =
                    authorizer.is_authorized(&request, cedar.policy_set(), cedar.entities());
                assert_eq!(response.decision(), expected);
            })
        });
        for (name, engine) in [
            ("cedar_engine", &cedar_engine),
            ("dsl_engine", &dsl_engine),
            ("rego_engine", &rego_engine),
        ] {
            group.bench_function(name, |b| {
                b.to_async(&runtime).iter(|| async {
                    let outcome = engine.evaluate_tool_call(&context).await;
                    assert_eq!(outcome.is_ok(), allowed);
                })
            });
        }
        group.finish();

        // Rounds alternate between the floor and each engine, and the ratio is the median
        // of the rounds' ratios: a machine whose load changes during the run moves both.
        let floor_round = || {
            let start = Instant::now();
            for _ in 0..BATCH {
                let response =
                    authorizer.is_authorized(&request, cedar.policy_set(), cedar.entities());
                assert_eq!(response.decision(), expected);
            }
            start.elapsed() / BATCH
        };
        let engine_round = |engine: &PolicyEngine| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..BATCH {
                    let outcome = engine.evaluate_tool_call(&context).await;
                    assert_eq!(outcome.is_ok(), allowed);
                }
                start.elapsed() / BATCH
            })
        };
        let mut line = format!("{case}:");
        for (name, engine) in [
            ("cedar_engine", &cedar_engine),
            ("dsl_engine", &dsl_engine),
            ("rego_engine", &rego_engine),
        ] {
            let mut rounds: Vec<(f64, Duration, Duration)> = (0..ROUNDS)
                .map(|_| {
                    let floor = floor_round();
                    let time = engine_round(engine);
                    (time.as_secs_f64() / floor.as_secs_f64(), floor, time)
                })
                .collect();
            rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (ratio, floor, time) = rounds[ROUNDS / 2];
            line.push_str(&format!(
                " {name} {time:?} against cedar_is_authorized {floor:?} ({ratio:.2}x);"
            ));
        }
        // The backend's own parts, for the record: building the request, and deciding.
        let request_time = median(ROUNDS, BATCH, || {
            std::hint::black_box(cedar.request_for(&context).unwrap());
        });
        let decide_time = median(ROUNDS, BATCH, || {
            std::hint::black_box(cedar.decide(&context).unwrap());
        });
        line.push_str(&format!(
            " request_for {request_time:?}, decide {decide_time:?}"
        ));
        ratios.push(line);
    }
    for line in ratios {
        println!("{line}");
    }
}

criterion_group!(benches, allowlist);
criterion_main!(benches);
