//! Production controls: deadlines, monitor mode and concurrent evaluation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use portcullis_engine::error::{DeadlineScope, PolicyTimedOut};
use portcullis_engine::{
    EngineError, InputContext, InterceptionPoint, OnError, PolicyDecision, PolicyEngine, PolicyExt,
    PolicySet, PolicySetBuilder, Redaction, TransformOperation,
};
use support::*;

const INPUT: InterceptionPoint = InterceptionPoint::Input;

fn timed_out(error: &EngineError) -> &PolicyTimedOut {
    error
        .as_evaluation()
        .and_then(|error| error.cause().downcast_ref::<PolicyTimedOut>())
        .unwrap_or_else(|| panic!("expected a time-out, got {error:?}"))
}

#[tokio::test]
async fn a_policy_past_its_deadline_is_cancelled_and_fails() {
    let slow = Scripted::returning("slow", PolicyDecision::allow()).after(Duration::from_secs(5));
    let finished = slow.finished();
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(slow.with_deadline(Duration::from_millis(30)))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let started = Instant::now();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let cause = timed_out(&error);
    assert_eq!(cause.scope(), DeadlineScope::Policy);
    assert_eq!(cause.after(), Duration::from_millis(30));
    let records = recorder.take();
    assert_eq!(records[0].decision, "evaluation_error");
    assert!(records[0].reason.as_deref().unwrap().contains("timed out"));
    // Cancelled means dropped: the slow work never completes, even later.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_policy_within_its_deadline_decides_normally() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(
                    Scripted::returning("quick", PolicyDecision::deny("no"))
                        .after(Duration::from_millis(5)),
                )
                .policy_deadline(INPUT, Duration::from_secs(2))
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert_eq!(error.as_denial().unwrap().reason(), Some("no"));
}

#[tokio::test]
async fn the_point_deadline_applies_to_policies_without_their_own() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .on_error(OnError::Allow)
                .input(
                    Scripted::returning("own", PolicyDecision::audit("made it"))
                        .after(Duration::from_millis(40))
                        .with_deadline(Duration::from_secs(2)),
                )
                .input(
                    Scripted::returning("default", PolicyDecision::allow())
                        .after(Duration::from_secs(5)),
                )
                .policy_deadline(INPUT, Duration::from_millis(20))
                .build(),
        )
        .build();
    let context = input(&["x"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    let ids: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|d| d.policy_id.as_str())
        .collect();
    assert_eq!(ids, ["own"], "the slow default-deadline policy was skipped");
}

#[tokio::test]
async fn the_call_deadline_bounds_the_whole_point() {
    let recorder = Recorder::default();
    let third = Scripted::returning("c", PolicyDecision::allow());
    let third_calls = third.calls();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(
                    Scripted::returning("a", PolicyDecision::allow())
                        .after(Duration::from_millis(30)),
                )
                .input(
                    Scripted::returning("b", PolicyDecision::allow())
                        .after(Duration::from_millis(30)),
                )
                .input(third)
                .call_deadline(INPUT, Duration::from_millis(45))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let started = Instant::now();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_eq!(error.policy_id(), "b");
    assert_eq!(timed_out(&error).scope(), DeadlineScope::Call);
    assert_eq!(third_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        recorder.summary(),
        pairs(&[("a", "allow"), ("b", "evaluation_error")])
    );
}

#[tokio::test]
async fn monitor_mode_audits_but_does_not_enforce() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(
                    Scripted::returning("new_deny", PolicyDecision::deny("would block"))
                        .monitored(),
                )
                .input(
                    Scripted::returning(
                        "new_redact",
                        PolicyDecision::redact([Redaction::mask("messages.0.content")]),
                    )
                    .monitored(),
                )
                .input(
                    Scripted::returning(
                        "new_transform",
                        PolicyDecision::transform([TransformOperation::append(
                            "messages.0.content",
                            "!",
                        )]),
                    )
                    .monitored(),
                )
                .input(Scripted::failing("new_broken", "flaky").monitored())
                .input(Scripted::returning("enforced", PolicyDecision::allow()))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let context = input(&["hello"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(!evaluation.is_modified());
    assert!(std::ptr::eq(evaluation.context(), &context));
    let flags: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|d| (d.policy_id.as_str(), d.decision.name(), d.enforced))
        .collect();
    assert_eq!(
        flags,
        [
            ("new_deny", "deny", false),
            ("new_redact", "redact", false),
            ("new_transform", "transform", false),
            ("enforced", "allow", true),
        ]
    );
    let records = recorder.take();
    let flags: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.policy_id.as_str(),
                r.decision.as_str(),
                r.enforced,
                r.json["enforced"].clone(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("new_deny", "deny", false, serde_json::json!(false)),
            ("new_redact", "redact", false, serde_json::json!(false)),
            (
                "new_transform",
                "transform",
                false,
                serde_json::json!(false)
            ),
            (
                "new_broken",
                "evaluation_error",
                false,
                serde_json::json!(false)
            ),
            ("enforced", "allow", true, serde_json::json!(true)),
        ]
    );
}

#[tokio::test]
async fn a_whole_point_can_run_in_monitor_mode() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(Scripted::returning("a", PolicyDecision::deny("no")))
                .monitor(InterceptionPoint::Output)
                .input(Scripted::returning("b", PolicyDecision::deny("no")))
                .build(),
        )
        .build();
    let context = output("x");
    assert!(engine.evaluate_output(&context).await.is_ok());
    assert!(engine.evaluate_input(&input(&["x"])).await.is_err());
}

/// A policy description for the concurrent-versus-sequential table.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Allow,
    Deny,
    Fail,
    Mask(usize),
    Append(&'static str),
    Audit,
}

fn build(kinds: &[(Kind, u64)], on_error: OnError, concurrent: bool) -> PolicySet {
    let mut builder: PolicySetBuilder = PolicySet::builder().on_error(on_error);
    for (at, (kind, delay)) in kinds.iter().enumerate() {
        let id = format!("p{at}");
        let policy = match kind {
            Kind::Allow => Scripted::returning(&id, PolicyDecision::allow()),
            Kind::Deny => Scripted::returning(&id, PolicyDecision::deny(format!("denied by {id}"))),
            Kind::Fail => Scripted::failing(&id, "failed"),
            Kind::Mask(message) => Scripted::returning(
                &id,
                PolicyDecision::redact([Redaction::mask(format!("messages.{message}.content"))]),
            ),
            Kind::Append(text) => Scripted::returning(
                &id,
                PolicyDecision::transform([TransformOperation::append(
                    "messages.-1.content",
                    *text,
                )]),
            ),
            Kind::Audit => Scripted::returning(&id, PolicyDecision::audit("seen")),
        };
        builder = builder.input(policy.after(Duration::from_millis(*delay)));
    }
    if concurrent {
        builder = builder.concurrent(INPUT);
    }
    builder.build()
}

type RunResult = (Result<InputContext, String>, Vec<(String, String)>);

async fn run(set: PolicySet) -> RunResult {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .on_audit(recorder.handler())
        .build();
    let context = input(&["system", "first", "second"]);
    let result = engine
        .evaluate_input(&context)
        .await
        .map(|evaluation| evaluation.into_context())
        .map_err(|error| format!("{} {error}", error.policy_id()));
    (result, recorder.summary())
}

#[tokio::test]
async fn concurrent_evaluation_has_the_sequential_outcome() {
    use Kind::*;
    let table: Vec<Vec<(Kind, u64)>> = vec![
        vec![(Allow, 5), (Allow, 1), (Audit, 3)],
        vec![(Allow, 9), (Deny, 1), (Allow, 1)],
        vec![(Deny, 9), (Deny, 1)],
        vec![(Mask(1), 8), (Append("!"), 1), (Mask(2), 4)],
        vec![(Append(" a"), 6), (Append(" b"), 1), (Append(" c"), 3)],
        vec![(Fail, 5), (Allow, 1)],
        vec![(Allow, 1), (Fail, 2), (Deny, 9)],
        vec![(Mask(0), 1), (Deny, 7), (Append("?"), 1)],
        vec![(Audit, 1)],
        vec![],
    ];
    for kinds in &table {
        for on_error in [OnError::Deny, OnError::Allow] {
            let (sequential, sequential_records) = run(build(kinds, on_error, false)).await;
            let (concurrent, concurrent_records) = run(build(kinds, on_error, true)).await;
            assert_eq!(concurrent, sequential, "{kinds:?} with {on_error:?}");
            // The same records, then one `evaluation_error` for each policy after the one
            // that stopped the call: concurrent mode ran it and audits its cancellation.
            let mut expected = sequential_records.clone();
            if sequential.is_err() {
                expected.extend(
                    (sequential_records.len()..kinds.len())
                        .map(|at| (format!("p{at}"), "evaluation_error".to_owned())),
                );
            }
            assert_eq!(concurrent_records, expected, "{kinds:?} with {on_error:?}");
        }
    }
}

struct Overlap {
    id: String,
    started: Arc<std::sync::atomic::AtomicUsize>,
    delay: Duration,
}

#[portcullis_engine::async_trait]
impl portcullis_engine::Policy<portcullis_engine::InputContext> for Overlap {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(
        &self,
        _: &InputContext,
    ) -> Result<PolicyDecision, portcullis_engine::BoxError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        let seen = self.started.load(Ordering::SeqCst);
        Ok(PolicyDecision::audit(format!("saw {seen} started")))
    }
}

#[tokio::test]
async fn concurrent_policies_overlap_in_time() {
    // When it decides, each policy reports how many of the three have started: with
    // concurrent evaluation all three have, even for the first to finish.
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut builder = PolicySet::builder().concurrent(INPUT);
    for at in 0..3u64 {
        builder = builder.input(Overlap {
            id: format!("p{at}"),
            started: Arc::clone(&started),
            delay: Duration::from_millis(20 + 10 * at),
        });
    }
    let engine = PolicyEngine::builder().policy_set(builder.build()).build();
    let context = input(&["x"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    let reasons: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|entry| entry.decision.reason().unwrap_or_default())
        .collect();
    assert_eq!(reasons, ["saw 3 started"; 3]);
}

#[tokio::test]
async fn concurrent_evaluation_cancels_the_rest_once_the_winning_deny_is_known() {
    let deny =
        Scripted::returning("deny", PolicyDecision::deny("stop")).after(Duration::from_millis(10));
    let slow = Scripted::returning("slow", PolicyDecision::allow()).after(Duration::from_secs(5));
    let slow_started = slow.calls();
    let slow_finished = slow.finished();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(deny)
                .input(slow)
                .concurrent(INPUT)
                .build(),
        )
        .build();
    let started = Instant::now();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(error.policy_id(), "deny");
    assert_eq!(
        slow_started.load(Ordering::SeqCst),
        1,
        "all policies start at once"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        slow_finished.load(Ordering::SeqCst),
        0,
        "the slow policy was cancelled"
    );
}

#[tokio::test]
async fn concurrent_audit_records_stay_in_declared_order() {
    let set = build(
        &[(Kind::Audit, 40), (Kind::Allow, 1), (Kind::Audit, 20)],
        OnError::Deny,
        true,
    );
    let (_, records) = run(set).await;
    assert_eq!(
        records,
        pairs(&[("p0", "audit"), ("p1", "allow"), ("p2", "audit")])
    );
}

#[tokio::test]
async fn concurrent_points_respect_the_call_deadline() {
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(
                PolicySet::builder()
                    .input(
                        Scripted::returning("a", PolicyDecision::allow())
                            .after(Duration::from_millis(5)),
                    )
                    .input(
                        Scripted::returning("b", PolicyDecision::allow())
                            .after(Duration::from_secs(5)),
                    )
                    .concurrent(INPUT)
                    .call_deadline(INPUT, Duration::from_millis(40))
                    .build(),
            )
            .build(),
    );
    let started = Instant::now();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(error.policy_id(), "b");
    assert_eq!(timed_out(&error).scope(), DeadlineScope::Call);
}

/// A policy that blocks its thread (as synchronous code does) and never yields.
struct Blocks {
    id: &'static str,
    for_: Duration,
    decision: PolicyDecision,
    finished: Arc<std::sync::atomic::AtomicBool>,
}

impl Blocks {
    fn new(id: &'static str, for_: Duration, decision: PolicyDecision) -> Self {
        Blocks {
            id,
            for_,
            decision,
            finished: Arc::default(),
        }
    }
}

#[portcullis_engine::async_trait]
impl portcullis_engine::Policy<portcullis_engine::InputContext> for Blocks {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(
        &self,
        _: &InputContext,
    ) -> Result<PolicyDecision, portcullis_engine::BoxError> {
        std::thread::sleep(self.for_);
        self.finished.store(true, Ordering::SeqCst);
        Ok(self.decision.clone())
    }
}

#[tokio::test]
async fn a_result_that_arrives_after_the_deadline_is_a_time_out() {
    // The policy blocks the executor: the deadline cannot interrupt it, but its late answer
    // is not taken.
    let blocks = Blocks::new(
        "blocks",
        Duration::from_millis(300),
        PolicyDecision::allow(),
    );
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(blocks.with_deadline(Duration::from_millis(50)))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    let cause = timed_out(&error);
    assert_eq!(cause.scope(), DeadlineScope::Policy);
    assert_eq!(cause.after(), Duration::from_millis(50));
    let records = recorder.take();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, "evaluation_error");
    assert!(records[0].reason.as_deref().unwrap().contains("timed out"));
}

#[tokio::test]
async fn a_late_result_under_a_call_deadline_is_a_time_out() {
    let blocks = Blocks::new(
        "blocks",
        Duration::from_millis(300),
        PolicyDecision::allow(),
    );
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(blocks)
                .call_deadline(INPUT, Duration::from_millis(50))
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert_eq!(timed_out(&error).scope(), DeadlineScope::Call);
}

#[tokio::test]
async fn a_blocking_policy_run_off_the_executor_is_cancelled_at_its_deadline() {
    let blocks = Blocks::new(
        "blocks",
        Duration::from_millis(300),
        PolicyDecision::allow(),
    );
    let finished = Arc::clone(&blocks.finished);
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(blocks.blocking().with_deadline(Duration::from_millis(50)))
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert_eq!(timed_out(&error).scope(), DeadlineScope::Policy);
    // The call returned at the deadline, before the policy's thread was done.
    assert!(!finished.load(Ordering::SeqCst));
    // The thread finishes on its own; its answer goes nowhere.
    while !finished.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_blocking_policy_decides_as_it_would_on_the_executor() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(
                    Blocks::new(
                        "denies",
                        Duration::from_millis(5),
                        PolicyDecision::deny("no"),
                    )
                    .blocking(),
                )
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    let denial = error.as_denial().expect("a denial");
    assert_eq!(denial.policy_id(), "denies");
    assert_eq!(denial.reason(), Some("no"));

    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::panicking("panics").blocking())
                .build(),
        )
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    let cause = error.as_evaluation().expect("an evaluation error").cause();
    assert!(cause.to_string().contains("panicked"), "{cause}");
}

#[tokio::test]
async fn a_monitored_change_that_would_fail_is_audited_as_the_error_it_would_be() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(
                    Scripted::returning(
                        "new_redact",
                        PolicyDecision::redact([Redaction::mask("messages.9.content")]),
                    )
                    .monitored(),
                )
                .input(
                    Scripted::returning(
                        "new_transform",
                        PolicyDecision::transform([TransformOperation::set(
                            "metadata.timestamp",
                            "soon",
                        )]),
                    )
                    .monitored(),
                )
                .input(
                    Scripted::returning(
                        "new_mask",
                        PolicyDecision::redact([Redaction::mask("messages.0.content")]),
                    )
                    .monitored(),
                )
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let context = input(&["hello"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    // Nothing monitored changes what is forwarded.
    assert!(std::ptr::eq(evaluation.context(), &context));
    let records = recorder.take();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.policy_id.as_str(), r.decision.as_str(), r.enforced))
        .collect();
    assert_eq!(
        seen,
        [
            ("new_redact", "evaluation_error", false),
            ("new_transform", "evaluation_error", false),
            ("new_mask", "redact", false),
        ]
    );
    assert!(
        records[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("does not exist"),
        "{:?}",
        records[0].reason
    );
    assert!(
        records[1].reason.as_deref().unwrap().contains("RFC 3339"),
        "{:?}",
        records[1].reason
    );
    // What enforcing would have listed: the failures are not decisions.
    let listed: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|d| d.policy_id.as_str())
        .collect();
    assert_eq!(listed, ["new_mask"]);
}

#[tokio::test]
async fn concurrent_evaluation_audits_the_policies_it_cancels() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::returning("first", PolicyDecision::allow()))
                .input(
                    Scripted::returning("deny", PolicyDecision::deny("stop"))
                        .after(Duration::from_millis(10)),
                )
                .input(
                    Scripted::returning("slow", PolicyDecision::allow())
                        .after(Duration::from_secs(5)),
                )
                .input(Scripted::returning("done", PolicyDecision::allow()))
                .concurrent(INPUT)
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    assert_eq!(error.policy_id(), "deny");
    let records = recorder.take();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.policy_id.as_str(), r.decision.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("first", "allow"),
            ("deny", "deny"),
            ("slow", "evaluation_error"),
            ("done", "evaluation_error"),
        ]
    );
    assert_eq!(
        records[2].reason.as_deref(),
        Some("cancelled after `deny` denied")
    );
    assert_eq!(
        records[3].reason.as_deref(),
        Some("discarded after `deny` denied: it had decided, but its decision was not applied")
    );
}

/// An audit handler that refuses the records of policies whose id starts with `refused`, as a
/// log that cannot keep them does.
struct Refusing(Arc<std::sync::atomic::AtomicUsize>);

impl portcullis_engine::AuditHandler for Refusing {
    fn handle(&self, _: &portcullis_engine::AuditRecord<'_>) {}

    fn try_handle(
        &self,
        record: &portcullis_engine::AuditRecord<'_>,
    ) -> Result<(), portcullis_engine::BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if record.policy_id.starts_with("refused") {
            Err("the audit log is full".into())
        } else {
            Ok(())
        }
    }
}

/// A call whose audit record the handler refuses fails, whatever `on_error` says and however
/// the point runs (one after another, concurrently, an allow, a redaction, an error).
#[tokio::test]
async fn a_refused_audit_record_fails_the_call_even_under_on_error_allow() {
    let sets: Vec<(&str, PolicySetBuilder)> = vec![
        (
            "a plain allow",
            PolicySet::builder().input(Scripted::returning(
                "refused-allow",
                PolicyDecision::allow(),
            )),
        ),
        (
            "a redaction",
            PolicySet::builder().input(Scripted::returning(
                "refused-redact",
                PolicyDecision::redact([Redaction::mask("messages.0.content")]),
            )),
        ),
        (
            "an evaluation error",
            PolicySet::builder().input(Scripted::failing("refused-error", "broken")),
        ),
        (
            "a concurrent point",
            PolicySet::builder()
                .input(Scripted::returning("kept", PolicyDecision::allow()))
                .input(Scripted::returning("refused-late", PolicyDecision::allow()))
                .concurrent(INPUT),
        ),
    ];
    for (what, set) in sets {
        let handled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let engine = PolicyEngine::builder()
            .policy_set(set.on_error(OnError::Allow).build())
            .on_audit(Refusing(Arc::clone(&handled)))
            .build();
        let error = engine
            .evaluate_input(&input(&["my text"]))
            .await
            .expect_err(what);
        let error = error
            .as_evaluation()
            .unwrap_or_else(|| panic!("{what}: {error:?}"));
        assert_eq!(
            error.policy_id(),
            portcullis_engine::AUDIT_POLICY_ID,
            "{what}"
        );
        assert!(error.cause_chain().contains("full"), "{what}");
        assert!(handled.load(Ordering::SeqCst) > 0, "{what}");
    }
    // Records it keeps: the call proceeds.
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::returning("kept", PolicyDecision::allow()))
                .build(),
        )
        .on_audit(Refusing(Arc::default()))
        .build();
    engine
        .evaluate_input(&input(&["my text"]))
        .await
        .expect("kept records");
}
