//! The streaming output guard: [`OutputStream`], the [`Feed`] of each push, and what a push
//! yields ([`StreamItem`]).

mod audit;
mod evaluation;
mod feed;
mod held;
mod lane;
mod stages;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::context::{InterceptionPoint, Metadata};
use crate::engine::PolicyEngine;
use crate::error::{BoxError, EngineError, PolicyEvaluationError};
use crate::set::PolicySet;
use crate::stream::item::StreamItems;
use crate::stream::plan::{ROOM_MOST, StreamPlan};
use crate::stream::report::{STREAM_POLICY_ID, StreamEvent, StreamMode, StreamOutcome};
use crate::stream::short::append;
use crate::stream::stage::StageScan;

use self::evaluation::Checkpoint;
pub use self::feed::Feed;
use self::held::{CharsUpTo, char_count};
use self::lane::{LANE_PUSH, LanePush, each_stage_at, lane_push_exact};

/// The way a push goes through the guard: one state, worked out each time the rules have run
/// (see [`OutputStream::plan_next_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushRoute {
    /// Every push takes the fast lane itself (see [`OutputStream::lane_push`]): incremental
    /// mode without batches, in the lane, no replacing literal pending, and not stopped.
    Lane,
    /// The push that ends a batch goes through [`OutputStream::lane_batch`]: incremental mode
    /// in batches, in the lane, and not stopped.
    LaneBatch,
    /// Every push goes through [`OutputStream::pending_push`]: as [`PushRoute::Lane`], with a
    /// replacing literal pending.
    LanePending,
    /// Out of the fast lane, a push that brings no literal of a denying stage, and in which no
    /// denying stage's DFA sees a match, only keeps its text while the text held stays within
    /// the windows (see [`OutputStream::hold_push`]): incremental mode with a plan that has a
    /// fast lane, without batches, out of the lane, no denying stage waiting on a literal of
    /// its own (see [`OutputStream::denial_pending`]), and not stopped.
    Hold,
    /// Every push goes through the stages ([`OutputStream::feed_text`]): the buffer and
    /// checkpoint modes, incremental mode without a fast lane, out of the lane while a
    /// denying stage waits on a literal of its own, and a stopped stream.
    Stages,
}

/// The streaming output guard; see the [module docs](crate::stream).
pub struct OutputStream<'e> {
    engine: &'e PolicyEngine,
    /// The set the stream started on: it runs on it to the end.
    set: Arc<PolicySet>,
    plan: Arc<StreamPlan>,
    metadata: Metadata,
    stages: Vec<StageScan>,
    /// Everything received.
    raw: String,
    /// Characters pushed after the end (not kept in `raw`).
    chars_after_end: usize,
    /// Characters received but not released, in the buffer and checkpoint modes.
    buffered_chars: usize,
    /// Characters received since the last checkpoint.
    since_checkpoint: usize,
    /// Everything released.
    released: String,
    /// Bytes of `raw` handed to the rules (incremental mode); in the fast lane, bytes released.
    fed: usize,
    /// Incremental mode: the text goes past the stages (see [`OutputStream::lane_feed`]).
    in_lane: bool,
    /// [`OutputStream::lane_push`] with as many vector tests as the plan's literals need.
    lane_push: LanePush,
    /// The way the next push goes through the guard, worked out each time the rules have run.
    route: PushRoute,
    /// In the fast lane, a replacing stage's literal has turned up (and no denying stage's):
    /// no match can start before this point, so the lane goes on releasing text up to it
    /// without running the stages, which run once the lane would release past it or a
    /// denying stage's literal may have come (see [`OutputStream::pending_push`]).
    lane_until: Option<usize>,
    /// Bytes of `raw` the quick filter has cleared while the guard holds text out of the
    /// lane: no literal of a denying stage starts before it that the stages have not seen
    /// whole.
    hold_filtered: usize,
    /// Bytes of `raw` when the fast lane last searched it.
    lane_searched: usize,
    /// Bytes of `raw` the fast lane's DFAs have stepped over: short pushes leave them to step
    /// later, many bytes at a time, within the plan's slack (see
    /// [`OutputStream::lane_push_short`]).
    lane_stepped: usize,
    /// Bytes of `raw` the fast lane's quick filter has cleared: no watched literal starts
    /// before it (the stages' own search positions may lag behind, and catch up when the
    /// filter flags something).
    lane_filtered: usize,
    /// Incremental mode in batches: while `raw` stays shorter than this, a push only keeps the
    /// text (0 when every push runs the rules, and once the stream has stopped).
    quiet_until: usize,
    /// Bytes the stages held after they last ran (0 in the fast lane).
    stage_held: usize,
    /// Where the text released by the last call starts: in `released` (to its end) when
    /// `lent_to` is [`usize::MAX`], otherwise in `raw` (a push in the fast lane releases the
    /// text as it was received, and lends it from there). A push between two runs of the
    /// rules (batches) leaves these as they were: it releases nothing, and its `Feed` says so
    /// itself; every other call sets them before anything reads them.
    lent_from: usize,
    /// Where that text ends in `raw` (the call released nothing when it equals `lent_from`).
    lent_to: usize,
    /// Text the fast lane released (`raw[from..fed]`) and has not copied to `released` yet:
    /// [`flush`](OutputStream::flush) copies it before anything else reads `released`, adds
    /// to it, or moves `fed` other than by releasing more of `raw` (the stages run only after
    /// it).
    unflushed: Option<usize>,
    /// Why the last call stopped the stream, until its [`Feed`] reports it.
    failure: Option<EngineError>,
    /// The last call left something for its [`Feed`]: an error in `failure`, or a checkpoint
    /// evaluation to wait for.
    outstanding: bool,
    /// The checkpoint evaluation the last call started, until its [`Feed`] has waited for it.
    /// Only ever reached through `&mut self` (never locked): the mutex keeps the guard `Sync`.
    checkpoint: Mutex<Option<Checkpoint<'e>>>,
    /// Bytes of `raw` covered by released text (buffer and checkpoint modes).
    released_raw: usize,
    incomplete_utf8: Vec<u8>,
    started: Instant,
    first_release: Option<Duration>,
    max_held_chars: usize,
    /// The characters of `raw` up to its end and up to `fed`, when [`note_held`] last counted
    /// them: counting the held characters again costs only the bytes received or released
    /// since, not the whole held text (a large batch holds a lot).
    ///
    /// [`note_held`]: OutputStream::note_held
    counted_to_end: CharsUpTo,
    counted_to_fed: CharsUpTo,
    finished: Option<StreamOutcome>,
    reported_end: bool,
    /// The labels the final evaluation's decisions carried, recorded in the session when the
    /// stream finishes without a denial.
    session_labels: Vec<String>,
}

impl PolicyEngine {
    /// Starts guarding a streamed answer; see [`stream`](crate::stream).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use portcullis_engine::stream::{StreamItem, StreamingRule};
    /// use portcullis_engine::{
    ///     async_trait, BoxError, Metadata, OutputContext, Policy, PolicyDecision,
    ///     PolicyEngine, PolicySet, Redaction,
    /// };
    ///
    /// /// Replaces SSNs, in whole answers and in streams.
    /// struct RedactSsn;
    ///
    /// const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";
    ///
    /// #[async_trait]
    /// impl Policy<OutputContext> for RedactSsn {
    ///     fn id(&self) -> &str {
    ///         "redact_ssn"
    ///     }
    ///
    ///     async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
    ///         Ok(PolicyDecision::redact([Redaction::replace("response.content", SSN)]))
    ///     }
    ///
    ///     fn streaming(&self) -> Option<Vec<StreamingRule>> {
    ///         Some(vec![StreamingRule::Replace {
    ///             pattern: SSN.into(),
    ///             replacement: "[REDACTED]".into(),
    ///             max_match_len: None,
    ///         }])
    ///     }
    /// }
    ///
    /// let engine = PolicyEngine::builder()
    ///     .policy_set(PolicySet::builder().output(RedactSsn).build())
    ///     .build();
    /// let mut guard = engine.output_stream(Metadata::new("agent", "session"));
    /// let mut shown = String::new();
    /// for delta in ["Your SSN is 123-45-", "6789, keep it ", "safe."] {
    ///     for item in guard.push(delta).await {
    ///         if let StreamItem::Text(text) = item {
    ///             shown.push_str(&text);
    ///         }
    ///     }
    /// }
    /// for item in guard.finish().await {
    ///     if let StreamItem::Text(text) = item {
    ///         shown.push_str(&text);
    ///     }
    /// }
    /// assert_eq!(shown, "Your SSN is [REDACTED], keep it safe.");
    /// # });
    /// ```
    pub fn output_stream(&self, metadata: Metadata) -> OutputStream<'_> {
        let active = self.active();
        let plan = active.stream_plan();
        let room = plan.room.load(Ordering::Relaxed);
        let mut stream = OutputStream {
            engine: self,
            set: Arc::clone(&active.set),
            stages: plan.stages.iter().map(StageScan::new).collect(),
            in_lane: plan.lane,
            lane_push: {
                let step = !plan.lane_dfas.is_empty();
                plan.lane_filter
                    .few_tests()
                    .and_then(|(singles, pairs)| {
                        LANE_PUSH
                            .get(usize::from(step))?
                            .get(singles)?
                            .get(pairs)
                            .copied()
                    })
                    .unwrap_or(if step {
                        lane_push_exact::<true, 4, 4>
                    } else {
                        lane_push_exact::<false, 4, 4>
                    })
            },
            route: PushRoute::Stages,
            lane_until: None,
            hold_filtered: 0,
            plan,
            metadata,
            raw: String::with_capacity(room),
            chars_after_end: 0,
            buffered_chars: 0,
            since_checkpoint: 0,
            released: String::with_capacity(room),
            released_raw: 0,
            fed: 0,
            lane_searched: 0,
            lane_filtered: 0,
            lane_stepped: 0,
            quiet_until: 0,
            stage_held: 0,
            lent_from: 0,
            lent_to: 0,
            unflushed: None,
            failure: None,
            outstanding: false,
            checkpoint: Mutex::new(None),
            incomplete_utf8: Vec::new(),
            started: Instant::now(),
            first_release: None,
            max_held_chars: 0,
            counted_to_end: CharsUpTo::default(),
            counted_to_fed: CharsUpTo::default(),
            finished: None,
            reported_end: false,
            session_labels: Vec::new(),
        };
        stream.plan_next_run();
        stream.report(StreamEvent::Start);
        stream
    }
}

impl Drop for OutputStream<'_> {
    fn drop(&mut self) {
        // A stream dropped without `finish` (the reader went away) still gets its end record.
        if self.finished.is_none() {
            // Dropped in the middle of a batch: its pushes did not count what they held.
            self.note_held();
            self.finished = Some(StreamOutcome::Abandoned);
        }
        self.report(StreamEvent::End);
        // The next streams on the plan start from the states this one's DFAs built.
        for (state, stage) in self.stages.iter_mut().zip(&self.plan.stages) {
            state.release(stage);
        }
        // The next stream on the plan makes room for as much text as this one received.
        self.plan
            .room
            .store(self.raw.len().min(ROOM_MOST), Ordering::Relaxed);
    }
}

impl<'e> OutputStream<'e> {
    /// The stream's plan.
    pub fn plan(&self) -> &StreamPlan {
        &self.plan
    }

    /// Everything released so far.
    pub fn released(&mut self) -> &str {
        self.flush();
        &self.released
    }

    /// Characters received but not released yet.
    pub fn held_chars(&self) -> usize {
        match self.plan.mode {
            StreamMode::Incremental => {
                let held: usize = self
                    .stages
                    .iter()
                    .map(|state| char_count(state.held()))
                    .sum();
                held + char_count(&self.raw[self.fed..])
            }
            StreamMode::Buffer | StreamMode::Checkpoint { .. } => self.buffered_chars,
        }
    }

    /// Adds a delta of the answer and returns what can be released now: at most one item,
    /// kept in place, whose text is allocated only when it is longer than
    /// [`StreamText::INLINE`](crate::stream::StreamText::INLINE) bytes.
    ///
    /// [`feed`](Self::feed) does the same and lends the released text instead of copying it.
    pub async fn push(&mut self, delta: &str) -> StreamItems {
        StreamItems::of(self.feed(delta).await)
    }

    /// Adds raw bytes of the answer (for example from a network body), which may split a
    /// UTF-8 character; the incomplete end is kept until the next bytes. Invalid UTF-8 is an
    /// evaluation error.
    pub async fn push_bytes(&mut self, bytes: &[u8]) -> StreamItems {
        StreamItems::of(self.feed_bytes(bytes).await)
    }

    /// Adds a delta of the answer and returns the text released by it (often empty), or why
    /// the stream stopped: a denial, or an evaluation error. A call that stops the stream
    /// releases nothing; once the stop is reported, calls release nothing and return `Ok("")`.
    ///
    /// This is [`push`](Self::push) without a copy of the released text: it is lent from the
    /// guard's record of everything released.
    ///
    /// The delta is taken, and the incremental rules run, when `feed` is called; the returned
    /// [`Feed`] is ready at once unless a checkpoint evaluation is due (checkpoint mode), which
    /// it runs when awaited. Dropping it unawaited loses nothing: text it would have released
    /// can be read from [`released`](Self::released), a denial or error it would have
    /// reported is reported by the next call (or by [`finish`](Self::finish)), and a
    /// checkpoint that did not finish leaves its text held for the next one (or the final
    /// evaluation).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use portcullis_engine::{Metadata, PolicyEngine, PolicySet};
    ///
    /// let engine = PolicyEngine::builder()
    ///     .policy_set(PolicySet::builder().build())
    ///     .build();
    /// let mut guard = engine.output_stream(Metadata::new("agent", "session"));
    /// let mut shown = String::new();
    /// for delta in ["Hello, ", "world."] {
    ///     shown.push_str(guard.feed(delta).await?);
    /// }
    /// for item in guard.finish().await {
    ///     shown.push_str(&item.into_text()?);
    /// }
    /// assert_eq!(shown, "Hello, world.");
    /// # Ok::<(), portcullis_engine::EngineError>(())
    /// # }).unwrap();
    /// ```
    // Always in line: a `Feed` returned through memory would be read back from two stores.
    #[inline(always)]
    pub fn feed(&mut self, delta: &str) -> Feed<'_, 'e> {
        // Between two runs of the rules (batches) a push only keeps the text: inlined into the
        // caller, this is all most pushes of a batched stream cost.
        let len = self.raw.len() + delta.len();
        if len < self.quiet_until {
            // A stream that stopped, or left something for its `Feed`, has no quiet pushes.
            debug_assert!(!self.outstanding);
            append(&mut self.raw, delta);
            // Nothing released. The held text only grows until the rules run: its record is
            // taken then (or when the stream ends).
            return Feed::released("");
        }
        match self.route {
            PushRoute::Lane => (self.lane_push)(self, delta),
            PushRoute::LaneBatch => self.lane_batch(delta),
            PushRoute::LanePending => self.pending_push(delta),
            PushRoute::Hold => self.hold_push(delta),
            PushRoute::Stages => self.feed_text(delta),
        }
        self.fed_call()
    }

    /// A denying stage holds a literal of its own, and waits for more text to decide on a
    /// match around it: the pushes go to the stages, so that the denial comes as soon as the
    /// text decides it (a push that only kept its text would bring no new literal for the
    /// filter to see).
    fn denial_pending(&self) -> bool {
        self.plan
            .stages
            .iter()
            .zip(&self.stages)
            .any(|(stage, state)| stage.denies() && state.holds_literal())
    }

    /// Works out how much text the next pushes may only keep before the rules run again (see
    /// the fast path of [`feed`](Self::feed)).
    fn plan_next_run(&mut self) {
        let batching = self.plan.mode == StreamMode::Incremental
            && self.plan.batch > 0
            && self.finished.is_none();
        self.stage_held = if self.in_lane {
            0
        } else {
            self.stages.iter().map(|state| state.held().len()).sum()
        };
        let unbatched = self.plan.mode == StreamMode::Incremental
            && self.plan.batch == 0
            && self.finished.is_none();
        self.route = if unbatched && self.in_lane && self.lane_until.is_none() {
            PushRoute::Lane
        } else if batching && self.in_lane {
            PushRoute::LaneBatch
        } else if unbatched && self.in_lane {
            PushRoute::LanePending
        } else if unbatched && self.plan.lane && !self.in_lane && !self.denial_pending() {
            PushRoute::Hold
        } else {
            PushRoute::Stages
        };
        if self.route == PushRoute::Hold {
            // A literal may have begun in the last bytes the stages received and end in the
            // next ones: the filter looks at its first bytes again.
            self.hold_filtered = (self.fed + 2)
                .saturating_sub(self.plan.longest_literal)
                .min(self.fed);
            // So may a match of a denying stage's DFA: its scan starts where one may begin.
            each_stage_at(
                &self.plan.deny_dfas,
                &self.plan,
                &mut self.stages,
                |stage, state| {
                    state.hold_watch_from(stage, &self.raw, self.fed);
                    true
                },
            );
        }
        self.quiet_until = match (batching, self.in_lane) {
            (false, _) => 0,
            (true, true) => self.lane_searched + self.plan.batch,
            (true, false) => self.fed + self.plan.batch,
        };
    }

    /// [`push_bytes`](Self::push_bytes) lending the released text, as [`feed`](Self::feed)
    /// does.
    pub fn feed_bytes(&mut self, bytes: &[u8]) -> Feed<'_, 'e> {
        let pending;
        let bytes = if self.incomplete_utf8.is_empty() {
            bytes
        } else {
            self.incomplete_utf8.extend_from_slice(bytes);
            pending = std::mem::take(&mut self.incomplete_utf8);
            &pending[..]
        };
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) if error.error_len().is_none() => {
                let (valid, rest) = bytes.split_at(error.valid_up_to());
                self.incomplete_utf8.extend_from_slice(rest);
                match std::str::from_utf8(valid) {
                    Ok(text) => text,
                    Err(error) => return self.failed(Box::new(error)),
                }
            }
            Err(_) if self.finished.is_some() => {
                self.chars_after_end += String::from_utf8_lossy(bytes).chars().count();
                self.flush();
                self.lend_from_released();
                return self.fed_call();
            }
            Err(error) => return self.failed(Box::new(error)),
        };
        self.feed(text)
    }

    /// A `Feed` of the error `cause`, which stops the stream.
    fn failed(&mut self, cause: BoxError) -> Feed<'_, 'e> {
        *self.pending_checkpoint() = None;
        self.failure = Some(self.fail(cause));
        self.outstanding = true;
        self.fed_call()
    }

    /// Ends the stream: runs the final evaluation and releases the rest.
    pub async fn finish(mut self) -> StreamItems {
        let mut result = self.settle().await;
        if result.is_ok() && self.finished.is_none() && self.engine.keeps_sessions() {
            // The stream proceeded: one record in the session, as for a whole answer.
            let context = self.whole_context();
            let labels = std::mem::take(&mut self.session_labels);
            let on_error = self.set.on_error;
            if let Err(error) = self
                .engine
                .record_session(on_error, &context, &labels, false)
                .await
            {
                result = Err(self.stop(error));
            }
        }
        if self.finished.is_none() {
            self.finished = Some(StreamOutcome::Allowed);
        }
        self.report(StreamEvent::End);
        StreamItems::of(result.map(|()| self.lent()))
    }

    /// Ends the stream with `error`: nothing more is released.
    fn stop(&mut self, error: EngineError) -> EngineError {
        self.finished = Some(match error {
            EngineError::Denied(_) => StreamOutcome::Denied,
            EngineError::Evaluation(_) => StreamOutcome::Error,
            EngineError::ApprovalRequired(_) => StreamOutcome::ApprovalRequired,
        });
        self.quiet_until = 0;
        self.route = PushRoute::Stages;
        error
    }

    fn fail(&mut self, cause: BoxError) -> EngineError {
        self.stop(EngineError::Evaluation(PolicyEvaluationError::new(
            STREAM_POLICY_ID,
            InterceptionPoint::Output,
            cause,
        )))
    }
}
