#![doc = include_str!("../docs/rustdoc-links.md")]
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate self as portcullis;

// The engine, unit by unit. Each item is listed: a new engine item becomes public API here
// only when it is added on purpose.

// Contexts: what policies see.
pub use portcullis_engine::{
    ByPoint, InputContext, InterceptionPoint, MAX_NESTING, Message, Metadata, OutputContext,
    PointMap, PolicyContext, Role, ToolCallContext, ToolResultContext, UnknownPoint,
};
// Decisions: what policies return.
pub use portcullis_engine::{
    DEFAULT_REPLACEMENT, PolicyDecision, Redaction, RedactionStrategy, TransformOp,
    TransformOperation, Transformation,
};
// Policies, and the wrappers that change how one runs.
pub use portcullis_engine::{
    Blocking, BoxError, BoxFuture, InputPolicy, Monitored, OutputPolicy, Policy, PolicyExt,
    PolicyMode, ToolCallPolicy, ToolResultPolicy, WithDeadline, async_trait,
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
// Approvals: escalations, the person who answers them, and the store of requests, grants and
// refusals.
pub use portcullis_engine::{
    ApprovalAnswer, ApprovalRecord, ApprovalRequest, ApprovalResolver, ApprovalScope,
    ApprovalStatus, ApprovalVerdict, Approvals, DEFAULT_APPROVAL_TIMEOUT, DecideError, Grant,
    GrantStore, MemoryGrantStore, Refusal,
};
// Streaming answers (the rest is in `stream`).
pub use portcullis_engine::{
    Feed, OutputStream, StreamItem, StreamItems, StreamText, StreamingRule,
};
// The engine's modules: applying decisions, the causes of errors, field paths, streaming.
pub use portcullis_engine::{apply, approval, duration, error, grant, path, session, stream, time};
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

#[cfg(feature = "dsl")]
#[cfg_attr(docsrs, doc(cfg(feature = "dsl")))]
pub use portcullis_dsl as dsl;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use portcullis_macros::{
    dsl_policy, input_policy, output_policy, policy_set, tool_call_policy, tool_result_policy,
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
pub use portcullis_rego::server as rego_rest;

#[cfg(feature = "cedar")]
#[cfg_attr(docsrs, doc(cfg(feature = "cedar")))]
pub use portcullis_cedar as cedar;

#[cfg(feature = "manifest")]
#[cfg_attr(docsrs, doc(cfg(feature = "manifest")))]
pub use portcullis_manifest as manifest;

/// Declares a guide: a page of `docs/` as a module's documentation, after the definitions that
/// turn its links to other pages into links within this documentation. A guide whose examples
/// need features is included only when they are on; without them its page says so.
macro_rules! guide {
    ($name:ident, $file:literal, $title:literal $(, $feature:literal)*) => {
        #[doc = include_str!("../docs/rustdoc-links.md")]
        #[cfg_attr(all($(feature = $feature),*), doc = include_str!(concat!("../docs/", $file)))]
        #[cfg_attr(
            not(all($(feature = $feature),*)),
            doc = concat!(
                "# ", $title, "\n\nThis guide needs the features",
                $(" `", $feature, "`",)*
                ", which this build of the documentation does not have: build it with them, or \
                 read `docs/", $file, "` in the repository."
            )
        )]
        pub mod $name {}
    };
}

/// The guides: one page per topic, each the file of the repository's `docs/` folder named
/// after it, with its examples compiled and run as doc tests.
///
/// Start with the crate page's [short example](crate#a-short-example), then
/// [How the engine decides](crate::guides::engine).
pub mod guides {
    guide!(engine, "engine.md", "How the engine decides");
    guide!(approvals, "approvals.md", "Approvals: a person in the loop");
    guide!(
        macros,
        "macros.md",
        "Policies as code, rules compiled at build time",
        "macros"
    );
    guide!(dsl, "dsl.md", "Rules in JSON", "dsl");
    guide!(
        remote,
        "remote.md",
        "Remote policies: a decision endpoint or an OPA server",
        "http",
        "rego-rest"
    );
    guide!(rego, "rego.md", "Rego policies in process", "rego");
    guide!(cedar, "cedar.md", "Cedar policies in process", "cedar");
    guide!(production, "production.md", "Production controls");
    guide!(streaming, "streaming.md", "Streaming answers");
    guide!(sessions, "sessions.md", "Session state", "dsl");
    guide!(
        audit_export,
        "audit-export.md",
        "Audit export",
        "otel",
        "observability"
    );
    guide!(
        integrations,
        "integrations.md",
        "Guarding an agent framework",
        "openai",
        "rig",
        "mcp"
    );
    guide!(proxies, "proxies.md", "Guard an agent you did not write");
    guide!(
        policy_authors,
        "policy-authors.md",
        "For policy authors",
        "manifest"
    );
    guide!(service, "service.md", "Run it as a service", "http");
    guide!(benchmarks, "benchmarks.md", "Benchmarks");
    guide!(architecture, "architecture.md", "Architecture");

    // The repository's SECURITY.md: the threat model.
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../SECURITY.md")]
    pub mod security {}
}
