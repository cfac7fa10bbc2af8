//! Rego in process: evaluation through the policy types, two-thread scaling, module load time.
//!
//! Run with `cargo bench -p portcullis-rego --bench rego`. Reads the OPA-built fixtures from
//! `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures` beside the workspace.
//! Goals: `tool_call/approved-tools` < 2 µs and `input/no-ssn-input` < 12 µs median per
//! evaluation; `threads/2` at least 1.7x the throughput of `threads/1`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use portcullis_engine::{
    InputContext, Message, Metadata, OutputContext, Policy, PolicyDecision, Role, ToolCallContext,
};
use portcullis_rego::{RegoBundle, RegoInputPolicy, RegoOutputPolicy, RegoToolCallPolicy};
use serde_json::json;

fn fixture(relative: &str) -> PathBuf {
    let dir = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let path = dir.join(relative);
    assert!(
        path.is_file(),
        "fixture {} is missing: set PORTCULLIS_OPA_FIXTURES to the folder holding rego-wasm/ and opa-wasm-extra/",
        path.display()
    );
    path
}

fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-42").with_timestamp("2026-01-01T00:00:00Z")
}

fn tool_call(tool: &str) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("query".into(), json!("rust webassembly"));
    ToolCallContext::new(
        tool,
        arguments,
        Message::new(Role::Assistant, "let me search"),
        metadata(),
    )
}

fn evaluation(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("rego");

    let tools =
        RegoToolCallPolicy::new("approved-tools", fixture("rego-wasm/approved-tools.tar.gz"))
            .expect("opens");
    let call = tool_call("web_search");
    assert_eq!(tools.decide(&call), Ok(PolicyDecision::allow()));
    group.bench_function("tool_call/approved-tools", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(tools.evaluate(black_box(&call)).await) })
    });

    let ssn =
        RegoInputPolicy::new("no-ssn", fixture("rego-wasm/no-ssn-input.tar.gz")).expect("opens");
    let input = InputContext::new(
        vec![
            Message::new(Role::System, "You are a helpful assistant."),
            Message::new(
                Role::User,
                "Please summarize the attached quarterly report for me.",
            ),
        ],
        metadata(),
    );
    assert_eq!(ssn.decide(&input), Ok(PolicyDecision::allow()));
    group.bench_function("input/no-ssn-input", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(ssn.evaluate(black_box(&input)).await) })
    });
    let with_ssn = InputContext::new(
        vec![Message::new(Role::User, "my SSN is 123-45-6789")],
        metadata(),
    );
    assert!(matches!(
        ssn.decide(&with_ssn),
        Ok(PolicyDecision::Deny { .. })
    ));
    group.bench_function("input/no-ssn-input (deny)", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(ssn.evaluate(black_box(&with_ssn)).await) })
    });

    let domains = RegoOutputPolicy::new(
        "no-blocked-domain",
        fixture("rego-wasm/no-blocked-domain-output.tar.gz"),
    )
    .expect("opens");
    let output = OutputContext::new(
        Message::new(
            Role::Assistant,
            "The answer is 42, see https://example.com.",
        ),
        metadata(),
    );
    group.bench_function("output/no-blocked-domain-output", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(domains.evaluate(black_box(&output)).await) })
    });

    let test_p = RegoBundle::open(fixture("opa-wasm-extra/test-p/policy.wasm")).expect("opens");
    let moo = json!({"fragment": "moo"});
    group.bench_function("bundle/test-p (ABI 1.2)", |b| {
        b.iter(|| black_box(test_p.evaluate_blocking("test/p", black_box(&moo))))
    });
    let example = RegoBundle::open(fixture("opa-wasm-extra/example-allow/policy.wasm"))
        .expect("opens")
        .with_data(json!({"user_roles": {"userA": ["editor"]}, "role_permissions": {"editor": [{"action": "edit", "object": "article"}]}}))
        .expect("data");
    let request = json!({"user": "userA", "object": "article", "action": "edit"});
    group.bench_function("bundle/example-allow (ABI 1.1)", |b| {
        b.iter(|| black_box(example.evaluate_blocking("example/allow", black_box(&request))))
    });
    group.finish();
}

/// Throughput of 1 and 2 threads evaluating the same bundle: one iteration is one evaluation on
/// every thread, so elements per second compare directly.
fn threads(c: &mut Criterion) {
    let tools =
        RegoToolCallPolicy::new("approved-tools", fixture("rego-wasm/approved-tools.tar.gz"))
            .expect("opens");
    let calls = [tool_call("web_search"), tool_call("exec_shell")];
    let mut group = c.benchmark_group("rego-threads");
    for threads in [1usize, 2] {
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_with_input(
            BenchmarkId::new("threads", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    // The clock starts when every thread is ready, and stops when the last is done.
                    let ready = std::sync::Barrier::new(threads + 1);
                    let mut start = Instant::now();
                    std::thread::scope(|scope| {
                        for thread in 0..threads {
                            let (tools, calls, ready) = (&tools, &calls, &ready);
                            scope.spawn(move || {
                                ready.wait();
                                for i in 0..iters {
                                    let call = &calls[(i as usize + thread) % 2];
                                    black_box(tools.decide(black_box(call)).ok());
                                }
                            });
                        }
                        ready.wait();
                        start = Instant::now();
                    });
                    start.elapsed()
                })
            },
        );
    }
    group.finish();
}

/// Opening a bundle: read, unpack, compile (the compiled-module cache only holds live modules,
/// and each iteration drops its bundle, so every iteration compiles), instantiate, load data.
fn load(c: &mut Criterion) {
    let mut group = c.benchmark_group("rego-load");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for name in ["approved-tools", "no-ssn-input"] {
        let path = fixture(&format!("rego-wasm/{name}.tar.gz"));
        group.bench_function(BenchmarkId::new("open", name), |b| {
            b.iter(|| black_box(RegoBundle::open(&path).expect("opens")))
        });
    }
    group.finish();
}

criterion_group!(benches, evaluation, threads, load);
criterion_main!(benches);
