//! The policy the binding adds to the engine: a policy written in Python, a
//! `portcullis_bindings::HostPolicy` over [`PythonCall`].

use std::fmt;
use std::time::Duration;

use portcullis_engine::{BoxError, PolicyContext, PolicyDecision, async_trait};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::Deserialize;

use portcullis_bindings::{HostCall, HostPolicy, describe};

use crate::convert::{to_json, to_python, type_name};
use crate::runtime::coroutine_loop;

/// How long a Python policy may take when it names no `deadline` of its own: a coroutine
/// that never finishes fails its evaluation after this long.
pub const DEFAULT_PYTHON_DEADLINE: Duration = Duration::from_secs(30);

/// Why a Python policy gave no decision.
#[derive(Debug)]
pub enum HostPolicyError {
    /// It raised an exception (or its coroutine did).
    Raised {
        /// The exception, described (`ValueError: out of range`).
        message: String,
        /// The exception itself, handed back as the `__cause__` of the evaluation error.
        error: PyErr,
    },
    /// It returned something that is not a decision.
    NotADecision {
        /// What it returned, described (JSON or its type, cut short when long).
        returned: String,
        /// Why that is not a decision.
        problem: String,
    },
}

impl fmt::Display for HostPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPolicyError::Raised { message, .. } => write!(f, "the policy raised {message}"),
            HostPolicyError::NotADecision { returned, problem } => write!(
                f,
                "the policy returned {returned}, which is not a decision ({problem})"
            ),
        }
    }
}

impl std::error::Error for HostPolicyError {}

impl HostPolicyError {
    fn raised(py: Python<'_>, error: PyErr) -> HostPolicyError {
        let kind = error.get_type(py);
        let kind = kind
            .name()
            .map_or_else(|_| "an exception".to_owned(), |name| name.to_string());
        let message = match error.value(py).str() {
            Ok(text) if !text.is_empty().unwrap_or(true) => format!("{kind}: {text}"),
            _ => kind,
        };
        HostPolicyError::Raised { message, error }
    }

    /// The exception a Python policy raised, if `error` or one of its causes is such a raise.
    pub fn raised_exception(
        py: Python<'_>,
        error: &(dyn std::error::Error + 'static),
    ) -> Option<Py<PyAny>> {
        std::iter::successors(Some(error), |error| error.source()).find_map(|error| {
            match error.downcast_ref::<HostPolicyError>() {
                Some(HostPolicyError::Raised { error, .. }) => {
                    Some(error.value(py).clone().into_any().unbind())
                }
                _ => None,
            }
        })
    }
}

/// What a Python policy returned, as a decision.
fn read_decision(returned: &Bound<'_, PyAny>) -> Result<PolicyDecision, HostPolicyError> {
    let value = to_json(returned).map_err(|error| HostPolicyError::NotADecision {
        returned: format!("a {}", type_name(returned)),
        problem: format!(
            "{}; a decision is a dict such as {{\"decision\": \"allow\"}} or Decision.allow()",
            error.message()
        ),
    })?;
    PolicyDecision::deserialize(&value).map_err(|error| HostPolicyError::NotADecision {
        returned: describe(&value),
        problem: error.to_string(),
    })
}

/// A policy written in Python, as the engine holds it (its id, deadline, and the call).
pub type PythonPolicy = HostPolicy<PythonCall>;

/// The call of a policy written in Python: a callable taking the context (a dict) and
/// returning a decision, or an awaitable of one (an `async def`), which is awaited on the
/// caller's event loop.
pub struct PythonCall {
    evaluate: Py<PyAny>,
}

/// What calling a Python policy gave: a decision, or a coroutine to await first.
enum Called {
    Decided(Result<PolicyDecision, HostPolicyError>),
    Awaiting(
        std::pin::Pin<Box<dyn Future<Output = PyResult<Py<PyAny>>> + Send>>,
        CancelOnDrop,
    ),
}

/// Cancels a policy's task on its loop unless it finished: dropped when the engine gives up
/// on the policy (its deadline passed, or the call was dropped).
struct CancelOnDrop {
    /// The task's `portcullis._runtime.Pending` and its loop, until it finishes.
    task: Option<(Py<PyAny>, Py<PyAny>)>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((task, event_loop)) = self.task.take() {
            Python::attach(|py| {
                // A loop that is closed has nothing left to cancel.
                let _ = task.call_method1(py, pyo3::intern!(py, "cancel"), (event_loop,));
            });
        }
    }
}

/// A policy with `id` whose decisions `evaluate(ctx)` gives, failing after `deadline` (or
/// [`DEFAULT_PYTHON_DEADLINE`]).
pub fn python_policy(id: String, evaluate: Py<PyAny>, deadline: Option<Duration>) -> PythonPolicy {
    HostPolicy::new(
        id,
        PythonCall { evaluate },
        deadline.unwrap_or(DEFAULT_PYTHON_DEADLINE),
    )
}

#[async_trait]
impl HostCall for PythonCall {
    async fn decide<C: PolicyContext>(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        let context = serde_json::to_value(context)?;
        let called = Python::attach(|py| -> PyResult<Called> {
            let context = to_python(py, &context)?;
            let returned = match self.evaluate.bind(py).call1((context,)) {
                Ok(returned) => returned,
                Err(error) => {
                    return Ok(Called::Decided(Err(HostPolicyError::raised(py, error))));
                }
            };
            if returned.is_instance_of::<PyDict>()
                || !returned.hasattr(pyo3::intern!(py, "__await__"))?
            {
                return Ok(Called::Decided(read_decision(&returned)));
            }
            let locals = coroutine_loop(py)?;
            let task = py
                .import(pyo3::intern!(py, "portcullis._runtime"))?
                .getattr(pyo3::intern!(py, "Pending"))?
                .call0()?;
            let running = task.call_method1(pyo3::intern!(py, "run"), (returned,))?;
            let pending = pyo3_async_runtimes::into_future_with_locals(&locals, running)?;
            let cancel = CancelOnDrop {
                task: Some((task.unbind(), locals.event_loop(py).unbind())),
            };
            Ok(Called::Awaiting(Box::pin(pending), cancel))
        })?;
        let decided = match called {
            Called::Decided(decided) => decided,
            Called::Awaiting(pending, mut cancel) => {
                let awaited = pending.await;
                cancel.task = None;
                Python::attach(|py| match awaited {
                    Ok(returned) => read_decision(returned.bind(py)),
                    Err(error) => Err(HostPolicyError::raised(py, error)),
                })
            }
        };
        Ok(decided?)
    }
}
