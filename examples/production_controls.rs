//! Deadlines, monitor mode and concurrent evaluation, side by side.
//!
//! Three slow checks (each standing in for a remote policy service that takes 20 ms) run
//! concurrently under a call deadline; a new policy rolls out in monitor mode; a check that
//! hangs is cancelled at its deadline.
//!
//! Run it with `cargo run --example production_controls`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use portcullis::{
    AuditRecord, BoxError, InputContext, InterceptionPoint, Message, Metadata, OnError, Policy,
    PolicyDecision, PolicyEngine, PolicyExt, PolicySet, async_trait,
};

/// A check that takes `latency` to answer, like a call to a remote policy service.
struct SlowCheck {
    id: &'static str,
    latency: Duration,
    decision: PolicyDecision,
}

#[async_trait]
impl Policy<InputContext> for SlowCheck {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, _context: &InputContext) -> Result<PolicyDecision, BoxError> {
        tokio::time::sleep(self.latency).await;
        Ok(self.decision.clone())
    }
}

fn check(id: &'static str, millis: u64, decision: PolicyDecision) -> SlowCheck {
    SlowCheck {
        id,
        latency: Duration::from_millis(millis),
        decision,
    }
}

fn print_record(record: &AuditRecord<'_>) {
    println!(
        "  audit {:<16} {:<16} enforced={:<5} {}",
        record.policy_id,
        record.decision,
        record.enforced,
        record.reason.as_deref().unwrap_or("")
    );
}

async fn run(title: &str, set: PolicySet) {
    println!("{title}");
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .on_audit(print_record)
        .build();
    let context = InputContext::new(
        vec![Message::user("Summarise this contract for me.")],
        Metadata::new("legal-agent", "session-9"),
    );
    let started = Instant::now();
    let result = engine.evaluate_input(&context).await;
    let outcome = match result {
        Ok(_) => "allowed".to_owned(),
        Err(error) => format!("failed: {error}"),
    };
    println!("  -> {outcome} in {} ms\n", started.elapsed().as_millis());
}

fn three_remote_checks() -> PolicySet {
    PolicySet::builder()
        .input(check("toxicity", 20, PolicyDecision::allow()))
        .input(check("pii", 20, PolicyDecision::allow()))
        .input(check("jailbreak", 20, PolicyDecision::allow()))
        .build()
}

#[tokio::main]
async fn main() {
    run(
        "three 20 ms checks, one after another:",
        three_remote_checks(),
    )
    .await;

    run(
        "the same checks, concurrently:",
        PolicySet::builder()
            .input(check("toxicity", 20, PolicyDecision::allow()))
            .input(check("pii", 20, PolicyDecision::allow()))
            .input(check("jailbreak", 20, PolicyDecision::allow()))
            .concurrent(InterceptionPoint::Input)
            .call_deadline(InterceptionPoint::Input, Duration::from_millis(250))
            .build(),
    )
    .await;

    run(
        "a new, stricter policy rolled out in monitor mode:",
        PolicySet::builder()
            .input(check("strict_topics", 1, PolicyDecision::deny("legal advice")).monitored())
            .input(check("pii", 1, PolicyDecision::allow()))
            .build(),
    )
    .await;

    run(
        "a check that hangs, cancelled at its 30 ms deadline (on_error: allow skips it):",
        PolicySet::builder()
            .on_error(OnError::Allow)
            .input(
                check("hanging_service", 60_000, PolicyDecision::allow())
                    .with_deadline(Duration::from_millis(30)),
            )
            .input(check("pii", 1, PolicyDecision::allow()))
            .build(),
    )
    .await;

    run(
        "the same hanging check under on_error: deny (fail closed):",
        PolicySet::builder()
            .input(check("hanging_service", 60_000, PolicyDecision::allow()))
            .policy_deadline(InterceptionPoint::Input, Duration::from_millis(30))
            .build(),
    )
    .await;
}
