//! Engine semantics: order, denial, audit, errors, panics, concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use portcullis_engine::error::{DENIED_WITHOUT_REASON, PolicyPanicked};
use portcullis_engine::{
    EngineError, InterceptionPoint, OnError, PolicyDecision, PolicyEngine, PolicySet,
};
use serde_json::json;
use support::*;

#[tokio::test]
async fn policies_run_in_declared_order_and_the_first_deny_stops() {
    let recorder = Recorder::default();
    let first = Scripted::returning("first", PolicyDecision::allow());
    let second = Scripted::returning("second", PolicyDecision::deny("no"));
    let third = Scripted::returning("third", PolicyDecision::allow());
    let third_calls = third.calls();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(first)
                .input(second)
                .input(third)
                .build(),
        )
        .on_audit(recorder.handler())
        .build();

    let error = engine.evaluate_input(&input(&["hi"])).await.unwrap_err();
    let denial = error.as_denial().expect("a denial");
    assert_eq!(denial.policy_id(), "second");
    assert_eq!(denial.interception_point(), InterceptionPoint::Input);
    assert_eq!(denial.reason(), Some("no"));
    assert_eq!(denial.to_string(), "no");
    assert_eq!(third_calls.load(Ordering::SeqCst), 0, "a later policy ran");
    assert_eq!(
        recorder.summary(),
        pairs(&[("first", "allow"), ("second", "deny")])
    );
}

#[tokio::test]
async fn a_denial_names_the_policy_the_decision_names() {
    let decision = PolicyDecision::Deny {
        reason: None,
        policy_id: Some("corporate/pii".into()),
    };
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .tool_call(Scripted::returning("gate", decision))
                .build(),
        )
        .build();
    let error = engine
        .evaluate_tool_call(&tool_call("shell", sample_arguments()))
        .await
        .unwrap_err();
    let denial = error.as_denial().unwrap();
    assert_eq!(denial.policy_id(), "corporate/pii");
    assert_eq!(denial.interception_point(), InterceptionPoint::ToolCall);
    assert_eq!(denial.reason(), None);
    assert_eq!(denial.to_string(), DENIED_WITHOUT_REASON);
    assert_eq!(error.policy_id(), "corporate/pii");
    assert!(error.to_string().contains("corporate/pii"), "{error}");
    // A denial has no cause: its reason is said once, by the error itself.
    assert!(std::error::Error::source(&error).is_none());
}

#[tokio::test]
async fn an_empty_set_allows_everything_unchanged() {
    let engine = PolicyEngine::builder().build();
    let context = input(&["system", "anything"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert!(evaluation.decisions().is_empty());
    assert!(std::ptr::eq(evaluation.context(), &context));
    let output_context = output("fine");
    let evaluation = engine.evaluate_output(&output_context).await.unwrap();
    assert_eq!(evaluation.into_context(), output_context);
}

#[tokio::test]
async fn the_original_context_is_forwarded_without_a_copy_when_nothing_changes() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(Scripted::returning("a", PolicyDecision::allow()))
                .output(Scripted::returning("b", PolicyDecision::audit("seen")))
                .build(),
        )
        .build();
    let context = output("hello");
    let evaluation = engine.evaluate_output(&context).await.unwrap();
    assert!(!evaluation.is_modified());
    assert!(std::ptr::eq(evaluation.context(), &context));
    let ids: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|entry| (entry.policy_id.as_str(), entry.decision.name()))
        .collect();
    assert_eq!(ids, [("a", "allow"), ("b", "audit")]);
}

#[tokio::test]
async fn every_decision_is_audited_with_every_field() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(Scripted::returning(
                    "allow",
                    PolicyDecision::Allow {
                        audit: true,
                        labels: Vec::new(),
                    },
                ))
                .output(Scripted::returning("note", PolicyDecision::audit("looked")))
                .output(Scripted::returning(
                    "mask",
                    PolicyDecision::redact([portcullis_engine::Redaction::replace(
                        "response.content",
                        "secret",
                    )]),
                ))
                .output(Scripted::returning(
                    "quiet",
                    PolicyDecision::deny_silently(),
                ))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let before = std::time::SystemTime::now();
    let context = output("a secret answer");
    assert!(engine.evaluate_output(&context).await.is_err());
    let records = recorder.take();
    assert_eq!(records.len(), 4);

    let expected = [
        ("allow", "allow", None),
        ("note", "audit", Some("looked")),
        ("mask", "redact", None),
        ("quiet", "deny", None),
    ];
    for (record, (id, decision, reason)) in records.iter().zip(expected) {
        assert_eq!(record.policy_id, id);
        assert_eq!(record.decision, decision);
        assert_eq!(record.point, "output");
        assert_eq!(record.reason.as_deref(), reason);
        assert!(record.enforced);
        assert_eq!(record.json["policy_id"], id);
        assert_eq!(record.json["decision"], decision);
        assert_eq!(record.json["interception_point"], "output");
        assert_eq!(record.json.get("reason").and_then(|r| r.as_str()), reason);
        let timestamp = record.json["timestamp"].as_str().unwrap();
        assert_eq!(
            timestamp.len(),
            "2026-11-22T10:00:00.000Z".len(),
            "{timestamp}"
        );
        assert!(timestamp.ends_with('Z'));
        assert!(
            timestamp.as_bytes()[19] == b'.',
            "milliseconds: {timestamp}"
        );
    }
    // The record holds the context each policy evaluated: the deny saw the redacted text.
    assert_eq!(records[2].context["response"]["content"], "a secret answer");
    assert_eq!(
        records[3].context["response"]["content"],
        "a [REDACTED] answer"
    );
    assert_eq!(records[0].context, serde_json::to_value(&context).unwrap());
    let year: u32 = records[0].json["timestamp"].as_str().unwrap()[..4]
        .parse()
        .unwrap();
    let now_year = 1970
        + before
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 31_556_952;
    assert_eq!(u64::from(year), now_year);
}

#[tokio::test]
async fn an_error_fails_the_call_under_on_error_deny() {
    let recorder = Recorder::default();
    let later = Scripted::returning("later", PolicyDecision::allow());
    let later_calls = later.calls();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::failing("broken", "backend unreachable"))
                .input(later)
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    let EngineError::Evaluation(error) = error else {
        panic!("expected an evaluation error, got {error:?}")
    };
    assert_eq!(error.policy_id(), "broken");
    assert_eq!(error.interception_point(), InterceptionPoint::Input);
    assert_eq!(
        std::error::Error::source(&error).unwrap().to_string(),
        "backend unreachable"
    );
    // As std's errors do: the message of this level, the cause from `source`, each once.
    assert_eq!(
        error.to_string(),
        "policy `broken` failed at the input point"
    );
    let whole = EngineError::Evaluation(error);
    assert_eq!(
        whole.to_string(),
        "policy `broken` failed at the input point"
    );
    assert_eq!(
        std::error::Error::source(&whole).map(ToString::to_string),
        Some("backend unreachable".to_owned())
    );
    assert_eq!(
        portcullis_engine::error::error_chain(&whole),
        "policy `broken` failed at the input point: backend unreachable"
    );
    assert_eq!(later_calls.load(Ordering::SeqCst), 0);
    let records = recorder.take();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, "evaluation_error");
    assert_eq!(records[0].reason.as_deref(), Some("backend unreachable"));
}

#[tokio::test]
async fn an_error_is_skipped_under_on_error_allow() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .on_error(OnError::Allow)
                .input(Scripted::failing("broken", "backend unreachable"))
                .input(Scripted::returning("later", PolicyDecision::allow()))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    let context = input(&["x"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(evaluation.decisions().len(), 1);
    assert_eq!(evaluation.decisions()[0].policy_id, "later");
    assert_eq!(
        recorder.summary(),
        pairs(&[("broken", "evaluation_error"), ("later", "allow")])
    );
}

#[tokio::test]
async fn a_panicking_policy_is_an_evaluation_error_and_the_engine_stays_usable() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::new(
                    "picky",
                    |context: &portcullis_engine::InputContext| {
                        if context.messages.len() > 1 {
                            panic!("too many messages for me");
                        }
                        Ok(PolicyDecision::allow())
                    },
                ))
                .build(),
        )
        .on_audit(recorder.handler())
        .build();
    for _ in 0..3 {
        let error = engine
            .evaluate_input(&input(&["a", "b"]))
            .await
            .unwrap_err();
        let evaluation = error.as_evaluation().unwrap();
        let panicked = evaluation.cause().downcast_ref::<PolicyPanicked>().unwrap();
        assert_eq!(panicked.message(), "too many messages for me");
        assert!(engine.evaluate_input(&input(&["a"])).await.is_ok());
    }
    let records = recorder.take();
    assert_eq!(records.len(), 6);
    assert_eq!(
        records[0].reason.as_deref(),
        Some("the policy panicked: too many messages for me")
    );
}

#[tokio::test]
async fn a_panic_under_on_error_allow_is_skipped() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .on_error(OnError::Allow)
                .output(Scripted::panicking("explodes"))
                .output(Scripted::returning("fine", PolicyDecision::allow()))
                .build(),
        )
        .build();
    let context = output("x");
    let evaluation = engine.evaluate_output(&context).await.unwrap();
    assert_eq!(evaluation.decisions()[0].policy_id, "fine");
}

/// Panics when its evaluation starts, before it returns a future.
struct PanicsOnStart;

impl portcullis_engine::Policy<portcullis_engine::InputContext> for PanicsOnStart {
    fn id(&self) -> &str {
        "panics_on_start"
    }

    fn evaluate<'life0, 'life1, 'async_trait>(
        &'life0 self,
        _: &'life1 portcullis_engine::InputContext,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<PolicyDecision, portcullis_engine::BoxError>>
                + Send
                + 'async_trait,
        >,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        panic!("before the future")
    }
}

#[tokio::test]
async fn a_panic_between_allows_is_the_error_of_the_policy_that_panicked() {
    let set = |on_error| {
        PolicySet::builder()
            .on_error(on_error)
            .input(Scripted::returning("first", PolicyDecision::allow()))
            // Pending once: the panic comes in a later poll of the run.
            .input(
                Scripted::returning("slow", PolicyDecision::allow())
                    .after(std::time::Duration::from_millis(2)),
            )
            .input(Scripted::new("explodes", |_| panic!("third one")))
            .input(PanicsOnStart)
            .input(Scripted::returning("last", PolicyDecision::allow()))
            .build()
    };
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(set(OnError::Deny))
        .on_audit(recorder.handler())
        .build();
    let error = engine.evaluate_input(&input(&["x"])).await.unwrap_err();
    let failed = error.as_evaluation().expect("an evaluation error");
    assert_eq!(failed.policy_id(), "explodes");
    let panicked = failed.cause().downcast_ref::<PolicyPanicked>().unwrap();
    assert_eq!(panicked.message(), "third one");
    assert_eq!(
        recorder.summary(),
        pairs(&[
            ("first", "allow"),
            ("slow", "allow"),
            ("explodes", "evaluation_error")
        ])
    );

    let engine = PolicyEngine::builder()
        .policy_set(set(OnError::Allow))
        .on_audit(recorder.handler())
        .build();
    let context = input(&["x"]);
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    let ids: Vec<&str> = evaluation
        .decisions()
        .iter()
        .map(|entry| entry.policy_id.as_str())
        .collect();
    assert_eq!(ids, ["first", "slow", "last"]);
    let records = recorder.take();
    let summary: Vec<(&str, &str)> = records
        .iter()
        .map(|record| (record.policy_id.as_str(), record.decision.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("first", "allow"),
            ("slow", "allow"),
            ("explodes", "evaluation_error"),
            ("panics_on_start", "evaluation_error"),
            ("last", "allow")
        ]
    );
    assert_eq!(
        records[3].reason.as_deref(),
        Some("the policy panicked: before the future")
    );
}

#[tokio::test]
async fn a_panicking_audit_handler_does_not_break_the_evaluation() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::returning("a", PolicyDecision::allow()))
                .build(),
        )
        .on_audit(|_: &portcullis_engine::AuditRecord<'_>| panic!("handler bug"))
        .build();
    assert!(engine.evaluate_input(&input(&["x"])).await.is_ok());
}

#[tokio::test]
async fn a_thousand_concurrent_evaluations_through_one_shared_engine() {
    let recorder = Recorder::default();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(
                PolicySet::builder()
                    .input(Scripted::new(
                        "odd",
                        |context: &portcullis_engine::InputContext| {
                            let n: u32 = context.messages[1].content.parse()?;
                            Ok(if n % 2 == 1 {
                                PolicyDecision::deny(format!("{n} is odd"))
                            } else {
                                PolicyDecision::redact([portcullis_engine::Redaction::mask(
                                    "metadata.tenant",
                                )])
                            })
                        },
                    ))
                    .build(),
            )
            .on_audit(recorder.handler())
            .build(),
    );
    let tasks: Vec<_> = (0..1000u32)
        .map(|n| {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move {
                let context = input(&["sys", &n.to_string()]);
                match engine.evaluate_input(&context).await {
                    Ok(evaluation) => {
                        assert_eq!(n % 2, 0);
                        assert_eq!(
                            evaluation.context().metadata.extra["tenant"],
                            json!("[REDACTED]")
                        );
                    }
                    Err(error) => {
                        assert_eq!(n % 2, 1);
                        assert_eq!(
                            error.as_denial().unwrap().reason(),
                            Some(&*format!("{n} is odd"))
                        );
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(recorder.take().len(), 1000);
}

#[test]
fn works_on_any_executor() {
    // No tokio here: a minimal executor that parks the thread.
    struct ThreadWaker(std::thread::Thread);
    impl std::task::Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(Scripted::returning("a", PolicyDecision::allow()))
                .call_deadline(InterceptionPoint::Input, std::time::Duration::from_secs(1))
                .build(),
        )
        .build();
    let context = input(&["x"]);
    let mut future = std::pin::pin!(engine.evaluate_input(&context));
    let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(result) = future.as_mut().poll(&mut cx) {
            assert!(result.is_ok());
            break;
        }
        std::thread::park();
    }
}
