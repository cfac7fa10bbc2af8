//! Size: a message of 1, 4 and 10 MiB through a DSL redaction, a Rego policy (real OPA
//! WebAssembly, `no-ssn-input`) and a remote policy (a decision service on 127.0.0.1), each
//! through the engine. Time should grow linearly with the size: 10 MiB taking much more than
//! ten times the 1 MiB time is a quadratic path, a bug.
//!
//! `cargo bench --all-features --bench size`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use portcullis::dsl::DslInputPolicy;
use portcullis::http::{HttpClientOptions, HttpInputPolicy};
use portcullis::rego::RegoInputPolicy;
use portcullis::{
    EngineError, InputContext, InputPolicy, Message, Metadata, PolicyDecision, PolicyEngine,
    PolicySet, Role,
};
use portcullis_testing::{EvaluateServer, Reply};

const MIB: usize = 1024 * 1024;

const SSN_RULE: &str = r#"{
  "condition": { "always": true },
  "action": "redact",
  "redactions": [
    {
      "field": "messages.*.content",
      "strategy": "replace",
      "pattern": "\\b\\d{3}-\\d{2}-\\d{4}\\b",
      "replacement": "[SSN]"
    }
  ]
}"#;

/// `bytes` of ordinary text ending in an SSN.
fn message(bytes: usize) -> InputContext {
    let tail = " my ssn is 123-45-6789";
    let line = "the quick brown fox jumps over the lazy dog 0123456789.\n";
    let mut text = line.repeat((bytes - tail.len()) / line.len() + 1);
    text.truncate(bytes - tail.len());
    text.push_str(tail);
    InputContext::new(
        vec![Message::new(Role::User, text)],
        Metadata::new("agent", "session"),
    )
}

fn engine_with(policy: impl InputPolicy + 'static) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(PolicySet::builder().input(policy).build())
        .build()
}

/// Evaluates once and checks the outcome (a redaction or a denial, never an error).
async fn evaluate(engine: &PolicyEngine, context: &InputContext) {
    match engine.evaluate_input(context).await {
        Ok(evaluation) => assert!(evaluation.is_modified()),
        Err(EngineError::Denied(_)) => {}
        Err(error) => panic!("{error}"),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = runtime.block_on(async {
        EvaluateServer::scripted(|request| {
            // A service that looks at what it got, as a real one would.
            let decision = if request.body.windows(11).any(|w| w == b"123-45-6789") {
                PolicyDecision::deny("SSN")
            } else {
                PolicyDecision::allow()
            };
            Reply::decision(&decision)
        })
        .await
        .expect("server")
    });
    let engines = [
        (
            "dsl",
            engine_with(DslInputPolicy::from_source("dsl", SSN_RULE, "ssn.json").expect("dsl")),
        ),
        (
            "rego",
            engine_with(
                RegoInputPolicy::from_bundle(
                    "rego",
                    common::bundle("rego-wasm/no-ssn-input.tar.gz"),
                )
                .expect("rego"),
            ),
        ),
        (
            "remote",
            engine_with(
                HttpInputPolicy::new(
                    "remote",
                    HttpClientOptions::new(server.url()).timeout(Duration::from_secs(60)),
                )
                .expect("remote"),
            ),
        ),
    ];
    let mut group = c.benchmark_group("size");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for mib in [1, 4, 10] {
        let context = message(mib * MIB);
        group.throughput(Throughput::Bytes((mib * MIB) as u64));
        for (kind, engine) in &engines {
            group.bench_with_input(
                BenchmarkId::new(*kind, format!("{mib}MiB")),
                &context,
                |b, context| {
                    b.to_async(&runtime).iter(|| async {
                        evaluate(engine, context).await;
                        // The test server records requests: forget them (10 MiB each).
                        server.take_requests();
                    });
                },
            );
        }
    }
    group.finish();
    drop(engines);
    runtime.block_on(server.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);
