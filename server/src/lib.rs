//! Portcullis as a network service: agents in any language, and fleets of agent processes,
//! ask one place for decisions.
//!
//! [`DecisionService`] holds an engine and answers HTTP requests: serve it with [`serve`], or
//! nest its [`router`](DecisionService::router) (an [axum](https://docs.rs/axum)
//! [`Router`](axum::Router)) in an application's own:
//!
//! - `POST /engine/evaluate`: the remote policy protocol, server side. The body is
//!   `{"policy_id": "..", "interception_point": "input"|"tool_call"|"tool_result"|"output", "context": {..}}`;
//!   the answer (200) is the decision of the one policy with that id at that point of the
//!   loaded set, such as `{"decision": "deny", "reason": ".."}`. Any client of that protocol
//!   (the `http` backend, the TypeScript `HttpInputPolicy`) works against it unchanged. The
//!   policy runs through the engine
//!   ([`PolicyEngine::evaluate_only`](portcullis_engine::PolicyEngine::evaluate_only)):
//!   audited, under its deadlines and the point's call deadline, with the session store's
//!   facts; the answer is the decision that took effect (`allow` when the policy is only
//!   monitored, or failed under `on_error: allow`).
//! - `POST /v1/evaluate/{input|tool_call|tool_result|output}`: the context through every policy of the
//!   point, as the engine runs them; the answer is 200 with the [`Outcome`] document for every
//!   outcome (a denial is an answer, not a failure):
//!   `{"outcome": "allowed"|"denied"|"error"|"approval_required", "decisions": [{"policy_id",
//!   "decision"}], "context": .., "denial": {"policy_id", "reason"}, "error": {"policy_id",
//!   "message"}, "approval": {"id", "action_digest", "policy_ids", "reasons"}}`.
//! - `GET /healthz`, `GET /readyz` (a set is loaded; the last reload's outcome and error only to
//!   a caller with the bearer token, URLs in it cut down to host and path by [`redact_urls`])
//!   and `GET /metrics` (Prometheus text; with a bearer token configured, only to a caller
//!   with it).
//!
//! Errors are `{"error": {"code": "..", "message": ".."}}`: 400 malformed JSON or an invalid
//! context, 401 bearer token missing or wrong, 404 unknown policy id, point or route, 408 body
//! not received in time, 413 body over the limit (1 MiB by default), 415 a POST whose
//! `Content-Type` is not JSON (what a browser page could send unasked), 503 no set loaded,
//! overloaded (with `Retry-After`) or over the request deadline. A policy that fails the call
//! under `/engine/evaluate` is a 500 (the protocol's clients read any non-2xx as an evaluation
//! error).
//!
//! [`ServeOptions::workers`] serves the connections on threads of their own, each with a
//! single-threaded runtime, rather than on the caller's runtime: `portcullis serve` does, one
//! per CPU.
//!
//! Limits ([`Limits`], [`ServeOptions`]): open connections are capped; a request's head must
//! arrive within the header read time (an idle keep-alive connection is closed after it too);
//! a request takes an evaluation slot (or waits in a bounded queue) *before* its body is read,
//! so at most `max_concurrent` bodies are read and held at once, each within the body read
//! time (408 beyond).
//!
//! ```no_run
//! use portcullis_engine::{PolicyEngine, PolicySet};
//! use portcullis_server::{DecisionService, Limits, serve};
//!
//! # async fn run(set: PolicySet) -> std::io::Result<()> {
//! let service = DecisionService::builder()
//!     .bearer_token("s3cret")
//!     .limits(Limits::new().max_concurrent(64))
//!     .build(PolicyEngine::builder().policy_set(set));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, service.clone(), service.serve_options(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```
//!
//! Reloading: swap a new set in with [`DecisionService::replace_policy_set`], or let a watcher
//! swap it into [`DecisionService::engine`] and report with
//! [`DecisionService::record_reload`]; evaluations under way finish on the set they started
//! with. A failed reload keeps the set in use and shows in `/readyz` and `/metrics`.
//!
//! Every request gets an id (the caller's `x-request-id`, or a new one, answered in
//! `x-request-id`), and one access line once answered: by default in the `tracing` log
//! (`answered`, at INFO, WARN for a 5xx: `request_id`, `method`, `route`, `status`, `micros`),
//! or wherever the service's [`AccessLog`] writes it. The lines a request logs on the way are
//! in a `request` span carrying its id, at DEBUG.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod access;
mod approvals;
mod console;
mod metrics;
pub mod outcome;
mod redact;
mod routes;
mod serve;
mod service;
#[cfg(feature = "tls")]
mod tls;

pub use access::{AccessLine, AccessLog, TracingAccessLog};
pub use approvals::{DEFAULT_GRANT_TTL, MAX_GRANT_TTL};
pub use outcome::{
    Approval, Context, ContextTask, DecisionTap, Outcome, Verdict, evaluate, parse_context,
};
pub use redact::redact_urls;
pub use serve::{DEFAULT_MAX_CONNECTIONS, HttpService, ServeOptions, serve};
pub use service::{
    DEFAULT_MAX_BODY_BYTES, DecisionService, DecisionServiceBuilder, Limits, ReloadStatus,
};
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use tls::{Tls, TlsError};
