//! The allow path allocates nothing in proportion to the context's size.
//!
//! This test binary counts every heap allocation (through `stats_alloc`) while one evaluation
//! runs, once with a small context and once with a 1 MiB message, and compares the counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::System;

use portcullis_engine::{
    AuditRecord, BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine,
    PolicySet, async_trait,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The counts are global: the tests of this binary take turns, or one would count the other's
/// allocations.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The turn of the calling test (a test that failed while holding it leaves it usable).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Allow(String);

#[async_trait]
impl Policy<InputContext> for Allow {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        std::hint::black_box(context.messages.len());
        Ok(PolicyDecision::allow())
    }
}

fn context(size: usize) -> InputContext {
    InputContext::new(
        vec![Message::user("x".repeat(size))],
        Metadata::new("agent", "session"),
    )
}

/// Bytes and allocations one evaluation takes.
fn measure(
    runtime: &tokio::runtime::Runtime,
    engine: &PolicyEngine,
    context: &InputContext,
) -> (usize, usize) {
    let region = Region::new(GLOBAL);
    let forwarded = runtime.block_on(async {
        let evaluation = engine.evaluate_input(context).await.expect("allowed");
        assert!(!evaluation.is_modified());
        std::ptr::eq(evaluation.context(), context)
    });
    let change = region.change();
    assert!(forwarded, "the original context is forwarded");
    (change.bytes_allocated, change.allocations)
}

#[test]
fn the_allow_path_does_not_allocate_in_proportion_to_the_context() {
    let _turn = turn();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut builder = PolicySet::builder();
    for at in 0..10 {
        builder = builder.input(Allow(format!("allow_{at}")));
    }
    let set = builder.build();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&counted);
    let engines = [
        PolicyEngine::builder().policy_set(set).build(),
        PolicyEngine::builder()
            .policy_set({
                let mut builder = PolicySet::builder();
                for at in 0..10 {
                    builder = builder.input(Allow(format!("allow_{at}")));
                }
                builder.build()
            })
            .on_audit(move |_: &AuditRecord<'_>| {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .build(),
    ];
    let small = context(16);
    let large = context(1 << 20);
    for engine in &engines {
        // Warm up lazily initialised state (thread locals, the runtime's first poll).
        measure(&runtime, engine, &small);
        let (small_bytes, small_count) = measure(&runtime, engine, &small);
        let (large_bytes, large_count) = measure(&runtime, engine, &large);
        assert_eq!(
            (small_bytes, small_count),
            (large_bytes, large_count),
            "allocations depend on the context's size"
        );
        assert!(small_bytes < 4096, "{small_bytes} bytes for one evaluation");
        // One boxed future per policy (`async_trait`'s), and nothing of the engine's own.
        assert_eq!(
            small_count, 10,
            "allocations for one evaluation of 10 policies"
        );
    }
    assert_eq!(counted.load(std::sync::atomic::Ordering::Relaxed), 30);
}

#[test]
fn the_in_memory_session_store_adds_no_allocation_once_warm() {
    let _turn = turn();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut builder = PolicySet::builder();
    for at in 0..10 {
        builder = builder.input(Allow(format!("allow_{at}")));
    }
    let engine = PolicyEngine::builder()
        .policy_set(builder.build())
        .sessions(portcullis_engine::MemorySessionStore::new())
        .build();
    let context = context(16);
    // Warm up: the session's first record, the thread's spare context and its facts.
    measure(&runtime, &engine, &context);
    measure(&runtime, &engine, &context);
    let (_, count) = measure(&runtime, &engine, &context);
    assert_eq!(
        count, 10,
        "allocations for one evaluation of 10 policies with a session store"
    );
}
