//! Replacing the policy set while evaluations run: none fails, each runs on one set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use portcullis_engine::{
    BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet,
    async_trait,
};

/// Allows, after giving the runtime a chance to run something else (a swap, say).
struct Stamp(String);

#[async_trait]
impl Policy<InputContext> for Stamp {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        tokio::task::yield_now().await;
        Ok(PolicyDecision::allow())
    }
}

fn set(name: &str) -> PolicySet {
    (0..3)
        .fold(PolicySet::builder(), |builder, index| {
            builder.input(Stamp(format!("{name}{index}")))
        })
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evaluations_finish_on_the_set_they_started_with() {
    let engine = Arc::new(PolicyEngine::builder().policy_set(set("a")).build());
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (engine, stop, swaps) = (engine.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            let mut next = "b";
            while !stop.load(Ordering::Relaxed) {
                engine.replace_policy_set(set(next));
                next = if next == "a" { "b" } else { "a" };
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        })
    };
    let mut tasks = Vec::new();
    let started = std::time::Instant::now();
    for task in 0..8 {
        let (engine, swaps) = (engine.clone(), swaps.clone());
        tasks.push(tokio::spawn(async move {
            let context = InputContext::new(
                vec![Message::user("hello")],
                Metadata::new("agent", format!("s{task}")),
            );
            let mut seen = [0usize; 2];
            // At least 500 evaluations each, and on until the swapper (a thread a busy
            // machine may leave waiting) has swapped a few times.
            for round in 0.. {
                let swapped = swaps.load(Ordering::Relaxed) > 10;
                if round >= 500 && (swapped || started.elapsed().as_secs() >= 30) {
                    break;
                }
                let evaluation = engine.evaluate_input(&context).await.expect("no failure");
                let ids: Vec<&str> = evaluation
                    .decisions()
                    .iter()
                    .map(|entry| entry.policy_id.as_str())
                    .collect();
                assert!(
                    ids == ["a0", "a1", "a2"] || ids == ["b0", "b1", "b2"],
                    "an evaluation mixed sets: {ids:?}"
                );
                seen[usize::from(ids[0] == "b0")] += 1;
            }
            seen
        }));
    }
    let mut seen = [0usize; 2];
    for task in tasks {
        let counts = task.await.unwrap();
        seen[0] += counts[0];
        seen[1] += counts[1];
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(seen[0] + seen[1] >= 4000);
    assert!(swaps.load(Ordering::Relaxed) > 10, "the set was swapped");
    assert!(seen[0] > 0 && seen[1] > 0, "both sets served: {seen:?}");
}

#[tokio::test]
async fn an_evaluation_keeps_its_set_after_a_swap() {
    let engine = PolicyEngine::builder().policy_set(set("a")).build();
    let context = InputContext::new(vec![Message::user("hi")], Metadata::new("agent", "s"));
    let before = engine.evaluate_input(&context).await.unwrap();
    let old = engine.replace_policy_set(set("b"));
    drop(old);
    // The set the evaluation ran on is gone from the engine; its decisions still name it.
    assert_eq!(before.decisions()[0].policy_id, "a0");
    let after = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(after.decisions()[0].policy_id, "b0");
    assert_eq!(engine.policy_set().input().len(), 3);
}

/// Denies an answer that mentions its word.
struct Forbid(&'static str);

#[async_trait]
impl portcullis_engine::Policy<portcullis_engine::OutputContext> for Forbid {
    fn id(&self) -> &str {
        self.0
    }

    async fn evaluate(
        &self,
        context: &portcullis_engine::OutputContext,
    ) -> Result<PolicyDecision, BoxError> {
        Ok(if context.response.content.contains(self.0) {
            PolicyDecision::deny(self.0)
        } else {
            PolicyDecision::allow()
        })
    }
}

#[tokio::test]
async fn a_stream_finishes_on_the_set_it_started_with() {
    use portcullis_engine::StreamItem;
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().output(Forbid("apple")).build())
        .build();
    let mut stream = engine.output_stream(Metadata::new("agent", "s"));
    let _ = stream.push("I like ").await;
    engine.replace_policy_set(PolicySet::builder().output(Forbid("pear")).build());
    let _ = stream.push("apple and pear").await;
    let items = stream.finish().await;
    let denied: Vec<&str> = items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Denied(denial) => Some(denial.policy_id()),
            _ => None,
        })
        .collect();
    assert_eq!(denied, ["apple"], "{items:?}");
    // A stream started now runs on the new set.
    let mut stream = engine.output_stream(Metadata::new("agent", "s"));
    let _ = stream.push("apple and pear").await;
    let items = stream.finish().await;
    assert!(
        items
            .iter()
            .any(|item| matches!(item, StreamItem::Denied(d) if d.policy_id() == "pear")),
        "{items:?}"
    );
}

#[tokio::test]
async fn a_replaced_set_is_dropped_once_its_evaluations_end() {
    let engine = PolicyEngine::builder().policy_set(set("a")).build();
    let context = InputContext::new(vec![Message::user("hi")], Metadata::new("agent", "s"));
    let before = engine.evaluate_input(&context).await.unwrap();
    let old = engine.replace_policy_set(set("b"));
    assert_eq!(Arc::strong_count(&old), 2, "the evaluation holds its set");
    drop(before);
    // Nothing else keeps it: not the engine, not the thread that evaluated on it.
    assert_eq!(Arc::strong_count(&old), 1);
    let after = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(after.decisions()[0].policy_id, "b0");
}

#[tokio::test]
async fn engines_on_one_thread_each_run_their_own_set() {
    let engines = [
        PolicyEngine::builder().policy_set(set("a")).build(),
        PolicyEngine::builder().policy_set(set("b")).build(),
    ];
    let context = InputContext::new(vec![Message::user("hi")], Metadata::new("agent", "s"));
    for round in 0..3 {
        for (engine, name) in engines.iter().zip(["a0", "b0"]) {
            let evaluation = engine.evaluate_input(&context).await.unwrap();
            assert_eq!(evaluation.decisions()[0].policy_id, name, "round {round}");
        }
    }
    engines[0].replace_policy_set(set("c"));
    for (engine, name) in engines.iter().zip(["c0", "b0"]) {
        let evaluation = engine.evaluate_input(&context).await.unwrap();
        assert_eq!(evaluation.decisions()[0].policy_id, name);
    }
}
