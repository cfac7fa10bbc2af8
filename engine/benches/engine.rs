//! Engine overhead on the allow path.
//!
//! `cargo bench -p portcullis-engine --bench engine`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{
    AuditRecord, BoxError, InputContext, InputPolicy, Message, Metadata, PolicyDecision,
    PolicyEngine, PolicyExt, PolicySet, async_trait,
};

struct AllowAll(String);

#[async_trait]
impl InputPolicy for AllowAll {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        std::hint::black_box(context);
        Ok(PolicyDecision::allow())
    }
}

fn policies() -> Vec<AllowAll> {
    (0..10).map(|at| AllowAll(format!("allow_{at}"))).collect()
}

fn context() -> InputContext {
    InputContext::new(
        vec![
            Message::system("You are a helpful assistant."),
            Message::user("What is the weather in Paris tomorrow?"),
        ],
        Metadata::new("agent-1", "session-1"),
    )
}

fn engine(monitored: bool, audit: Option<Arc<AtomicUsize>>) -> PolicyEngine {
    let mut builder = PolicySet::builder();
    for policy in policies() {
        builder = if monitored {
            builder.input(policy.monitored())
        } else {
            builder.input(policy)
        };
    }
    let engine = PolicyEngine::builder().policy_set(builder.build());
    match audit {
        Some(count) => engine
            .on_audit(move |_: &AuditRecord<'_>| {
                count.fetch_add(1, Ordering::Relaxed);
            })
            .build(),
        None => engine.build(),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let context = context();
    let mut group = c.benchmark_group("engine");

    // The policies called directly, one after another: the floor the engine adds to.
    let raw: Vec<Box<dyn InputPolicy>> = policies()
        .into_iter()
        .map(|p| Box::new(p) as Box<dyn InputPolicy>)
        .collect();
    group.bench_function("10 allow policies, called directly", |b| {
        b.to_async(&runtime).iter(|| async {
            for policy in &raw {
                std::hint::black_box(policy.evaluate(&context).await.ok());
            }
        })
    });

    let plain = engine(false, None);
    group.bench_function("10 allow policies, no audit handler", |b| {
        b.to_async(&runtime)
            .iter(|| async { std::hint::black_box(plain.evaluate_input(&context).await.is_ok()) })
    });

    let counted = Arc::new(AtomicUsize::new(0));
    let audited = engine(false, Some(Arc::clone(&counted)));
    group.bench_function("10 allow policies, counting audit handler", |b| {
        b.to_async(&runtime)
            .iter(|| async { std::hint::black_box(audited.evaluate_input(&context).await.is_ok()) })
    });

    let monitored = engine(true, None);
    group.bench_function("10 allow policies, all in monitor mode", |b| {
        b.to_async(&runtime).iter(|| async {
            std::hint::black_box(monitored.evaluate_input(&context).await.is_ok())
        })
    });
    group.finish();
    assert!(counted.load(Ordering::Relaxed) > 0);
}

criterion_group!(benches, bench);
criterion_main!(benches);
