//! Three remote policies that each take 20 ms, evaluated one after another and concurrently.
//!
//! `cargo bench --features http --bench controls`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis::http::{HttpClientOptions, HttpInputPolicy};
use portcullis::{
    InputContext, InterceptionPoint, Message, Metadata, PolicyDecision, PolicyEngine, PolicySet,
};
use portcullis_testing::{EvaluateServer, Reply};

fn engine(servers: &[EvaluateServer], concurrent: bool) -> PolicyEngine {
    let mut builder = PolicySet::builder();
    for (at, server) in servers.iter().enumerate() {
        let policy =
            HttpInputPolicy::new(format!("remote_{at}"), HttpClientOptions::new(server.url()))
                .expect("a valid URL");
        builder = builder.input(policy);
    }
    if concurrent {
        builder = builder.concurrent(InterceptionPoint::Input);
    }
    PolicyEngine::builder().policy_set(builder.build()).build()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let servers: Vec<EvaluateServer> = runtime.block_on(async {
        let mut servers = Vec::new();
        for _ in 0..3 {
            servers.push(
                EvaluateServer::replying(
                    Reply::decision(&PolicyDecision::allow()).after(Duration::from_millis(20)),
                )
                .await
                .expect("a server"),
            );
        }
        servers
    });
    let context = InputContext::new(
        vec![Message::user("hello")],
        Metadata::new("agent", "session"),
    );
    let mut group = c.benchmark_group("controls");
    group.sample_size(20);
    for (name, concurrent) in [("sequential", false), ("concurrent", true)] {
        let engine = engine(&servers, concurrent);
        group.bench_function(format!("3 remote policies of 20 ms, {name}"), |b| {
            b.to_async(&runtime).iter(|| async {
                std::hint::black_box(engine.evaluate_input(&context).await.is_ok())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
