//! What one evaluation came to, as one JSON document: the answer of
//! `POST /v1/evaluate/{point}` and what `portcullis eval` prints.

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use portcullis_engine::error::error_chain;
use portcullis_engine::{
    AuditHandler, AuditRecord, BoxError, EngineError, InputContext, InterceptionPoint,
    OutputContext, PolicyContext, PolicyEngine, ToolCallContext, ToolResultContext,
};
use serde_json::Value;
use serde_json::value::RawValue;

tokio::task_local! {
    /// The decisions audited by the evaluation running in this task.
    static TAKEN: RefCell<Vec<(String, String)>>;
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
            taken.borrow_mut().push((
                record.policy_id.to_owned(),
                record.decision.as_str().to_owned(),
            ));
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

/// What one evaluation came to. `Forwarded` holds the context to forward: a JSON [`Value`]
/// from [`evaluate`]; the service answers it as JSON text written once
/// ([`Box<RawValue>`](serde_json::value::RawValue)), without building a value first.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<Forwarded = Value> {
    /// How it ended.
    pub outcome: Verdict,
    /// The decisions taken, in order: (policy id, decision name).
    pub decisions: Vec<(String, String)>,
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
                    decision,
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
        let text = if pretty {
            serde_json::to_string_pretty(&document)
        } else {
            serde_json::to_string(&document)
        };
        text.unwrap_or_default()
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
    let read = match point {
        InterceptionPoint::Input => serde_json::from_slice(body).map(Context::Input),
        InterceptionPoint::ToolCall => serde_json::from_slice(body).map(Context::ToolCall),
        InterceptionPoint::ToolResult => serde_json::from_slice(body).map(Context::ToolResult),
        InterceptionPoint::Output => serde_json::from_slice(body).map(Context::Output),
    };
    read.map_err(|error| match error.classify() {
        serde_json::error::Category::Data => {
            ContextError::Invalid(format!("not a valid {point} context: {error}"))
        }
        _ => ContextError::Malformed(format!("the request body is not JSON: {error}")),
    })
}

/// How an [`Outcome`] holds the context to forward.
pub(crate) trait Forwarded: Sized {
    /// `context` written as JSON.
    fn of<C: serde::Serialize>(context: &C) -> serde_json::Result<Self>;

    /// JSON's `null`, for a context that cannot be written.
    fn null() -> Self;
}

impl Forwarded for Value {
    fn of<C: serde::Serialize>(context: &C) -> serde_json::Result<Self> {
        serde_json::to_value(context)
    }

    fn null() -> Self {
        Value::Null
    }
}

impl Forwarded for Box<RawValue> {
    fn of<C: serde::Serialize>(context: &C) -> serde_json::Result<Self> {
        serde_json::value::to_raw_value(context)
    }

    fn null() -> Self {
        serde_json::value::to_raw_value(&()).unwrap_or_default()
    }
}

/// Evaluates a context on the engine: the context to forward, written as `F`, or why not.
struct Forward<'a, F>(&'a PolicyEngine, PhantomData<fn() -> F>);

impl<F: Forwarded> ContextTask for Forward<'_, F> {
    type Output = Result<serde_json::Result<F>, EngineError>;

    async fn run<C: PolicyContext>(self, context: &C) -> Self::Output {
        let evaluation = self.0.evaluate(context).await?;
        Ok(F::of(evaluation.context()))
    }
}

/// Evaluates `context` on `engine` and says what came of it. The engine's audit handler must
/// be a [`DecisionTap`] for the outcome to list the decisions taken.
pub async fn evaluate(engine: &PolicyEngine, context: &Context) -> Outcome {
    evaluate_as(engine, context).await
}

/// [`evaluate`], the context to forward written as `F`.
pub(crate) async fn evaluate_as<F: Forwarded + Send>(
    engine: &PolicyEngine,
    context: &Context,
) -> Outcome<F> {
    let (result, decisions) = TAKEN
        .scope(RefCell::new(Vec::new()), async {
            let result = context.run(Forward(engine, PhantomData)).await;
            let decisions = TAKEN.with(|taken| std::mem::take(&mut *taken.borrow_mut()));
            (result, decisions)
        })
        .await;
    let mut outcome = Outcome {
        outcome: Verdict::Allowed,
        decisions,
        context: None,
        denial: None,
        error: None,
        approval: None,
    };
    match result {
        Ok(forwarded) => outcome.context = Some(forwarded.unwrap_or_else(|_| F::null())),
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
