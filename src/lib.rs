//! Portcullis: an embeddable policy engine for LLM agents.
//!
//! Put Portcullis around an agent to block, redact, rewrite and audit what goes to the model,
//! which tools the model calls, and what the model answers. Policies are plain Rust, JSON
//! rules, or Rego (in-process WebAssembly or a policy server); every decision is audited.
//!
//! This crate is the facade: the core engine is always here, and each unit comes behind a
//! feature named after it.
//!
//! | feature | unit | default |
//! |---|---|---|
//! | `dsl` | `dsl`: JSON rules, checked when loaded | yes |
//! | `macros` | `#[input_policy]` and friends, `policy_set!`, `dsl_policy!` | yes |
//! | `rego` | `rego`: OPA WebAssembly bundles, in process | no |
//! | `rego-rest` | `rego_rest`: a policy server speaking the OPA REST API | no |
//! | `http` | `http`: the remote `/engine/evaluate` endpoint | no |
//! | `otel` | `otel`: OpenTelemetry spans for audit records | no |
//! | `observability` | `observability`: OTLP export to an LLM observability platform | no |
//! | `manifest` | `manifest`: policy sets as YAML files, reloaded when they change | no |
//! | `redis` | `redis`: a session store in Redis, shared by a fleet of processes | no |
//! | `server` | `server`: the decision service, an axum router to serve or mount | no |
//! | `full` | all of the above | no |
//! | `openai` | `openai`: a tower layer guarding async-openai chat completions | no |
//! | `rig` | `rig`: an agent hook guarding rig-agent runs | no |
//! | `mcp` | `mcp`: a guarded MCP server in front of another, and a guarded rmcp client | no |
//!
//! The framework integrations (`openai`, `rig`, `mcp`) are not part of `full`: they pull in the
//! frameworks themselves, which only their users want.

#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate self as portcullis;

// The engine, unit by unit. Each item is listed: a new engine item becomes public API here
// only when it is added on purpose.

// Contexts: what policies see.
pub use portcullis_engine::{
    ByPoint, InputContext, InterceptionPoint, MAX_NESTING, Message, Metadata, OutputContext,
    PointMap, PolicyContext, Role, ToolCallContext, UnknownPoint,
};
// Decisions: what policies return.
pub use portcullis_engine::{
    DEFAULT_REPLACEMENT, PolicyDecision, Redaction, RedactionStrategy, TransformOp,
    TransformOperation, Transformation,
};
// Policies, and the wrappers that change how one runs.
pub use portcullis_engine::{
    Blocking, BoxError, BoxFuture, InputPolicy, Monitored, OutputPolicy, Policy, PolicyExt,
    PolicyMode, ToolCallPolicy, WithDeadline, async_trait,
};
// Policy sets.
pub use portcullis_engine::{OnError, PointPolicies, PointSettings, PolicySet, PolicySetBuilder};
// The engine and what an evaluation returns.
pub use portcullis_engine::{
    CONTEXT_CHECK_ID, DecisionEntry, Evaluation, PolicyEngine, PolicyEngineBuilder,
};
// Errors (their causes are in `error`).
pub use portcullis_engine::{EngineError, PolicyDenialError, PolicyEvaluationError};
// Audit records.
pub use portcullis_engine::{AuditContext, AuditDecision, AuditHandler, AuditRecord};
// Approvals: escalations, the person who answers them, and stored grants.
pub use portcullis_engine::{
    ApprovalAnswer, ApprovalRequest, ApprovalResolver, Approvals, DEFAULT_APPROVAL_TIMEOUT, Grant,
    GrantStore, MemoryGrantStore,
};
// Streaming answers (the rest is in `stream`).
pub use portcullis_engine::{
    Feed, OutputStream, StreamItem, StreamItems, StreamText, StreamingRule,
};
// The engine's modules: applying decisions, the causes of errors, field paths, streaming.
pub use portcullis_engine::{apply, approval, error, path, session, stream};
// Session state: the store trait and the in-memory store (see the `session` module).
pub use portcullis_engine::{MemorySessionStore, SessionFacts, SessionStore};

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use portcullis_otel as otel;

#[cfg(feature = "observability")]
#[cfg_attr(docsrs, doc(cfg(feature = "observability")))]
pub use portcullis_observability as observability;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use portcullis_openai as openai;

#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub use portcullis_rig as rig;

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use portcullis_mcp as mcp;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use portcullis_redis as redis;

#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub use portcullis_server as server;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(feature = "dsl")]
#[cfg_attr(docsrs, doc(cfg(feature = "dsl")))]
pub use portcullis_dsl as dsl;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use portcullis_macros::{
    dsl_policy, input_policy, output_policy, policy_set, tool_call_policy,
};

/// Support for the code the macros generate. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "dsl")]
    pub use portcullis_dsl::__private as dsl;

    #[cfg(feature = "macros")]
    mod policy_fn;
    #[cfg(feature = "macros")]
    pub use policy_fn::{IntoPolicyResult, into_policy_result};
}

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use portcullis_http as http;

#[cfg(feature = "rego")]
#[cfg_attr(docsrs, doc(cfg(feature = "rego")))]
pub use portcullis_rego as rego;
#[cfg(feature = "rego-rest")]
#[cfg_attr(docsrs, doc(cfg(feature = "rego-rest")))]
pub use portcullis_rego_rest as rego_rest;

#[cfg(feature = "manifest")]
#[cfg_attr(docsrs, doc(cfg(feature = "manifest")))]
pub use portcullis_manifest as manifest;
