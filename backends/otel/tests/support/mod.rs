//! Policies and an engine that produce every kind of audit record.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use portcullis_engine::{
    AuditHandler, AuditRecord, BoxError, InputContext, Message, Metadata, OnError, Policy,
    PolicyDecision, PolicyEngine, PolicyExt, PolicySet, ToolCallContext, async_trait,
};
use serde_json::json;

/// A policy that always gives the same answer.
pub struct Fixed {
    id: &'static str,
    answer: Result<PolicyDecision, &'static str>,
}

impl Fixed {
    pub fn decides(id: &'static str, decision: PolicyDecision) -> Self {
        Fixed {
            id,
            answer: Ok(decision),
        }
    }

    pub fn fails(id: &'static str, error: &'static str) -> Self {
        Fixed {
            id,
            answer: Err(error),
        }
    }

    fn answer(&self) -> Result<PolicyDecision, BoxError> {
        self.answer.clone().map_err(BoxError::from)
    }
}

#[async_trait]
impl Policy<InputContext> for Fixed {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        self.answer()
    }
}

#[async_trait]
impl Policy<ToolCallContext> for Fixed {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, _: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        self.answer()
    }
}

/// What one record said, copied out.
#[derive(Debug, Clone)]
pub struct Seen {
    pub policy_id: String,
    pub decision: &'static str,
    pub timestamp: SystemTime,
    pub reason: Option<String>,
    pub enforced: bool,
}

/// Wraps a handler, noting every record it passes on.
pub fn noting<H: AuditHandler>(handler: H, seen: Arc<Mutex<Vec<Seen>>>) -> impl AuditHandler {
    move |record: &AuditRecord<'_>| {
        seen.lock().unwrap().push(Seen {
            policy_id: record.policy_id.to_owned(),
            decision: record.decision.as_str(),
            timestamp: record.timestamp,
            reason: record.reason.as_deref().map(str::to_owned),
            enforced: record.enforced,
        });
        handler.handle(record);
    }
}

/// Input policies giving, in order: allow, audit, redact, transform, a monitored deny and an
/// enforced deny; a tool-call policy that fails (skipped: `OnError::Allow`).
pub fn every_decision(handler: impl AuditHandler) -> PolicyEngine {
    let redact: PolicyDecision = serde_json::from_value(json!({
        "decision": "redact",
        "redactions": [{"field": "messages.0.content", "strategy": "mask", "pattern": "\\d+"}]
    }))
    .unwrap();
    let transform: PolicyDecision = serde_json::from_value(json!({
        "decision": "transform",
        "transformation": {"operations": [{"op": "append", "field": "messages.0.content", "value": "!"}]}
    }))
    .unwrap();
    let set = PolicySet::builder()
        .input(Fixed::decides("allow_all", PolicyDecision::allow()))
        .input(Fixed::decides(
            "note_it",
            PolicyDecision::audit("worth a look"),
        ))
        .input(Fixed::decides("mask_digits", redact))
        .input(Fixed::decides("shout", transform))
        .input(Fixed::decides("would_block", PolicyDecision::deny("trial rule")).monitored())
        .input(Fixed::decides(
            "no_secrets",
            PolicyDecision::deny("secrets stay home"),
        ))
        .tool_call(Fixed::fails("broken", "backend unavailable"))
        .on_error(OnError::Allow)
        .build();
    PolicyEngine::builder()
        .policy_set(set)
        .on_audit(handler)
        .build()
}

pub fn input() -> InputContext {
    InputContext::new(
        vec![Message::user("my pin is 1234")],
        Metadata::new("agent-7", "session-42"),
    )
}

pub fn tool_call() -> ToolCallContext {
    ToolCallContext::new(
        "search",
        serde_json::Map::new(),
        Message::assistant("let me search"),
        Metadata::new("agent-7", "session-42"),
    )
}

/// Runs one input evaluation (ends in a denial) and one tool-call evaluation (one evaluation
/// error, skipped); returns how many records that makes.
pub async fn run_every_decision(engine: &PolicyEngine) -> usize {
    let denied = engine.evaluate_input(&input()).await.unwrap_err();
    assert_eq!(denied.as_denial().unwrap().policy_id(), "no_secrets");
    engine.evaluate_tool_call(&tool_call()).await.unwrap();
    7
}
