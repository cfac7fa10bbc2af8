//! The core of Portcullis, an embeddable policy engine for LLM agents.
//!
//! An application builds one [`PolicyEngine`] at start-up and calls it at four interception
//! points: [`evaluate_input`](PolicyEngine::evaluate_input) before a request goes to the model,
//! [`evaluate_tool_call`](PolicyEngine::evaluate_tool_call) before a tool runs,
//! [`evaluate_tool_result`](PolicyEngine::evaluate_tool_result) after it ran and before the
//! model reads what it returned, and [`evaluate_output`](PolicyEngine::evaluate_output) after the
//! model has answered. Each call
//! runs the policies of that point in declared order and either returns the context to forward
//! (possibly redacted or transformed) or fails with a denial or an evaluation error.
//!
//! Semantics, point by point:
//! - the first enforced `deny` stops the evaluation: no later policy of the point runs;
//! - every decision of every policy that ran produces one [`AuditRecord`], handed to the
//!   audit handler before the call returns;
//! - a policy that fails, panics, misses its deadline or returns a decision that cannot be
//!   applied is an evaluation error: [`OnError::Deny`] (the default) fails the call,
//!   [`OnError::Allow`] skips the policy; either way an `evaluation_error` record is emitted;
//! - a deadline cancels a policy where it awaits; a policy that blocks its thread cannot be
//!   interrupted, but an answer after the deadline is refused as a time-out all the same, and
//!   [`PolicyExt::blocking`] runs such a policy off the executor so the call returns at the
//!   deadline;
//! - `redact` and `transform` decisions are applied in order to the context being forwarded,
//!   and later policies see the change; when nothing changes the original context is
//!   forwarded without a copy;
//! - policies in monitor mode are evaluated and audited (`enforced: false`) but take no effect;
//!   their records show what enforcing would do, including a redaction or transform that
//!   would fail (audited as the evaluation error it would be);
//! - a point can run its policies concurrently (see [`PolicySetBuilder::concurrent`]); the
//!   policies it cancels once the outcome is known are audited too, as evaluation errors
//!   saying so.
//!
//! - an enforced `escalate` lets the call proceed only once a person approves this exact
//!   action (see [Approvals](#approvals)).
//!
//! # Approvals
//!
//! When a point ends with no denial and at least one enforced `escalate` decision, the engine
//! builds an [`ApprovalRequest`] whose [`action_digest`](approval::action_digest) is the
//! SHA-256 of the RFC 8785 canonical JSON of the interception point and the context to forward
//! (`metadata.timestamp` left out). Later policies of the point still run: a later `deny` wins
//! and no approval is asked; later changes apply and the request shows them. Then, in order:
//!
//! 1. a grant stored for the digest ([`Approvals::grant`], single use, with an expiry; kept
//!    by a [`GrantStore`], [`MemoryGrantStore`] by default) lets the call proceed;
//! 2. else the [`ApprovalResolver`] configured with
//!    [`PolicyEngineBuilder::approvals`] answers within
//!    [`PolicyEngineBuilder::approval_timeout`] (default [`DEFAULT_APPROVAL_TIMEOUT`], five
//!    minutes): [`ApprovalAnswer::Granted`] proceeds, [`ApprovalAnswer::Refused`] fails the
//!    call as a denial by the (first) escalating policy;
//! 3. no resolver, [`ApprovalAnswer::Pending`] or the time-out fail the call with
//!    [`EngineError::ApprovalRequired`], carrying the request: show it to a person, record a
//!    grant, and retry. A retry whose action differs in any byte has another digest.
//!
//! A resolver that returns an error or panics, and a grant store that fails, refuse (fail
//! closed). Each escalation is audited as `escalate`, then each resolution as
//! `approval_granted`, `approval_refused` or `approval_pending`, with the approver or the
//! reason. Monitored escalations are audited and ask nobody. In a stream, an escalating output
//! policy holds the whole answer until its approval is resolved at the end.
//!
//! Most applications use this crate through the `portcullis` facade.

#![cfg_attr(docsrs, feature(doc_cfg))]

// Modules in layers, each using only the ones above it in this list (`tests/layers.rs` checks
// it; `docs/architecture.md` explains it).
//
// Plain data: no module here knows policies, sets or the engine.
pub mod approval;
mod blocking;
mod context;
mod decision;
pub mod duration;
pub mod edge;
pub mod error;
pub mod grant;
pub mod json;
pub mod path;
mod pattern;
pub mod time;
mod timer;
pub mod token;
// Policies and sets, on the data.
pub mod apply;
mod audit;
mod point;
mod policy;
mod resolve;
mod set;
// The engine, on those.
mod engine;
mod single;
mod unwind;
// Streaming, on the engine (its leaves `stream::rule` and `stream::report` are plain data).
pub mod stream;
// Session state: a store's data and trait under the policies, the engine's steps on the
// contexts, the module's documentation on top.
pub mod session;

pub use async_trait::async_trait;

pub use approval::ApprovalRequest;
pub use approval::ApprovalScope;
pub use audit::{
    AUDIT_POLICY_ID, AuditContext, AuditDecision, AuditHandler, AuditRecord, RecordWithContext,
};
pub use context::{
    InputContext, InterceptionPoint, MAX_NESTING, Message, Metadata, OutputContext, Role,
    ToolCallContext, ToolResultContext, UnknownPoint,
};
pub use decision::{
    DEFAULT_REPLACEMENT, PolicyDecision, Redaction, RedactionStrategy, TransformOp,
    TransformOperation, Transformation,
};
pub use engine::{CONTEXT_CHECK_ID, DecisionEntry, Evaluation, PolicyEngine, PolicyEngineBuilder};
pub use error::{BoxError, EngineError, PolicyDenialError, PolicyEvaluationError};
pub use grant::{
    ApprovalRecord, ApprovalStatus, ApprovalVerdict, DecideError, Grant, GrantStore,
    MemoryGrantStore, Refusal,
};
pub use point::{ByPoint, PointMap, PolicyContext};
pub use policy::{
    Blocking, InputPolicy, Monitored, OutputPolicy, Policy, PolicyExt, PolicyMode, ToolCallPolicy,
    ToolResultPolicy, WithDeadline,
};
pub use resolve::{ApprovalAnswer, ApprovalResolver, Approvals, DEFAULT_APPROVAL_TIMEOUT};
pub use session::{MemorySessionStore, SessionFacts, SessionStore};
pub use set::{OnError, PointPolicies, PointSettings, PolicySet, PolicySetBuilder};
pub use stream::{Feed, OutputStream, StreamItem, StreamItems, StreamText, StreamingRule};
pub use token::BearerToken;

/// Support for the workspace's other crates (the dsl and rego crates share the engine's
/// pattern cache and list positions). Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::path::list_position;
    pub use crate::pattern::{
        PATTERN_CACHE_CAPACITY, PATTERN_SIZE_LIMIT, cached_regex, compile_pattern,
    };
}

/// A boxed future that can cross threads, as policy traits return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PolicyEngine>();
    assert_send_sync::<PolicySet>();
};
