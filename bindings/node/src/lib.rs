//! The Node.js binding of Portcullis: the native addon under the `@portcullis/*` packages.
//!
//! The engine's loop, its decisions, redactions, transforms and audit records stay in Rust;
//! this crate only translates. A policy written in JavaScript is a Rust policy whose
//! evaluation calls the JavaScript function through a threadsafe function and awaits what it
//! gives (a decision, or a promise of one); the native policies are the Rust backends.
//! Evaluations run on the addon's tokio runtime, never on the JavaScript thread, and resolve
//! promises; each outcome comes back as one JSON document that the packages' JavaScript layer
//! turns into the forwarded context or one of its error classes (see `bindings/node/README.md`).
//!
//! The package's layer (`packages/core/index.js`) is the public API; the exports here are its
//! building blocks and may change in any release.

mod audit;
mod context;
mod engine;
mod native;
mod policy;

pub use audit::{NativeAuditSink, ObservabilitySettings, observability_sink};
pub use context::read_context;
pub use engine::{NativeEngine, NativePolicySet, create_engine, engine_from_manifest};
pub use native::{
    ClientOptions, NativePolicy, dsl_policy, http_policy, parse_point, rego_policy,
    rego_server_policy,
};
pub use policy::{
    DEFAULT_JS_DEADLINE, HostEvaluate, HostPolicyError, JsCall, JsPolicy, Report, Thrown, js_policy,
};
