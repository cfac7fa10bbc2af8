//! Running the incremental stages over new text (the route of every push that takes no fast
//! path), and what a run leaves for the next push.

use crate::context::InterceptionPoint;
use crate::decision::PolicyDecision;
use crate::error::{EngineError, PolicyDenialError};
use crate::stream::plan::StageAction;
use crate::stream::report::{StreamMode, StreamOutcome};
use crate::stream::short::append;
use crate::stream::stage::Sink;

use super::OutputStream;
use super::held::char_count;

impl<'e> OutputStream<'e> {
    /// [`feed`](Self::feed) past its fast path: leaves what the call released from `lent_from`
    /// on, or why the stream stopped in `failure`, or a checkpoint evaluation to wait for.
    #[inline(never)]
    pub(super) fn feed_text(&mut self, delta: &str) {
        // A checkpoint whose `Feed` was dropped before it finished is given up: its text
        // stays held for the next one. (An error such a `Feed` did not report stays in
        // `failure`, for the next call to report.)
        *self.pending_checkpoint() = None;
        self.lend_from_released();
        // Text pushed after the end still counts as received, so the end record says how
        // much the stream carried whatever the chunking.
        if self.finished.is_some() {
            self.chars_after_end += char_count(delta);
            return;
        }
        // The pushes of a batch before this one only added to the held text, and did not
        // count it: it is at its most now.
        self.note_held();
        append(&mut self.raw, delta);
        if self.plan.mode != StreamMode::Incremental {
            let chars = char_count(delta);
            self.buffered_chars += chars;
            self.since_checkpoint += chars;
        }
        let ran = match self.plan.mode {
            // A whole batch has arrived since the lane's last search (the fast path of `feed`
            // keeps the text otherwise).
            StreamMode::Incremental if self.in_lane => {
                self.lane_feed(false).map(|()| self.try_lane())
            }
            StreamMode::Incremental if self.raw.len() - self.fed >= self.plan.batch => {
                self.run_stages(false).map(|()| self.try_lane())
            }
            StreamMode::Incremental | StreamMode::Buffer => Ok(()),
            StreamMode::Checkpoint { every } if self.since_checkpoint >= every => {
                self.start_checkpoint();
                Ok(())
            }
            StreamMode::Checkpoint { .. } => Ok(()),
        };
        self.after_run(ran);
    }

    /// What every call that ran the rules (or started a checkpoint) does after them: plans
    /// the next run, keeps a failure for the call's [`Feed`], keeps the records.
    pub(super) fn after_run(&mut self, ran: Result<(), EngineError>) {
        self.plan_next_run();
        if let Err(error) = ran {
            self.failure = Some(error);
            self.outstanding = true;
            return;
        }
        self.note_held();
        self.note_release();
    }

    /// Runs the stages as a pipeline: each passes what it has cleared into the next one's
    /// buffer, the last into `released`.
    pub(super) fn run_stages(&mut self, end: bool) -> Result<(), EngineError> {
        // The stages' text follows what the fast lane released: `released` gets that first,
        // and the call's text is what follows it.
        self.flush();
        self.lend_from_released();
        self.run_stages_lent(end)
    }

    /// [`run_stages`](Self::run_stages) once the call's text starts in `released` (the lane's
    /// earlier text flushed).
    pub(super) fn run_stages_lent(&mut self, end: bool) -> Result<(), EngineError> {
        debug_assert!(self.unflushed.is_none() && self.lent_to == usize::MAX);
        let delta = &self.raw[self.fed..];
        self.fed = self.raw.len();
        let Some(first) = self.stages.first_mut() else {
            self.released.push_str(delta);
            return Ok(());
        };
        first.buffer.push_str(delta);
        let mut released_unchanged = 0;
        let mut matched = None;
        for (index, stage) in self.plan.stages.iter().enumerate() {
            let (head, tail) = self.stages.split_at_mut(index + 1);
            let mut out = match tail.first_mut() {
                Some(next) => Sink {
                    text: &mut next.buffer,
                    unchanged: &mut next.unchanged,
                },
                None => Sink {
                    text: &mut self.released,
                    unchanged: &mut released_unchanged,
                },
            };
            // Only a denying stage stops at a match.
            if head[index].advance(stage, end, &mut out).is_err() {
                matched = Some(index);
                break;
            }
        }
        let Some(index) = matched else {
            return Ok(());
        };
        let stage = &self.plan.stages[index];
        let reason = match &stage.action {
            StageAction::Deny { reason } => reason.clone(),
            StageAction::Replace { .. } => None,
        };
        self.record_stage(
            stage,
            PolicyDecision::Deny {
                reason: reason.clone(),
                policy_id: None,
            },
        );
        let denied =
            PolicyDenialError::new(stage.policy_id.clone(), InterceptionPoint::Output, reason);
        self.finished = Some(StreamOutcome::Denied);
        Err(EngineError::Denied(denied))
    }
}
