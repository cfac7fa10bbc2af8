//! Where evaluations run: on the calling Java thread, blocking on the library's tokio runtime
//! when a policy waits.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The library's tokio runtime (built on first use).
pub fn runtime() -> Result<&'static Runtime, String> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("portcullis")
                .enable_all()
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| format!("portcullis cannot start its runtime: {error}"))
}

/// Fails when called on a thread that is already inside an evaluation (a Java policy calling
/// an engine): blocking there would deadlock.
pub fn check_not_nested() -> Result<(), String> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(
            "an engine cannot be called from inside one of its evaluations (a policy calling an engine)"
                .to_owned(),
        );
    }
    Ok(())
}

/// Runs `call` to its end on this thread: polled once first (policies that decide in memory
/// finish without a round trip through the runtime), then blocking on the runtime.
pub fn run_blocking<F: Future>(call: F) -> Result<F::Output, String> {
    check_not_nested()?;
    Ok(portcullis_bindings::run_here(runtime()?, call))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_call_that_waits_and_refuses_nesting() {
        let slept = run_blocking(async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            7
        })
        .unwrap();
        assert_eq!(slept, 7);
        let nested = run_blocking(async { run_blocking(async {}) }).unwrap();
        assert!(
            nested
                .unwrap_err()
                .contains("inside one of its evaluations")
        );
    }
}
