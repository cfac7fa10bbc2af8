//! Where a binding's call runs: its first steps on the caller's thread, so that policies
//! deciding in memory (DSL rules, Rego bundles) finish without a round trip through the
//! runtime; the rest, when the evaluation waits, on the runtime.

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Runtime;

/// Takes the first steps of `call` on this thread, inside `runtime`'s context (a policy that
/// starts I/O finds its runtime): ready when the evaluation finished without waiting, pending
/// when it waits (then go on with [`Runtime::block_on`] or by spawning it).
pub fn poll_here<F: Future + ?Sized>(runtime: &Runtime, call: Pin<&mut F>) -> Poll<F::Output> {
    let _entered = runtime.enter();
    call.poll(&mut Context::from_waker(Waker::noop()))
}

/// Runs `call` to its end on this thread: its first steps here ([`poll_here`]), then, when it
/// waits, blocked on `runtime`.
pub fn run_here<F: Future>(runtime: &Runtime, call: F) -> F::Output {
    let mut call = pin!(call);
    match poll_here(runtime, call.as_mut()) {
        Poll::Ready(output) => output,
        Poll::Pending => runtime.block_on(call),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_decides_at_once_or_waits_runs_to_its_end() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        assert_eq!(run_here(&runtime, async { 1 }), 1);
        let waited = run_here(&runtime, async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            2
        });
        assert_eq!(waited, 2);
        let mut sleeping = Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        });
        assert!(poll_here(&runtime, sleeping.as_mut()).is_pending());
    }
}
