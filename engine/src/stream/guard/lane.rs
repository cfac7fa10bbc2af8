//! The fast lane: pushes that bring no watched literal release text at once, past the
//! stages; a literal's arrival hands the text to the stages, and a clear run takes the lane
//! again. Also the holding route out of the lane.

use regex_automata::Span;

use crate::error::EngineError;
use crate::stream::plan::{LiteralFilter, MatchFinder, Stage, StageAction, StreamPlan};
use crate::stream::short::append;
use crate::stream::stage::{FinderProgress, IN_PARTS_FROM, StageScan, unfinished_from};

use super::OutputStream;

/// The bit of the stage at `index` in a set of stages, for the first 64 (none for the others).
pub(super) fn stage_bit(index: usize) -> u64 {
    u32::try_from(index)
        .ok()
        .and_then(|index| 1u64.checked_shl(index))
        .unwrap_or(0)
}

/// Calls `each` on the plan's stages at `indices` (one of its lists of stages by index), each
/// with the stream's scan of it; whether every call gave `true` (every one is made).
pub(super) fn each_stage_at(
    indices: &[usize],
    plan: &StreamPlan,
    scans: &mut [StageScan],
    mut each: impl FnMut(&Stage, &mut StageScan) -> bool,
) -> bool {
    let mut all = true;
    for &index in indices {
        if let (Some(stage), Some(scan)) = (plan.stages.get(index), scans.get_mut(index)) {
            all &= each(stage, scan);
        }
    }
    all
}

/// Bytes a push in the fast lane leaves its DFAs to step later, when the plan's slack allows:
/// as many as a DFA steps as several parts at once.
pub(super) const LANE_STEP_AFTER: usize = IN_PARTS_FROM;

/// [`OutputStream::lane_push`] as a function, to be picked when the stream starts.
pub(super) type LanePush = for<'s, 'e> fn(&'s mut OutputStream<'e>, &str);

/// [`OutputStream::lane_push`] with its vector test on exactly `ES` one-byte slots and `EP`
/// pair slots, and with `STEP` the plan's DFAs stepped over the push (see
/// [`step_lane_dfas`](OutputStream::step_lane_dfas)). Its two forms stay out of line, each on
/// its own: the long form's one test then saves only the few registers it needs, not the many
/// of the short form's loop.
#[inline(never)]
pub(super) fn lane_push_exact<const STEP: bool, const ES: usize, const EP: usize>(
    stream: &mut OutputStream<'_>,
    delta: &str,
) {
    if delta.len() < 16 {
        lane_push_short_exact::<STEP, ES, EP>(stream, delta);
    } else {
        lane_push_long_exact::<STEP, ES, EP>(stream, delta);
    }
}

/// [`OutputStream::lane_push_short`] on exactly `ES` one-byte slots and `EP` pair slots.
#[inline(never)]
pub(super) fn lane_push_short_exact<const STEP: bool, const ES: usize, const EP: usize>(
    stream: &mut OutputStream<'_>,
    delta: &str,
) {
    stream.lane_push_short::<STEP, ES, EP>(delta);
}

/// [`OutputStream::lane_push`] of 16 bytes or more on exactly `ES` one-byte slots and `EP`
/// pair slots.
#[inline(never)]
pub(super) fn lane_push_long_exact<const STEP: bool, const ES: usize, const EP: usize>(
    stream: &mut OutputStream<'_>,
    delta: &str,
) {
    stream.lane_push::<STEP, ES, EP>(delta);
}

/// The forms of [`OutputStream::lane_push`] for up to four one-byte tests and four pair tests,
/// by their counts (a test on empty slots costs as much as on full ones), without and with
/// DFAs to step.
pub(super) const LANE_PUSH: [[[LanePush; 5]; 5]; 2] = {
    macro_rules! counts {
        ($step:literal, $singles:literal) => {
            [
                lane_push_exact::<$step, $singles, 0>,
                lane_push_exact::<$step, $singles, 1>,
                lane_push_exact::<$step, $singles, 2>,
                lane_push_exact::<$step, $singles, 3>,
                lane_push_exact::<$step, $singles, 4>,
            ]
        };
    }
    macro_rules! stepping {
        ($step:literal) => {
            [
                counts!($step, 0),
                counts!($step, 1),
                counts!($step, 2),
                counts!($step, 3),
                counts!($step, 4),
            ]
        };
    }
    [stepping!(false), stepping!(true)]
};

impl<'e> OutputStream<'e> {
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
    pub(super) fn lane_push<const STEP: bool, const ES: usize, const EP: usize>(
        &mut self,
        delta: &str,
    ) {
        debug_assert!(delta.len() >= 16);
        append(&mut self.raw, delta);
        if STEP && !self.step_lane_dfas(false) {
            return self.lane_search();
        }
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
    pub(super) fn lane_push_short<const STEP: bool, const ES: usize, const EP: usize>(
        &mut self,
        delta: &str,
    ) {
        let received = self.raw.len();
        append(&mut self.raw, delta);
        let mut filtered = self.lane_filtered;
        if received.saturating_sub(filtered) >= LiteralFilter::SHORT {
            return self.lane_search();
        }
        // The DFAs step a push behind too, as long as the bytes they have not seen stay
        // within the slack (a DFA's match, like a literal, starts at most its stage's `back`
        // before its end, and the reach counts every stage's): many bytes at a time, which
        // they step as several parts at once once there are enough of them.
        if STEP && self.lane_dfas_due(received) && !self.step_lane_dfas(false) {
            return self.lane_search();
        }
        let len = self.raw.len();
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
    pub(super) fn lane_cleared(&mut self, filtered: usize) {
        self.lane_searched = self.raw.len();
        self.lane_filtered = filtered;
        let cut = self.lane_cut();
        self.lane_release(cut);
    }

    /// Where the fast lane releases the received text up to: all but the windows.
    #[inline(always)]
    pub(super) fn lane_cut(&self) -> usize {
        self.raw
            .floor_char_boundary(self.raw.len().saturating_sub(self.plan.windows))
    }

    /// Releases the received text up to `cut` as it came, lent from `raw`: the end of a push
    /// in the fast lane.
    #[inline(always)]
    pub(super) fn lane_release(&mut self, cut: usize) {
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
    /// where a match may start and the push brings no literal of a denying stage (that the
    /// filter sees: as in the lane, it tests a push behind, within the slack, and so do the
    /// DFAs). Otherwise the stages take the unreleased text and run: by then the text after
    /// the literal is long enough for them to act on its match in one run, where running at
    /// once would have needed a run to find the match incomplete and more runs after it.
    #[inline(never)]
    pub(super) fn pending_push(&mut self, delta: &str) {
        let received = self.raw.len();
        append(&mut self.raw, delta);
        let cut = self.lane_cut();
        // Since the lane's search, no literal of a denying stage has begun (the filter has
        // looked from where one that search could not see whole may begin).
        let deny_clear = self.deny_filter_behind(received);
        if deny_clear
            && self.lane_until.is_some_and(|until| cut <= until)
            && (!self.lane_dfas_due(received) || self.step_lane_dfas(false))
        {
            self.lane_searched = self.raw.len();
            self.lane_release(cut);
            return;
        }
        self.pending_run(deny_clear);
    }

    /// The end of [`pending_push`](Self::pending_push) when the push cannot only release
    /// text: the stages take the unreleased text and run. With `deny_clear`, the filter of
    /// the denying stages' literals found none in what it tested. Out of line, so that the
    /// quick path saves only the few registers it needs.
    #[inline(never)]
    fn pending_run(&mut self, deny_clear: bool) {
        self.lane_until = None;
        // The stages take the text: what the filter left untested is tested now.
        let len = self.raw.len();
        let deny_clear = deny_clear
            && self.plan.deny_filter.as_ref().is_none_or(|filter| {
                self.hold_filtered >= len
                    || filter.clear_from(self.raw.as_bytes(), self.hold_filtered)
            });
        self.leave_lane();
        // The lane's search found none of the denying stages' literals, and the filter none
        // since: the text the stages take holds none.
        let clear = if deny_clear {
            self.plan
                .stages
                .iter()
                .enumerate()
                .filter(|(_, stage)| stage.denies())
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

    /// Whether the filter of the denying stages' literals finds none in the text received
    /// from `hold_filtered` on, testing it as the lane's quick filter does (see
    /// [`lane_push_short`](Self::lane_push_short)): a push behind, 16 bytes at a time, until
    /// the bytes it has not tested would outgrow the slack. (A literal in them could only
    /// make a match that starts where nothing is released yet.) Moves `hold_filtered` on
    /// over what it cleared.
    #[inline(never)]
    fn deny_filter_behind(&mut self, received: usize) -> bool {
        let Some(filter) = &self.plan.deny_filter else {
            return true;
        };
        let raw = self.raw.as_bytes();
        let mut filtered = self.hold_filtered;
        while received.saturating_sub(filtered) >= 16 {
            if !filter.clear_16(raw, filtered) {
                return false;
            }
            filtered += 16;
        }
        if raw.len() - filtered > self.plan.lane_slack {
            if !filter.clear_from(raw, filtered) {
                return false;
            }
            filtered = raw.len();
        }
        self.hold_filtered = filtered;
        true
    }

    /// [`lane_push`](Self::lane_push) when the quick filter may have found a literal: the
    /// stages' own searches decide. Out of line, so that the quick path stays small.
    #[inline(never)]
    pub(super) fn lane_search(&mut self) {
        self.lend_from_released();
        let ran = self.lane_feed(false).map(|()| self.try_lane());
        self.after_run(ran);
    }

    /// [`feed`](Self::feed) that ends a batch in the fast lane: the lane searches the batch,
    /// with none of the other bookkeeping of [`feed_text`](Self::feed_text) while it stays in
    /// the lane.
    #[inline(never)]
    pub(super) fn lane_batch(&mut self, delta: &str) {
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

    /// [`feed`](Self::feed) out of the fast lane (without batches). A push only keeps its text
    /// while the text held (by the stages and before them) stays within the windows: the lane
    /// holds back as much, and whatever the stages do with the text later, they do the same
    /// whether it reaches them in one piece or in several. So after a secret the stages run on
    /// a few larger pieces of text rather than on every delta, until they are quiet and the
    /// guard takes the lane again. A push that may bring a literal of a denying stage, or in
    /// which a denying stage's DFA sees a match, goes to the stages at once, so that the
    /// denial is reported as soon as it would be without this (a replacement shows only in
    /// released text, and nothing is released meanwhile).
    #[inline(never)]
    pub(super) fn hold_push(&mut self, delta: &str) {
        append(&mut self.raw, delta);
        let len = self.raw.len();
        let held = self.stage_held + len - self.fed;
        if held <= self.plan.windows
            && self.plan.deny_filter.as_ref().is_none_or(|filter| {
                filter.clear_push(self.raw.as_bytes(), self.hold_filtered, delta.as_bytes())
            })
            && self.step_hold_dfas()
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

    /// The fast lane: while no literal any stage watches for occurs in the unreleased text,
    /// and no stage that steps a DFA has seen a match in it, no stage can match in it and
    /// every stage would pass it on unchanged, so the stages are skipped. Each push (or
    /// batch) costs one literal search per stage watched with literals, and one step of each
    /// DFA, over the new bytes, and the lane holds back what the pipeline would: the windows
    /// of all stages. (A DFA's match ends at least a window before the text released: a match
    /// starting there would be whole, and seen, by the end of the text received.) When a
    /// literal or a DFA's match turns up, the unreleased text goes to the stages and the
    /// pipeline runs until it is quiet again ([`try_lane`](Self::try_lane)).
    pub(super) fn lane_feed(&mut self, end: bool) -> Result<(), EngineError> {
        // A DFA that has seen a match (or given up) sends the text to the stages, as a
        // denying stage's literal does: where its match starts is the stages' to find. Until
        // the end, and unless a literal turns up, the DFAs stay a push behind as they do on a
        // push the quick filter clears.
        let len = self.raw.len();
        let stepped = end || self.lane_dfas_due(len);
        let mut stepped_clear = if stepped {
            self.step_lane_dfas(end)
        } else {
            each_stage_at(
                &self.plan.lane_dfas,
                &self.plan,
                &mut self.stages,
                |_, state| state.lane_unmatched(),
            )
        };
        self.lane_searched = len;
        let raw = self.raw.as_bytes();
        // A few new bytes (and the two before, for a literal's first three bytes) go through
        // the quick filter of all the stages' literals first; only what it flags goes to the
        // stages' prefilters, each from where it searched last.
        let new = self.lane_filtered.min(len);
        let quiet = len - new < LiteralFilter::SHORT && self.plan.lane_filter.clear_from(raw, new);
        // The first literal any stage's prefilter finds, and whether a denying stage found one.
        // The quick filter has cleared the text before `new` (but for a literal that starts
        // at one of its last two bytes): a stage's search starts there if it searched less
        // far itself.
        let mut first = None;
        let mut deny = false;
        // The stages (the first 64) whose literals this call searched for up to the end of
        // the text and did not find.
        let mut clear = 0u64;
        if !quiet {
            let cleared = new.saturating_sub(2);
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
                    deny |= stage.denies();
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
            self.literal_stages_scanned().unwrap_or(len)
        };
        // A literal sends the text to the stages: the DFAs left behind step first, so that a
        // denial they see stops the call before it releases anything.
        if first.is_some() && !stepped {
            stepped_clear = self.step_lane_dfas(end);
        }
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
        let deny = deny || !stepped_clear;
        let hit = match first {
            _ if !stepped_clear => true,
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
    pub(super) fn run_stages_from_lane(
        &mut self,
        clear: u64,
        end: bool,
    ) -> Result<(), EngineError> {
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
    pub(super) fn leave_lane(&mut self) {
        self.in_lane = false;
        let at = self.fed;
        let behind = self.raw[..at].chars().next_back().map_or(0, char::len_utf8);
        let look_behind = &self.raw[at - behind..at];
        for (stage, state) in self.plan.stages.iter().zip(&mut self.stages) {
            state.buffer.clear();
            state.buffer.push_str(look_behind);
            state.held_from = state.buffer.len();
            state.unchanged = state.buffer.len();
            state.rewatch(stage);
        }
    }

    /// Takes the fast lane again, if the stream is out of it, once the pipeline is quiet (after
    /// any run of the stages, the lane's own too): no stage has seen a literal in the text it
    /// holds, no stage's DFA a match (nor given up), and the held text of every stage is the
    /// answer's text as it came (no replacement in it, for any stage), with the character
    /// before it for a stage whose pattern looks around (its matches at the start of the
    /// text depend on that character). The held texts then lie end to end in `raw`, and the
    /// lane goes on from where the first of them starts.
    pub(super) fn try_lane(&mut self) {
        if self.in_lane
            || !self.plan.lane
            || !self.stages.iter().all(|state| match &state.progress {
                FinderProgress::Literals { found, .. } => found.is_none(),
                FinderProgress::Dfa(scanner) => !scanner.matched(),
                FinderProgress::Blind => false,
            })
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
        // text and the held text of the stages after it unchanged, and the character before
        // them too if it looks around. (The one before a replacement that ends right there is
        // not the answer's; a stage that does not look around never reads it.)
        let mut held_after = 0;
        for (stage, state) in self.plan.stages.iter().zip(&self.stages).skip(1).rev() {
            held_after += state.held().len();
            let needed = held_after + if stage.looks_around { behind } else { 0 };
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
        self.lane_filtered = self.literal_stages_scanned().unwrap_or(start);
        // The stages that step a DFA step it in the lane from where the lane goes on.
        each_stage_at(
            &self.plan.lane_dfas,
            &self.plan,
            &mut self.stages,
            |stage, state| {
                state.lane_watch_from(stage, &self.raw, start);
                true
            },
        );
        self.lane_stepped = start;
        self.fed = start;
        self.in_lane = true;
    }

    /// Where the fast lane's search for the literals of the stages that watch for them has
    /// got to, the least far of them (none when no stage watches for literals).
    fn literal_stages_scanned(&self) -> Option<usize> {
        self.plan
            .stages
            .iter()
            .zip(&self.stages)
            .filter(|(stage, _)| matches!(stage.finder, MatchFinder::Literals { .. }))
            .map(|(_, state)| state.lane_scanned)
            .min()
    }

    /// Out of the fast lane, steps the scan of each denying stage's DFA over the answer as
    /// received (see [`StageScan::hold_step`]): whether none of them sees a match.
    fn step_hold_dfas(&mut self) -> bool {
        each_stage_at(
            &self.plan.deny_dfas,
            &self.plan,
            &mut self.stages,
            |stage, state| state.hold_step(stage, &self.raw),
        )
    }

    /// Whether the lane's DFAs step on a push that brought the text from `received` on:
    /// they stay behind until [`LANE_STEP_AFTER`] bytes before it have come, or until the
    /// bytes they have not seen would outgrow the plan's slack.
    #[inline(always)]
    pub(super) fn lane_dfas_due(&self, received: usize) -> bool {
        received.saturating_sub(self.lane_stepped) >= LANE_STEP_AFTER
            || self.raw.len() - self.lane_stepped > self.plan.lane_slack
    }

    /// In the fast lane, steps the DFA of every stage that steps one over the text received
    /// (with `end`, all of it): whether none has seen a match, nor given up.
    #[inline]
    pub(super) fn step_lane_dfas(&mut self, end: bool) -> bool {
        let clear = each_stage_at(
            &self.plan.lane_dfas,
            &self.plan,
            &mut self.stages,
            |stage, state| state.lane_step(stage, &self.raw, end),
        );
        self.lane_stepped = self.raw.len();
        clear
    }
}
