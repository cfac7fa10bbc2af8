//! Audit records and the handlers that receive them.
//!
//! Every decision of every policy that ran produces one [`AuditRecord`], handed synchronously
//! to the engine's [`AuditHandler`] before the evaluation call returns.

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::context::{
    InputContext, InterceptionPoint, Metadata, OutputContext, ToolCallContext, ToolResultContext,
};
use crate::decision::PolicyDecision;
use crate::error::BoxError;
use crate::stream::report::StreamReport;
use crate::time::Rfc3339;

/// The decision an audit record reports: one of the six decision kinds, an evaluation error,
/// or how an escalation was resolved (`approval_granted`, `approval_refused`,
/// `approval_pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditDecision {
    /// The policy allowed.
    Allow,
    /// The policy denied.
    Deny,
    /// The policy asked for an audit record.
    Audit,
    /// The policy redacted.
    Redact,
    /// The policy transformed.
    Transform,
    /// The policy could not be evaluated.
    EvaluationError,
    /// The policy asked for a person's approval.
    Escalate,
    /// An escalation was approved (by a stored grant or the resolver); the reason names the
    /// approver.
    ApprovalGranted,
    /// An escalation was refused (by the resolver, or because the resolver failed); the call
    /// fails as a denial.
    ApprovalRefused,
    /// An escalation could not be resolved (no resolver, `Pending`, or the time-out); the call
    /// fails with [`EngineError::ApprovalRequired`](crate::EngineError::ApprovalRequired).
    ApprovalPending,
}

impl AuditDecision {
    /// Every decision an audit record may report.
    pub const ALL: [AuditDecision; 10] = [
        AuditDecision::Allow,
        AuditDecision::Deny,
        AuditDecision::Audit,
        AuditDecision::Redact,
        AuditDecision::Transform,
        AuditDecision::EvaluationError,
        AuditDecision::Escalate,
        AuditDecision::ApprovalGranted,
        AuditDecision::ApprovalRefused,
        AuditDecision::ApprovalPending,
    ];

    /// The decision a wire name ([`as_str`](Self::as_str)) names, if any.
    pub fn from_name(name: &str) -> Option<AuditDecision> {
        AuditDecision::ALL
            .into_iter()
            .find(|decision| decision.as_str() == name)
    }

    /// Whether this reports how an escalation was resolved (`approval_granted`,
    /// `approval_refused`, `approval_pending`).
    pub const fn is_approval(self) -> bool {
        matches!(
            self,
            AuditDecision::ApprovalGranted
                | AuditDecision::ApprovalRefused
                | AuditDecision::ApprovalPending
        )
    }

    /// The wire name (`allow`, …, `evaluation_error`).
    pub const fn as_str(self) -> &'static str {
        match self {
            AuditDecision::Allow => "allow",
            AuditDecision::Deny => "deny",
            AuditDecision::Audit => "audit",
            AuditDecision::Redact => "redact",
            AuditDecision::Transform => "transform",
            AuditDecision::EvaluationError => "evaluation_error",
            AuditDecision::Escalate => "escalate",
            AuditDecision::ApprovalGranted => "approval_granted",
            AuditDecision::ApprovalRefused => "approval_refused",
            AuditDecision::ApprovalPending => "approval_pending",
        }
    }

    /// Whether this is a `deny`, an `evaluation_error` or an `approval_refused` (the outcomes
    /// tracing marks as errors).
    pub const fn is_failure(self) -> bool {
        matches!(
            self,
            AuditDecision::Deny | AuditDecision::EvaluationError | AuditDecision::ApprovalRefused
        )
    }
}

impl From<&PolicyDecision> for AuditDecision {
    fn from(decision: &PolicyDecision) -> Self {
        match decision {
            PolicyDecision::Allow { .. } => AuditDecision::Allow,
            PolicyDecision::Deny { .. } => AuditDecision::Deny,
            PolicyDecision::Audit { .. } => AuditDecision::Audit,
            PolicyDecision::Redact { .. } => AuditDecision::Redact,
            PolicyDecision::Transform { .. } => AuditDecision::Transform,
            PolicyDecision::Escalate { .. } => AuditDecision::Escalate,
        }
    }
}

impl fmt::Display for AuditDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The context an audit record is about, borrowed from the evaluation.
///
/// It serializes as that context's JSON. Nothing is copied or serialized unless a handler
/// asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AuditContext<'a> {
    /// An input context.
    Input(&'a InputContext),
    /// A tool-call context.
    ToolCall(&'a ToolCallContext),
    /// A tool-result context.
    ToolResult(&'a ToolResultContext),
    /// An output context.
    Output(&'a OutputContext),
}

impl AuditContext<'_> {
    /// The context's metadata.
    pub fn metadata(&self) -> &Metadata {
        match self {
            AuditContext::Input(context) => &context.metadata,
            AuditContext::ToolCall(context) => &context.metadata,
            AuditContext::ToolResult(context) => &context.metadata,
            AuditContext::Output(context) => &context.metadata,
        }
    }

    /// The context as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        // Contexts are plain data with string keys: serializing them cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// One audit record: what one policy decided about one context.
///
/// Records borrow from the evaluation they describe: a handler that keeps them should copy
/// what it needs (or call [`to_json`](AuditRecord::to_json)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AuditRecord<'a> {
    /// The policy that decided.
    pub policy_id: &'a str,
    /// What it decided.
    pub decision: AuditDecision,
    /// Where.
    pub interception_point: InterceptionPoint,
    /// The decision's reason, or the error text for an `evaluation_error`.
    pub reason: Option<Cow<'a, str>>,
    /// The context the policy evaluated.
    pub context: AuditContext<'a>,
    /// When the decision was taken (UTC; serialized as RFC 3339 with milliseconds).
    pub timestamp: SystemTime,
    /// Whether the decision was enforced. `false` for policies running in monitor mode: their
    /// denials do not block and their changes are not applied.
    pub enforced: bool,
    /// The full decision (with its redactions or operations); `None` for an evaluation error.
    /// Not serialized: the record's `decision` names its kind.
    pub policy_decision: Option<&'a PolicyDecision>,
    /// For the records a streaming guard emits when a stream starts and ends: its numbers.
    pub stream: Option<&'a StreamReport>,
}

/// The record as JSON: `policy_id`, `decision`, `interception_point`, `reason` (when there is
/// one), `context`, `timestamp` (RFC 3339, UTC, milliseconds), `enforced`, and `stream` (for a
/// stream's records), in that order.
impl Serialize for AuditRecord<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.with_context(&self.context).serialize(serializer)
    }
}

/// An [`AuditRecord`] written with another value where its context goes: see
/// [`AuditRecord::with_context`].
#[derive(Debug, Clone, Copy)]
pub struct RecordWithContext<'r, 'a, T> {
    record: &'r AuditRecord<'a>,
    context: T,
}

impl<T: Serialize> Serialize for RecordWithContext<'_, '_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let record = self.record;
        let fields =
            5 + usize::from(record.reason.is_some()) + usize::from(record.stream.is_some());
        let mut out = serializer.serialize_struct("AuditRecord", fields)?;
        out.serialize_field("policy_id", record.policy_id)?;
        out.serialize_field("decision", &record.decision)?;
        out.serialize_field("interception_point", &record.interception_point)?;
        match &record.reason {
            Some(reason) => out.serialize_field("reason", reason)?,
            None => out.skip_field("reason")?,
        }
        out.serialize_field("context", &self.context)?;
        out.serialize_field("timestamp", Rfc3339::of(record.timestamp).as_str())?;
        out.serialize_field("enforced", &record.enforced)?;
        match record.stream {
            Some(stream) => out.serialize_field("stream", stream)?,
            None => out.skip_field("stream")?,
        }
        out.end()
    }
}

impl<'a> AuditRecord<'a> {
    /// The record as it serializes, with `context` written in place of the context: for a
    /// writer that sends the context once and refers to it from each record that shares it.
    pub fn with_context<T: Serialize>(&self, context: T) -> RecordWithContext<'_, 'a, T> {
        RecordWithContext {
            record: self,
            context,
        }
    }
}

impl AuditRecord<'_> {
    /// The timestamp as RFC 3339 (`2026-11-22T05:30:17.123Z`).
    pub fn timestamp_rfc3339(&self) -> String {
        crate::time::rfc3339(self.timestamp)
    }

    /// The record as JSON (this serializes the context).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Receives every audit record, synchronously, before the evaluation call returns.
///
/// Implemented for every `Fn(&AuditRecord) + Send + Sync + 'static`:
///
/// ```
/// use portcullis_engine::{AuditRecord, PolicyEngine, PolicySet};
///
/// let engine = PolicyEngine::builder()
///     .policy_set(PolicySet::builder().build())
///     .on_audit(|record: &AuditRecord<'_>| println!("{} {}", record.policy_id, record.decision))
///     .build();
/// # drop(engine);
/// ```
///
/// A handler must be quick: it runs on the evaluation path. Handlers that export over a
/// network or write to a file queue the record and return.
///
/// A handler that must not lose records (an audit log under `on_failure: deny`) implements
/// [`try_handle`](AuditHandler::try_handle): the engine hands every record through it, and a
/// record refused fails its call with an evaluation error of [`AUDIT_POLICY_ID`], whatever
/// the set's `on_error` (fail closed).
pub trait AuditHandler: Send + Sync + 'static {
    /// Takes one record.
    fn handle(&self, record: &AuditRecord<'_>);

    /// Takes one record, and says whether the call it belongs to may proceed: `Err` (why the
    /// record cannot be kept) fails the call. The engine calls this, never
    /// [`handle`](Self::handle) directly; the default hands the record to `handle` and
    /// accepts. A handler that wraps others forwards this call to them and returns the first
    /// refusal. It must be quick and must not block.
    fn try_handle(&self, record: &AuditRecord<'_>) -> Result<(), BoxError> {
        self.handle(record);
        Ok(())
    }
}

/// The policy id under which the engine reports a call whose audit record a handler refused
/// ([`AuditHandler::try_handle`]).
pub const AUDIT_POLICY_ID: &str = "portcullis.audit";

impl<F> AuditHandler for F
where
    F: Fn(&AuditRecord<'_>) + Send + Sync + 'static,
{
    fn handle(&self, record: &AuditRecord<'_>) {
        self(record)
    }
}
