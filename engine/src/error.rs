//! Errors of the engine, and the causes it reports for failed policies.
//!
//! An evaluation call fails with an [`EngineError`]: a [`PolicyDenialError`] when an enforced
//! policy denied, a [`PolicyEvaluationError`] when a policy could not be evaluated. The latter
//! carries its cause ([`PolicyPanicked`], [`PolicyTimedOut`], [`ApplyError`], or whatever the
//! policy returned) behind [`source`](std::error::Error::source).

use std::error::Error as StdError;
use std::fmt;

use crate::approval::ApprovalRequest;
use crate::context::InterceptionPoint;
pub use crate::context::InvalidContext;

/// The error type policies return: anything that is an error and can cross threads.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What one policy's evaluation returns: its decision, or why it has none.
pub(crate) type PolicyResult = Result<crate::decision::PolicyDecision, BoxError>;

/// The text of a [`PolicyDenialError`] whose decision gave no reason.
pub const DENIED_WITHOUT_REASON: &str = "denied by policy";

/// A policy denied the interaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDenialError {
    policy_id: String,
    interception_point: InterceptionPoint,
    reason: Option<String>,
}

impl PolicyDenialError {
    /// A denial by `policy_id` at `interception_point`.
    pub fn new(
        policy_id: impl Into<String>,
        interception_point: InterceptionPoint,
        reason: Option<String>,
    ) -> Self {
        PolicyDenialError {
            policy_id: policy_id.into(),
            interception_point,
            reason,
        }
    }

    /// The denying policy: the decision's own `policy_id` if it named one, otherwise the id
    /// of the policy that returned it.
    pub fn policy_id(&self) -> &str {
        &self.policy_id
    }

    /// Where the denial happened.
    pub fn interception_point(&self) -> InterceptionPoint {
        self.interception_point
    }

    /// The reason the decision gave, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
}

impl fmt::Display for PolicyDenialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason.as_deref().unwrap_or(DENIED_WITHOUT_REASON))
    }
}

impl StdError for PolicyDenialError {}

/// A policy could not be evaluated (it failed, panicked, timed out, or its decision could not
/// be applied).
///
/// As std's errors do, it displays its own message only (`policy `pii` failed at the input
/// point`) and returns the cause from [`source`](std::error::Error::source); a reporter that
/// walks the chain prints each cause once.
#[derive(Debug)]
pub struct PolicyEvaluationError {
    policy_id: String,
    interception_point: InterceptionPoint,
    source: BoxError,
}

impl PolicyEvaluationError {
    /// An evaluation error of `policy_id` at `interception_point`, caused by `source`.
    pub fn new(
        policy_id: impl Into<String>,
        interception_point: InterceptionPoint,
        source: impl Into<BoxError>,
    ) -> Self {
        PolicyEvaluationError {
            policy_id: policy_id.into(),
            interception_point,
            source: source.into(),
        }
    }

    /// The policy that failed.
    pub fn policy_id(&self) -> &str {
        &self.policy_id
    }

    /// Where it failed.
    pub fn interception_point(&self) -> InterceptionPoint {
        self.interception_point
    }

    /// The cause, with its own causes, as one line (`a: b: c`).
    pub fn cause_chain(&self) -> String {
        error_chain(&*self.source)
    }

    /// The cause.
    pub fn cause(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }

    /// Takes the cause out.
    pub fn into_cause(self) -> BoxError {
        self.source
    }
}

/// Says which policy failed where; the cause is the [`source`](StdError::source) (its text with
/// the causes' is [`cause_chain`](PolicyEvaluationError::cause_chain)).
impl fmt::Display for PolicyEvaluationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy `{}` failed at the {} point",
            self.policy_id, self.interception_point
        )
    }
}

impl StdError for PolicyEvaluationError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// Renders an error and its causes as `outer: inner: innermost`.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        // Some errors repeat their cause in their own message; do not say it twice.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}

/// Why an evaluation call failed.
#[derive(Debug)]
pub enum EngineError {
    /// A policy denied the interaction.
    Denied(PolicyDenialError),
    /// A policy could not be evaluated and the policy set's `on_error` is `deny`.
    Evaluation(PolicyEvaluationError),
    /// A policy escalated and no approval came: no stored grant, and no resolver, a `Pending`
    /// answer or the approval time-out. Show the request to a person, record a grant for its
    /// digest with [`Approvals::grant`](crate::Approvals::grant), and retry the call.
    ApprovalRequired(Box<ApprovalRequest>),
}

impl EngineError {
    /// The denial, if this is one.
    pub fn as_denial(&self) -> Option<&PolicyDenialError> {
        match self {
            EngineError::Denied(denial) => Some(denial),
            _ => None,
        }
    }

    /// The approval request, if this is an [`EngineError::ApprovalRequired`].
    pub fn as_approval_request(&self) -> Option<&ApprovalRequest> {
        match self {
            EngineError::ApprovalRequired(request) => Some(request),
            _ => None,
        }
    }

    /// The evaluation error, if this is one.
    pub fn as_evaluation(&self) -> Option<&PolicyEvaluationError> {
        match self {
            EngineError::Evaluation(error) => Some(error),
            _ => None,
        }
    }

    /// The policy that denied or failed (for an approval request, the first that escalated).
    pub fn policy_id(&self) -> &str {
        match self {
            EngineError::Denied(denial) => denial.policy_id(),
            EngineError::Evaluation(error) => error.policy_id(),
            EngineError::ApprovalRequired(request) => {
                request.policy_ids.first().map_or("", String::as_str)
            }
        }
    }

    /// Where it happened.
    pub fn interception_point(&self) -> InterceptionPoint {
        match self {
            EngineError::Denied(denial) => denial.interception_point(),
            EngineError::Evaluation(error) => error.interception_point(),
            EngineError::ApprovalRequired(request) => request.interception_point,
        }
    }
}

/// `EngineError` is the error it holds, said at the engine's level: it displays that error's
/// message (a denial with the denying policy's id) and returns that error's cause from
/// [`source`](StdError::source), so no message appears twice in a chain.
impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Denied(denial) => write!(f, "denied by `{}`: {denial}", denial.policy_id),
            EngineError::Evaluation(error) => fmt::Display::fmt(error, f),
            EngineError::ApprovalRequired(request) => fmt::Display::fmt(request, f),
        }
    }
}

impl StdError for EngineError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            EngineError::Denied(denial) => denial.source(),
            EngineError::Evaluation(error) => error.source(),
            EngineError::ApprovalRequired(_) => None,
        }
    }
}

impl From<PolicyDenialError> for EngineError {
    fn from(denial: PolicyDenialError) -> Self {
        EngineError::Denied(denial)
    }
}

impl From<PolicyEvaluationError> for EngineError {
    fn from(error: PolicyEvaluationError) -> Self {
        EngineError::Evaluation(error)
    }
}

/// The cause of an evaluation error when a policy panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPanicked {
    message: String,
}

impl PolicyPanicked {
    pub(crate) fn from_payload(payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(text) = payload.downcast_ref::<&'static str>() {
            (*text).to_owned()
        } else if let Some(text) = payload.downcast_ref::<String>() {
            text.clone()
        } else {
            "a panic without a message".to_owned()
        };
        PolicyPanicked { message }
    }

    /// The panic's message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PolicyPanicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the policy panicked: {}", self.message)
    }
}

impl StdError for PolicyPanicked {}

/// The cause of an evaluation error when a `redact` or `transform` decision could not be
/// applied to the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyError {
    field: String,
    problem: String,
}

impl ApplyError {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        ApplyError {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The path of the redaction or operation that failed (empty when the whole result was
    /// rejected).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What went wrong.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid context: {}", self.problem)
        } else {
            write!(f, "cannot apply to `{}`: {}", self.field, self.problem)
        }
    }
}

impl StdError for ApplyError {}

/// Which deadline a policy missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadlineScope {
    /// The policy's own deadline (or its point's policy deadline).
    Policy,
    /// The deadline of the whole evaluation of the point.
    Call,
}

/// The cause of an evaluation error when a policy had not answered by its deadline: it was
/// still running and was cancelled, or it blocked its thread and answered too late.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTimedOut {
    scope: DeadlineScope,
    after: std::time::Duration,
}

impl PolicyTimedOut {
    pub(crate) fn new(scope: DeadlineScope, after: std::time::Duration) -> Self {
        PolicyTimedOut { scope, after }
    }

    /// Which deadline passed.
    pub fn scope(&self) -> DeadlineScope {
        self.scope
    }

    /// The deadline, as a duration from the start of the policy (for [`DeadlineScope::Policy`])
    /// or of the call (for [`DeadlineScope::Call`]).
    pub fn after(&self) -> std::time::Duration {
        self.after
    }
}

impl fmt::Display for PolicyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match self.scope {
            DeadlineScope::Policy => "the policy's deadline",
            DeadlineScope::Call => "the call deadline",
        };
        write!(
            f,
            "timed out: {whose} of {:?} passed before the policy answered",
            self.after
        )
    }
}

impl StdError for PolicyTimedOut {}
