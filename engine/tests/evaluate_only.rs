//! `PolicyEngine::evaluate_only`: one policy of a point, through the engine's machinery (the
//! server side of the remote policy protocol asks for one policy's decision this way).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use portcullis_engine::{
    AuditRecord, BoxError, EngineError, InputContext, InterceptionPoint, Message, Metadata,
    OnError, Policy, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};

/// Answers `decision`, or fails when it has none.
struct Fixed(&'static str, Option<PolicyDecision>);

#[async_trait]
impl Policy<InputContext> for Fixed {
    fn id(&self) -> &str {
        self.0
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        self.1.clone().ok_or_else(|| "the policy broke".into())
    }
}

fn context() -> InputContext {
    InputContext::new(vec![Message::user("hello")], Metadata::new("agent", "s1"))
}

/// (policy id, decision, enforced) of every audit record.
type Records = Arc<Mutex<Vec<(String, String, bool)>>>;

/// An engine on `set` whose audit records are kept.
fn recorded(set: PolicySet) -> (PolicyEngine, Records) {
    let records = Records::default();
    let kept = Arc::clone(&records);
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .on_audit(move |record: &AuditRecord<'_>| {
            kept.lock().unwrap_or_else(|e| e.into_inner()).push((
                record.policy_id.to_owned(),
                record.decision.as_str().to_owned(),
                record.enforced,
            ));
        })
        .build();
    (engine, records)
}

#[tokio::test]
async fn only_the_named_policy_runs_and_is_audited() {
    let set = PolicySet::builder()
        .input(Fixed("deny_all", Some(PolicyDecision::deny("no"))))
        .input(Fixed("allow_all", Some(PolicyDecision::allow())))
        .build();
    let (engine, records) = recorded(set);
    let context = context();
    let evaluation = engine
        .evaluate_only("allow_all", &context)
        .await
        .expect("a policy with that id")
        .expect("allowed");
    let ids: Vec<_> = evaluation
        .decisions()
        .iter()
        .map(|d| d.policy_id.as_str())
        .collect();
    assert_eq!(ids, ["allow_all"]);
    match engine.evaluate_only("deny_all", &context).await {
        Some(Err(EngineError::Denied(denial))) => assert_eq!(denial.policy_id(), "deny_all"),
        other => panic!(
            "not a denial: {:?}",
            other.map(|r| r.map(|e| e.decisions().to_vec()))
        ),
    }
    let records = records.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        records,
        [
            ("allow_all".to_owned(), "allow".to_owned(), true),
            ("deny_all".to_owned(), "deny".to_owned(), true),
        ]
    );
    // No such policy at that point: none at all.
    assert!(engine.evaluate_only("nope", &context).await.is_none());
    let call = ToolCallContext::new(
        "rm",
        serde_json::Map::new(),
        Message::assistant("x"),
        Metadata::new("agent", "s1"),
    );
    assert!(engine.evaluate_only("allow_all", &call).await.is_none());
}

#[tokio::test]
async fn its_mode_and_the_sets_on_error_apply() {
    let set = PolicySet::builder()
        .input(Fixed("deny_all", Some(PolicyDecision::deny("no"))))
        .input(Fixed("broken", None))
        .monitor(InterceptionPoint::Input)
        .build();
    let (engine, records) = recorded(set);
    let context = context();
    let evaluation = engine
        .evaluate_only("deny_all", &context)
        .await
        .expect("a policy with that id")
        .expect("a monitored denial does not stop the call");
    assert!(!evaluation.decisions()[0].enforced);

    let set = PolicySet::builder()
        .input(Fixed("broken", None))
        .on_error(OnError::Allow)
        .build();
    engine.replace_policy_set(set);
    let evaluation = engine
        .evaluate_only("broken", &context)
        .await
        .expect("a policy with that id")
        .expect("on_error: allow skips the failure");
    assert!(evaluation.decisions().is_empty());
    let records = records.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        records,
        [
            ("deny_all".to_owned(), "deny".to_owned(), false),
            ("broken".to_owned(), "evaluation_error".to_owned(), true),
        ]
    );
}
