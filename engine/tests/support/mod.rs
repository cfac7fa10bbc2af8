//! Policies and contexts shared by the engine's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis_engine::{
    AuditRecord, BoxError, InputContext, Message, Metadata, OutputContext, Policy, PolicyContext,
    PolicyDecision, ToolCallContext, async_trait,
};
use serde_json::{Value, json};

type Decide<C> = dyn Fn(&C) -> Result<PolicyDecision, BoxError> + Send + Sync;

/// A policy whose decision a test scripts, counting its calls and optionally sleeping first.
pub struct Scripted<C> {
    id: String,
    decide: Box<Decide<C>>,
    delay: Option<Duration>,
    pub calls: Arc<AtomicUsize>,
    pub finished: Arc<AtomicUsize>,
}

impl<C> Scripted<C> {
    pub fn new(
        id: &str,
        decide: impl Fn(&C) -> Result<PolicyDecision, BoxError> + Send + Sync + 'static,
    ) -> Self {
        Scripted {
            id: id.to_owned(),
            decide: Box::new(decide),
            delay: None,
            calls: Arc::default(),
            finished: Arc::default(),
        }
    }

    pub fn returning(id: &str, decision: PolicyDecision) -> Self {
        Self::new(id, move |_| Ok(decision.clone()))
    }

    pub fn failing(id: &str, message: &'static str) -> Self {
        Self::new(id, move |_| Err(message.into()))
    }

    pub fn panicking(id: &str) -> Self {
        Self::new(id, |_| panic!("boom in policy"))
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    pub fn calls(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.calls)
    }

    pub fn finished(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.finished)
    }

    async fn run(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        let decision = (self.decide)(context);
        self.finished.fetch_add(1, Ordering::SeqCst);
        decision
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for Scripted<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        self.run(context).await
    }
}

pub fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-42")
        .with_timestamp("2026-11-22T10:00:00.000Z")
        .with_extra("tenant", "acme")
}

pub fn input(texts: &[&str]) -> InputContext {
    InputContext::new(
        texts
            .iter()
            .enumerate()
            .map(|(at, text)| {
                if at == 0 {
                    Message::system(*text)
                } else {
                    Message::user(*text)
                }
            })
            .collect(),
        metadata(),
    )
}

pub fn tool_call(tool: &str, arguments: Value) -> ToolCallContext {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    ToolCallContext::new(
        tool,
        arguments,
        Message::assistant("calling a tool"),
        metadata(),
    )
}

pub fn output(text: &str) -> OutputContext {
    OutputContext::new(Message::assistant(text), metadata())
}

pub fn sample_arguments() -> Value {
    json!({"query": "weather in Paris", "limit": 3, "options": {"lang": "en"}})
}

/// A record as a test keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptRecord {
    pub policy_id: String,
    pub decision: String,
    pub point: String,
    pub reason: Option<String>,
    pub enforced: bool,
    pub context: Value,
    pub json: Value,
}

/// An audit handler that keeps every record.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<KeptRecord>>>);

impl Recorder {
    pub fn handler(&self) -> impl Fn(&AuditRecord<'_>) + Send + Sync + 'static {
        let records = Arc::clone(&self.0);
        move |record: &AuditRecord<'_>| {
            let kept = KeptRecord {
                policy_id: record.policy_id.to_owned(),
                decision: record.decision.as_str().to_owned(),
                point: record.interception_point.as_str().to_owned(),
                reason: record.reason.as_deref().map(str::to_owned),
                enforced: record.enforced,
                context: record.context.to_json(),
                json: record.to_json(),
            };
            records.lock().unwrap().push(kept);
        }
    }

    pub fn take(&self) -> Vec<KeptRecord> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    pub fn summary(&self) -> Vec<(String, String)> {
        self.take()
            .into_iter()
            .map(|kept| (kept.policy_id, kept.decision))
            .collect()
    }
}

pub fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}
