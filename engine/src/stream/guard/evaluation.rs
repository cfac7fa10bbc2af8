//! The policies' own evaluations of the text: checkpoints, the final evaluation at the end
//! of the stream, and monitored evaluations.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};

use crate::context::{Message, OutputContext};
use crate::error::EngineError;
use crate::stream::report::StreamMode;

use super::OutputStream;

/// A checkpoint evaluation under way: whether the evaluation changed the text.
pub(super) type Checkpoint<'e> =
    Pin<Box<dyn Future<Output = Result<bool, EngineError>> + Send + 'e>>;

impl<'e> OutputStream<'e> {
    /// Waits for what the last call left outstanding: the checkpoint evaluation it started.
    /// Ready once nothing is left but, perhaps, the error to report in `failure`.
    pub(super) fn poll_outstanding(&mut self, context: &mut Context<'_>) -> Poll<()> {
        if let Some(checkpoint) = self.pending_checkpoint() {
            let Poll::Ready(result) = checkpoint.as_mut().poll(context) else {
                return Poll::Pending;
            };
            *self.pending_checkpoint() = None;
            self.end_checkpoint(result);
        }
        self.outstanding = false;
        Poll::Ready(())
    }

    /// Releases the rest, from `lent_from` on.
    pub(super) async fn settle(&mut self) -> Result<(), EngineError> {
        // The pushes since the rules last ran may have held more than ever before (a stream
        // that stopped holds what it stopped on, which is not held back).
        if self.finished.is_none() {
            self.note_held();
        }
        self.flush();
        self.lend_from_released();
        // The last call stopped the stream and its `Feed` was dropped before reporting why.
        self.outstanding = false;
        if let Some(error) = self.failure.take() {
            return Err(error);
        }
        *self.pending_checkpoint() = None;
        if self.finished.is_some() {
            return Ok(());
        }
        if !self.incomplete_utf8.is_empty() {
            let bytes = std::mem::take(&mut self.incomplete_utf8);
            if let Err(error) = std::str::from_utf8(&bytes) {
                return Err(self.fail(Box::new(error)));
            }
        }
        self.lend_from_released();
        match self.plan.mode {
            StreamMode::Incremental => {
                if self.in_lane {
                    self.lane_feed(true)?;
                } else {
                    self.run_stages(true)?;
                }
                self.record_stage_decisions();
                self.evaluate_monitored().await;
            }
            StreamMode::Buffer | StreamMode::Checkpoint { .. } => self.final_evaluation().await?,
        }
        self.note_release();
        Ok(())
    }

    /// Evaluates the monitored output policies on the whole text (they never hold text back).
    pub(super) async fn evaluate_monitored(&self) {
        if !self.set.output().entries.iter().any(|entry| entry.monitor) {
            return;
        }
        let context = self.whole_context();
        self.engine
            .evaluate_monitored_output(&self.set, &context)
            .await;
    }

    pub(super) fn whole_context(&self) -> OutputContext {
        OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone())
    }

    /// Starts evaluating the accumulated text; the [`Feed`] of the call waits for it.
    pub(super) fn start_checkpoint(&mut self) {
        self.since_checkpoint = 0;
        let engine = self.engine;
        let set = Arc::clone(&self.set);
        let context = self.whole_context();
        self.outstanding = true;
        *self.pending_checkpoint() = Some(Box::pin(async move {
            // Escalations are resolved once, on the whole answer: until then an escalation
            // holds the text, as a change does.
            engine
                .evaluate_unrecorded(set, &context)
                .await
                .map(|(evaluation, _)| evaluation.is_modified() || evaluation.escalates())
        }));
    }

    /// The checkpoint evaluation under way, if any.
    pub(super) fn pending_checkpoint(&mut self) -> &mut Option<Checkpoint<'e>> {
        self.checkpoint
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the text a checkpoint evaluation allowed unchanged; a change holds the text
    /// until the final evaluation, an error stops the stream.
    pub(super) fn end_checkpoint(&mut self, result: Result<bool, EngineError>) {
        match result {
            Ok(false) => {
                self.released.push_str(&self.raw[self.released_raw..]);
                self.released_raw = self.raw.len();
                self.buffered_chars = 0;
            }
            Ok(true) => {}
            Err(error) => self.failure = Some(self.stop(error)),
        }
        self.note_held();
        self.note_release();
    }

    pub(super) async fn final_evaluation(&mut self) -> Result<(), EngineError> {
        let context = self.whole_context();
        let result = match self
            .engine
            .evaluate_unrecorded(Arc::clone(&self.set), &context)
            .await
        {
            // Escalations are resolved once, on the whole answer.
            Ok((evaluation, labels)) => self
                .engine
                .approve(evaluation)
                .await
                .map(|evaluation| (evaluation, labels)),
            Err(error) => Err(error),
        };
        match result {
            Ok((evaluation, labels)) => {
                self.session_labels = labels;
                let forwarded = &evaluation.context().response.content;
                match forwarded.strip_prefix(self.released.as_str()) {
                    Some(rest) => {
                        self.released.push_str(rest);
                        self.released_raw = self.raw.len();
                        self.buffered_chars = 0;
                        Ok(())
                    }
                    None => Err(self.fail(
                        "the final evaluation changed text already released at a checkpoint; \
                         the rest is withheld"
                            .into(),
                    )),
                }
            }
            Err(error) => Err(self.stop(error)),
        }
    }
}
