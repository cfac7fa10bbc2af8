//! Engine overhead on the allow path.
//!
//! `cargo bench -p portcullis-engine --bench engine`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{
    AuditRecord, BoxError, InputContext, InputPolicy, Message, Metadata, Policy, PolicyDecision,
    PolicyEngine, PolicyExt, PolicySet, Redaction, TransformOperation, async_trait,
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

/// A policy that always returns the same decision.
struct Decides(&'static str, PolicyDecision);

#[async_trait]
impl Policy<InputContext> for Decides {
    fn id(&self) -> &str {
        self.0
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        Ok(self.1.clone())
    }
}

/// Applying redactions and transforms: the cost of changing a context.
fn changes(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut messages = vec![Message::system("You are a helpful assistant.")];
    for at in 0..10 {
        messages.push(Message::user(format!(
            "Message {at}: please mail ops{at}@example.com about ticket {at}."
        )));
        messages.push(Message::assistant(format!("Noted, ticket {at}.")));
    }
    let context = InputContext::new(
        messages,
        Metadata::new("agent-1", "session-1").with_extra("tenant", "acme"),
    );
    let decisions = [
        (
            "replace e-mails in every message",
            PolicyDecision::redact([Redaction::replace(
                "messages.*.content",
                r"[a-z0-9]+@[a-z]+\.com",
            )]),
        ),
        (
            "mask the last message",
            PolicyDecision::redact([Redaction::mask("messages.-1.content")]),
        ),
        (
            "replace that matches nothing",
            PolicyDecision::redact([Redaction::replace("messages.*.content", r"\d{3}-\d{4}")]),
        ),
        (
            "append to the first message",
            PolicyDecision::transform([TransformOperation::append(
                "messages.0.content",
                " Be brief.",
            )]),
        ),
    ];
    let mut group = c.benchmark_group("changes");
    for (name, decision) in decisions {
        let engine = PolicyEngine::builder()
            .policy_set(
                PolicySet::builder()
                    .input(Decides("change", decision))
                    .build(),
            )
            .build();
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                std::hint::black_box(engine.evaluate_input(&context).await.is_ok())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, changes);
criterion_main!(benches);
