//! Approvals: `escalate`, the action digest, stored grants, the resolver and its failures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis_engine::approval::action_digest;
use portcullis_engine::{
    ApprovalAnswer, ApprovalRequest, ApprovalResolver, BoxError, EngineError, Grant, GrantStore,
    InterceptionPoint, MemoryGrantStore, PolicyDecision, PolicyEngine, PolicyExt, PolicySet,
    StreamItem, ToolCallContext, TransformOperation, async_trait,
};
use serde_json::json;
use support::*;

type Answer = dyn Fn(&ApprovalRequest) -> Result<ApprovalAnswer, BoxError> + Send + Sync;

/// A resolver that answers from a script and counts the requests it saw.
#[derive(Clone)]
struct Script {
    answer: Arc<Answer>,
    asked: Arc<Mutex<Vec<ApprovalRequest>>>,
    delay: Option<Duration>,
}

impl Script {
    fn new(
        answer: impl Fn(&ApprovalRequest) -> Result<ApprovalAnswer, BoxError> + Send + Sync + 'static,
    ) -> Self {
        Script {
            answer: Arc::new(answer),
            asked: Arc::default(),
            delay: None,
        }
    }

    fn granting(by: &str) -> Self {
        let by = by.to_owned();
        Script::new(move |_| Ok(ApprovalAnswer::Granted { by: by.clone() }))
    }

    fn asked(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
}

#[async_trait]
impl ApprovalResolver for Script {
    async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
        self.asked.lock().unwrap().push(request.clone());
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        (self.answer)(request)
    }
}

fn email(to: &str) -> ToolCallContext {
    tool_call(
        "send_email",
        json!({"to": to, "subject": "hi", "body": "hello"}),
    )
}

fn escalating() -> Scripted<ToolCallContext> {
    Scripted::returning(
        "ask_first",
        PolicyDecision::escalate("e-mail leaves the company"),
    )
}

fn set() -> PolicySet {
    PolicySet::builder().tool_call(escalating()).build()
}

fn required(error: EngineError) -> ApprovalRequest {
    match error {
        EngineError::ApprovalRequired(request) => *request,
        other => panic!("expected an approval request, got {other:?}"),
    }
}

#[tokio::test]
async fn escalate_reads_and_writes_its_wire_form() {
    let decision: PolicyDecision =
        serde_json::from_str(r#"{"decision":"escalate","reason":"ask"}"#).unwrap();
    assert_eq!(decision, PolicyDecision::escalate("ask"));
    assert_eq!(decision.name(), "escalate");
    assert_eq!(decision.reason(), Some("ask"));
    assert_eq!(
        serde_json::to_value(PolicyDecision::Escalate {
            reason: None,
            labels: Vec::new(),
        })
        .unwrap(),
        json!({"decision": "escalate"})
    );
}

#[tokio::test]
async fn without_a_resolver_an_escalation_requires_an_approval_and_is_audited() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .on_audit(recorder.handler())
        .build();
    let context = email("a@example.com");
    let request = required(engine.evaluate_tool_call(&context).await.unwrap_err());
    assert_eq!(request.interception_point, InterceptionPoint::ToolCall);
    assert_eq!(request.policy_ids, ["ask_first"]);
    assert_eq!(request.reasons, ["e-mail leaves the company"]);
    assert_eq!(request.context, serde_json::to_value(&context).unwrap());
    assert_eq!(
        request.action_digest,
        action_digest(InterceptionPoint::ToolCall, &request.context)
    );
    let records = recorder.take();
    let summary: Vec<_> = records
        .iter()
        .map(|kept| (kept.policy_id.as_str(), kept.decision.as_str()))
        .collect();
    assert_eq!(
        summary,
        [("ask_first", "escalate"), ("ask_first", "approval_pending")]
    );
    assert_eq!(
        records[0].reason.as_deref(),
        Some("e-mail leaves the company")
    );
    assert_eq!(
        records[1].reason.as_deref(),
        Some("no approval resolver is configured")
    );
}

#[tokio::test]
async fn the_digest_ignores_the_timestamp_and_key_order_but_no_other_byte() {
    let engine = PolicyEngine::builder().policy_set(set()).build();
    let first = email("a@example.com");
    let mut later = first.clone();
    later.metadata.timestamp = "2027-01-01T00:00:00.000Z".into();
    let mut changed = first.clone();
    changed
        .arguments
        .insert("to".into(), json!("b@example.com"));
    let mut one_byte = first.clone();
    one_byte.arguments.insert("body".into(), json!("hellp"));
    let digest = |context: ToolCallContext| {
        let engine = &engine;
        async move { required(engine.evaluate_tool_call(&context).await.unwrap_err()).action_digest }
    };
    let reference = digest(first.clone()).await;
    assert_eq!(reference, digest(later).await);
    assert_ne!(reference, digest(changed).await);
    assert_ne!(reference, digest(one_byte).await);

    let ordered: serde_json::Value =
        serde_json::from_str(r#"{"tool_name":"t","arguments":{"a":1,"b":{"c":2,"d":3}}}"#).unwrap();
    let reordered: serde_json::Value =
        serde_json::from_str(r#"{"arguments":{"b":{"d":3,"c":2},"a":1},"tool_name":"t"}"#).unwrap();
    assert_eq!(
        action_digest(InterceptionPoint::ToolCall, &ordered),
        action_digest(InterceptionPoint::ToolCall, &reordered)
    );
}

#[tokio::test]
async fn a_stored_grant_lets_exactly_one_call_through() {
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .on_audit(recorder.handler())
        .build();
    let context = email("a@example.com");
    let request = required(engine.evaluate_tool_call(&context).await.unwrap_err());
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    recorder.take();

    // The retried call, later: another timestamp, the same action.
    let mut retried = context.clone();
    retried.metadata.timestamp = "2026-11-22T10:05:00.000Z".into();
    let evaluation = engine.evaluate_tool_call(&retried).await.unwrap();
    assert_eq!(evaluation.context(), &retried);
    assert!(evaluation.escalates());
    let records = recorder.take();
    assert_eq!(records[1].decision, "approval_granted");
    assert_eq!(
        records[1].reason.as_deref(),
        Some("granted by alice (a stored grant)")
    );

    // The grant is used up.
    let again = required(engine.evaluate_tool_call(&retried).await.unwrap_err());
    assert_eq!(again.action_digest, request.action_digest);
}

#[tokio::test]
async fn an_expired_grant_or_a_grant_for_another_action_does_not_count() {
    let engine = PolicyEngine::builder().policy_set(set()).build();
    let context = email("a@example.com");
    let request = required(engine.evaluate_tool_call(&context).await.unwrap_err());
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::ZERO)
        .await
        .unwrap();
    required(engine.evaluate_tool_call(&context).await.unwrap_err());

    let other = required(
        engine
            .evaluate_tool_call(&email("b@example.com"))
            .await
            .unwrap_err(),
    );
    engine
        .approvals()
        .grant(&other.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    required(engine.evaluate_tool_call(&context).await.unwrap_err());
    // The other action's grant is still there for it.
    engine
        .evaluate_tool_call(&email("b@example.com"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_memory_store_drops_expired_grants_and_takes_one_at_a_time() {
    let store = MemoryGrantStore::new();
    let past = std::time::SystemTime::now() - Duration::from_secs(1);
    let future = std::time::SystemTime::now() + Duration::from_secs(60);
    store
        .put(
            "d",
            Grant {
                by: "old".into(),
                expires_at: past,
            },
        )
        .await
        .unwrap();
    store
        .put(
            "d",
            Grant {
                by: "new".into(),
                expires_at: future,
            },
        )
        .await
        .unwrap();
    assert_eq!(store.take("d").await.unwrap().unwrap().by, "new");
    assert_eq!(store.take("d").await.unwrap(), None);
    assert_eq!(store.take("other").await.unwrap(), None);
}

#[tokio::test]
async fn the_resolver_grants_refuses_or_leaves_pending() {
    let recorder = Recorder::default();
    let script = Script::new(|request| {
        Ok(match request.context["arguments"]["to"].as_str() {
            Some("a@example.com") => ApprovalAnswer::Granted { by: "bob".into() },
            Some("b@example.com") => ApprovalAnswer::Refused {
                reason: Some("not this one".into()),
            },
            _ => ApprovalAnswer::Pending,
        })
    });
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .approvals(script.clone())
        .on_audit(recorder.handler())
        .build();

    engine
        .evaluate_tool_call(&email("a@example.com"))
        .await
        .unwrap();
    let records = recorder.take();
    assert_eq!(records[1].decision, "approval_granted");
    assert_eq!(records[1].reason.as_deref(), Some("granted by bob"));

    let error = engine
        .evaluate_tool_call(&email("b@example.com"))
        .await
        .unwrap_err();
    let denial = error.as_denial().expect("a refusal is a denial");
    assert_eq!(denial.policy_id(), "ask_first");
    assert_eq!(denial.reason(), Some("not this one"));
    let records = recorder.take();
    assert_eq!(records[1].decision, "approval_refused");
    assert_eq!(records[1].reason.as_deref(), Some("not this one"));

    required(
        engine
            .evaluate_tool_call(&email("c@example.com"))
            .await
            .unwrap_err(),
    );
    assert_eq!(recorder.take()[1].decision, "approval_pending");
    assert_eq!(script.asked(), 3);
}

#[tokio::test]
async fn a_stored_grant_is_used_before_the_resolver_is_asked() {
    let script = Script::granting("bob");
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .approvals(script.clone())
        .build();
    let context = email("a@example.com");
    let digest = action_digest(
        InterceptionPoint::ToolCall,
        &serde_json::to_value(&context).unwrap(),
    );
    engine
        .approvals()
        .grant(&digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(script.asked(), 0);
    engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(script.asked(), 1);
}

#[tokio::test]
async fn a_resolver_that_fails_or_panics_refuses() {
    for (script, expected) in [
        (
            Script::new(|_| Err("the chat is down".into())),
            "the approval resolver failed: the chat is down",
        ),
        (
            Script::new(|_| panic!("resolver bug")),
            "the approval resolver panicked: resolver bug",
        ),
    ] {
        let recorder = Recorder::default();
        let engine = PolicyEngine::builder()
            .policy_set(set())
            .approvals(script)
            .on_audit(recorder.handler())
            .build();
        let error = engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err();
        let denial = error.as_denial().expect("fails closed as a denial");
        assert_eq!(denial.policy_id(), "ask_first");
        assert_eq!(denial.reason(), Some(expected));
        assert_eq!(recorder.take()[1].decision, "approval_refused");
    }
}

#[tokio::test]
async fn a_resolver_that_does_not_answer_in_time_leaves_the_approval_pending() {
    let mut script = Script::granting("late");
    script.delay = Some(Duration::from_secs(30));
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .approvals(script)
        .approval_timeout(Duration::from_millis(50))
        .on_audit(recorder.handler())
        .build();
    required(
        engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err(),
    );
    let records = recorder.take();
    assert_eq!(records[1].decision, "approval_pending");
    assert_eq!(records[1].reason.as_deref(), Some("no answer within 50ms"));
}

#[tokio::test]
async fn a_later_deny_wins_and_no_approval_is_asked() {
    let script = Script::granting("bob");
    let recorder = Recorder::default();
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .tool_call(escalating())
                .tool_call(Scripted::returning(
                    "no_email",
                    PolicyDecision::deny("never"),
                ))
                .build(),
        )
        .approvals(script.clone())
        .on_audit(recorder.handler())
        .build();
    let error = engine
        .evaluate_tool_call(&email("a@example.com"))
        .await
        .unwrap_err();
    assert_eq!(error.as_denial().unwrap().policy_id(), "no_email");
    assert_eq!(script.asked(), 0);
    assert_eq!(
        recorder.summary(),
        pairs(&[("ask_first", "escalate"), ("no_email", "deny")])
    );
}

#[tokio::test]
async fn later_changes_apply_and_the_request_shows_the_changed_action() {
    let script = Script::granting("bob");
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .tool_call(escalating())
                .tool_call(Scripted::returning(
                    "sign",
                    PolicyDecision::transform([TransformOperation::append(
                        "arguments.body",
                        " -- sent by an agent",
                    )]),
                ))
                .build(),
        )
        .approvals(script.clone())
        .build();
    let context = email("a@example.com");
    let evaluation = engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(
        evaluation.context().arguments["body"],
        "hello -- sent by an agent"
    );
    let asked = script.asked.lock().unwrap();
    assert_eq!(
        asked[0].context["arguments"]["body"],
        "hello -- sent by an agent"
    );
}

#[tokio::test]
async fn a_monitored_escalation_asks_nobody() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .tool_call(escalating().monitored())
                .build(),
        )
        .build();
    engine
        .evaluate_tool_call(&email("a@example.com"))
        .await
        .unwrap();
}

#[tokio::test]
async fn concurrent_escalations_run_with_concurrent_policies_too() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .tool_call(escalating())
                .tool_call(Scripted::returning("ok", PolicyDecision::allow()))
                .concurrent(InterceptionPoint::ToolCall)
                .build(),
        )
        .build();
    required(
        engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_grant_lets_one_of_many_concurrent_calls_through() {
    let engine = Arc::new(PolicyEngine::builder().policy_set(set()).build());
    let context = email("a@example.com");
    let request = required(engine.evaluate_tool_call(&context).await.unwrap_err());
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    let passed = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let engine = Arc::clone(&engine);
            let context = context.clone();
            let passed = Arc::clone(&passed);
            tokio::spawn(async move {
                match engine.evaluate_tool_call(&context).await {
                    Ok(_) => {
                        passed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(error) => {
                        required(error);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(passed.load(Ordering::SeqCst), 1);
}

/// A grant store that refuses to work: the engine fails closed.
struct Broken;

#[async_trait]
impl GrantStore for Broken {
    async fn put(&self, _: &str, _: Grant) -> Result<(), BoxError> {
        Err("offline".into())
    }

    async fn take(&self, _: &str) -> Result<Option<Grant>, BoxError> {
        Err("offline".into())
    }
}

#[tokio::test]
async fn a_failing_grant_store_refuses() {
    let script = Script::granting("bob");
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .approvals(script.clone())
        .grant_store(Broken)
        .build();
    let error = engine
        .evaluate_tool_call(&email("a@example.com"))
        .await
        .unwrap_err();
    assert_eq!(
        error.as_denial().unwrap().reason(),
        Some("the grant store failed: offline")
    );
    assert_eq!(script.asked(), 0);
    assert!(
        engine
            .approvals()
            .grant("d", "alice", Duration::from_secs(1))
            .await
            .is_err()
    );
}

struct EscalateOutput;

#[async_trait]
impl portcullis_engine::Policy<portcullis_engine::OutputContext> for EscalateOutput {
    fn id(&self) -> &str {
        "ask_before_answering"
    }

    async fn evaluate(
        &self,
        context: &portcullis_engine::OutputContext,
    ) -> Result<PolicyDecision, BoxError> {
        Ok(if context.response.content.contains("wire") {
            PolicyDecision::escalate("money moves")
        } else {
            PolicyDecision::allow()
        })
    }
}

#[tokio::test]
async fn an_escalating_output_policy_holds_the_whole_stream_until_it_is_resolved() {
    for (resolver, granted) in [(Some(Script::granting("bob")), true), (None, false)] {
        let mut builder =
            PolicyEngine::builder().policy_set(PolicySet::builder().output(EscalateOutput).build());
        if let Some(resolver) = resolver {
            builder = builder.approvals(resolver);
        }
        let engine = builder.build();
        let mut stream = engine.output_stream(metadata());
        let mut released = String::new();
        for delta in ["I will ", "wire the ", "money now."] {
            for item in stream.push(delta).await {
                match item {
                    StreamItem::Text(text) => released.push_str(&text),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert_eq!(released, "", "text was released before the approval");
        let items = stream.finish().await;
        if granted {
            assert!(
                matches!(&items[..], [StreamItem::Text(text)] if text == "I will wire the money now.")
            );
        } else {
            assert!(
                matches!(&items[..], [StreamItem::ApprovalRequired(request)] if request.policy_ids == ["ask_before_answering"])
            );
        }
    }
}

#[tokio::test]
async fn an_unanswered_escalation_is_recorded_once_and_decided_by_id() {
    use portcullis_engine::{ApprovalStatus, ApprovalVerdict};
    let engine = PolicyEngine::builder().policy_set(set()).build();
    let first = required(
        engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err(),
    );
    // A retry before anyone answered carries the same request.
    let again = required(
        engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err(),
    );
    assert_eq!(again.id, first.id);
    let pending = engine
        .approvals()
        .list(Some(ApprovalStatus::Pending))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].request.context["arguments"]["to"],
        "a@example.com"
    );
    let record = engine
        .approvals()
        .decide(
            &first.id,
            ApprovalVerdict::Grant {
                by: "erin".into(),
                ttl: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();
    assert_eq!(record.status, ApprovalStatus::Granted);
    engine
        .evaluate_tool_call(&email("a@example.com"))
        .await
        .unwrap();
    let next = required(
        engine
            .evaluate_tool_call(&email("a@example.com"))
            .await
            .unwrap_err(),
    );
    assert_ne!(next.id, first.id, "a grant is used once");
    engine
        .approvals()
        .decide(
            &next.id,
            ApprovalVerdict::Refuse {
                by: "erin".into(),
                reason: Some("not again".into()),
            },
        )
        .await
        .unwrap();
    for _ in 0..2 {
        match engine.evaluate_tool_call(&email("a@example.com")).await {
            Err(EngineError::Denied(denial)) => {
                assert_eq!(denial.policy_id(), "ask_first");
                assert_eq!(denial.reason(), Some("refused by erin: not again"));
            }
            other => panic!("a refused action is denied, not {other:?}"),
        }
    }
    let other = required(
        engine
            .evaluate_tool_call(&email("b@example.com"))
            .await
            .unwrap_err(),
    );
    assert_ne!(other.action_digest, first.action_digest);
}

#[tokio::test]
async fn an_action_scoped_grant_covers_the_call_not_the_words_around_it() {
    use portcullis_engine::{ApprovalScope, Message, Metadata};
    let engine = PolicyEngine::builder()
        .policy_set(set())
        .approval_scope(ApprovalScope::Action)
        .build();
    let call = |id: &str, words: &str, session: &str| {
        let mut metadata = Metadata::new("agent", session);
        metadata.extra.insert("tool_call_id".into(), json!(id));
        ToolCallContext::new(
            "send_email",
            json!({"to": "a@example.com"}).as_object().unwrap().clone(),
            Message::assistant(words),
            metadata,
        )
    };
    let request = required(
        engine
            .evaluate_tool_call(&call("call_1", "Sending.", "s"))
            .await
            .unwrap_err(),
    );
    engine
        .approvals()
        .grant(&request.action_digest, "erin", Duration::from_secs(60))
        .await
        .unwrap();
    // Another session is another action.
    required(
        engine
            .evaluate_tool_call(&call("call_2", "Trying again.", "other"))
            .await
            .unwrap_err(),
    );
    engine
        .evaluate_tool_call(&call("call_3", "Trying again.", "s"))
        .await
        .unwrap();
}
