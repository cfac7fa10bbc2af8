//! What one evaluation came to, as one JSON document: the answer of
//! `POST /v1/evaluate/{point}` and what `portcullis eval` prints.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use portcullis_engine::error::error_chain;
use portcullis_engine::{
    AuditDecision, AuditHandler, AuditRecord, BoxError, EngineError, InputContext,
    InterceptionPoint, OutputContext, PolicyContext, PolicyEngine, ToolCallContext,
    ToolResultContext,
};
use serde_json::Value;

tokio::task_local! {
    /// The decisions audited by the evaluation running in this task.
    static TAKEN: RefCell<Vec<(String, AuditDecision)>>;
}

/// Called with every audit record (the service counts decisions with one).
type Observer = Arc<dyn Fn(&AuditRecord<'_>) + Send + Sync>;

/// An audit handler that notes which decisions an evaluation took, for [`evaluate`], and hands
/// every record on to the handler it wraps (if any).
///
/// An engine whose outcomes are reported with [`evaluate`] must have this handler (built with
/// [`DecisionTap::new`] or [`DecisionTap::wrapping`] its own). Records are noted per task, so
/// concurrent evaluations on one engine never see each other's decisions.
#[derive(Clone, Default)]
pub struct DecisionTap {
    inner: Option<Arc<dyn AuditHandler>>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for DecisionTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionTap")
            .field("inner", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

impl DecisionTap {
    /// A tap that only notes decisions.
    pub fn new() -> Self {
        DecisionTap::default()
    }

    /// A tap that notes decisions and hands every record to `handler` (an audit log, an
    /// exporter).
    pub fn wrapping(handler: impl AuditHandler) -> Self {
        DecisionTap {
            inner: Some(Arc::new(handler)),
            observer: None,
        }
    }

    /// A tap that hands every record to a shared `handler` too.
    pub fn wrapping_shared(handler: Arc<dyn AuditHandler>) -> Self {
        DecisionTap {
            inner: Some(handler),
            observer: None,
        }
    }

    /// Also calls `observer` with every record (the service counts decisions this way).
    pub fn observed(mut self, observer: impl Fn(&AuditRecord<'_>) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }
}

impl AuditHandler for DecisionTap {
    fn handle(&self, record: &AuditRecord<'_>) {
        let _ = self.try_handle(record);
    }

    /// Notes the record, then hands it on and returns the wrapped handler's answer, so a log
    /// under `on_failure: deny` fails the call behind the service too.
    fn try_handle(&self, record: &AuditRecord<'_>) -> Result<(), BoxError> {
        let _ = TAKEN.try_with(|taken| {
            taken
                .borrow_mut()
                .push((record.policy_id.to_owned(), record.decision));
        });
        if let Some(observer) = &self.observer {
            observer(record);
        }
        match &self.inner {
            Some(inner) => inner.try_handle(record),
            None => Ok(()),
        }
    }
}

/// An escalation no one approved yet: what a person needs to approve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The request's id.
    pub id: String,
    /// The digest a grant must name.
    pub action_digest: String,
    /// The policies that escalated.
    pub policy_ids: Vec<String>,
    /// Their reasons.
    pub reasons: Vec<String>,
}

/// How an evaluation ended: the `outcome` of its JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The call goes on, with the context to forward.
    Allowed,
    /// An enforced policy denied the call, or a person refused it.
    Denied,
    /// A policy could not be evaluated.
    Error,
    /// An escalation waits for a person's approval.
    ApprovalRequired,
}

impl Verdict {
    /// Every verdict, in the order of their exit statuses.
    pub const ALL: [Verdict; 4] = [
        Verdict::Allowed,
        Verdict::Denied,
        Verdict::Error,
        Verdict::ApprovalRequired,
    ];

    /// The name the JSON document gives it: `allowed`, `denied`, `error` or
    /// `approval_required`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::Error => "error",
            Verdict::ApprovalRequired => "approval_required",
        }
    }

    /// The verdict `name` names ([`as_str`](Self::as_str)), if any.
    pub fn from_name(name: &str) -> Option<Verdict> {
        Verdict::ALL
            .into_iter()
            .find(|verdict| verdict.as_str() == name)
    }

    /// The exit status of `portcullis eval` for it: 0 allowed, 2 denied, 3 error, 4 approval
    /// required.
    pub const fn exit_code(self) -> u8 {
        match self {
            Verdict::Allowed => 0,
            Verdict::Denied => 2,
            Verdict::Error => 3,
            Verdict::ApprovalRequired => 4,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one evaluation came to. `Forwarded` is the context to forward: a JSON [`Value`] from
/// [`evaluate`]; the service writes its answer from the evaluation's own context.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<Forwarded = Value> {
    /// How it ended.
    pub outcome: Verdict,
    /// The decisions taken, in order: (policy id, decision).
    pub decisions: Vec<(String, AuditDecision)>,
    /// The context to forward, when allowed.
    pub context: Option<Forwarded>,
    /// (policy id, reason) when denied.
    pub denial: Option<(String, Option<String>)>,
    /// (policy id, message) on an evaluation error.
    pub error: Option<(String, String)>,
    /// The request to approve, when an approval is required.
    pub approval: Option<Approval>,
}

impl<Forwarded: serde::Serialize> Outcome<Forwarded> {
    /// The outcome as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::from_str(&self.to_text(false)).unwrap_or(Value::Null)
    }

    /// The outcome as JSON text, keys in the documented order:
    /// `{"outcome", "decisions": [{"policy_id", "decision"}], "context", "denial": {"policy_id",
    /// "reason"}, "error": {"policy_id", "message"}, "approval": {"id", "action_digest",
    /// "policy_ids", "reasons"}}`, the last four only when they apply.
    pub fn to_text(&self, pretty: bool) -> String {
        let mut text = Vec::with_capacity(256);
        self.write(&mut text, pretty);
        String::from_utf8(text).unwrap_or_default()
    }

    /// Appends [`to_text`](Self::to_text) to `out` (nothing when the context cannot be
    /// written as JSON).
    pub(crate) fn write(&self, out: &mut Vec<u8>, pretty: bool) {
        #[derive(serde::Serialize)]
        struct Decision<'a> {
            policy_id: &'a str,
            decision: &'a str,
        }
        #[derive(serde::Serialize)]
        struct Denial<'a> {
            policy_id: &'a str,
            reason: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        struct Failure<'a> {
            policy_id: &'a str,
            message: &'a str,
        }
        #[derive(serde::Serialize)]
        struct Pending<'a> {
            id: &'a str,
            action_digest: &'a str,
            policy_ids: &'a [String],
            reasons: &'a [String],
        }
        #[derive(serde::Serialize)]
        struct Document<'a, Forwarded> {
            outcome: Verdict,
            decisions: Vec<Decision<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            context: Option<&'a Forwarded>,
            #[serde(skip_serializing_if = "Option::is_none")]
            denial: Option<Denial<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<Failure<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            approval: Option<Pending<'a>>,
        }
        let document = Document {
            outcome: self.outcome,
            decisions: self
                .decisions
                .iter()
                .map(|(policy_id, decision)| Decision {
                    policy_id,
                    decision: decision.as_str(),
                })
                .collect(),
            context: self.context.as_ref(),
            denial: self.denial.as_ref().map(|(policy_id, reason)| Denial {
                policy_id,
                reason: reason.as_deref(),
            }),
            error: self
                .error
                .as_ref()
                .map(|(policy_id, message)| Failure { policy_id, message }),
            approval: self.approval.as_ref().map(|approval| Pending {
                id: &approval.id,
                action_digest: &approval.action_digest,
                policy_ids: &approval.policy_ids,
                reasons: &approval.reasons,
            }),
        };
        let start = out.len();
        let written = if pretty {
            serde_json::to_writer_pretty(&mut *out, &document)
        } else {
            portcullis_engine::json::to_writer(out, &document)
        };
        if written.is_err() {
            out.truncate(start);
        }
    }

    /// The exit status of `portcullis eval` for this outcome: 0 allowed, 2 denied, 3 error,
    /// 4 approval required.
    pub fn exit_code(&self) -> u8 {
        self.outcome.exit_code()
    }
}

/// A context of any point.
#[derive(Debug, Clone, PartialEq)]
pub enum Context {
    /// An input context.
    Input(InputContext),
    /// A tool-call context.
    ToolCall(ToolCallContext),
    /// A tool-result context.
    ToolResult(ToolResultContext),
    /// An output context.
    Output(OutputContext),
}

/// Work to do on a context of any point, written once, generic over the point: [`Context::run`]
/// hands the context over with its own type.
pub trait ContextTask {
    /// What the work comes to.
    type Output;

    /// Does the work on `context`.
    fn run<C: PolicyContext>(self, context: &C) -> impl Future<Output = Self::Output> + Send;
}

impl Context {
    /// The context's point.
    pub fn point(&self) -> InterceptionPoint {
        match self {
            Context::Input(_) => InterceptionPoint::Input,
            Context::ToolCall(_) => InterceptionPoint::ToolCall,
            Context::ToolResult(_) => InterceptionPoint::ToolResult,
            Context::Output(_) => InterceptionPoint::Output,
        }
    }

    /// Runs `task` on the context, typed by its point: the one place the service dispatches
    /// on the point.
    pub async fn run<T: ContextTask>(&self, task: T) -> T::Output {
        match self {
            Context::Input(context) => task.run(context).await,
            Context::ToolCall(context) => task.run(context).await,
            Context::ToolResult(context) => task.run(context).await,
            Context::Output(context) => task.run(context).await,
        }
    }
}

/// Reads `value` as a context of `point`, or says why it is not one.
pub fn parse_context(point: InterceptionPoint, value: Value) -> Result<Context, String> {
    let read = match point {
        InterceptionPoint::Input => serde_json::from_value(value).map(Context::Input),
        InterceptionPoint::ToolCall => serde_json::from_value(value).map(Context::ToolCall),
        InterceptionPoint::ToolResult => serde_json::from_value(value).map(Context::ToolResult),
        InterceptionPoint::Output => serde_json::from_value(value).map(Context::Output),
    };
    read.map_err(|error| format!("not a valid {point} context: {error}"))
}

/// Why a request body is not a context of its point.
#[derive(Debug)]
pub enum ContextError {
    /// The body is not JSON.
    Malformed(String),
    /// The body is JSON, but not a context of the point.
    Invalid(String),
}

/// Reads a request body as a context of `point` in one pass (no intermediate JSON value), or
/// says why it is not one. A field given twice is refused, where reading through a JSON value
/// would keep the last.
pub fn read_context(point: InterceptionPoint, body: &[u8]) -> Result<Context, ContextError> {
    // The body is checked to be UTF-8 at once, with vector instructions; its JSON is then read
    // as text, so the reader does not check each string again. A body that is not UTF-8 is
    // read as bytes, for the reader's own account of where it is wrong.
    let text = simdutf8::basic::from_utf8(body).ok();
    let read = match point {
        InterceptionPoint::Input => read_json(body, text).map(Context::Input),
        InterceptionPoint::ToolCall => read_json(body, text).map(Context::ToolCall),
        InterceptionPoint::ToolResult => read_json(body, text).map(Context::ToolResult),
        InterceptionPoint::Output => read_json(body, text).map(Context::Output),
    };
    read.map_err(|error| match error.classify() {
        serde_json::error::Category::Data => {
            ContextError::Invalid(format!("not a valid {point} context: {error}"))
        }
        _ => ContextError::Malformed(format!("the request body is not JSON: {error}")),
    })
}

/// Reads `body` as JSON: from `text`, the body already checked to be UTF-8, when there is one.
fn read_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    text: Option<&str>,
) -> serde_json::Result<T> {
    match text {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(body),
    }
}

/// Evaluates a context on the engine: the context to forward, as JSON, or why not.
struct Forward<'a>(&'a PolicyEngine);

impl ContextTask for Forward<'_> {
    type Output = Result<serde_json::Result<Value>, EngineError>;

    async fn run<C: PolicyContext>(self, context: &C) -> Self::Output {
        let evaluation = self.0.evaluate(context).await?;
        Ok(serde_json::to_value(evaluation.context()))
    }
}

/// Evaluates a context on the engine and, when the call is allowed, writes its outcome
/// document with the context to forward straight from the evaluation: no JSON value, and one
/// buffer of the given capacity.
struct Written<'a>(&'a PolicyEngine, usize);

impl ContextTask for Written<'_> {
    type Output = Result<Vec<u8>, EngineError>;

    async fn run<C: PolicyContext>(self, context: &C) -> Self::Output {
        // The engine's evaluation (more than a KiB of state) is kept in a box of its own, so
        // that the futures around it stay small: the service's route moves them, and each
        // layer around an argument future keeps room for it again.
        let evaluation = Box::pin(self.0.evaluate(context)).await?;
        let mut text = Vec::with_capacity(self.1);
        let decisions = TAKEN.with(|taken| std::mem::take(&mut *taken.borrow_mut()));
        outcome_of(Ok(evaluation.context()), decisions).write(&mut text, false);
        Ok(text)
    }
}

/// Evaluates `context` on `engine` and says what came of it. The engine's audit handler must
/// be a [`DecisionTap`] for the outcome to list the decisions taken.
pub async fn evaluate(engine: &PolicyEngine, context: &Context) -> Outcome {
    let (result, decisions) = noting_decisions(context.run(Forward(engine))).await;
    outcome_of(
        result.map(|forwarded| forwarded.unwrap_or(Value::Null)),
        decisions,
    )
}

/// [`evaluate`], the outcome written as [`Outcome::to_text`] writes it (not pretty), in a
/// buffer of `capacity` bytes to start with.
pub(crate) async fn evaluate_to_text(
    engine: &PolicyEngine,
    context: &Context,
    capacity: usize,
) -> Vec<u8> {
    let (result, decisions) = noting_decisions(context.run(Written(engine, capacity))).await;
    match result {
        Ok(text) => text,
        Err(error) => {
            let mut text = Vec::with_capacity(256);
            outcome_of::<()>(Err(error), decisions).write(&mut text, false);
            text
        }
    }
}

/// Runs `evaluation` noting the decisions it takes; returns what it came to and the decisions
/// it left noted.
async fn noting_decisions<T>(
    evaluation: impl Future<Output = T>,
) -> (T, Vec<(String, AuditDecision)>) {
    TAKEN
        .scope(RefCell::new(Vec::with_capacity(4)), async {
            let result = evaluation.await;
            let decisions = TAKEN.with(|taken| std::mem::take(&mut *taken.borrow_mut()));
            (result, decisions)
        })
        .await
}

/// The outcome of an evaluation that came to `result`, having taken `decisions`.
fn outcome_of<F>(
    result: Result<F, EngineError>,
    decisions: Vec<(String, AuditDecision)>,
) -> Outcome<F> {
    let mut outcome = Outcome {
        outcome: Verdict::Allowed,
        decisions,
        context: None,
        denial: None,
        error: None,
        approval: None,
    };
    match result {
        Ok(forwarded) => outcome.context = Some(forwarded),
        Err(EngineError::Denied(denial)) => {
            outcome.outcome = Verdict::Denied;
            outcome.denial = Some((
                denial.policy_id().to_owned(),
                denial.reason().map(str::to_owned),
            ));
        }
        Err(EngineError::ApprovalRequired(request)) => {
            outcome.outcome = Verdict::ApprovalRequired;
            outcome.approval = Some(Approval {
                id: request.id.clone(),
                action_digest: request.action_digest.clone(),
                policy_ids: request.policy_ids.clone(),
                reasons: request.reasons.clone(),
            });
        }
        Err(error) => {
            outcome.outcome = Verdict::Error;
            let (policy_id, message) = match &error {
                EngineError::Evaluation(failure) => {
                    (failure.policy_id().to_owned(), error_chain(failure))
                }
                other => (other.policy_id().to_owned(), other.to_string()),
            };
            outcome.error = Some((policy_id, message));
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use portcullis_dsl::DslInputPolicy;
    use portcullis_engine::{
        BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicySet, async_trait,
    };
    use serde_json::json;

    use super::*;

    struct Failing;

    #[async_trait]
    impl Policy<InputContext> for Failing {
        fn id(&self) -> &str {
            "failing"
        }

        async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
            if context
                .messages
                .iter()
                .any(|message| message.content == "boom")
            {
                return Err("the policy store is unreachable".into());
            }
            Ok(PolicyDecision::allow())
        }
    }

    fn rule(id: &str, rule: serde_json::Value) -> DslInputPolicy {
        DslInputPolicy::from_source(id, &rule.to_string(), id).expect("a valid rule")
    }

    /// The service's answer, written straight from the evaluation, is the outcome document of
    /// `evaluate` (its keys in the context's own order, where a value may sort them): allowed
    /// as sent, allowed redacted, denied, failed.
    #[tokio::test]
    async fn the_text_written_from_the_evaluation_is_the_outcome_document() {
        let set = PolicySet::builder()
            .input(rule(
                "no_secrets",
                json!({"condition": {"field": "messages.0.content", "contains": ["secret"]},
                       "action": "deny", "reason": "no \"secrets\""}),
            ))
            .input(rule(
                "mask_cards",
                json!({"condition": {"field": "messages.0.content", "contains": ["card"]},
                       "action": "redact", "redactions": [{"field": "messages.0.content",
                       "strategy": "replace", "pattern": "[0-9]{4}", "replacement": "####"}]}),
            ))
            .input(Failing)
            .build();
        let engine = PolicyEngine::builder()
            .policy_set(set)
            .on_audit(DecisionTap::new())
            .build();
        for (text, expected) in [
            ("hello", Verdict::Allowed),
            ("my card is 1234 5678, \u{e9}t\u{e9}", Verdict::Allowed),
            ("a secret", Verdict::Denied),
            ("boom", Verdict::Error),
        ] {
            let context = Context::Input(InputContext::new(
                vec![Message::user(text)],
                Metadata::new("agent", "s1"),
            ));
            let outcome = evaluate(&engine, &context).await;
            assert_eq!(outcome.outcome, expected, "{text}");
            let written = evaluate_to_text(&engine, &context, 16).await;
            let written: Value = serde_json::from_slice(&written).unwrap();
            assert_eq!(written, outcome.to_json(), "{text}");
        }
    }

    /// A body read as text (checked to be UTF-8 first) reads as it does as bytes; a body that
    /// is not UTF-8 is malformed, with the reader's account of where.
    #[test]
    fn bodies_read_as_text_read_as_bytes_do_and_bytes_that_are_not_utf8_are_malformed() {
        let bodies = [
            r#"{"messages":[{"role":"user","content":"caf\u00e9 \"quoted\" naïve 😀"}],
                "metadata":{"agent_id":"a","session_id":"s","timestamp":"2026-01-01T00:00:00Z"}}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"metadata":{"agent_id":"a","session_id":"s"}}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"a\u{1}\"}]}",
            r#"{"messages":"#,
        ];
        for body in bodies {
            let as_bytes = serde_json::from_slice::<InputContext>(body.as_bytes());
            match (
                read_context(InterceptionPoint::Input, body.as_bytes()),
                as_bytes,
            ) {
                (Ok(Context::Input(read)), Ok(expected)) => assert_eq!(read, expected, "{body}"),
                (Err(ContextError::Invalid(message)), Err(error))
                | (Err(ContextError::Malformed(message)), Err(error)) => {
                    assert!(message.ends_with(&error.to_string()), "{message} / {error}");
                }
                (read, expected) => panic!("{body}: {read:?} against {expected:?}"),
            }
        }
        let mut not_utf8 = br#"{"messages":[{"role":"user","content":"caf"#.to_vec();
        not_utf8.extend_from_slice(b"\xe9\"}]}");
        let Err(ContextError::Malformed(message)) =
            read_context(InterceptionPoint::Input, &not_utf8)
        else {
            panic!("a body that is not UTF-8 is malformed")
        };
        assert!(
            message.starts_with("the request body is not JSON: invalid unicode code point"),
            "{message}"
        );
    }
}
