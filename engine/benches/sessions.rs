//! What a session store adds per evaluation: a 10-allow-policy engine without a store and
//! with the in-memory store (one load before the point, one record after it).
//!
//! `cargo bench -p portcullis-engine --bench sessions`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{
    BoxError, InputContext, MemorySessionStore, Message, Metadata, Policy, PolicyDecision,
    PolicyEngine, PolicySet, async_trait,
};

struct AllowAll(String);

#[async_trait]
impl Policy<InputContext> for AllowAll {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        std::hint::black_box(context);
        Ok(PolicyDecision::allow())
    }
}

fn engine(store: Option<MemorySessionStore>) -> PolicyEngine {
    let mut set = PolicySet::builder();
    for at in 0..10 {
        set = set.input(AllowAll(format!("allow_{at}")));
    }
    let builder = PolicyEngine::builder().policy_set(set.build());
    match store {
        Some(store) => builder.sessions(store).build(),
        None => builder.build(),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let context = InputContext::new(
        vec![
            Message::system("You are a helpful assistant."),
            Message::user("What is the weather in Paris tomorrow?"),
        ],
        Metadata::new("agent-1", "session-1"),
    );
    let mut group = c.benchmark_group("sessions");
    let plain = engine(None);
    group.bench_function("10 allow policies, no session store", |b| {
        b.to_async(&runtime)
            .iter(|| async { std::hint::black_box(plain.evaluate_input(&context).await.is_ok()) })
    });
    let kept = engine(Some(MemorySessionStore::new()));
    group.bench_function("10 allow policies, in-memory session store", |b| {
        b.to_async(&runtime)
            .iter(|| async { std::hint::black_box(kept.evaluate_input(&context).await.is_ok()) })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
