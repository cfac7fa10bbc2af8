//! What the observability handler adds to one evaluation with 3 policies.
//!
//! `cargo bench -p portcullis-observability --bench audit`
//!
//! Goal: the median of `observability` stays within 5 µs of `no_handler`. Spans go to a
//! receiver on 127.0.0.1 that answers 200, as a platform would. `closure_handler` (a handler
//! doing nothing) shows what building the records costs the engine, and
//! `otel_without_processor` what creating SDK spans on the evaluation path would cost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/receiver.rs"]
mod receiver;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{
    BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet,
    async_trait,
};
use portcullis_observability::{ObservabilityAuditHandler, ObservabilityOptions};

/// Evaluations per timed chunk: 3 records each, well within the handler's queue.
const CHUNK: u64 = 1000;

struct Allow(&'static str);

#[async_trait]
impl Policy<InputContext> for Allow {
    fn id(&self) -> &str {
        self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        black_box(context);
        Ok(PolicyDecision::Allow {
            audit: true,
            labels: Vec::new(),
        })
    }
}

fn three_policies() -> PolicySet {
    PolicySet::builder()
        .input(Allow("first"))
        .input(Allow("second"))
        .input(Allow("third"))
        .build()
}

fn audit(c: &mut Criterion) {
    let receiver_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("receiver runtime");
    let receiver =
        receiver_runtime.block_on(receiver::Receiver::start(receiver::Behaviour::status(200)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("bench runtime");

    let handler = ObservabilityAuditHandler::new(
        ObservabilityOptions::builder()
            .public_key("pk-bench")
            .secret_key("sk-bench")
            .base_url(receiver.base_url())
            .build(),
    )
    .expect("handler");
    let without = PolicyEngine::builder().policy_set(three_policies()).build();
    let with = PolicyEngine::builder()
        .policy_set(three_policies())
        .on_audit(handler.clone())
        .build();
    let context = InputContext::new(
        vec![Message::user("what is the weather in Lisbon?")],
        Metadata::new("agent-7", "session-42"),
    );

    let mut group = c.benchmark_group("evaluate_input_3_policies");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("no_handler", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(without.evaluate_input(&context).await.is_ok()) })
    });
    let closure = PolicyEngine::builder()
        .policy_set(three_policies())
        .on_audit(|record: &portcullis_engine::AuditRecord<'_>| {
            black_box(record);
        })
        .build();
    group.bench_function("closure_handler", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(closure.evaluate_input(&context).await.is_ok()) })
    });
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let otel = PolicyEngine::builder()
        .policy_set(three_policies())
        .on_audit(portcullis_otel::OtelAuditHandler::new(
            opentelemetry::trace::TracerProvider::tracer(&provider, "bench"),
        ))
        .build();
    group.bench_function("otel_without_processor", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(otel.evaluate_input(&context).await.is_ok()) })
    });
    // Timed in chunks small enough for the queue, with an untimed flush between chunks: the
    // figure is the cost of an evaluation whose records are all exported, not of one whose
    // records are dropped because the benchmark outruns the exporter.
    group.bench_function("observability", |b| {
        b.iter_custom(|iterations| {
            let mut elapsed = Duration::ZERO;
            let mut left = iterations;
            while left > 0 {
                let chunk = left.min(CHUNK);
                left -= chunk;
                let start = Instant::now();
                runtime.block_on(async {
                    for _ in 0..chunk {
                        black_box(with.evaluate_input(&context).await.is_ok());
                    }
                });
                elapsed += start.elapsed();
                if let Err(error) = receiver_runtime.block_on(handler.flush()) {
                    panic!("the benchmark lost spans: {error}");
                }
            }
            elapsed
        })
    });
    group.finish();

    drop(with);
    eprintln!(
        "spans received by the receiver: {}",
        receiver_runtime.block_on(async { receiver::spans_received(&receiver) })
    );
    drop(handler);
    drop(receiver);
}

criterion_group!(benches, audit);
criterion_main!(benches);
