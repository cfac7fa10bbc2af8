//! Stage scanning: the state one incremental stage keeps between pushes, and how it decides
//! which of the text it holds is final.

use regex_automata::hybrid::{self, LazyStateID, StartError};
use regex_automata::util::start;
use regex_automata::{Anchored, Span};

use crate::stream::plan::{DfaWatch, LiteralFilter, MatchFinder, Stage, StageAction};

/// One stream's scan of one incremental [`Stage`]: the text it has not passed on yet, and how
/// far its [`MatchFinder`] has got.
///
/// Positions are offsets in `buffer`. Text before `held_from` has been passed on; one
/// character of it stays as look-behind context. The buffer is compacted only once enough
/// passed text has piled up, so a push costs no move of the held text.
pub(super) struct StageScan {
    pub(super) buffer: String,
    /// Where the held text starts.
    pub(super) held_from: usize,
    /// Replacements made.
    pub(super) replacements: usize,
    /// Bytes at the end of what this stage received that the stage before passed on unchanged
    /// (since its last replacement).
    pub(super) unchanged: usize,
    /// Where the fast lane's search for this stage's literals goes on, in `raw`.
    pub(super) lane_scanned: usize,
    /// The text this stage receives in the run under way, the first after the fast lane,
    /// holds none of its literals: the lane's search of the answer up to its end found none
    /// of them (nor, for a denying stage, the filter of the pushes since), and no earlier
    /// stage's replacement can bring one ([`Stage::own_literals`]). The stage's first search
    /// in the run is then skipped.
    pub(super) lane_clear: bool,
    pub(super) progress: FinderProgress,
    /// Out of the fast lane, a denying stage that steps a DFA also scans the answer as
    /// received (`raw`) with it, from where a match not yet whole may begin: its own scan
    /// sees only the text the stages have taken (see [`hold_step`](Self::hold_step)).
    hold_scan: Option<Box<Scanner>>,
}

/// Passed text kept before the buffer is compacted.
pub(super) const COMPACT_AFTER: usize = 4096;

/// How far one stream's search with a stage's [`MatchFinder`] has got.
pub(super) enum FinderProgress {
    Literals {
        /// Where the next literal search starts.
        search_from: usize,
        /// Where the first literal in the held text starts: a match may contain it, and none
        /// can start more than the stage's `back` bytes before it.
        found: Option<usize>,
    },
    Dfa(Box<Scanner>),
    /// The DFA gave up: the stage searches its held text on every push.
    Blind,
}

/// The DFA's state over the text since the last reset point.
pub(super) struct Scanner {
    cache: hybrid::dfa::Cache,
    state: LazyStateID,
    /// Where the DFA has got to.
    scanned: usize,
    /// The DFA has seen a match since the last reset point.
    matched: bool,
}

/// Text a DFA steps over as several parts at once (see `Scanner::step_in_parts`) from this
/// many bytes.
pub(super) const IN_PARTS_FROM: usize = 64;

/// A deny stage found a match.
pub(super) struct Matched;

/// The state an unanchored scan of `dfa` starts from, after the byte `look_behind`.
fn unanchored_start(
    dfa: &hybrid::dfa::DFA,
    cache: &mut hybrid::dfa::Cache,
    look_behind: Option<u8>,
) -> Result<LazyStateID, StartError> {
    let config = start::Config::new()
        .anchored(Anchored::No)
        .look_behind(look_behind);
    dfa.start_state(cache, &config)
}

/// The first place a literal of at most `longest` bytes may begin in text that ends at `end`
/// and not lie wholly within it: a search of the text up to `end` cannot have seen one that
/// begins there or later, and the next text may complete it.
pub(super) fn unfinished_from(end: usize, longest: usize) -> usize {
    (end + 1).saturating_sub(longest)
}

impl StageScan {
    pub(super) fn new(stage: &Stage) -> Self {
        let mut state = StageScan {
            buffer: String::new(),
            held_from: 0,
            replacements: 0,
            unchanged: 0,
            lane_scanned: 0,
            lane_clear: false,
            progress: FinderProgress::Blind,
            hold_scan: None,
        };
        state.rewatch(stage);
        state
    }

    /// The stage has found a literal of its own in the text it holds.
    pub(super) fn holds_literal(&self) -> bool {
        matches!(
            self.progress,
            FinderProgress::Literals { found: Some(_), .. }
        )
    }

    #[inline]
    pub(super) fn held(&self) -> &str {
        &self.buffer[self.held_from..]
    }

    /// Starts watching again at `held_from`, over the held text; a DFA reuses the cache its
    /// last scan had, if any.
    pub(super) fn rewatch(&mut self, stage: &Stage) {
        self.progress = match &stage.finder {
            MatchFinder::Literals { .. } => FinderProgress::Literals {
                search_from: self.held_from,
                found: None,
            },
            MatchFinder::Dfa(dfa) => {
                let look_behind = self.buffer.as_bytes()[..self.held_from].last().copied();
                let cache = self.take_cache(dfa);
                Scanner::start(dfa, cache, look_behind, self.held_from)
            }
        };
        self.watch(stage, false);
    }

    /// The cache of the DFA scan under way (the progress is left blind), or one for a new
    /// scan.
    fn take_cache(&mut self, dfa: &DfaWatch) -> hybrid::dfa::Cache {
        match std::mem::replace(&mut self.progress, FinderProgress::Blind) {
            FinderProgress::Dfa(scanner) => scanner.cache,
            _ => dfa.take_cache(),
        }
    }

    /// In the fast lane, a stage that steps a DFA steps it over the answer as received
    /// (`raw`): its own buffer holds nothing there, and the text would reach it unchanged.
    /// Whether the DFA has seen no match and did not give up; with `end`, `raw` is complete.
    #[inline(always)]
    pub(super) fn lane_step(&mut self, stage: &Stage, raw: &str, end: bool) -> bool {
        match (&mut self.progress, &stage.finder) {
            (FinderProgress::Dfa(scanner), MatchFinder::Dfa(dfa)) => {
                if !end && scanner.step_short(&dfa.dfa, raw) {
                    return true;
                }
                if scanner.step(dfa, raw, end) {
                    return !scanner.matched;
                }
                // It gave up, and stays given up (see `lane_unmatched`).
                self.go_blind(dfa);
                false
            }
            _ => false,
        }
    }

    /// In the fast lane, whether this stage's DFA has seen no match as far as it got, and did
    /// not give up.
    pub(super) fn lane_unmatched(&self) -> bool {
        matches!(&self.progress, FinderProgress::Dfa(scanner) if !scanner.matched)
    }

    /// A stage that steps a DFA takes the fast lane at `at` in `raw`: its scan starts afresh
    /// there, with the byte before as look-behind. (No match can start before `at` that its
    /// scan up to now would not have seen: the text before `at` was released, and a stage
    /// releases text only once no match starting in it can be left.)
    pub(super) fn lane_watch_from(&mut self, stage: &Stage, raw: &str, at: usize) {
        if let MatchFinder::Dfa(dfa) = &stage.finder {
            let look_behind = raw.as_bytes()[..at].last().copied();
            let cache = self.take_cache(dfa);
            self.progress = Scanner::start(dfa, cache, look_behind, at);
        }
    }

    /// Out of the fast lane, a denying stage that steps a DFA starts a scan of `raw` a match
    /// ending after `at` may begin in (its longest match before it), for
    /// [`hold_step`](Self::hold_step). The scan reuses the cache of the last one.
    pub(super) fn hold_watch_from(&mut self, stage: &Stage, raw: &str, at: usize) {
        let MatchFinder::Dfa(dfa) = &stage.finder else {
            return;
        };
        let from = raw.floor_char_boundary(at.saturating_sub(stage.span));
        let look_behind = raw.as_bytes()[..from].last().copied();
        let cache = match self.hold_scan.take() {
            Some(scan) => scan.cache,
            None => dfa.take_cache(),
        };
        self.hold_scan = match Scanner::start(dfa, cache, look_behind, from) {
            FinderProgress::Dfa(scanner) => Some(scanner),
            _ => None,
        };
    }

    /// Steps the scan [`hold_watch_from`](Self::hold_watch_from) started over the bytes of
    /// `raw` it has not seen: whether it has seen no match, and did not give up (a match it
    /// sees may lie in text an earlier stage replaces; the stages decide). Without a scan,
    /// `false`.
    pub(super) fn hold_step(&mut self, stage: &Stage, raw: &str) -> bool {
        match (&mut self.hold_scan, &stage.finder) {
            (Some(scanner), MatchFinder::Dfa(dfa)) => {
                scanner.step(dfa, raw, false) && !scanner.matched
            }
            _ => false,
        }
    }

    /// Where the DFA scan under way has got to, if the stage steps one.
    #[cfg(test)]
    pub(super) fn dfa_scanned(&self) -> Option<usize> {
        match &self.progress {
            FinderProgress::Dfa(scanner) => Some(scanner.scanned),
            _ => None,
        }
    }

    /// Runs the watch over the text it has not seen; with `end`, the text is complete.
    pub(super) fn watch(&mut self, stage: &Stage, end: bool) {
        let len = self.buffer.len();
        match (&mut self.progress, &stage.finder) {
            (
                FinderProgress::Literals {
                    search_from,
                    found: found @ None,
                },
                MatchFinder::Literals {
                    prefilter,
                    longest,
                    filter,
                    ..
                },
            ) if *search_from < len => {
                let bytes = self.buffer.as_bytes();
                let unsearched = &bytes[*search_from..];
                // A SIMD search costs more to start than a push's few bytes cost to test
                // with the quick filter: a literal wholly in them has its first three bytes
                // (or all of its fewer) there, which the filter flags. (The filter tests
                // from the two bytes before them too, 16 positions at a time.)
                let literal = if std::mem::take(&mut self.lane_clear)
                    || (unsearched.len() < LiteralFilter::SHORT
                        && filter.clear_from(bytes, *search_from))
                {
                    None
                } else {
                    prefilter.find(bytes, Span::from(*search_from..len))
                };
                match literal {
                    // A longer literal may have begun before it and not be whole yet: the
                    // first literal starts no later than where one may straddle the end.
                    Some(literal) => {
                        *found = Some(literal.start.min(unfinished_from(len, *longest)));
                    }
                    // An occurrence may start in the last `longest - 1` bytes and end in the
                    // next push.
                    None => *search_from = unfinished_from(len, *longest).max(*search_from),
                }
            }
            (FinderProgress::Dfa(scanner), MatchFinder::Dfa(dfa)) => {
                let gave_up = !scanner.step(dfa, &self.buffer, end);
                // The stage then searches its held text on every push.
                if gave_up {
                    self.go_blind(dfa);
                }
            }
            _ => {}
        }
    }

    /// Passes on to `out` what is final of the held text; with `end`, everything is final.
    pub(super) fn advance(
        &mut self,
        stage: &Stage,
        end: bool,
        out: &mut Sink<'_>,
    ) -> Result<(), Matched> {
        self.watch(stage, end);
        let len = self.buffer.len();
        // Text before the horizon is final once no match starting in it is left to act on.
        let horizon = if end {
            len
        } else {
            self.buffer
                .floor_char_boundary(len.saturating_sub(stage.window).max(self.held_from))
        };
        let clean = match &self.progress {
            // Every match contains a literal, and none starts more than `back` bytes before
            // it: no match can start before the first literal in the held text (or, when
            // there is none, where one may still start) less `back`, and the text before that
            // is final, however far it reaches past the horizon.
            FinderProgress::Literals { search_from, found } if !end => {
                let earliest = found
                    .unwrap_or(*search_from)
                    .saturating_sub(stage.back)
                    .min(len);
                if earliest >= horizon {
                    let cut = self.buffer.floor_char_boundary(earliest).max(horizon);
                    self.pass(cut, out);
                    return Ok(());
                }
                // A literal turned up, and a match containing it may start before the
                // horizon: the regex decides.
                false
            }
            FinderProgress::Literals { found, .. } => found.is_none(),
            FinderProgress::Dfa(scanner) if !scanner.matched => true,
            // The DFA saw a complete match: the whole text holds it too.
            FinderProgress::Dfa(_) if stage.denies() => {
                return Err(Matched);
            }
            FinderProgress::Dfa(_) | FinderProgress::Blind => false,
        };
        if clean {
            self.pass(horizon, out);
            return Ok(());
        }
        // A stage watched for literals knows where the first literal at or after `position`
        // starts (`Some(None)`: none lies wholly in the text): no match starts more than the
        // stage's `back` before it, so the regex starts there, or not at all, and after the
        // last match the watch goes on from it rather than searching the text again.
        let (mut next_literal, literals) = match (&self.progress, &stage.finder) {
            (
                FinderProgress::Literals { found, .. },
                MatchFinder::Literals {
                    prefilter, longest, ..
                },
            ) => (Some(*found), Some((prefilter, *longest))),
            _ => (None, None),
        };
        let mut position = self.held_from;
        let replaced = self.replacements;
        loop {
            let from = match next_literal {
                Some(None) => break,
                Some(Some(literal)) => literal.saturating_sub(stage.back).max(position),
                None => position,
            };
            let Some(found) = stage.regex.find_at(&self.buffer, from) else {
                break;
            };
            if !end && found.start() + stage.span > len {
                break;
            }
            match &stage.action {
                StageAction::Deny { .. } => return Err(Matched),
                StageAction::Replace { replacement } => {
                    out.pass(&self.buffer[position..found.start()]);
                    out.replace(replacement);
                    self.replacements += 1;
                    position = found.end();
                }
            }
            if end && position >= len {
                next_literal = None;
                break;
            }
            next_literal = match literals {
                // After the first match: text with another match after it is dense with
                // them, and the regex's own search finds each as cheaply as this one would.
                Some((prefilter, longest)) if self.replacements == replaced + 1 => Some(
                    prefilter
                        .find(self.buffer.as_bytes(), Span::from(position..len))
                        // As in `watch`: a longer literal may have begun before the one found.
                        .map(|literal| literal.start.min(unfinished_from(len, longest))),
                ),
                _ => None,
            };
        }
        let cut = position.max(horizon);
        out.pass(&self.buffer[position..cut]);
        let before = self.buffer.len();
        self.cut_at(cut);
        // Bytes the compaction dropped from the front of the buffer.
        let dropped = before - self.buffer.len();
        if matches!(self.progress, FinderProgress::Blind)
            && matches!(stage.finder, MatchFinder::Dfa(_))
        {
            // The DFA gave up on this text; it stays given up.
            return Ok(());
        }
        match (next_literal, literals) {
            // No literal lies wholly in the text left held (it starts at or after `position`).
            (Some(None), Some((_, longest))) if !end => {
                let len = self.buffer.len();
                self.progress = FinderProgress::Literals {
                    search_from: unfinished_from(len, longest).max(self.held_from),
                    found: None,
                };
            }
            // The first literal in the text left held.
            (Some(Some(literal)), Some(_)) if !end && literal >= cut => {
                self.progress = FinderProgress::Literals {
                    search_from: self.held_from,
                    found: Some(literal - dropped),
                };
            }
            _ => self.rewatch(stage),
        }
        // The literal the regex has dealt with is behind: what the watch finds in the text
        // left held decides how much more of it is final, as at the start of the next run. A
        // stage that holds no more than it must lets the next pushes be kept without running
        // the stages, and the fast lane be taken again sooner.
        if let FinderProgress::Literals { search_from, found } = &self.progress
            && !end
        {
            let earliest = found
                .unwrap_or(*search_from)
                .saturating_sub(stage.back)
                .min(len);
            let cut = self.buffer.floor_char_boundary(earliest);
            if cut > self.held_from {
                self.pass(cut, out);
            }
        }
        Ok(())
    }

    /// Gives the DFA's cache back to the stage for the streams to come: the stream is over.
    pub(super) fn release(&mut self, stage: &Stage) {
        if let MatchFinder::Dfa(dfa) = &stage.finder {
            self.go_blind(dfa);
            if let Some(scanner) = self.hold_scan.take() {
                dfa.keep_cache(scanner.cache);
            }
        }
    }

    /// Leaves the stage blind, its DFA scan's cache (if any) kept for the streams to come:
    /// the DFA gave up, or the stream is over.
    fn go_blind(&mut self, dfa: &DfaWatch) {
        if let FinderProgress::Dfa(scanner) =
            std::mem::replace(&mut self.progress, FinderProgress::Blind)
        {
            dfa.keep_cache(scanner.cache);
        }
    }

    /// Passes the held text before `cut` on to `out`.
    pub(super) fn pass(&mut self, cut: usize, out: &mut Sink<'_>) {
        out.pass(&self.buffer[self.held_from..cut]);
        self.cut_at(cut);
    }

    /// Marks the text before `cut` as passed, keeping one character before it as look-behind
    /// context; compacts the buffer when enough passed text has piled up.
    pub(super) fn cut_at(&mut self, cut: usize) {
        self.held_from = cut;
        if cut < COMPACT_AFTER {
            return;
        }
        let keep_from = self.buffer[..cut]
            .char_indices()
            .next_back()
            .map_or(cut, |(at, _)| at);
        self.buffer.drain(..keep_from);
        self.held_from -= keep_from;
        match &mut self.progress {
            FinderProgress::Literals { search_from, found } => {
                *search_from = search_from.saturating_sub(keep_from);
                if let Some(literal) = found {
                    *literal = literal.saturating_sub(keep_from);
                }
            }
            FinderProgress::Dfa(scanner) => {
                scanner.scanned = scanner.scanned.saturating_sub(keep_from)
            }
            FinderProgress::Blind => {}
        }
    }
}

/// Where a stage passes its text on: the next stage's buffer, or the released text.
pub(super) struct Sink<'a> {
    pub(super) text: &'a mut String,
    /// The receiver's [`StageScan::unchanged`].
    pub(super) unchanged: &'a mut usize,
}

impl Sink<'_> {
    /// Passes `text` on as it came.
    pub(super) fn pass(&mut self, text: &str) {
        self.text.push_str(text);
        *self.unchanged = self.unchanged.saturating_add(text.len());
    }

    /// Passes a replacement on.
    fn replace(&mut self, replacement: &str) {
        self.text.push_str(replacement);
        *self.unchanged = 0;
    }
}

impl Scanner {
    /// A scan of text from `at`, after the byte `look_behind`: blind when the DFA cannot
    /// start there.
    fn start(
        dfa: &DfaWatch,
        mut cache: hybrid::dfa::Cache,
        look_behind: Option<u8>,
        at: usize,
    ) -> FinderProgress {
        match unanchored_start(&dfa.dfa, &mut cache, look_behind) {
            Ok(state) => FinderProgress::Dfa(Box::new(Scanner {
                cache,
                state,
                scanned: at,
                matched: false,
            })),
            Err(_) => {
                dfa.keep_cache(cache);
                FinderProgress::Blind
            }
        }
    }

    /// The DFA has seen a match since the scan started.
    pub(super) fn matched(&self) -> bool {
        self.matched
    }

    /// Steps the DFA over `text[scanned..]` as four parts at once (two for shorter text), when
    /// no step lands on a tagged state: the state after the text, or `None` (nothing changed;
    /// the text may hold a match, or a state to compute, and [`step`](Self::step) takes it
    /// byte by byte).
    ///
    /// Each step is a lookup that depends on the one before, so one scan waits on memory at
    /// every byte; independent scans wait together. The first part's scan goes on from the
    /// DFA's state; each later part's starts afresh, unanchored, the longest match and a byte
    /// before the part (the longest of ASCII text, when the text is ASCII), with the byte
    /// before as look-behind. A match is seen by the scan of the part holding the byte after
    /// it (the DFA sees a match one byte late): it starts within that scan, less than the
    /// longest match before the part. And every match still to come starts within the last
    /// part's scan, so its state at the end stands for the whole text as a single scan's
    /// would.
    fn step_in_parts(&mut self, watch: &DfaWatch, text: &str) -> Option<LazyStateID> {
        let bytes = text.as_bytes().get(self.scanned..)?;
        let overlap = watch.overlap(text, self.scanned);
        if bytes.len() / 4 >= overlap {
            self.step_parts::<4>(watch, text, overlap)
        } else if bytes.len() / 2 >= overlap {
            self.step_parts::<2>(watch, text, overlap)
        } else {
            None
        }
    }

    /// [`step_in_parts`](Self::step_in_parts) in `PARTS` parts, each later one scanned from
    /// `overlap` bytes before it.
    #[inline(always)]
    fn step_parts<const PARTS: usize>(
        &mut self,
        watch: &DfaWatch,
        text: &str,
        overlap: usize,
    ) -> Option<LazyStateID> {
        let dfa = &watch.dfa;
        let bytes = text.as_bytes().get(self.scanned..)?;
        let part = bytes.len() / PARTS;
        // Where each scan starts in `bytes`, and the state it starts from.
        let mut starts = [0; PARTS];
        let mut states = [self.state; PARTS];
        for index in 1..PARTS {
            let from = (index * part).checked_sub(overlap)?;
            let look_behind = match from.checked_sub(1) {
                Some(before) => bytes.get(before).copied(),
                None => self
                    .scanned
                    .checked_sub(1)
                    .and_then(|at| text.as_bytes().get(at).copied()),
            };
            starts[index] = from;
            states[index] = unanchored_start(dfa, &mut self.cache, look_behind).ok()?;
        }
        if states.iter().any(LazyStateID::is_tagged) {
            return None;
        }
        // Every scan steps over `part` bytes together; the later ones then over their
        // overlap, and the last over the bytes the parts leave at the end.
        let together = bytes.get(..starts[PARTS - 1] + part + overlap)?;
        for step in 0..part {
            let mut tagged = false;
            for (state, &from) in states.iter_mut().zip(&starts) {
                *state = dfa.next_state_untagged(&self.cache, *state, together[from + step]);
                tagged |= state.is_tagged();
            }
            if tagged {
                return None;
            }
        }
        for step in part..part + overlap {
            let mut tagged = false;
            for (state, &from) in states.iter_mut().zip(&starts).skip(1) {
                *state = dfa.next_state_untagged(&self.cache, *state, together[from + step]);
                tagged |= state.is_tagged();
            }
            if tagged {
                return None;
            }
        }
        let mut last = states[PARTS - 1];
        for &byte in bytes.get(together.len()..)? {
            last = dfa.next_state_untagged(&self.cache, last, byte);
            if last.is_tagged() {
                return None;
            }
        }
        Some(last)
    }

    /// Skips the text from `scanned` when the pattern's
    /// [`GramFilter`](crate::stream::grams::GramFilter) clears it: no match ends in it, and
    /// one that ends later starts in its last `prefix - 1` bytes or after them, where the
    /// scan then starts afresh, with the byte before as look-behind. Whether it did; when it
    /// did not (no filter, or one that may see a match), nothing changed.
    ///
    /// A match the scan has not seen ends at `scanned` or later (the DFA sees a match one
    /// byte late), so it starts at most the longest match before `scanned`: the filter tests
    /// the text from there.
    fn skip_cleared(&mut self, watch: &DfaWatch, text: &str) -> bool {
        let Some(grams) = &watch.grams else {
            return false;
        };
        let bytes = text.as_bytes();
        let from = self
            .scanned
            .saturating_sub(watch.overlap(text, self.scanned));
        if !bytes.get(from..).is_some_and(|unseen| grams.clear(unseen)) {
            return false;
        }
        let Some(restart) = bytes
            .len()
            .checked_sub(grams.prefix() - 1)
            .filter(|&restart| restart > self.scanned)
        else {
            return false;
        };
        let look_behind = bytes.get(restart - 1).copied();
        let Ok(state) = unanchored_start(&watch.dfa, &mut self.cache, look_behind) else {
            return false;
        };
        self.state = state;
        self.scanned = restart;
        true
    }

    /// [`step`](Self::step) over the few bytes of a push, in line, when every step lands on a
    /// state that is not tagged (no match, no quit, nothing to compute): whether it did. When
    /// it did not, nothing changed, and `step` takes the bytes from the start.
    #[inline(always)]
    fn step_short(&mut self, dfa: &hybrid::dfa::DFA, text: &str) -> bool {
        let Some(bytes) = text.as_bytes().get(self.scanned..) else {
            return false;
        };
        if bytes.len() > 16 || self.state.is_tagged() {
            return false;
        }
        let mut state = self.state;
        for &byte in bytes {
            state = dfa.next_state_untagged(&self.cache, state, byte);
            if state.is_tagged() {
                return false;
            }
        }
        self.state = state;
        self.scanned = text.len();
        true
    }

    /// Steps the DFA over `text[scanned..]`; `false` when it gives up.
    fn step(&mut self, watch: &DfaWatch, text: &str, end: bool) -> bool {
        if self.matched {
            return true;
        }
        let dfa = &watch.dfa;
        let mut state = self.state;
        let bytes = text.as_bytes().get(self.scanned..).unwrap_or_default();
        let mut at = 0;
        if bytes.len() >= IN_PARTS_FROM {
            if !end && self.skip_cleared(watch, text) {
                return true;
            }
            if let Some(last) = self.step_in_parts(watch, text) {
                state = last;
                at = bytes.len();
            }
        }
        while at < bytes.len() {
            // From a state that is not tagged, a step is one lookup, and the steps go on that
            // way until one lands on a tagged state: a match, a quit, the dead state, or one
            // not computed yet, which the checked step below computes.
            if !state.is_tagged() {
                // Four bytes a round (an array, whose loop the compiler unrolls), then the
                // rest, while every step lands on a state that is not tagged.
                let mut untagged = |byte: u8, at: &mut usize| {
                    let next = dfa.next_state_untagged(&self.cache, state, byte);
                    let taken = !next.is_tagged();
                    if taken {
                        state = next;
                        *at += 1;
                    }
                    taken
                };
                'rounds: while let Some(&round) = bytes
                    .get(at..at + 4)
                    .and_then(|r| <&[u8; 4]>::try_from(r).ok())
                {
                    for byte in round {
                        if !untagged(byte, &mut at) {
                            break 'rounds;
                        }
                    }
                }
                while let Some(&byte) = bytes.get(at) {
                    if !untagged(byte, &mut at) {
                        break;
                    }
                }
            }
            let Some(&byte) = bytes.get(at) else {
                break;
            };
            match dfa.next_state(&mut self.cache, state, byte) {
                Ok(next) => state = next,
                Err(_) => return false,
            }
            at += 1;
            if state.is_tagged() {
                if state.is_match() {
                    self.matched = true;
                    break;
                }
                if state.is_quit() {
                    return false;
                }
            }
        }
        self.scanned = text.len();
        if end && !self.matched {
            match dfa.next_eoi_state(&mut self.cache, state) {
                Ok(next) if next.is_match() => self.matched = true,
                Ok(next) if next.is_quit() => return false,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        self.state = state;
        true
    }
}
