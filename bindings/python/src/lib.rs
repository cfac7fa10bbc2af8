//! The Python binding of Portcullis: the native module `portcullis._native` under the
//! `portcullis` package.
//!
//! The engine's loop, its decisions, redactions, transforms and audit records stay in Rust;
//! this crate only translates. A policy written in Python is a Rust policy whose evaluation
//! calls the Python callable (with the GIL) and, when it returns a coroutine, awaits it on the
//! caller's asyncio loop. The native policies are the Rust backends. Contexts cross as dicts,
//! read into the engine's types with their depth bounded; each outcome comes back as one
//! tuple that the package's Python layer (`python/portcullis/`) turns into the forwarded
//! context or one of its exception classes. No evaluation holds the GIL while it waits.
//!
//! The package's layer is the public API; the names here are its building blocks and may
//! change in any release.

mod audit;
mod convert;
mod engine;
mod native;
mod policy;
mod runtime;

use pyo3::prelude::*;

pub use audit::{NativeAuditSink, observability_sink};
pub use convert::{MAX_DEPTH, NotJson, read_context, to_json, to_python};
pub use engine::{NativeEngine, NativePolicySet, Outcome, create_engine, engine_from_manifest};
pub use native::{
    NativePolicy, dsl_policy, http_policy, parse_point, rego_policy, rego_server_policy,
};
pub use policy::{
    DEFAULT_PYTHON_DEADLINE, HostPolicyError, PythonCall, PythonPolicy, python_policy,
};

/// The module `portcullis._native`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<NativePolicy>()?;
    module.add_class::<NativePolicySet>()?;
    module.add_class::<NativeEngine>()?;
    module.add_class::<NativeAuditSink>()?;
    module.add_function(wrap_pyfunction!(dsl_policy, module)?)?;
    module.add_function(wrap_pyfunction!(rego_policy, module)?)?;
    module.add_function(wrap_pyfunction!(rego_server_policy, module)?)?;
    module.add_function(wrap_pyfunction!(http_policy, module)?)?;
    module.add_function(wrap_pyfunction!(create_engine, module)?)?;
    module.add_function(wrap_pyfunction!(engine_from_manifest, module)?)?;
    module.add_function(wrap_pyfunction!(observability_sink, module)?)?;
    Ok(())
}
