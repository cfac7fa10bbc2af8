//! The native policies: the Rust backends (DSL rules, Rego bundles, a Rego policy server, a
//! remote HTTP endpoint, built by `portcullis-bindings`) behind one Python class,
//! [`NativePolicy`].

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use portcullis_bindings::{Loaded, PointPolicy};
use portcullis_engine::InterceptionPoint;
use portcullis_http::HttpClientOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Reads a point's wire name (`input`, `tool_call`, `tool_result`, `output`); `ValueError`
/// otherwise.
pub fn parse_point(point: &str) -> PyResult<InterceptionPoint> {
    portcullis_bindings::parse_point(point).map_err(PyValueError::new_err)
}

/// A policy evaluated by the Rust engine (not by Python): what `DslInputPolicy`,
/// `RegoInputPolicy`, `RegoServerInputPolicy`, `HttpInputPolicy` and their twins wrap.
#[pyclass(frozen, module = "portcullis._native")]
pub struct NativePolicy {
    id: String,
    pub(crate) policy: PointPolicy,
    problems: Vec<String>,
    warnings: Vec<String>,
}

#[pymethods]
impl NativePolicy {
    /// The policy's id.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// The point it decides at: `input`, `tool_call`, `tool_result` or `output`.
    #[getter]
    fn point(&self) -> &'static str {
        self.policy.point().as_str()
    }

    /// Why the policy could not be loaded (empty when it loaded): each evaluation fails with
    /// these.
    #[getter]
    fn problems(&self) -> Vec<String> {
        self.problems.clone()
    }

    /// What the rule checker warns about in a rule that loaded.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

impl NativePolicy {
    fn new(id: String, loaded: Result<Loaded, String>) -> PyResult<NativePolicy> {
        let loaded = loaded.map_err(PyValueError::new_err)?;
        Ok(NativePolicy {
            id,
            policy: loaded.policy,
            problems: loaded.problems,
            warnings: loaded.warnings,
        })
    }
}

/// A policy that loaded, with nothing to report.
fn loaded(policy: Result<PointPolicy, String>) -> Result<Loaded, String> {
    policy.map(|policy| Loaded {
        policy,
        problems: Vec::new(),
        warnings: Vec::new(),
    })
}

/// A DSL policy of `point` from `<dir>/<id>.json`. A rule that cannot be loaded does not
/// raise: the policy lists why in `problems`, and each evaluation fails with it.
#[pyfunction]
pub fn dsl_policy(py: Python<'_>, point: &str, id: String, dir: String) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    let built = py.detach(|| portcullis_bindings::dsl(point, &id, Path::new(&dir)));
    NativePolicy::new(id, Ok(built))
}

/// A Rego policy of `point` evaluating the OPA WebAssembly bundle at `bundle` in process
/// (read and compiled without holding the GIL). Raises `ValueError` when the bundle cannot be
/// opened.
#[pyfunction]
pub fn rego_policy(
    py: Python<'_>,
    point: &str,
    id: String,
    bundle: String,
) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    let built = py.detach(|| portcullis_bindings::rego(point, &id, &bundle));
    NativePolicy::new(id, loaded(built))
}

/// The client options of a remote policy: its address, how long a request may take
/// (seconds), and headers sent with every request.
fn client_options(
    base_url: &str,
    timeout: Option<f64>,
    headers: Option<HashMap<String, String>>,
) -> PyResult<HttpClientOptions> {
    let mut options = HttpClientOptions::new(base_url);
    if let Some(seconds) = timeout {
        options = options.timeout(positive_seconds(seconds, "timeout")?);
    }
    for (name, value) in headers.iter().flatten() {
        options = options.header(name.as_str(), value.as_str());
    }
    Ok(options)
}

/// `seconds` as a duration; `ValueError` naming `what` unless it is a positive number.
pub(crate) fn positive_seconds(seconds: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what} must be a positive number of seconds, not {seconds}"
            ))
        })
}

/// A policy of `point` whose decision is the document at `package` on a Rego policy server
/// (the OPA REST API). Raises `ValueError` when the options or the package are invalid; no
/// request is made until the first evaluation.
#[pyfunction]
#[pyo3(signature = (point, id, base_url, package, timeout=None, headers=None))]
pub fn rego_server_policy(
    point: &str,
    id: String,
    base_url: &str,
    package: &str,
    timeout: Option<f64>,
    headers: Option<HashMap<String, String>>,
) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    let options = client_options(base_url, timeout, headers)?;
    let built = portcullis_bindings::rego_server(point, &id, &options, package);
    NativePolicy::new(id, loaded(built))
}

/// A policy of `point` evaluated by a remote endpoint (`POST {base_url}/engine/evaluate`).
/// Raises `ValueError` when the options are invalid; no request is made until the first
/// evaluation.
#[pyfunction]
#[pyo3(signature = (point, id, base_url, timeout=None, headers=None))]
pub fn http_policy(
    point: &str,
    id: String,
    base_url: &str,
    timeout: Option<f64>,
    headers: Option<HashMap<String, String>>,
) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    let options = client_options(base_url, timeout, headers)?;
    let built = portcullis_bindings::http(point, &id, &options);
    NativePolicy::new(id, loaded(built))
}
