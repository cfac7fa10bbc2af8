//! Where evaluations run: one tokio runtime for the module, and the asyncio event loop on
//! which a call's `async def` policies are awaited.
//!
//! An `await engine.evaluate_*(ctx)` call runs its future with the caller's loop in
//! [`CALLER_LOOP`], so a coroutine a Python policy returns is awaited on that loop. A `_sync`
//! call blocks its thread, so its loop cannot run coroutines: they are awaited on the
//! module's background loop (`portcullis._runtime.background_loop()`, a daemon thread started
//! the first time one is needed).

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Runtime;

tokio::task_local! {
    /// The event loop (and contextvars) of the `await`ing caller of this evaluation.
    pub(crate) static CALLER_LOOP: TaskLocals;
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The module's tokio runtime (built on first use, shared with `pyo3-async-runtimes`).
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let built = RUNTIME.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("portcullis")
            .enable_all()
            .build()
            .map_err(|error| error.to_string())?;
        Ok(runtime)
    });
    match built {
        Ok(runtime) => {
            // Once set, later calls are refused: the runtime stays the same one.
            let _ = pyo3_async_runtimes::tokio::init_with_runtime(runtime);
            Ok(runtime)
        }
        Err(error) => Err(PyRuntimeError::new_err(format!(
            "portcullis cannot start its runtime: {error}"
        ))),
    }
}

/// Fails when called on a thread that is already inside an evaluation (a policy calling an
/// engine's `_sync` method): blocking there would deadlock.
pub(crate) fn check_not_nested() -> PyResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(PyRuntimeError::new_err(
            "a _sync evaluation cannot run inside another evaluation (a policy calling the engine): \
             use `await engine.evaluate_*(ctx)` from an async def policy",
        ));
    }
    Ok(())
}

static BACKGROUND_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The loop on which this evaluation's coroutines are awaited: the caller's, or the
/// background loop for a `_sync` call (with the current contextvars).
pub(crate) fn coroutine_loop(py: Python<'_>) -> PyResult<TaskLocals> {
    if let Ok(locals) = CALLER_LOOP.try_with(Clone::clone) {
        return Ok(locals);
    }
    let event_loop = BACKGROUND_LOOP.get_or_try_init(py, || {
        py.import("portcullis._runtime")?
            .call_method0("background_loop")
            .map(Bound::unbind)
    })?;
    TaskLocals::new(event_loop.bind(py).clone()).copy_context(py)
}
