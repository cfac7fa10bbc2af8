//! The native policies: the Rust backends (DSL rules, Rego bundles, a Rego policy server, a
//! remote HTTP endpoint) behind one Python class, [`NativePolicy`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use portcullis_dsl::{DslError, DslPolicy};
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    InputContext, InputPolicy, InterceptionPoint, OutputContext, OutputPolicy, ToolCallContext,
    ToolCallPolicy, ToolResultContext, ToolResultPolicy,
};
use portcullis_http::{HttpClientOptions, HttpPolicy};
use portcullis_rego::RegoPolicy;
use portcullis_rego_rest::{RegoServerClientOptions, RegoServerPolicy};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::policy::FailedPolicy;

/// A policy of one point, as a policy set holds it.
#[derive(Clone)]
pub enum PointPolicy {
    /// An input policy.
    Input(Arc<dyn InputPolicy>),
    /// A tool-call policy.
    ToolCall(Arc<dyn ToolCallPolicy>),
    /// A tool-result policy.
    ToolResult(Arc<dyn ToolResultPolicy>),
    /// An output policy.
    Output(Arc<dyn OutputPolicy>),
}

impl PointPolicy {
    /// `policy` as a policy of `point`, for a type that serves every point.
    pub fn at<P>(point: InterceptionPoint, policy: P) -> PointPolicy
    where
        P: InputPolicy + ToolCallPolicy + ToolResultPolicy + OutputPolicy + 'static,
    {
        match point {
            InterceptionPoint::Input => PointPolicy::Input(Arc::new(policy)),
            InterceptionPoint::ToolCall => PointPolicy::ToolCall(Arc::new(policy)),
            InterceptionPoint::ToolResult => PointPolicy::ToolResult(Arc::new(policy)),
            InterceptionPoint::Output => PointPolicy::Output(Arc::new(policy)),
        }
    }

    /// The point the policy decides at.
    pub fn point(&self) -> InterceptionPoint {
        match self {
            PointPolicy::Input(_) => InterceptionPoint::Input,
            PointPolicy::ToolCall(_) => InterceptionPoint::ToolCall,
            PointPolicy::ToolResult(_) => InterceptionPoint::ToolResult,
            PointPolicy::Output(_) => InterceptionPoint::Output,
        }
    }
}

/// Builds the policy of `point` with that point's type of one backend family
/// (`for_point!(point, RegoPolicy, |P| P::new(..), |built| ())`): the constructor, written
/// once, is called on the type of the point, and the policy is wrapped with what `$keep`
/// takes from it.
macro_rules! for_point {
    ($point:expr, $family:ident, |$policy:ident| $make:expr, |$built:ident| $keep:expr $(,)?) => {
        match $point {
            InterceptionPoint::Input => {
                type $policy = $family<InputContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::Input(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::ToolCall => {
                type $policy = $family<ToolCallContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::ToolCall(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::ToolResult => {
                type $policy = $family<ToolResultContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::ToolResult(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::Output => {
                type $policy = $family<OutputContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::Output(Arc::new($built)), kept)
                })
            }
        }
    };
}

/// Reads a point's wire name (`input`, `tool_call`, `tool_result`, `output`).
pub fn parse_point(point: &str) -> PyResult<InterceptionPoint> {
    serde_json::from_value(serde_json::Value::String(point.to_owned())).map_err(|_| {
        PyValueError::new_err(format!(
            "unknown interception point {point:?}: expected \"input\", \"tool_call\", \"tool_result\" or \"output\""
        ))
    })
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
    fn loaded(id: String, policy: PointPolicy, warnings: Vec<String>) -> NativePolicy {
        NativePolicy {
            id,
            policy,
            problems: Vec::new(),
            warnings,
        }
    }
}

/// The error a constructor raises: what failed, with its cause chain.
fn construction_error(what: &str, error: &(dyn std::error::Error + 'static)) -> PyErr {
    PyValueError::new_err(format!("{what}: {}", error_chain(error)))
}

/// A DSL policy of `point` from `<dir>/<id>.json`. A rule that cannot be loaded does not
/// raise: the policy lists why in `problems`, and each evaluation fails with it.
#[pyfunction]
pub fn dsl_policy(py: Python<'_>, point: &str, id: String, dir: String) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    py.detach(|| {
        let loaded = for_point!(
            point,
            DslPolicy,
            |Policy| Policy::new(id.as_str(), &dir),
            |policy| policy
                .warnings()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
        );
        Ok(match loaded {
            Ok((policy, warnings)) => NativePolicy::loaded(id, policy, warnings),
            Err(error) => failed_dsl(point, id, &error),
        })
    })
}

/// The policy a DSL rule that cannot be loaded gives: every evaluation fails with why.
fn failed_dsl(point: InterceptionPoint, id: String, error: &DslError) -> NativePolicy {
    let problems: Vec<String> = match error.problems() {
        Some(problems) => problems.iter().map(ToString::to_string).collect(),
        None => vec![error_chain(error)],
    };
    let policy = PointPolicy::at(point, FailedPolicy::new(id.clone(), problems.join("\n")));
    NativePolicy {
        id,
        policy,
        problems,
        warnings: Vec::new(),
    }
}

/// A Rego policy of `point` evaluating the OPA WebAssembly bundle at `bundle` in process.
/// Raises `ValueError` when the bundle cannot be opened.
#[pyfunction]
pub fn rego_policy(
    py: Python<'_>,
    point: &str,
    id: String,
    bundle: String,
) -> PyResult<NativePolicy> {
    let point = parse_point(point)?;
    py.detach(|| {
        let (policy, ()) = for_point!(
            point,
            RegoPolicy,
            |Policy| Policy::new(id.as_str(), &bundle),
            |policy| (),
        )
        .map_err(|error| {
            construction_error(&format!("cannot load the Rego bundle {bundle}"), &error)
        })?;
        Ok(NativePolicy::loaded(id, policy, Vec::new()))
    })
}

/// The client options of a remote policy: its address, how long a request may take, and
/// headers sent with every request.
fn client_options(
    base_url: &str,
    timeout: Option<f64>,
    headers: Option<HashMap<String, String>>,
) -> PyResult<HttpClientOptions> {
    let mut options = HttpClientOptions::new(base_url);
    if let Some(seconds) = timeout {
        let timeout = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|timeout| !timeout.is_zero())
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "timeout must be a positive number of seconds, not {seconds}"
                ))
            })?;
        options = options.timeout(timeout);
    }
    for (name, value) in headers.iter().flatten() {
        options = options.header(name.as_str(), value.as_str());
    }
    Ok(options)
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
    let options: RegoServerClientOptions = client_options(base_url, timeout, headers)?;
    let (policy, ()) = for_point!(
        point,
        RegoServerPolicy,
        |Policy| Policy::new(id.as_str(), options.clone(), package),
        |policy| (),
    )
    .map_err(|error| construction_error("invalid Rego server policy", &error))?;
    Ok(NativePolicy::loaded(id, policy, Vec::new()))
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
    let (policy, ()) = for_point!(
        point,
        HttpPolicy,
        |Policy| Policy::new(id.as_str(), options.clone()),
        |policy| (),
    )
    .map_err(|error| construction_error("invalid HTTP policy", &error))?;
    Ok(NativePolicy::loaded(id, policy, Vec::new()))
}
