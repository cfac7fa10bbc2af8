//! What a call of the guard returns: the [`Feed`] future, and how the text a call released
//! is lent from the guard (from `released`, or from `raw` in the fast lane).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::EngineError;

use super::OutputStream;

/// The future returned by [`OutputStream::feed`] and [`OutputStream::feed_bytes`]: the text the
/// delta released, or why the stream stopped.
///
/// It is ready at once except when a checkpoint evaluation is due (checkpoint mode), so a
/// stream in incremental or buffer mode never waits on it.
#[must_use = "the future holds the released text, or why the stream stopped"]
pub struct Feed<'a, 'e> {
    state: FeedState<'a, 'e>,
}

/// Two words, returned in registers: a `Feed` stored for the caller to read back would make
/// the processor forward a load from several stores, which stalls it.
pub(super) enum FeedState<'a, 'e> {
    /// The call released this text (often none) and left nothing to wait for or report: the
    /// `Feed` of nearly every call, which the caller awaits without reading the guard again.
    /// Also what a `Feed` polled to completion holds: nothing more.
    Released(&'a str),
    /// The call left something for its `Feed` in the guard: a checkpoint evaluation to wait
    /// for, or why the stream stopped.
    Outstanding(&'a mut OutputStream<'e>),
}

impl<'a> Feed<'a, '_> {
    #[inline]
    pub(super) fn released(text: &'a str) -> Self {
        Feed {
            state: FeedState::Released(text),
        }
    }
}

impl<'a> Future for Feed<'a, '_> {
    type Output = Result<&'a str, EngineError>;

    // Always in line: awaited once per push, and nearly always ready at once.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match std::mem::replace(&mut this.state, FeedState::Released("")) {
            FeedState::Released(text) => Poll::Ready(Ok(text)),
            FeedState::Outstanding(stream) => {
                if stream.poll_outstanding(context).is_pending() {
                    this.state = FeedState::Outstanding(stream);
                    return Poll::Pending;
                }
                match stream.failure.take() {
                    Some(error) => Poll::Ready(Err(error)),
                    None => Poll::Ready(Ok(stream.lent())),
                }
            }
        }
    }
}

impl std::fmt::Debug for Feed<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            FeedState::Outstanding(stream)
                if stream
                    .checkpoint
                    .try_lock()
                    .is_ok_and(|checkpoint| checkpoint.is_some()) =>
            {
                "waiting for a checkpoint evaluation"
            }
            FeedState::Outstanding(_) => "ready",
            FeedState::Released(_) => "ready (or done)",
        };
        f.debug_struct("Feed").field("state", &state).finish()
    }
}

impl<'e> OutputStream<'e> {
    /// Copies the text the fast lane released without copying it to `released`.
    pub(super) fn flush(&mut self) {
        if let Some(from) = self.unflushed.take() {
            self.released.push_str(&self.raw[from..self.fed]);
        }
    }

    /// The text released by the last call.
    #[inline]
    pub(super) fn lent(&self) -> &str {
        if self.lent_from == self.lent_to {
            ""
        } else if self.lent_to != usize::MAX {
            &self.raw[self.lent_from..self.lent_to]
        } else {
            &self.released[self.lent_from..]
        }
    }

    /// The last call's text starts at the end of `released`.
    #[inline]
    pub(super) fn lend_from_released(&mut self) {
        self.lent_from = self.released.len();
        self.lent_to = usize::MAX;
    }

    /// The `Feed` of a call that left its outcome in the guard: the text it released, or what
    /// it left outstanding.
    #[inline(always)]
    pub(super) fn fed_call(&mut self) -> Feed<'_, 'e> {
        if self.outstanding {
            Feed {
                state: FeedState::Outstanding(self),
            }
        } else {
            Feed::released(self.lent())
        }
    }
}
