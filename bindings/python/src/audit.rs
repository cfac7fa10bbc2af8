//! Where an engine's audit records go: back to Python with each call (for `on_audit`), and to
//! a native sink (the observability platform exporter) without crossing into Python.

use portcullis_engine::AuditHandler;
use portcullis_engine::error::error_chain;
use portcullis_observability::ObservabilityAuditHandler;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::runtime::{check_not_nested, runtime};

/// The audit handler of an engine: records kept for `on_audit` when `keep`, and exported by
/// `sink` when there is one. `None` when neither.
pub(crate) fn audit_handler(
    keep: bool,
    sink: Option<&NativeAuditSink>,
) -> Option<impl AuditHandler> {
    portcullis_bindings::audit_handler(keep, sink.map(|sink| sink.handler.clone()))
}

/// An audit sink that exports records as spans to an observability platform over OTLP/HTTP,
/// on a thread of its own: an engine given it hands it every record without a call into
/// Python.
#[pyclass(frozen, module = "portcullis._native")]
pub struct NativeAuditSink {
    handler: ObservabilityAuditHandler,
}

#[pymethods]
impl NativeAuditSink {
    /// Where spans are posted.
    #[getter]
    fn endpoint(&self) -> &str {
        self.handler.endpoint()
    }

    /// Exports every span buffered so far, without holding the GIL; raises `RuntimeError`
    /// with why an export failed.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        check_not_nested()?;
        let runtime = runtime()?;
        let handler = self.handler.clone();
        py.detach(|| runtime.block_on(handler.flush()))
            .map_err(|error| PyRuntimeError::new_err(error_chain(&error)))
    }
}

/// A sink for the observability platform of the given keys and address, or of the
/// `OBS_PUBLIC_KEY`, `OBS_SECRET_KEY` and `OBS_BASE_URL` variables when none is given.
/// Raises `ValueError` when a key is missing or the address is invalid.
#[pyfunction]
#[pyo3(signature = (public_key=None, secret_key=None, base_url=None))]
pub fn observability_sink(
    public_key: Option<String>,
    secret_key: Option<String>,
    base_url: Option<String>,
) -> PyResult<NativeAuditSink> {
    let runtime = runtime()?;
    let _entered = runtime.enter();
    let given = public_key.is_some() || secret_key.is_some() || base_url.is_some();
    let handler = portcullis_bindings::observability_handler(given.then_some(
        portcullis_bindings::ObservabilitySettings {
            public_key,
            secret_key,
            base_url,
        },
    ))
    .map_err(|error| PyValueError::new_err(error_chain(&error)))?;
    Ok(NativeAuditSink { handler })
}
