//! The engine as Python reaches it: [`NativePolicySet`] gathers the policies,
//! [`NativeEngine`] evaluates contexts and reports each outcome, with the call's audit records,
//! as one tuple the package's layer turns into the context to forward or one of its exception
//! classes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use portcullis_engine::{
    EngineError, InputContext, InterceptionPoint, OnError, OutputContext, PolicyContext,
    PolicyDenialError, PolicyEngine, PolicyEngineBuilder, PolicyEvaluationError, PolicySet,
    PolicySetBuilder, ToolCallContext, ToolResultContext,
};
use portcullis_manifest::{CodeRegistry, Manifest};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyTuple, PyType};
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;

use portcullis_bindings::{PointPolicy, poll_here, run_here, with_records};

use crate::audit::{NativeAuditSink, audit_handler};
use crate::convert::{from_json_text, read_context, to_python};
use crate::native::{NativePolicy, parse_point, positive_seconds};
use crate::policy::{HostPolicyError, python_policy};
use crate::runtime::{CALLER_LOOP, check_not_nested, runtime};

/// The policies of an engine being built: the package's layer adds each policy of the Python
/// policy set, in order, then builds the engine with [`create_engine`].
#[pyclass(module = "portcullis._native")]
pub struct NativePolicySet {
    builder: Option<PolicySetBuilder>,
}

#[pymethods]
impl NativePolicySet {
    /// An empty set whose evaluation errors are handled as `on_error` says (`"deny"` or
    /// `"allow"`).
    #[new]
    fn new(on_error: &str) -> PyResult<NativePolicySet> {
        let on_error = match on_error {
            "deny" => OnError::Deny,
            "allow" => OnError::Allow,
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_error must be \"deny\" or \"allow\", not {other:?}"
                )));
            }
        };
        Ok(NativePolicySet {
            builder: Some(PolicySet::builder().on_error(on_error)),
        })
    }

    /// Adds a policy written in Python at `point`: `evaluate(ctx)` gives its decisions (or
    /// awaitables of them), `deadline` (seconds) how long one evaluation may take.
    #[pyo3(signature = (point, id, evaluate, deadline=None))]
    fn add_python(
        &mut self,
        point: &str,
        id: String,
        evaluate: Py<PyAny>,
        deadline: Option<f64>,
    ) -> PyResult<()> {
        let point = parse_point(point)?;
        let deadline = match deadline {
            None => None,
            Some(seconds) => Some(positive_seconds(
                seconds,
                &format!("the deadline of policy {id:?}"),
            )?),
        };
        self.add(PointPolicy::at(
            point,
            python_policy(id, evaluate, deadline),
        ))
    }

    /// Adds a native policy at `point`; raises `ValueError` when it is a policy of another
    /// point.
    fn add_native(&mut self, point: &str, policy: &NativePolicy) -> PyResult<()> {
        let point = parse_point(point)?;
        let own = policy.policy.point();
        if own != point {
            return Err(PyValueError::new_err(format!(
                "it is a {own} policy; it cannot go in {point}"
            )));
        }
        self.add(policy.policy.clone())
    }
}

impl NativePolicySet {
    fn add(&mut self, policy: PointPolicy) -> PyResult<()> {
        let builder = self.builder.take().ok_or_else(already_built)?;
        self.builder = Some(policy.add_to(builder));
        Ok(())
    }
}

fn already_built() -> PyErr {
    PyRuntimeError::new_err("this policy set already went into an engine")
}

/// Builds an engine on `set` (which cannot be used again); with `audit`, each outcome carries
/// the call's audit records; `sink` receives every record too.
#[pyfunction]
#[pyo3(signature = (set, audit, sink=None))]
pub fn create_engine(
    set: &mut NativePolicySet,
    audit: bool,
    sink: Option<&NativeAuditSink>,
) -> PyResult<NativeEngine> {
    let builder = set.builder.take().ok_or_else(already_built)?;
    let builder = PolicyEngine::builder().policy_set(builder.build());
    let builder = match audit_handler(audit, sink) {
        Some(handler) => builder.on_audit(handler),
        None => builder,
    };
    Ok(NativeEngine::new(builder, audit))
}

/// Loads the manifest at `path` (§10) without holding the GIL and builds its engine; with
/// `audit`, each outcome carries the call's audit records, and `sink` receives every record
/// (the manifest's own sinks receive them too). Raises `ValueError` with every problem of the
/// manifest.
#[pyfunction]
#[pyo3(signature = (path, audit, sink=None))]
pub fn engine_from_manifest(
    py: Python<'_>,
    path: String,
    audit: bool,
    sink: Option<&NativeAuditSink>,
) -> PyResult<NativeEngine> {
    check_not_nested()?;
    let runtime = runtime()?;
    let handler = audit_handler(audit, sink);
    let builder = py.detach(|| {
        runtime.block_on(async move {
            let loaded =
                Manifest::load(&path, &CodeRegistry::new()).map_err(|errors| errors.to_string())?;
            match handler {
                Some(handler) => loaded.into_engine_builder_with_audit(handler).await,
                None => loaded.into_engine_builder().await,
            }
            .map_err(|errors| errors.to_string())
        })
    });
    let builder = builder.map_err(PyValueError::new_err)?;
    Ok(NativeEngine::new(builder, audit))
}

/// A policy engine: evaluates contexts (dicts) from any thread, and from asyncio.
#[pyclass(frozen, module = "portcullis._native")]
pub struct NativeEngine {
    engine: Arc<PolicyEngine>,
    audit: bool,
}

impl NativeEngine {
    fn new(builder: PolicyEngineBuilder, audit: bool) -> NativeEngine {
        NativeEngine {
            engine: Arc::new(builder.build()),
            audit,
        }
    }
}

#[pymethods]
impl NativeEngine {
    /// Evaluates the policies of `point` on `context`, blocking this thread (not the GIL):
    /// returns the outcome (see [`Outcome`]), or raises the `PolicyDenialError` of a denial
    /// when the engine keeps no audit records. Raises `TypeError` or `ValueError` for a context
    /// that is not a valid one of the point.
    ///
    /// The first steps run on this thread: in-memory policies decide without entering the
    /// runtime's scheduler; an evaluation that waits goes on blocked on the runtime.
    fn evaluate_sync<'py>(
        &self,
        py: Python<'py>,
        point: &str,
        context: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        check_not_nested()?;
        let call = self.call(point, context)?;
        let runtime = runtime()?;
        let outcome = py.detach(|| run_here(runtime, call));
        // A denial with no audit records to deliver first is raised here: no tuple for the
        // package's layer to unpack, no further call to raise it.
        if let Outcome {
            verdict: Verdict::Denied(denial),
            records: None,
        } = outcome
        {
            return Err(PyErr::from_value(denial.into_error(py)?));
        }
        outcome.into_pyobject(py)
    }

    /// Records a person's approval of the action whose digest is `digest` (an approval
    /// request's `action_digest`), by `by`, usable once within `ttl` seconds: the retried call
    /// proceeds. Raises `RuntimeError` when the grant store fails.
    fn grant(&self, py: Python<'_>, digest: &str, by: String, ttl: f64) -> PyResult<()> {
        check_not_nested()?;
        let ttl = positive_seconds(ttl, "ttl")?;
        let runtime = runtime()?;
        let engine = Arc::clone(&self.engine);
        py.detach(|| runtime.block_on(engine.approvals().grant(digest, by, ttl)))
            .map_err(|error| PyRuntimeError::new_err(error.to_string()))
    }

    /// Evaluates the policies of `point` on `context` for a caller on a running asyncio loop:
    /// returns the outcome itself when the policies decided without waiting, otherwise an
    /// awaitable of it (the evaluation goes on on the module's runtime; coroutines of Python
    /// policies are awaited on the caller's loop).
    fn evaluate_async<'py>(
        &self,
        py: Python<'py>,
        point: &str,
        context: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = self.call(point, context)?;
        let locals = TaskLocals::with_running_loop(py)
            .map_err(|_| {
                PyRuntimeError::new_err(
                    "evaluate_* must be awaited on a running asyncio event loop; use evaluate_*_sync outside one",
                )
            })?
            .copy_context(py)?;
        let runtime = runtime()?;
        let mut call = Box::pin(CALLER_LOOP.scope(locals.clone(), call));
        // The first steps on this thread: in-memory policies decide without a round trip
        // through the runtime.
        let first = py.detach(|| poll_here(runtime, call.as_mut()));
        match first {
            Poll::Ready(outcome) => Ok(outcome.into_pyobject(py)?.into_any()),
            Poll::Pending => {
                pyo3_async_runtimes::tokio::future_into_py_with_locals(py, locals, async move {
                    Ok(call.await)
                })
            }
        }
    }
}

impl NativeEngine {
    /// The evaluation of `context` at `point`, ready to run.
    fn call(
        &self,
        point: &str,
        context: &Bound<'_, PyAny>,
    ) -> PyResult<Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>> {
        let point = parse_point(point)?;
        let context = match point {
            InterceptionPoint::Input => AnyContext::Input(read_context(context)?),
            InterceptionPoint::ToolCall => AnyContext::ToolCall(read_context(context)?),
            InterceptionPoint::ToolResult => AnyContext::ToolResult(read_context(context)?),
            InterceptionPoint::Output => AnyContext::Output(read_context(context)?),
        };
        // On the heap at once: the evaluation's future is large, and each step of the call
        // would otherwise copy it (from here to the thread's stack, into the runtime).
        Ok(Box::pin(run(Arc::clone(&self.engine), self.audit, context)))
    }
}

/// A context of any point.
enum AnyContext {
    Input(InputContext),
    ToolCall(ToolCallContext),
    ToolResult(ToolResultContext),
    Output(OutputContext),
}

/// Runs one call, keeping its audit records when `audit`.
async fn run(engine: Arc<PolicyEngine>, audit: bool, context: AnyContext) -> Outcome {
    let verdict = async move {
        match context {
            AnyContext::Input(context) => evaluate(&engine, context).await,
            AnyContext::ToolCall(context) => evaluate(&engine, context).await,
            AnyContext::ToolResult(context) => evaluate(&engine, context).await,
            AnyContext::Output(context) => evaluate(&engine, context).await,
        }
    };
    let (verdict, records) = with_records(audit, verdict).await;
    Outcome { verdict, records }
}

/// What the engine did with one call.
enum Verdict {
    /// Go on: with the changed context, or `None` when unchanged.
    Forward(Option<Value>),
    /// A policy denied.
    Denied(Denial),
    /// A policy could not be evaluated (and `on_error` is `deny`).
    Evaluation(PolicyEvaluationError),
    /// A policy escalated: the approval request, as JSON.
    ApprovalRequired(Value),
}

async fn evaluate<C: PolicyContext>(engine: &PolicyEngine, context: C) -> Verdict {
    match engine.evaluate(&context).await {
        Ok(evaluation) if evaluation.is_modified() => Verdict::Forward(Some(
            serde_json::to_value(evaluation.context()).unwrap_or(Value::Null),
        )),
        Ok(_) => Verdict::Forward(None),
        Err(EngineError::Denied(denial)) => Verdict::Denied(Denial(denial)),
        Err(EngineError::Evaluation(error)) => Verdict::Evaluation(error),
        Err(EngineError::ApprovalRequired(request)) => {
            Verdict::ApprovalRequired(serde_json::to_value(&*request).unwrap_or(Value::Null))
        }
    }
}

/// A policy's denial, on its way to Python.
struct Denial(PolicyDenialError);

/// The package's `PolicyDenialError` class.
static DENIAL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

impl Denial {
    /// The denial as a `PolicyDenialError`, made without a call of its constructor (every
    /// denied call makes one): `Exception.__new__` with the message, then its attributes.
    fn into_error(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let class = DENIAL_ERROR
            .get_or_try_init(py, || -> PyResult<Py<PyType>> {
                Ok(py
                    .import(intern!(py, "portcullis.errors"))?
                    .getattr(intern!(py, "PolicyDenialError"))?
                    .cast_into::<PyType>()?
                    .unbind())
            })?
            .bind(py);
        let Denial(denial) = self;
        let text = denial.to_string();
        let message = PyString::new(py, &text);
        let error = class.call_method1(intern!(py, "__new__"), (class, &message))?;
        error.setattr(intern!(py, "policy_id"), denial.policy_id())?;
        let point = match denial.interception_point() {
            InterceptionPoint::Input => intern!(py, "input"),
            InterceptionPoint::ToolCall => intern!(py, "tool_call"),
            InterceptionPoint::ToolResult => intern!(py, "tool_result"),
            InterceptionPoint::Output => intern!(py, "output"),
        };
        error.setattr(intern!(py, "interception_point"), point)?;
        // Most denials' message is their reason: one string for both.
        let reason = match denial.reason() {
            Some(reason) if reason == text => message.into_any(),
            Some(reason) => PyString::new(py, reason).into_any(),
            None => py.None().into_bound(py),
        };
        error.setattr(intern!(py, "reason"), reason)?;
        Ok(error)
    }
}

/// The outcome of one call, as Python receives it: a tuple `(kind, detail, records)`.
///
/// | kind | detail |
/// |---|---|
/// | 0, forward | the changed context (a new dict), or `None` when unchanged |
/// | 1, denied | the `PolicyDenialError` to raise |
/// | 2, evaluation error | `(policy_id, interception_point, cause, exception)`: `exception` is what a Python policy raised, else `None` |
/// | 3, approval required | the approval request (a dict) |
///
/// `records` is the list of the call's audit records (dicts), or `None` when the engine does
/// not keep them.
pub struct Outcome {
    verdict: Verdict,
    /// Each record's JSON text.
    records: Option<Vec<String>>,
}

impl<'py> IntoPyObject<'py> for Outcome {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (kind, detail): (u8, Bound<'py, PyAny>) = match self.verdict {
            Verdict::Forward(None) => (0, py.None().into_bound(py)),
            Verdict::Forward(Some(context)) => (0, to_python(py, &context)?),
            Verdict::Denied(denial) => (1, denial.into_error(py)?),
            Verdict::Evaluation(error) => {
                let raised = HostPolicyError::raised_exception(py, error.cause());
                (
                    2,
                    (
                        error.policy_id(),
                        error.interception_point().as_str(),
                        error.cause_chain(),
                        raised,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                )
            }
            Verdict::ApprovalRequired(request) => (3, to_python(py, &request)?),
        };
        let records = match self.records {
            None => py.None().into_bound(py),
            Some(records) => {
                let list = PyList::empty(py);
                for record in &records {
                    list.append(from_json_text(py, record)?)?;
                }
                list.into_any()
            }
        };
        (kind, detail, records).into_pyobject(py)
    }
}
