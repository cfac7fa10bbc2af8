//! What an approval costs when its grant is already stored: an escalating tool-call policy
//! whose grant waits in the memory store, against the same policy allowing. The difference is
//! the approval step: serializing the context, its canonical JSON and SHA-256 digest, and
//! taking the grant. The tool call's arguments make a context of about 1 KiB.
//!
//! `cargo bench -p portcullis-engine --bench approvals`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::approval::action_digest;
use portcullis_engine::{
    BoxError, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext,
    async_trait,
};
use serde_json::{Map, Value, json};

struct Fixed(PolicyDecision);

#[async_trait]
impl Policy<ToolCallContext> for Fixed {
    fn id(&self) -> &str {
        "gate"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        std::hint::black_box(context);
        Ok(self.0.clone())
    }
}

/// A `send_email` call whose JSON is about 1 KiB.
fn context() -> ToolCallContext {
    let mut arguments = Map::new();
    arguments.insert("to".into(), json!("alice@example.com"));
    arguments.insert("cc".into(), json!(["bob@example.com", "carol@example.com"]));
    arguments.insert("subject".into(), json!("Quarterly numbers, as discussed"));
    arguments.insert(
        "body".into(),
        json!("Hello Alice, here are the figures we talked about this morning. ".repeat(11)),
    );
    arguments.insert("priority".into(), json!(3));
    let context = ToolCallContext::new(
        "send_email",
        arguments,
        Message::assistant("I will send the e-mail now."),
        Metadata::new("agent-1", "session-1"),
    );
    let size = serde_json::to_vec(&context).map_or(0, |json| json.len());
    assert!((960..=1200).contains(&size), "the context is {size} bytes");
    context
}

fn engine(decision: PolicyDecision) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(Fixed(decision)).build())
        .build()
}

fn approvals(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let context = context();
    let mut group = c.benchmark_group("approval");

    let allow = engine(PolicyDecision::allow());
    group.bench_function("allow", |b| {
        b.to_async(&runtime).iter(|| async {
            let evaluation = allow.evaluate_tool_call(&context).await;
            assert!(evaluation.is_ok());
        });
    });

    let escalate = engine(PolicyDecision::escalate("ask first"));
    let digest = action_digest(
        portcullis_engine::InterceptionPoint::ToolCall,
        &serde_json::to_value(&context).unwrap_or(Value::Null),
    );
    // Each evaluation uses up one grant: record one before each, outside the measured time.
    group.bench_function("escalate_with_stored_grant", |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let granted = escalate
                        .approvals()
                        .grant(&digest, "alice", Duration::from_secs(60))
                        .await;
                    assert!(granted.is_ok());
                    let start = Instant::now();
                    let evaluation = escalate.evaluate_tool_call(&context).await;
                    total += start.elapsed();
                    assert!(evaluation.is_ok());
                }
                total
            })
        });
    });

    group.bench_function("digest_only", |b| {
        let json = serde_json::to_value(&context).unwrap_or(Value::Null);
        b.iter(|| action_digest(portcullis_engine::InterceptionPoint::ToolCall, &json));
    });
    group.bench_function("canonical_only", |b| {
        let json = serde_json::to_value(&context).unwrap_or(Value::Null);
        b.iter(|| {
            portcullis_engine::approval::canonical_action(
                portcullis_engine::InterceptionPoint::ToolCall,
                &json,
            )
        });
    });
    group.finish();
}

criterion_group!(benches, approvals);
criterion_main!(benches);
