//! The streaming output guard: [`OutputStream`], the [`Feed`] of each push, and what a push
//! yields ([`StreamItem`]).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use regex_automata::Span;

use crate::audit::{AuditContext, AuditDecision, AuditRecord};
use crate::context::{InterceptionPoint, Message, Metadata, OutputContext};
use crate::decision::{PolicyDecision, Redaction};
use crate::engine::PolicyEngine;
use crate::error::{BoxError, EngineError, PolicyDenialError, PolicyEvaluationError};
use crate::set::PolicySet;
use crate::stream::item::StreamItems;
use crate::stream::plan::{LiteralFilter, MatchFinder, ROOM_MOST, Stage, StageAction, StreamPlan};
use crate::stream::report::{
    STREAM_POLICY_ID, StreamEvent, StreamMode, StreamOutcome, StreamReport,
};
use crate::stream::short::append;
use crate::stream::stage::{FinderProgress, Sink, StageScan, unfinished_from};

/// The characters of `text`; ASCII (most deltas) is checked a word at a time, much faster
/// than counting short text character by character.
fn char_count(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// The characters of a growing text up to a position that moves a little at a time: counting
/// them up to a new position costs only the bytes between the two positions.
#[derive(Debug, Default)]
struct CharsUpTo {
    at: usize,
    chars: usize,
}

impl CharsUpTo {
    /// The characters of `text[..at]` (`at` a character boundary, `text` only ever appended to
    /// since the last call).
    fn to(&mut self, text: &str, at: usize) -> usize {
        if at >= self.at {
            self.chars += char_count(&text[self.at..at]);
        } else {
            self.chars -= char_count(&text[at..self.at]);
        }
        self.at = at;
        self.chars
    }
}

/// The bit of the stage at `index` in a set of stages, for the first 64 (none for the others).
fn stage_bit(index: usize) -> u64 {
    u32::try_from(index)
        .ok()
        .and_then(|index| 1u64.checked_shl(index))
        .unwrap_or(0)
}

/// [`OutputStream::lane_push`] as a function, to be picked when the stream starts.
type LanePush = for<'s, 'e> fn(&'s mut OutputStream<'e>, &str);

/// [`OutputStream::lane_push`] with its vector test on exactly `ES` one-byte slots and `EP`
/// pair slots. Its two forms stay out of line, each on its own: the long form's one test then
/// saves only the few registers it needs, not the many of the short form's loop.
#[inline(never)]
fn lane_push_exact<const ES: usize, const EP: usize>(stream: &mut OutputStream<'_>, delta: &str) {
    if delta.len() < 16 {
        lane_push_short_exact::<ES, EP>(stream, delta);
    } else {
        lane_push_long_exact::<ES, EP>(stream, delta);
    }
}

/// [`OutputStream::lane_push_short`] on exactly `ES` one-byte slots and `EP` pair slots.
#[inline(never)]
fn lane_push_short_exact<const ES: usize, const EP: usize>(
    stream: &mut OutputStream<'_>,
    delta: &str,
) {
    stream.lane_push_short::<ES, EP>(delta);
}

/// [`OutputStream::lane_push`] of 16 bytes or more on exactly `ES` one-byte slots and `EP`
/// pair slots.
#[inline(never)]
fn lane_push_long_exact<const ES: usize, const EP: usize>(
    stream: &mut OutputStream<'_>,
    delta: &str,
) {
    stream.lane_push::<ES, EP>(delta);
}

/// The forms of [`OutputStream::lane_push`] for up to four one-byte tests and four pair tests,
/// by their counts: a test on empty slots costs as much as on full ones.
const LANE_PUSH: [[LanePush; 5]; 5] = {
    macro_rules! counts {
        ($singles:literal) => {
            [
                lane_push_exact::<$singles, 0>,
                lane_push_exact::<$singles, 1>,
                lane_push_exact::<$singles, 2>,
                lane_push_exact::<$singles, 3>,
                lane_push_exact::<$singles, 4>,
            ]
        };
    }
    [counts!(0), counts!(1), counts!(2), counts!(3), counts!(4)]
};

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
    /// Out of the fast lane, a push that brings no literal of a denying stage only keeps its
    /// text while the text held stays within the windows (see [`OutputStream::hold_push`]):
    /// incremental mode with a fast lane, without batches, out of the lane, and not stopped.
    Hold,
    /// Every push goes through the stages ([`OutputStream::feed_text`]): the buffer and
    /// checkpoint modes, incremental mode without a fast lane, and a stopped stream.
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
            lane_push: plan
                .lane_filter
                .few_tests()
                .and_then(|(singles, pairs)| LANE_PUSH.get(singles)?.get(pairs).copied())
                .unwrap_or(lane_push_exact::<4, 4>),
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

    /// Copies the text the fast lane released without copying it to `released`.
    fn flush(&mut self) {
        if let Some(from) = self.unflushed.take() {
            self.released.push_str(&self.raw[from..self.fed]);
        }
    }

    /// The text released by the last call.
    #[inline]
    fn lent(&self) -> &str {
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
    fn lend_from_released(&mut self) {
        self.lent_from = self.released.len();
        self.lent_to = usize::MAX;
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

    /// The `Feed` of a call that left its outcome in the guard: the text it released, or what
    /// it left outstanding.
    #[inline(always)]
    fn fed_call(&mut self) -> Feed<'_, 'e> {
        if self.outstanding {
            Feed {
                state: FeedState::Outstanding(self),
            }
        } else {
            Feed::released(self.lent())
        }
    }

    /// [`feed`](Self::feed) in the fast lane without batches: when the quick filter finds no
    /// literal in the new bytes, the text before the windows is released at once, with none
    /// of the other bookkeeping of [`feed_text`](Self::feed_text) (the guard's state stays
    /// what that would leave). The released text is the text as it was received: it is lent
    /// from `raw`, and copied to `released` only when something reads that
    /// ([`flush`](Self::flush)).
    ///
    /// Its vector test runs on `ES` one-byte slots and `EP` pair slots: each stream calls the
    /// form whose slots its plan's literals fill exactly (see [`LANE_PUSH`]).
    ///
    /// Deltas of fewer than 16 bytes take [`lane_push_short`](Self::lane_push_short).
    #[inline(always)]
    fn lane_push<const ES: usize, const EP: usize>(&mut self, delta: &str) {
        debug_assert!(delta.len() >= 16);
        append(&mut self.raw, delta);
        let len = self.raw.len();
        let new = self.lane_filtered;
        if len - new >= LiteralFilter::SHORT
            || !self.plan.lane_filter.clear_push_exact::<ES, EP>(
                self.raw.as_bytes(),
                new,
                delta.as_bytes(),
            )
        {
            return self.lane_search();
        }
        self.lane_cleared(len);
    }

    /// [`lane_push`](Self::lane_push) of fewer than 16 bytes. The quick filter tests such
    /// deltas a push behind, 16 bytes at a time, as long as the bytes it has not tested stay
    /// within the plan's slack (they cannot change what the lane releases): a few short
    /// deltas then cost one test between them, and the bytes it reads back have reached the
    /// cache (the bytes of this push, just copied, would stall the read).
    #[inline(always)]
    fn lane_push_short<const ES: usize, const EP: usize>(&mut self, delta: &str) {
        let received = self.raw.len();
        append(&mut self.raw, delta);
        let len = self.raw.len();
        let mut filtered = self.lane_filtered;
        if received.saturating_sub(filtered) >= LiteralFilter::SHORT {
            return self.lane_search();
        }
        while received.saturating_sub(filtered) >= 16 {
            if !self
                .plan
                .lane_filter
                .clear_16_exact::<ES, EP>(self.raw.as_bytes(), filtered)
            {
                return self.lane_search();
            }
            filtered += 16;
        }
        if len - filtered > self.plan.lane_slack {
            // The filter may not fall further behind: this push's bytes are tested now.
            if !self
                .plan
                .lane_filter
                .clear_from_exact::<ES, EP>(self.raw.as_bytes(), filtered)
            {
                return self.lane_search();
            }
            filtered = len;
        }
        self.lane_cleared(filtered);
    }

    /// The end of a push in the fast lane whose text the quick filter has cleared up to
    /// `filtered` (or left untested within the slack after it): the text before the windows
    /// is released.
    #[inline(always)]
    fn lane_cleared(&mut self, filtered: usize) {
        self.lane_searched = self.raw.len();
        self.lane_filtered = filtered;
        let cut = self.lane_cut();
        self.lane_release(cut);
    }

    /// Where the fast lane releases the received text up to: all but the windows.
    #[inline(always)]
    fn lane_cut(&self) -> usize {
        self.raw
            .floor_char_boundary(self.raw.len().saturating_sub(self.plan.windows))
    }

    /// Releases the received text up to `cut` as it came, lent from `raw`: the end of a push
    /// in the fast lane.
    #[inline(always)]
    fn lane_release(&mut self, cut: usize) {
        self.lent_from = self.fed;
        if cut > self.fed {
            if self.unflushed.is_none() {
                self.unflushed = Some(self.fed);
            }
            self.fed = cut;
            if self.first_release.is_none() {
                self.note_first_release();
            }
        }
        self.lent_to = self.fed;
        self.note_held_in_lane();
    }

    /// [`feed`](Self::feed) in the fast lane while a replacing stage's literal is pending
    /// (see `lane_until`): the push releases what the lane would, as long as that stays before
    /// where a match may start and the push brings no literal of a denying stage. Otherwise
    /// the stages take the unreleased text and run: by then the text after the literal is
    /// long enough for them to act on its match in one run, where running at once would
    /// have needed a run to find the match incomplete and more runs after it.
    #[inline(never)]
    fn pending_push(&mut self, delta: &str) {
        append(&mut self.raw, delta);
        let len = self.raw.len();
        let cut = self.lane_cut();
        // Since the lane's search, no literal of a denying stage has begun (the filter has
        // looked from where one that search could not see whole may begin).
        let deny_clear = self.plan.deny_filter.as_ref().is_none_or(|filter| {
            filter.clear_push(self.raw.as_bytes(), self.hold_filtered, delta.as_bytes())
        });
        if deny_clear && self.lane_until.is_some_and(|until| cut <= until) {
            self.hold_filtered = len;
            self.lane_searched = len;
            self.lane_release(cut);
            return;
        }
        self.lane_until = None;
        self.leave_lane();
        // The lane's search found none of the denying stages' literals, and the filter none
        // since: the text the stages take holds none.
        let clear = if deny_clear {
            self.plan
                .stages
                .iter()
                .enumerate()
                .filter(|(_, stage)| matches!(stage.action, StageAction::Deny { .. }))
                .fold(0, |clear, (index, _)| clear | stage_bit(index))
        } else {
            0
        };
        self.flush();
        self.lend_from_released();
        let ran = self
            .run_stages_from_lane(clear, false)
            .map(|()| self.try_lane());
        self.after_run(ran);
    }

    /// [`lane_push`](Self::lane_push) when the quick filter may have found a literal: the
    /// stages' own searches decide. Out of line, so that the quick path stays small.
    #[inline(never)]
    fn lane_search(&mut self) {
        self.lend_from_released();
        let ran = self.lane_feed(false).map(|()| self.try_lane());
        self.after_run(ran);
    }

    /// [`feed`](Self::feed) that ends a batch in the fast lane: the lane searches the batch,
    /// with none of the other bookkeeping of [`feed_text`](Self::feed_text) while it stays in
    /// the lane.
    #[inline(never)]
    fn lane_batch(&mut self, delta: &str) {
        // The batch's other pushes only kept their text: what is held is at its most now.
        self.note_held_in_lane();
        append(&mut self.raw, delta);
        // Nothing released unless the lane releases it.
        (self.lent_from, self.lent_to) = (0, 0);
        let ran = self.lane_feed(false);
        if ran.is_ok() && self.in_lane {
            // What `after_run` would leave: the next run comes a batch after this search.
            self.quiet_until = self.lane_searched + self.plan.batch;
            self.note_held_in_lane();
            return;
        }
        let ran = ran.map(|()| self.try_lane());
        self.after_run(ran);
    }

    /// [`note_held`](Self::note_held) in the fast lane, where the stages hold nothing: the
    /// call only when the text received and not released may set a record.
    #[inline(always)]
    fn note_held_in_lane(&mut self) {
        if self.raw.len() - self.fed > self.max_held_chars {
            self.note_held();
        }
    }

    #[cold]
    fn note_first_release(&mut self) {
        self.first_release = Some(self.started.elapsed());
    }

    /// [`feed`](Self::feed) out of the fast lane (without batches). A push only keeps its text
    /// while the text held (by the stages and before them) stays within the windows: the lane
    /// holds back as much, and whatever the stages do with the text later, they do the same
    /// whether it reaches them in one piece or in several. So after a secret the stages run on
    /// a few larger pieces of text rather than on every delta, until they are quiet and the
    /// guard takes the lane again. A push that may bring a literal of a denying stage goes to
    /// the stages at once, so that the denial is reported as soon as it would be without this
    /// (a replacement shows only in released text, and nothing is released meanwhile).
    #[inline(never)]
    fn hold_push(&mut self, delta: &str) {
        append(&mut self.raw, delta);
        let len = self.raw.len();
        let held = self.stage_held + len - self.fed;
        if held <= self.plan.windows
            && self.plan.deny_filter.as_ref().is_none_or(|filter| {
                filter.clear_push(self.raw.as_bytes(), self.hold_filtered, delta.as_bytes())
            })
        {
            self.hold_filtered = len;
            // Nothing released.
            (self.lent_from, self.lent_to) = (0, 0);
            if held > self.max_held_chars {
                self.note_held();
            }
            return;
        }
        self.lend_from_released();
        let ran = self.run_stages(false).map(|()| self.try_lane());
        self.after_run(ran);
    }

    /// [`feed`](Self::feed) past its fast path: leaves what the call released from `lent_from`
    /// on, or why the stream stopped in `failure`, or a checkpoint evaluation to wait for.
    #[inline(never)]
    fn feed_text(&mut self, delta: &str) {
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
    fn after_run(&mut self, ran: Result<(), EngineError>) {
        self.plan_next_run();
        if let Err(error) = ran {
            self.failure = Some(error);
            self.outstanding = true;
            return;
        }
        self.note_held();
        self.note_release();
    }

    /// Notes the time of the first release, if the text from `lent_from` on is it.
    fn note_release(&mut self) {
        if !self.lent().is_empty() && self.first_release.is_none() {
            self.first_release = Some(self.started.elapsed());
        }
    }

    /// Waits for what the last call left outstanding: the checkpoint evaluation it started.
    /// Ready once nothing is left but, perhaps, the error to report in `failure`.
    fn poll_outstanding(&mut self, context: &mut Context<'_>) -> Poll<()> {
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
        } else if unbatched && self.plan.lane && !self.in_lane {
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

    /// Releases the rest, from `lent_from` on.
    async fn settle(&mut self) -> Result<(), EngineError> {
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

    // Out of line: a new record is rare, and the fast paths that check for one stay small.
    #[inline(never)]
    fn note_held(&mut self) {
        // Characters never outnumber bytes: count them only when the bytes could set a record.
        let held_bytes = match self.plan.mode {
            // The stages hold nothing in the fast lane.
            StreamMode::Incremental if self.in_lane => self.raw.len() - self.fed,
            StreamMode::Incremental => {
                let held: usize = self.stages.iter().map(|state| state.held().len()).sum();
                held + self.raw.len() - self.fed
            }
            _ => self.raw.len() - self.released_raw,
        };
        if held_bytes <= self.max_held_chars {
            return;
        }
        let held = match self.plan.mode {
            StreamMode::Incremental => {
                let staged: usize = self
                    .stages
                    .iter()
                    .map(|state| char_count(state.held()))
                    .sum();
                let received = self.counted_to_end.to(&self.raw, self.raw.len());
                staged + received - self.counted_to_fed.to(&self.raw, self.fed)
            }
            _ => self.held_chars(),
        };
        self.max_held_chars = self.max_held_chars.max(held);
    }

    /// Runs the stages as a pipeline: each passes what it has cleared into the next one's
    /// buffer, the last into `released`.
    fn run_stages(&mut self, end: bool) -> Result<(), EngineError> {
        // The stages' text follows what the fast lane released: `released` gets that first,
        // and the call's text is what follows it.
        self.flush();
        self.lend_from_released();
        self.run_stages_lent(end)
    }

    /// [`run_stages`](Self::run_stages) once the call's text starts in `released` (the lane's
    /// earlier text flushed).
    fn run_stages_lent(&mut self, end: bool) -> Result<(), EngineError> {
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

    /// The fast lane: while no literal any stage watches for occurs in the unreleased text,
    /// no stage can match in it and every stage would pass it on unchanged, so the stages
    /// are skipped. Each push (or batch) costs one literal search per stage over the new
    /// bytes, and the lane holds back what the pipeline would: the windows of all stages.
    /// When a literal turns up, the unreleased text goes to the stages and the pipeline runs
    /// until it is quiet again ([`try_lane`](Self::try_lane)).
    fn lane_feed(&mut self, end: bool) -> Result<(), EngineError> {
        let len = self.raw.len();
        self.lane_searched = len;
        let raw = self.raw.as_bytes();
        // A few new bytes (and the one before, for a literal's first two bytes) go through
        // the quick filter of all the stages' literals first; only what it flags goes to the
        // stages' prefilters, each from where it searched last.
        let new = self.lane_filtered.min(len);
        let quiet = len - new < LiteralFilter::SHORT && self.plan.lane_filter.clear_from(raw, new);
        // The first literal any stage's prefilter finds, and whether a denying stage found one.
        // The quick filter has cleared the text before `new` (but for a literal that starts
        // at its last byte): a stage's search starts there if it searched less far itself.
        let mut first = None;
        let mut deny = false;
        // The stages (the first 64) whose literals this call searched for up to the end of
        // the text and did not find.
        let mut clear = 0u64;
        if !quiet {
            let cleared = new.saturating_sub(1);
            let plan = &*self.plan;
            let stages = &mut self.stages[..];
            if let Some(group) = &plan.lane_group {
                // The group's first literal, from where the one that searched least left off.
                let mut from = len;
                for &index in &group.stages {
                    if let Some(state) = stages.get_mut(index) {
                        state.lane_scanned = state.lane_scanned.max(cleared);
                        from = from.min(state.lane_scanned);
                    }
                }
                if from < len {
                    match group.prefilter.find(raw, Span::from(from..len)) {
                        Some(literal) => first = Some(literal.start),
                        // One-byte literals: none straddles the end.
                        None => {
                            for &index in &group.stages {
                                if let Some(state) = stages.get_mut(index) {
                                    state.lane_scanned = len;
                                    clear |= stage_bit(index);
                                }
                            }
                        }
                    }
                }
            }
            for &index in &plan.lane_solo {
                // At the end any literal makes the stages run: the search can stop at one.
                if end && first.is_some() {
                    break;
                }
                let (Some(stage), Some(state)) = (plan.stages.get(index), stages.get_mut(index))
                else {
                    continue;
                };
                state.lane_scanned = state.lane_scanned.max(cleared);
                let MatchFinder::Literals {
                    prefilter, longest, ..
                } = &stage.finder
                else {
                    first = Some(state.lane_scanned.min(len));
                    deny = true;
                    continue;
                };
                // A replacing stage's literal matters only if it comes first; a denying
                // stage's anywhere.
                let until = match (&stage.action, first) {
                    (StageAction::Replace { .. }, Some(first)) => first,
                    _ => len,
                };
                // A literal of this stage that starts before `until` counts, wherever it
                // ends.
                let search_end = if until < len {
                    (until + longest - 1).min(len)
                } else {
                    len
                };
                if state.lane_scanned < until
                    && let Some(literal) = prefilter
                        .find(raw, Span::from(state.lane_scanned..search_end))
                        .filter(|literal| literal.start < until)
                {
                    first = Some(first.map_or(literal.start, |at: usize| at.min(literal.start)));
                    deny |= matches!(stage.action, StageAction::Deny { .. });
                    continue;
                }
                if until == len {
                    clear |= stage_bit(index);
                }
                state.lane_scanned = unfinished_from(until, *longest).max(state.lane_scanned);
            }
        }
        self.lane_filtered = if quiet {
            // A literal starting at the last byte is seen with the next bytes.
            len
        } else {
            // The flagged bytes stay with the filter until their literal is complete.
            self.stages
                .iter()
                .map(|state| state.lane_scanned)
                .min()
                .unwrap_or(len)
        };
        // A longer literal may have begun before the first one found and not be whole yet:
        // until the end, the first literal starts no later than where one may straddle it.
        let first = first.map(|at| {
            if end {
                at
            } else {
                at.min(unfinished_from(len, self.plan.longest_literal))
            }
        });
        let cut = if end { len } else { self.lane_cut() };
        self.lane_until = None;
        // A replacing stage's literal: the lane goes on while it releases text before where
        // a match may start (see `pending_push`).
        let hit = match first {
            Some(at) if !end && !deny && cut <= at.saturating_sub(self.plan.reach) => {
                self.lane_until = Some(at.saturating_sub(self.plan.reach));
                // The pushes that follow look for a denying stage's literal from where one
                // this search could not see whole may begin.
                self.hold_filtered = (len + 2).saturating_sub(self.plan.longest_literal).min(len);
                false
            }
            found => found.is_some(),
        };
        if hit {
            self.flush();
            self.lend_from_released();
            // No match can start before the first literal less the reach: the text before
            // that goes out as the lane would release it, and the stages take only the rest
            // (after a batch, much less than all the lane held). Not when a denying stage's
            // literal came: a call that stops the stream releases nothing; nor at the end,
            // where the search stops at the first literal it finds, which may not be the
            // first in the text.
            if let Some(at) = first
                && !deny
                && !end
            {
                let until = self
                    .raw
                    .floor_char_boundary(cut.min(at.saturating_sub(self.plan.reach)));
                if until > self.fed {
                    self.released.push_str(&self.raw[self.fed..until]);
                    self.fed = until;
                }
            }
            self.leave_lane();
            return self.run_stages_from_lane(clear, end);
        }
        if cut > self.fed {
            // Lent from `raw`, as a push in the fast lane does.
            self.lane_release(cut);
        }
        Ok(())
    }

    /// [`run_stages_lent`](Self::run_stages_lent) on the text the fast lane has just handed
    /// the stages. The lane has searched the answer up to its end for the literals of the
    /// stages in `clear` (see [`stage_bit`]) and found none: those of them that see only the
    /// answer's own literals ([`Stage::own_literals`]) skip their search of the text.
    fn run_stages_from_lane(&mut self, clear: u64, end: bool) -> Result<(), EngineError> {
        for (index, (stage, state)) in self.plan.stages.iter().zip(&mut self.stages).enumerate() {
            state.lane_clear = stage.own_literals && clear & stage_bit(index) != 0;
        }
        let ran = self.run_stages_lent(end);
        for state in &mut self.stages {
            state.lane_clear = false;
        }
        ran
    }

    /// Hands the unreleased text to the stages: each starts afresh at `fed`, with the
    /// character before it as look-behind context.
    fn leave_lane(&mut self) {
        self.in_lane = false;
        let at = self.fed;
        let behind = self.raw[..at].chars().next_back().map_or(0, char::len_utf8);
        let look_behind = &self.raw[at - behind..at];
        for (stage, state) in self.plan.stages.iter().zip(&mut self.stages) {
            state.buffer.clear();
            state.buffer.push_str(look_behind);
            state.held_from = state.buffer.len();
            state.unchanged = state.buffer.len();
            state.rewatch(stage, None);
        }
    }

    /// Takes the fast lane again, if the stream is out of it, once the pipeline is quiet (after
    /// any run of the stages, the lane's own too): no stage has seen a literal in the text it
    /// holds, and the held text of every stage, with the character before it, is the answer's
    /// text as it came (no replacement in it, for any stage). The held texts then lie end to
    /// end in `raw`, and the lane goes on from where the first of them starts.
    fn try_lane(&mut self) {
        if self.in_lane
            || !self.plan.lane
            || !self
                .stages
                .iter()
                .all(|state| matches!(state.progress, FinderProgress::Literals { found: None, .. }))
        {
            return;
        }
        let held: usize = self.stages.iter().map(|state| state.held().len()).sum();
        // A replacement longer than what it replaced can make the held text outgrow the text
        // received; such held text is not the answer's text as it came, and the lane waits.
        let Some(before) = self
            .fed
            .checked_sub(held)
            .and_then(|start| self.raw.get(..start))
        else {
            return;
        };
        let start = before.len();
        let behind = before.chars().next_back().map_or(0, char::len_utf8);
        // The first stage reads `raw` itself; each later one must have received its held
        // text, the held text of the stages after it and the character before unchanged.
        let mut needed = behind;
        for state in self.stages.iter().skip(1).rev() {
            needed += state.held().len();
            if state.unchanged < needed {
                return;
            }
        }
        debug_assert_eq!(
            self.stages
                .iter()
                .rev()
                .map(StageScan::held)
                .collect::<String>(),
            self.raw[start..self.fed],
        );
        // What each stage has searched: its held text up to its search position; the text of
        // the stages before it (later in the answer) is new to it.
        let mut end = self.fed;
        for state in &mut self.stages {
            let unsearched = match state.progress {
                FinderProgress::Literals { search_from, .. } => {
                    state.buffer.len() - search_from.max(state.held_from)
                }
                _ => state.held().len(),
            };
            state.lane_scanned = (end - unsearched).max(start);
            end -= state.held().len();
            state.buffer.clear();
            state.held_from = 0;
        }
        self.lane_filtered = self
            .stages
            .iter()
            .map(|state| state.lane_scanned)
            .min()
            .unwrap_or(start);
        self.fed = start;
        self.in_lane = true;
    }

    /// One record per incremental policy at the end: `redact` if it replaced anything,
    /// `allow` otherwise.
    fn record_stage_decisions(&self) {
        if !self.engine.audits() {
            return;
        }
        let mut index = 0;
        while index < self.plan.stages.len() {
            let policy_index = self.plan.stages[index].policy_index;
            let mut redactions = Vec::new();
            let first = &self.plan.stages[index];
            while index < self.plan.stages.len()
                && self.plan.stages[index].policy_index == policy_index
            {
                let stage = &self.plan.stages[index];
                if let StageAction::Replace { replacement } = &stage.action
                    && self.stages[index].replacements > 0
                {
                    redactions.push(
                        Redaction::replace("response.content", stage.pattern.clone())
                            .with_replacement(replacement.clone()),
                    );
                }
                index += 1;
            }
            let decision = if redactions.is_empty() {
                PolicyDecision::allow()
            } else {
                PolicyDecision::redact(redactions)
            };
            self.record_stage(first, decision);
        }
    }

    fn record_stage(&self, stage: &Stage, decision: PolicyDecision) {
        if !self.engine.audits() {
            return;
        }
        let context =
            OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone());
        // The whole answer's own records, at its final evaluation, decide whether a refusing
        // audit log fails the stream.
        let _ = self.engine.emit(AuditRecord {
            policy_id: &stage.policy_id,
            decision: AuditDecision::from(&decision),
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: None,
        });
    }

    /// Evaluates the monitored output policies on the whole text (they never hold text back).
    async fn evaluate_monitored(&self) {
        if !self.set.output().entries.iter().any(|entry| entry.monitor) {
            return;
        }
        let context = self.whole_context();
        self.engine
            .evaluate_monitored_output(&self.set, &context)
            .await;
    }

    fn whole_context(&self) -> OutputContext {
        OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone())
    }

    /// Starts evaluating the accumulated text; the [`Feed`] of the call waits for it.
    fn start_checkpoint(&mut self) {
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
    fn pending_checkpoint(&mut self) -> &mut Option<Checkpoint<'e>> {
        self.checkpoint
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the text a checkpoint evaluation allowed unchanged; a change holds the text
    /// until the final evaluation, an error stops the stream.
    fn end_checkpoint(&mut self, result: Result<bool, EngineError>) {
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

    async fn final_evaluation(&mut self) -> Result<(), EngineError> {
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

    fn report(&mut self, event: StreamEvent) {
        if event == StreamEvent::End {
            if self.reported_end {
                return;
            }
            self.reported_end = true;
        }
        if !self.engine.audits() {
            return;
        }
        self.flush();
        let report = StreamReport {
            event,
            mode: self.plan.mode,
            outcome: if event == StreamEvent::End {
                self.finished
            } else {
                None
            },
            raw_chars: self.raw.chars().count() + self.chars_after_end,
            released_chars: self.released.chars().count(),
            max_held_chars: self.max_held_chars,
            time_to_first_release: self.first_release,
        };
        let reason = match report.outcome {
            Some(outcome) => format!("stream ended: {outcome}"),
            None => "stream started".to_owned(),
        };
        let context = OutputContext::new(Message::assistant(String::new()), self.metadata.clone());
        let decision = PolicyDecision::audit(reason);
        // A report of the stream, not a decision: a refusal is the final evaluation's to act on.
        let _ = self.engine.emit(AuditRecord {
            policy_id: STREAM_POLICY_ID,
            decision: AuditDecision::Audit,
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: Some(&report),
        });
    }
}

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
enum FeedState<'a, 'e> {
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
    fn released(text: &'a str) -> Self {
        Feed {
            state: FeedState::Released(text),
        }
    }
}

/// A checkpoint evaluation under way: whether the evaluation changed the text.
type Checkpoint<'e> = Pin<Box<dyn Future<Output = Result<bool, EngineError>> + Send + 'e>>;

impl<'a> Future for Feed<'a, '_> {
    type Output = Result<&'a str, EngineError>;

    #[inline]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::set::PolicySetBuilder;
    use crate::stream::plan::required_literals;
    use crate::stream::{StreamItem, StreamingRule};

    /// An engine with the policy set `outputs` builds.
    fn engine_of(outputs: impl FnOnce(PolicySetBuilder) -> PolicySetBuilder) -> PolicyEngine {
        let set = outputs(crate::PolicySet::builder()).build();
        PolicyEngine::builder().policy_set(set).build()
    }

    /// The runtime each test drives its guard on.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    }

    /// Whether a stream of `deltas` through `engine` is denied, by a push or at its end.
    fn denied<'d>(engine: &PolicyEngine, deltas: impl IntoIterator<Item = &'d str>) -> bool {
        runtime().block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            for delta in deltas {
                if guard.feed(delta).await.is_err() {
                    return true;
                }
            }
            guard
                .finish()
                .await
                .into_iter()
                .any(|item| matches!(item, StreamItem::Denied(_)))
        })
    }

    fn literals_of(pattern: &str) -> Option<MatchFinder> {
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .expect("a valid pattern");
        required_literals(&hir)
    }

    /// The literal the watch of `pattern` finds in a text holding a match of it.
    fn watched_by(pattern: &str) -> Option<Vec<u8>> {
        let MatchFinder::Literals { prefilter, .. } = literals_of(pattern)? else {
            return None;
        };
        let probe = b"xx ops@example.com 123-45-6789 evil.INVALID";
        let found = prefilter.find(probe, Span::from(0..probe.len()))?;
        Some(probe[found.range()].to_vec())
    }

    #[test]
    fn the_rarest_required_literal_is_watched() {
        // The `@` of an e-mail address, not its common `.`.
        assert_eq!(
            watched_by(r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}").as_deref(),
            Some(&b"@"[..])
        );
        assert_eq!(
            watched_by(r"\b\d{3}-\d{2}-\d{4}\b").as_deref(),
            Some(&b"-"[..])
        );
        // Case-insensitive alternatives: a prefix of each case variant.
        let found = watched_by(r"(?i:phishing\.example|evil\.invalid)").expect("literals");
        assert!(found.eq_ignore_ascii_case(&b"evil.invalid"[..found.len()]));
    }

    struct Redact(&'static str, &'static str);

    #[async_trait::async_trait]
    impl Policy<OutputContext> for Redact {
        fn id(&self) -> &str {
            self.1
        }

        async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
            Ok(PolicyDecision::allow())
        }

        fn streaming(&self) -> Option<Vec<StreamingRule>> {
            Some(vec![StreamingRule::Replace {
                pattern: self.0.into(),
                replacement: format!("[{}]", self.1),
                max_match_len: None,
            }])
        }
    }

    #[test]
    fn a_stream_leaves_its_dfa_states_to_the_next() {
        // No literal is in every match of a passport number: its stage steps a DFA.
        let engine = engine_of(|set| set.output(Redact(r"[A-Z]{2}[0-9]{7}", "PASSPORT")));
        let plan = engine.stream_plan();
        let Some(MatchFinder::Dfa(dfa)) = plan.stages.first().map(|stage| &stage.finder) else {
            panic!("the stage is watched with a DFA");
        };
        assert_eq!(dfa.kept_caches(), 0);
        let runtime = runtime();
        for _ in 0..3 {
            runtime.block_on(async {
                let mut guard = engine.output_stream(Metadata::new("agent", "session"));
                let mut shown = String::new();
                for delta in ["Passport XK12", "34567 on file."] {
                    shown.push_str(guard.feed(delta).await.expect("no denial"));
                }
                for item in guard.finish().await {
                    shown.push_str(&item.into_text().expect("text"));
                }
                assert_eq!(shown, "Passport [PASSPORT] on file.");
            });
            // The ended stream's cache waits for the next stream, which takes it.
            assert_eq!(dfa.kept_caches(), 1);
        }
    }

    #[test]
    fn text_without_watched_literals_takes_the_fast_lane() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane);
        let runtime = runtime();
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let plain = "nothing to see in this sentence at all. ".repeat(8);
            for chunk in plain.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
                assert!(guard.in_lane);
                assert!(guard.raw.len() - guard.fed <= plan.windows);
            }
            assert_eq!(guard.held_chars(), plan.windows);

            // A literal sends the text through the rules, and once they are quiet again the
            // guard is back in the lane.
            let secret = "mail ops@example.com or call 123-45-6789 now. ";
            let mut left_the_lane = false;
            for chunk in [secret, &plain].concat().as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
                left_the_lane |= !guard.in_lane;
            }
            assert!(left_the_lane);
            assert!(guard.in_lane);
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            assert_eq!(
                shown,
                format!("{plain}mail [EMAIL] or call [SSN] now. {plain}")
            );
        });
    }

    /// An e-mail address, watched for its `@`.
    const EMAIL: &str = r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}";

    #[test]
    fn replacing_stages_with_one_byte_literals_are_searched_together() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Deny(&["evil.invalid"]))
                .output(Redact(EMAIL, "EMAIL"))
        });
        let plan = engine.stream_plan();
        let group = plan.lane_group.as_ref().expect("a group");
        // The `-` of the SSN and the `@` of the address, not the denied domain.
        assert_eq!(group.stages, [0, 2]);
        let text = b"plain text, then ops@example.com and 123-45-6789";
        let found = group.prefilter.find(text, Span::from(0..text.len()));
        assert_eq!(found.map(|found| text[found.start]), Some(b'@'));
        // One replacing stage alone is searched on its own.
        let engine = engine_of(|set| set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN")));
        assert!(engine.stream_plan().lane_group.is_none());
        // So are replacing stages whose literals are longer than a byte.
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"key-[0-9a-f]{8}", "KEY"))
        });
        assert!(engine.stream_plan().lane_group.is_none());
        // The group's literals are found where each stage's search had left off: a secret
        // after a long plain text is replaced, through the group, as the whole text has it.
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(EMAIL, "EMAIL"))
        });
        let text = [
            "plain words here. ".repeat(30),
            "call 123-45-6789 or ops@example.com. ".into(),
            "more plain words. ".repeat(30),
        ]
        .concat();
        runtime().block_on(async {
            for size in [5, 16, 64, 300] {
                let mut guard = engine.output_stream(Metadata::new("agent", "session"));
                let mut shown = String::new();
                for chunk in text.as_bytes().chunks(size) {
                    let chunk = std::str::from_utf8(chunk).expect("ascii");
                    shown.push_str(guard.feed(chunk).await.expect("no denial"));
                }
                for item in guard.finish().await {
                    shown.push_str(&item.into_text().expect("text"));
                }
                assert_eq!(
                    shown,
                    text.replace("123-45-6789", "[SSN]")
                        .replace("ops@example.com", "[EMAIL]"),
                    "{size}"
                );
            }
        });
    }

    #[test]
    fn out_of_the_lane_clear_pushes_are_kept_until_the_windows_fill() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane);
        let runtime = runtime();
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let plain = "nothing to see in this sentence at all. ".repeat(8);
            let secret = "mail ops@example.com or call 123-45-6789 now. ";
            let text = [plain.as_str(), secret, &plain, secret, secret, &plain].concat();
            let mut shown = String::new();
            let (mut kept, mut ran) = (0, 0);
            for chunk in text.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                let buffers = |guard: &OutputStream<'_>| -> Vec<usize> {
                    guard.stages.iter().map(|s| s.buffer.len()).collect()
                };
                let (was_in_lane, before) = (guard.in_lane, buffers(&guard));
                let released = guard.feed(chunk).await.expect("no denial").to_owned();
                if !was_in_lane {
                    // Out of the lane, a push whose bytes hold no literal only keeps them
                    // (the stages do not run) while the held text stays within the windows.
                    if !guard.in_lane && buffers(&guard) == before {
                        assert!(released.is_empty());
                        kept += 1;
                    } else {
                        ran += 1;
                    }
                }
                let held = guard.raw.len() - guard.fed
                    + guard.stages.iter().map(|s| s.held().len()).sum::<usize>();
                assert!(held <= plan.windows, "{held} held");
                shown.push_str(&released);
            }
            assert!(kept > 0 && ran > 0, "kept {kept}, ran {ran}");
            assert!(guard.in_lane);
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            let redacted = "mail [EMAIL] or call [SSN] now. ";
            assert_eq!(
                shown,
                [plain.as_str(), redacted, &plain, redacted, redacted, &plain].concat()
            );
        });
    }

    #[test]
    fn a_stream_makes_room_for_as_much_text_as_the_last_one_received() {
        let engine = engine_of(|set| set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN")));
        let runtime = runtime();
        runtime.block_on(async {
            let first = engine.output_stream(Metadata::new("agent", "session"));
            assert_eq!(first.raw.capacity(), 0);
            let mut first = first;
            let text = "call 123-45-6789 now. ".repeat(100);
            for chunk in text.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                first.feed(chunk).await.expect("no denial");
            }
            first.finish().await;
            let second = engine.output_stream(Metadata::new("agent", "session"));
            assert!(second.raw.capacity() >= text.len());
            assert!(second.released.capacity() >= text.len());
        });
    }

    struct Deny(&'static [&'static str]);

    #[async_trait::async_trait]
    impl Policy<OutputContext> for Deny {
        fn id(&self) -> &str {
            "deny"
        }

        async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
            Ok(PolicyDecision::allow())
        }

        fn streaming(&self) -> Option<Vec<StreamingRule>> {
            Some(vec![StreamingRule::deny_on_any(self.0, None)])
        }
    }

    /// Replaces matches of a pattern with the given text.
    struct ReplaceWith(&'static str, &'static str);

    #[async_trait::async_trait]
    impl Policy<OutputContext> for ReplaceWith {
        fn id(&self) -> &str {
            "replace"
        }

        async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
            Ok(PolicyDecision::allow())
        }

        fn streaming(&self) -> Option<Vec<StreamingRule>> {
            Some(vec![StreamingRule::Replace {
                pattern: self.0.into(),
                replacement: self.1.into(),
                max_match_len: None,
            }])
        }
    }

    #[test]
    fn a_literal_a_replacement_makes_with_the_text_after_it_is_found() {
        // The answer has no blocked domain; the SSN's replacement makes one with the text
        // after it. The fast lane finds none in the answer, and the deny stage must still
        // search its own text.
        let plain = "nothing to see in this sentence at all. ".repeat(12);
        let text = [&plain[..64], "call 123-45-6789.invalid now. ", &plain].concat();
        for batch in [0, 256] {
            let engine = engine_of(|set| {
                set.stream_batch(batch)
                    .output(ReplaceWith(r"\b\d{3}-\d{2}-\d{4}\b", "x-evil"))
                    .output(Deny(&["evil.invalid"]))
            });
            let plan = engine.stream_plan();
            assert!(plan.lane);
            assert_eq!(
                plan.stages
                    .iter()
                    .map(|stage| stage.own_literals)
                    .collect::<Vec<_>>(),
                [true, false]
            );
            for size in [1, 5, 16, 64] {
                let chunks = text
                    .as_bytes()
                    .chunks(size)
                    .map(|chunk| std::str::from_utf8(chunk).expect("ascii"));
                assert!(denied(&engine, chunks), "batch {batch}, {size}-byte deltas");
            }
        }
    }

    #[test]
    fn empty_pushes_while_a_replacing_literal_is_pending_pass_with_one_byte_literals() {
        // Every literal is one byte: the pushes after the lane's search look for a denying
        // stage's literal from the end of the text it searched, not past it.
        let engine = engine_of(|set| {
            set.output(Redact(r"[0-9]{1,4}-[0-9]{1,4}", "DASH"))
                .output(Redact(r"[a-z]{1,8}@[a-z]{1,8}", "AT"))
                .output(Deny(&["#"]))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane && plan.longest_literal == 1);
        let shown = runtime().block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let pushes = [
                "call 12-34 now, or write to them about it: ",
                "",
                "",
                "their address is a@b for now, ",
                "",
                "it says so on the page you have in front of you!",
                "",
                "",
            ];
            for chunk in pushes {
                shown.push_str(guard.feed(chunk).await.expect("allowed"));
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("allowed"));
            }
            shown
        });
        assert_eq!(
            shown,
            "call [DASH] now, or write to them about it: their address is [AT] for now, \
             it says so on the page you have in front of you!"
        );
    }

    #[test]
    fn a_denied_literal_begun_in_the_push_that_found_a_replacing_one_is_found() {
        // The push that brings the SSN's `-` ends in the first bytes of a blocked domain: the
        // lane's search then cannot see it whole, and the pushes after it must.
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Deny(&["evil.invalid"]))
        });
        let plain = "nothing to see in this sentence at all. ".repeat(4);
        let pushes = [
            &plain[..],
            "call 123-45-6789 at evil",
            ".invalid now, or later. ",
            &plain,
            &plain,
        ];
        assert!(denied(&engine, pushes));
    }

    #[test]
    fn short_deltas_are_tested_a_window_at_a_time_within_the_slack() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane && plan.lane_slack >= 16);
        let runtime = runtime();
        runtime.block_on(async {
            let plain = "nothing to see in this sentence at all. ".repeat(8);
            let secret = "mail ops@example.com or call 123-45-6789 now. ";
            let text = [plain.as_str(), secret, &plain, secret, &plain].concat();
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let (mut deferred, mut tested) = (0, 0);
            for chunk in text.as_bytes().chunks(3) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                let (direct, filtered) = (guard.route == PushRoute::Lane, guard.lane_filtered);
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
                if direct && guard.in_lane && guard.lane_until.is_none() {
                    // The untested bytes never outgrow the slack.
                    assert!(guard.raw.len() - guard.lane_filtered <= plan.lane_slack);
                    if guard.lane_filtered == filtered {
                        deferred += 1;
                    } else {
                        tested += 1;
                    }
                }
            }
            // About one push in six tests a window (16 bytes in 3-byte deltas).
            assert!(
                deferred > 4 * tested && tested > 0,
                "{deferred} deferred, {tested} tested"
            );
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            let redacted = "mail [EMAIL] or call [SSN] now. ";
            assert_eq!(
                shown,
                [plain.as_str(), redacted, &plain, redacted, &plain].concat()
            );
        });
    }

    #[test]
    fn a_replacing_literal_lets_the_lane_release_up_to_where_its_match_may_start() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Deny(&["evil.invalid"]))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane);
        let runtime = runtime();
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        // Released, and whether the stream was denied.
        let stream = |text: String| {
            runtime.block_on(async {
                let mut guard = engine.output_stream(Metadata::new("agent", "session"));
                let mut shown = String::new();
                let mut pending_pushes = 0;
                for chunk in text.as_bytes().chunks(16) {
                    let chunk = std::str::from_utf8(chunk).expect("ascii");
                    let was_pending = guard.lane_until;
                    match guard.feed(chunk).await {
                        Ok(released) => shown.push_str(released),
                        Err(_) => return (shown, true, pending_pushes),
                    }
                    if let (Some(until), Some(_)) = (was_pending, guard.lane_until) {
                        // The stages did not run, the lane released text before `until`.
                        pending_pushes += 1;
                        assert!(guard.in_lane && guard.stages.iter().all(|s| s.buffer.is_empty()));
                        assert!(guard.fed <= until && guard.raw.len() - guard.fed <= plan.windows);
                    }
                }
                for item in guard.finish().await {
                    match item.into_text() {
                        Ok(text) => shown.push_str(&text),
                        Err(_) => return (shown, true, pending_pushes),
                    }
                }
                (shown, false, pending_pushes)
            })
        };
        // The SSN's `-` is found while the lane still has text to release before it.
        let text = [plain.as_str(), "call 123-45-6789 now. ", &plain].concat();
        let (shown, denied, pending_pushes) = stream(text);
        assert!(!denied);
        assert!(pending_pushes > 0);
        assert_eq!(shown, [plain.as_str(), "call [SSN] now. ", &plain].concat());
        // A denying stage's literal while a replacing one is pending: the stages run at once,
        // and nothing of the denied match is released.
        let text = [
            plain.as_str(),
            "call 123-45-6789 at evil.invalid now. ",
            &plain,
        ]
        .concat();
        let (shown, denied, _) = stream(text);
        assert!(denied);
        assert!(
            shown.len() <= plain.len() + "call 123-45-6789 at ".len(),
            "{shown:?}"
        );
    }

    #[test]
    fn a_batch_whose_match_the_stages_pass_on_takes_the_lane_again_at_once() {
        let engine = engine_of(|set| {
            set.stream_batch(256)
                .output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
                .output(Deny(&["evil.invalid"]))
        });
        assert!(engine.stream_plan().lane);
        let plain = "nothing to see in this sentence at all. ".repeat(12);
        // The first batch ends 256 bytes in, far enough after the secrets for the stages to
        // pass their replacements on in the run that batch makes.
        let text = [
            &plain[..64],
            "call 123-45-6789 or ops@example.com now. ",
            &plain,
        ]
        .concat();
        let (shown, lane_after_run) = runtime().block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let mut lane_after_run = None;
            for chunk in text.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                let before = guard.raw.len();
                shown.push_str(guard.feed(chunk).await.expect("allowed"));
                if before < 256 && guard.raw.len() >= 256 {
                    lane_after_run = Some(guard.in_lane);
                }
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("allowed"));
            }
            (shown, lane_after_run)
        });
        // Back in the lane with the push that ran the stages, not a batch later.
        assert_eq!(lane_after_run, Some(true));
        assert_eq!(
            shown,
            [&plain[..64], "call [SSN] or [EMAIL] now. ", &plain].concat()
        );
    }

    #[test]
    fn a_literal_whose_start_ends_a_push_is_found_in_the_fast_lane() {
        let engine = engine_of(|set| set.output(Deny(&["evil.invalid", "malware.test"])));
        assert!(engine.stream_plan().lane);
        // The first two bytes of the literal end one push (the filter flags them, the
        // prefilter finds no whole literal yet); the rest comes with the next pushes.
        for split in [
            &["nothing to see in this sentence. ev", "il.invalid and more"][..],
            &[
                "nothing to see in this sentence. e",
                "v",
                "il.inv",
                "alid and more",
            ],
            &["plain text, then ma", "lware.test"],
        ] {
            assert!(denied(&engine, split.iter().copied()), "{split:?}");
        }
    }

    #[test]
    fn a_stage_without_its_literal_in_sight_holds_back_only_what_could_precede_one() {
        // The DFA stage keeps the guard out of the fast lane, so the e-mail stage runs on
        // every push: with no `@` in sight it holds back only the 16 address characters a
        // match may have before an `@` that is still to come (and a partial character), not
        // its whole window.
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{5}\b", "ZIP"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.[a-z]{2,4}", "EMAIL"))
        });
        let plan = engine.stream_plan();
        assert!(!plan.lane);
        let email = &plan.stages[1];
        assert_eq!(email.back, 16);
        assert!(email.window > 30);
        let runtime = runtime();
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let text = "plain words and more plain words, ".repeat(8);
            for chunk in text.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
                assert!(guard.stages[1].held().len() <= email.back + 3);
            }
            // An address still arriving is held whole, and redacted.
            for chunk in ["write to ops", "@corp", ".com now. ", &text] {
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            assert_eq!(shown, format!("{text}write to [EMAIL] now. {text}"));
        });
    }

    #[test]
    fn out_of_the_lane_a_blocked_literal_goes_to_the_stages_at_once() {
        let engine = engine_of(|set| {
            set.output(Deny(&["evil.invalid", "malware.test"]))
                .output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
        });
        assert!(engine.stream_plan().lane);
        let runtime = runtime();
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        // Right after a replacement, out of the lane, the blocked domain arrives in pieces.
        let text = [
            &plain,
            "call 123-45-6789 or ops@example.com, ",
            "then evil.inv",
            "alid ",
        ]
        .concat();
        let literal_end = text.find("evil.invalid").expect("the literal") + "evil.invalid".len();
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut received = 0;
            let mut out_of_the_lane = false;
            for chunk in text
                .as_bytes()
                .chunks(8)
                .chain([&b"more plain text. "[..]; 40])
            {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                out_of_the_lane |= !guard.in_lane;
                received += chunk.len();
                if guard.feed(chunk).await.is_err() {
                    assert!(out_of_the_lane);
                    // The deny stage (the first) reports a match once its window is past
                    // it: within a few pushes of the literal, not once the windows of all
                    // stages fill.
                    assert!(
                        received <= literal_end + 24,
                        "denied {} bytes after the literal",
                        received - literal_end
                    );
                    return;
                }
            }
            panic!("no denial");
        });
    }

    #[test]
    fn the_lane_tests_exactly_the_literals_first_bytes() {
        let engine = engine_of(|set| {
            set.output(Redact(r"\b\d{3}-\d{2}-\d{4}\b", "SSN"))
                .output(Redact(EMAIL, "EMAIL"))
                .output(Deny(&["phishing.example", "malware.test", "evil.invalid"]))
        });
        // `-` and `@` alone; `ph`, `ma` and `ev` in either case.
        assert_eq!(engine.stream_plan().lane_filter.few_tests(), Some((2, 3)));
    }

    #[test]
    fn a_feed_is_two_words() {
        // Returned in two registers; a larger `Feed` goes through memory, and reading it back
        // from several stores stalls the caller on every push.
        assert_eq!(
            std::mem::size_of::<Feed<'_, '_>>(),
            2 * std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn patterns_without_a_common_literal_are_stepped_by_a_dfa() {
        assert!(literals_of(r"\b\d{5}\b").is_none());
        assert!(literals_of(r"\w{3,8}").is_none());
    }
}
