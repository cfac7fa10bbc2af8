//! Turning a panic inside a policy's future into an error.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::BoxFuture;
use crate::error::PolicyPanicked;

/// Polls a boxed future, catching a panic in any poll.
pub(crate) struct CatchUnwind<'a, T> {
    inner: BoxFuture<'a, T>,
}

impl<'a, T> CatchUnwind<'a, T> {
    pub(crate) fn new(inner: BoxFuture<'a, T>) -> Self {
        CatchUnwind { inner }
    }
}

impl<T> Future for CatchUnwind<'_, T> {
    type Output = Result<T, PolicyPanicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The future is dropped after a panic and never polled again, so no broken state
        // can be observed: asserting unwind safety is sound here.
        match catch_unwind(AssertUnwindSafe(|| self.inner.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(payload) => Poll::Ready(Err(PolicyPanicked::from_payload(&*payload))),
        }
    }
}
