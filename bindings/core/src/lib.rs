//! What the language bindings of Portcullis share (`bindings/node`, `bindings/python`,
//! `bindings/java`): the
//! native policies (DSL rules, Rego bundles, a Rego policy server, a remote HTTP endpoint)
//! built for one point, the policy a rule that could not be loaded gives, and the audit
//! records a call keeps to hand to the host language's handler, and the policy trait for a
//! policy written in the host language, and one call of an engine on a context given as JSON
//! with its outcome as JSON, and where a call takes its first steps.
//!
//! Nothing here knows a host language: each binding translates these into its own values and
//! errors.

mod audit;
mod host;
mod native;
mod outcome;
mod steps;

pub use audit::{
    ObservabilitySettings, RecordContexts, audit_handler, observability_handler, with_records,
};
pub use host::{HostCall, HostPolicy};
pub use native::{
    FailedPolicy, Loaded, NotLoaded, PointPolicy, construction_error, describe, dsl, http,
    parse_point, rego, rego_server,
};
pub use outcome::{FORWARD_UNCHANGED, is_call_context, outcome, read_context};
pub use steps::{poll_here, run_here};
