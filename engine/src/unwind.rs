//! Turning a panic inside a policy's future into an error.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::BoxFuture;
use crate::error::{PolicyPanicked, PolicyResult};
use crate::point::PolicyContext;
use crate::policy::Policy;

/// Starts a policy's evaluation on the first poll and polls it, catching a panic in either:
/// one unwind guard per poll covers the synchronous start of an `async_trait` method and
/// every poll of the future it returns.
pub(crate) struct CatchUnwind<'a, C: PolicyContext> {
    start: Option<(&'a dyn Policy<C>, &'a C)>,
    running: Option<BoxFuture<'a, PolicyResult>>,
}

impl<'a, C: PolicyContext> CatchUnwind<'a, C> {
    /// Evaluates `policy` on `context` when first polled.
    pub(crate) fn new(policy: &'a dyn Policy<C>, context: &'a C) -> Self {
        CatchUnwind {
            start: Some((policy, context)),
            running: None,
        }
    }
}

impl<C: PolicyContext> Future for CatchUnwind<'_, C> {
    type Output = Result<PolicyResult, PolicyPanicked>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // The future is dropped after a panic and never polled again, so no broken state
        // can be observed: asserting unwind safety is sound here.
        let polled = catch_unwind(AssertUnwindSafe(|| {
            let running = match &mut this.running {
                Some(running) => running,
                None => match this.start.take() {
                    Some((policy, context)) => this.running.insert(policy.evaluate(context)),
                    // Polled again after a panic in `start`: `poll` said `Ready` already.
                    None => return Poll::Pending,
                },
            };
            running.as_mut().poll(cx)
        }));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(payload) => Poll::Ready(Err(PolicyPanicked::from_payload(&*payload))),
        }
    }
}
