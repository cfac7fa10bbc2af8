//! Portcullis audit handler for LLM observability platforms: every decision becomes a span
//! of a trace, exported over OTLP/HTTP (protobuf) to a Langfuse-compatible platform.
//!
//! [`ObservabilityAuditHandler`] exports the spans of the `otel` handler
//! (`engine.policy.evaluate`, attributes `engine.policy_id`, `engine.decision`,
//! `engine.interception_point`, `engine.enforced`, `engine.reason`, status error for `deny`
//! and `evaluation_error`), adding `session.id` and `user.id` from the context's metadata so
//! the platform groups decisions by session and agent.
//!
//! Configure it in code with [`ObservabilityOptions::builder`] or from the environment:
//!
//! | variable | meaning |
//! |---|---|
//! | `OBS_PUBLIC_KEY` | public key (HTTP Basic user), required |
//! | `OBS_SECRET_KEY` | secret key (HTTP Basic password), required |
//! | `OBS_BASE_URL` | base URL, default `https://cloud.langfuse.com` |
//!
//! Spans are posted to `{base}/api/public/otel/v1/traces` by a batching processor on a thread
//! of its own: an evaluation never waits on the network and an export failure never fails an
//! evaluation. [`flush`](ObservabilityAuditHandler::flush) exports what is buffered and
//! reports failures; call it before the program exits.
//!
//! ```no_run
//! use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine, PolicySet};
//! use portcullis_observability::ObservabilityAuditHandler;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // OBS_PUBLIC_KEY=pk-lf-… OBS_SECRET_KEY=sk-lf-… [OBS_BASE_URL=https://langfuse.example.com]
//! let audit = ObservabilityAuditHandler::from_env()?;
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().build())
//!     .on_audit(audit.clone())
//!     .build();
//!
//! let context = InputContext::new(vec![Message::user("hello")], Metadata::new("agent-7", "session-42"));
//! engine.evaluate_input(&context).await?;
//!
//! audit.flush().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Environment variables of the OTLP exporter (`OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_BSP_*`, …) still apply, except that the `Authorization` and
//! `x-langfuse-ingestion-version` headers are always the handler's own.
//!
//! The transport is public as [`otlp`]: the OTLP/HTTP client ([`otlp::OtlpClient`]) and the
//! span export around it ([`otlp::start_export`]), for any sink that posts spans to a
//! collector (the manifest's `audit.otlp` is one).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod export;
mod handler;
mod options;
pub mod otlp;
mod queue;

pub use error::ObservabilityError;
pub use handler::{ObservabilityAuditHandler, SESSION_ID, USER_ID};
pub use options::{
    BASE_URL_VAR, DEFAULT_BASE_URL, DEFAULT_SERVICE_NAME, DEFAULT_TIMEOUT, ObservabilityOptions,
    ObservabilityOptionsBuilder, PUBLIC_KEY_VAR, SECRET_KEY_VAR, TRACES_PATH,
};

/// The header carrying the platform's ingestion version, and its value.
pub const INGESTION_VERSION_HEADER: (&str, &str) =
    (export::INGESTION_VERSION_HEADER, export::INGESTION_VERSION);
