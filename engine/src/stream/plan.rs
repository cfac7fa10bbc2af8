//! The stream plan: how the guard runs a policy set's output policies, worked out once per
//! engine (the first time a stream is asked for).
//!
//! Each streaming rule becomes a [`Stage`]: its compiled regex, its window (the most text it
//! may hold back), and how it watches new text for a possible match (literals, or a lazy DFA).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use regex::Regex;
use regex_automata::MatchKind;
use regex_automata::hybrid;
use regex_automata::util::prefilter::Prefilter;
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind};

use crate::pattern::{PATTERN_SIZE_LIMIT, compile_pattern};
use crate::set::PolicySet;
use crate::stream::grams::GramFilter;
use crate::stream::report::StreamMode;
use crate::stream::rule::StreamingRule;

/// The most room, in bytes, a stream makes ahead for the text it receives and for the text it
/// releases.
pub(super) const ROOM_MOST: usize = 256 * 1024;

/// What the guard will do with a policy set's output policies, worked out when the set is
/// built.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub(super) mode: StreamMode,
    /// Bytes that arrive before the rules run again (incremental mode).
    pub(super) batch: usize,
    pub(super) stages: Vec<Stage>,
    /// Every stage watches for literals or steps a DFA (see [`MatchFinder`]): text none of
    /// the literals occurs in, and in which no DFA has seen a match, can bypass the stages.
    /// Out of the fast lane, a push that brings no literal of a denying stage, and in which
    /// no denying stage's DFA sees a match, may then only keep its text (see
    /// `OutputStream::hold_push`).
    pub(super) lane: bool,
    /// The literals of every stage, for the fast lane's quick test.
    pub(super) lane_filter: LiteralFilter,
    /// The literals of the stages that deny, when any does: out of the fast lane, text that
    /// may hold one goes to the stages at once (see `OutputStream::hold_push`).
    pub(super) deny_filter: Option<LiteralFilter>,
    /// Replacing stages whose literals the fast lane looks for in one search.
    pub(super) lane_group: Option<LaneGroup>,
    /// The other stages watched for literals, by index and in order: the fast lane searches
    /// for each one's literals on its own.
    pub(super) lane_solo: Vec<usize>,
    /// The stages that step a DFA, by index: the fast lane steps each one's DFA over the text
    /// it receives (the text reaches every stage unchanged while the lane holds).
    pub(super) lane_dfas: Vec<usize>,
    /// The denying stages that step a DFA, by index: out of the fast lane, each steps a
    /// second scan over the answer as received, which sends a push that may complete a match
    /// to the stages at once (see `StageScan::hold_step`).
    pub(super) deny_dfas: Vec<usize>,
    /// The windows of all stages together: what the pipeline holds back, and the fast lane
    /// too (a later stage may match around an earlier stage's replacement, so the lane cannot
    /// hold back less).
    pub(super) windows: usize,
    /// The longest literal any stage watches for, in bytes (0 when none does).
    pub(super) longest_literal: usize,
    /// The most bytes before the first literal in a text that a match of any stage can
    /// start: the stages' `back`, added up. A stage's match starts at most its `back` before
    /// a literal of its own, and that literal is either in the text or in the replacement of
    /// an earlier stage's match, which starts no earlier than that match.
    pub(super) reach: usize,
    /// The most received bytes the fast lane may leave to its quick filter for later: a
    /// literal in them could only make a match that starts where the lane does not release
    /// yet (the windows, less the reach and the two bytes a literal may start before the
    /// tested text).
    pub(super) lane_slack: usize,
    /// The bytes the last stream on this plan received, up to [`ROOM_MOST`]: a stream starts
    /// with room for as much text, so that a long answer is not copied again and again as
    /// the guard's records of it grow.
    pub(super) room: Arc<AtomicUsize>,
    pub(super) whole_text_reasons: Vec<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Stage {
    pub(super) policy_index: usize,
    pub(super) policy_id: String,
    pub(super) regex: Arc<Regex>,
    pub(super) pattern: String,
    pub(super) action: StageAction,
    /// Bytes this stage may hold back: longest match, look-ahead, and a partial character.
    pub(super) window: usize,
    /// The longest match and the look-ahead it needs: a match starting at least this far
    /// before the end of the text received is final (no more text can change it, nor bring a
    /// match starting before it).
    pub(super) span: usize,
    /// The most bytes a match can start before the first byte of the literal the stage
    /// watches for (the longest match when it watches with a DFA).
    pub(super) back: usize,
    /// How the stage tells text that cannot hold a match from text that may.
    pub(super) finder: MatchFinder,
    /// The stage watches for literals, and no replacement of an earlier stage holds one of
    /// them or makes one with the text around it: every literal in the text this stage
    /// receives is one the answer itself holds there. So when the fast lane has just
    /// searched the answer for them and found none, the stage need not search again (see
    /// `StageScan::lane_clear`).
    pub(super) own_literals: bool,
    /// The pattern has look-around assertions (a word boundary): what it matches at the start
    /// of a text depends on the character before it.
    pub(super) looks_around: bool,
}

/// What a stage runs over each new piece of text, so that the regex searches only where a match
/// may be.
#[derive(Debug, Clone)]
pub(super) enum MatchFinder {
    /// Every match contains one of a few literals (`@` in an e-mail pattern, a prefix of each
    /// alternative of `foo|bar`): a SIMD literal search over the new text finds the places a
    /// match may be, and text far enough before the first of them is final.
    Literals {
        prefilter: Prefilter,
        /// The literals the prefilter looks for.
        literals: Vec<Vec<u8>>,
        /// The most bytes a match can start before the literal found in it (none when the
        /// pattern does not bound them; the longest match bounds them then).
        back: Option<usize>,
        /// The longest literal, in bytes: an occurrence may straddle two pushes.
        longest: usize,
        /// The quick test run before the prefilter on the few bytes of a push.
        filter: Arc<LiteralFilter>,
    },
    /// A lazy DFA stepped over each new byte. It gives up ("quits") on non-ASCII text when the
    /// pattern has a Unicode word boundary; the stage then searches its window on every push.
    Dfa(Arc<DfaWatch>),
}

/// Caches kept for the streams to come, per DFA: as many as streams usually run at once.
const KEPT_CACHES: usize = 4;

/// A stage's lazy DFA, and the caches of the streams that ended: the states a DFA builds as it
/// steps (for a list of a hundred words, more work than the whole-text search of an answer)
/// then serve the next streams rather than being built again for each.
#[derive(Debug)]
pub(super) struct DfaWatch {
    pub(super) dfa: hybrid::dfa::DFA,
    /// The longest match, in bytes: a match that ends after a point starts less than this
    /// before it (see `Scanner::step`, which scans long text as several parts at once).
    pub(super) longest: usize,
    /// The longest match of ASCII text alone, in bytes: shorter when a character the pattern
    /// matches has a longer form outside ASCII (Unicode case folding makes `k` match the
    /// three bytes of the Kelvin sign).
    pub(super) longest_ascii: usize,
    /// A quick test that text holds no match, when every match starts with one of a few
    /// long enough literals: the scan then skips the text it clears.
    pub(super) grams: Option<GramFilter>,
    caches: Mutex<Vec<hybrid::dfa::Cache>>,
}

impl DfaWatch {
    fn new(
        dfa: hybrid::dfa::DFA,
        (longest, longest_ascii): (usize, usize),
        grams: Option<GramFilter>,
    ) -> Self {
        DfaWatch {
            dfa,
            longest,
            longest_ascii: longest_ascii.min(longest),
            grams,
            caches: Mutex::new(Vec::new()),
        }
    }

    /// How far before each part of `text[from..]` the scan of that part starts, when the DFA
    /// steps it in parts (see `Scanner::step`): the longest match and a byte. A match that
    /// ends in the text starts at most the longest match before it: when those bytes and the
    /// text are ASCII, so is the match, and the longest match of ASCII text serves.
    pub(super) fn overlap(&self, text: &str, from: usize) -> usize {
        let ascii = text
            .as_bytes()
            .get(from.saturating_sub(self.longest)..)
            .is_some_and(<[u8]>::is_ascii);
        1 + if ascii {
            self.longest_ascii
        } else {
            self.longest
        }
    }

    /// A cache holding the states earlier streams built, or a new one.
    pub(super) fn take_cache(&self) -> hybrid::dfa::Cache {
        self.caches
            .lock()
            .ok()
            .and_then(|mut caches| caches.pop())
            .unwrap_or_else(|| self.dfa.create_cache())
    }

    /// How many caches wait for the next streams.
    #[cfg(test)]
    pub(super) fn kept_caches(&self) -> usize {
        self.caches.lock().map_or(0, |caches| caches.len())
    }

    /// Keeps `cache` for a later stream (up to [`KEPT_CACHES`]).
    pub(super) fn keep_cache(&self, cache: hybrid::dfa::Cache) {
        if let Ok(mut caches) = self.caches.lock()
            && caches.len() < KEPT_CACHES
        {
            caches.push(cache);
        }
    }
}

/// Replacing stages watched for one-byte literals, two or three bytes in all (the `-` of an
/// SSN, the `@` of an e-mail address): the fast lane finds the first of them with one
/// `memchr2` or `memchr3` instead of a search per stage. Of a replacing stage's literals only
/// the first one in the text matters, so the first of all of them is all the lane needs.
#[derive(Debug, Clone)]
pub(super) struct LaneGroup {
    pub(super) prefilter: Prefilter,
    /// The stages, by index.
    pub(super) stages: Vec<usize>,
}

impl LaneGroup {
    /// The group of `stages`, when there are two or more such stages.
    fn of(stages: &[Stage]) -> Option<LaneGroup> {
        let mut members = Vec::new();
        let mut bytes: Vec<Vec<u8>> = Vec::new();
        for (index, stage) in stages.iter().enumerate() {
            if let (StageAction::Replace { .. }, MatchFinder::Literals { literals, .. }) =
                (&stage.action, &stage.finder)
                && literals.iter().all(|literal| literal.len() == 1)
            {
                members.push(index);
                for literal in literals {
                    if !bytes.contains(literal) {
                        bytes.push(literal.clone());
                    }
                }
            }
        }
        if members.len() < 2 || bytes.len() > 3 {
            return None;
        }
        let prefilter = Prefilter::new(MatchKind::LeftmostFirst, &bytes)?;
        Some(LaneGroup {
            prefilter,
            stages: members,
        })
    }

    /// Whether the stage at `index` is one of the group.
    #[inline]
    pub(super) fn has(&self, index: usize) -> bool {
        self.stages.contains(&index)
    }
}

#[derive(Debug, Clone)]
pub(super) enum StageAction {
    Deny { reason: Option<String> },
    Replace { replacement: String },
}

impl StreamPlan {
    /// The mode.
    pub fn mode(&self) -> StreamMode {
        self.mode
    }

    /// The most text, in bytes, the incremental mode holds back (0 in the other modes, which
    /// hold back everything or everything since the last checkpoint).
    pub fn hold_back(&self) -> usize {
        if self.mode != StreamMode::Incremental {
            return 0;
        }
        self.batch + self.windows
    }

    /// Why the set cannot stream incrementally, one line per enforced output policy that
    /// cannot (empty in incremental mode).
    pub fn whole_text_reasons(&self) -> &[String] {
        &self.whole_text_reasons
    }

    /// Works out how the guard runs `set`'s output policies, compiling their streaming rules.
    pub(crate) fn build(set: &PolicySet) -> StreamPlan {
        let (checkpoint, batch) = (set.stream_checkpoint, set.stream_batch);
        let mut stages = Vec::new();
        let mut reasons = Vec::new();
        let forms = &set.output_streaming;
        for (index, (entry, form)) in set.output().entries.iter().zip(forms).enumerate() {
            if entry.monitor {
                continue;
            }
            let id = entry.policy.id();
            match form {
                None => reasons.push(format!("`{id}` has no streaming form")),
                Some(rules) => match rules
                    .iter()
                    .map(|rule| Stage::compile(index, id, rule))
                    .collect::<Result<Vec<_>, String>>()
                {
                    Ok(compiled) => stages.extend(compiled),
                    Err(problem) => reasons.push(format!("`{id}` cannot stream: {problem}")),
                },
            }
        }
        let mode = if reasons.is_empty() {
            StreamMode::Incremental
        } else {
            stages.clear();
            match checkpoint {
                Some(every) => StreamMode::Checkpoint {
                    every: every.max(1),
                },
                None => StreamMode::Buffer,
            }
        };
        for index in 0..stages.len() {
            let (earlier, rest) = stages.split_at_mut(index);
            if let Some(stage) = rest.first_mut() {
                stage.own_literals = own_literals(stage, earlier);
            }
        }
        // Every stage has a finder: the lane serves whenever there is a stage.
        let lane = !stages.is_empty();
        let deny_dfas = (0..stages.len())
            .filter(|&index| {
                stages.get(index).is_some_and(|stage| {
                    matches!(
                        (&stage.action, &stage.finder),
                        (StageAction::Deny { .. }, MatchFinder::Dfa(_))
                    )
                })
            })
            .collect();
        let windows = stages.iter().map(|stage| stage.window).sum();
        let reach = stages.iter().map(|stage| stage.back).sum();
        let mut lane_filter = LiteralFilter::empty();
        let mut deny_filter: Option<LiteralFilter> = None;
        let mut longest_literal = 0;
        for stage in &stages {
            if let MatchFinder::Literals {
                filter, longest, ..
            } = &stage.finder
            {
                lane_filter.merge(filter);
                longest_literal = longest_literal.max(*longest);
                if stage.denies() {
                    deny_filter
                        .get_or_insert_with(LiteralFilter::empty)
                        .merge(filter);
                }
            }
        }
        let lane_group = LaneGroup::of(&stages);
        let watched_by_dfa = |index: &usize| {
            stages
                .get(*index)
                .is_some_and(|stage| matches!(stage.finder, MatchFinder::Dfa(_)))
        };
        let lane_solo = (0..stages.len())
            .filter(|index| !watched_by_dfa(index))
            .filter(|&index| lane_group.as_ref().is_none_or(|group| !group.has(index)))
            .collect();
        let lane_dfas = (0..stages.len()).filter(watched_by_dfa).collect();
        StreamPlan {
            mode,
            batch,
            stages,
            lane,
            lane_group,
            lane_solo,
            lane_dfas,
            deny_dfas,
            lane_filter,
            deny_filter,
            windows,
            longest_literal,
            reach,
            lane_slack: windows.saturating_sub(reach + 2),
            room: Arc::new(AtomicUsize::new(0)),
            whole_text_reasons: reasons,
        }
    }
}

impl Stage {
    /// The stage denies the answer at a match (rather than replacing it).
    pub(super) fn denies(&self) -> bool {
        matches!(self.action, StageAction::Deny { .. })
    }

    fn compile(
        policy_index: usize,
        policy_id: &str,
        rule: &StreamingRule,
    ) -> Result<Stage, String> {
        let pattern = rule.pattern();
        let regex = compile_pattern(pattern)?;
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .map_err(|error| format!("invalid pattern {pattern:?}: {error}"))?;
        let properties = hir.properties();
        if properties.minimum_len() == Some(0) {
            return Err(format!("the pattern {pattern:?} can match empty text"));
        }
        let longest = match (properties.maximum_len(), rule.stated_max()) {
            (_, Some(stated)) => stated,
            (Some(bound), None) => bound,
            (None, None) => {
                return Err(format!(
                    "the pattern {pattern:?} has no upper bound on its match length; state a maximum"
                ));
            }
        };
        // One more character of look-ahead for boundary assertions, and up to three bytes to
        // stop at a character boundary.
        let lookahead = if properties.look_set().is_empty() {
            0
        } else {
            4
        };
        let action = match rule {
            StreamingRule::DenyOnMatch { reason, .. } => StageAction::Deny {
                reason: reason.clone(),
            },
            StreamingRule::Replace { replacement, .. } => StageAction::Replace {
                replacement: replacement.clone(),
            },
        };
        let finder = match required_literals(&hir) {
            Some(finder) => finder,
            None => {
                let dfa = hybrid::dfa::DFA::builder()
                    .configure(
                        hybrid::dfa::DFA::config()
                            .match_kind(MatchKind::LeftmostFirst)
                            .unicode_word_boundary(true)
                            .cache_capacity(4 * PATTERN_SIZE_LIMIT),
                    )
                    .thompson(
                        regex_automata::nfa::thompson::Config::new()
                            .nfa_size_limit(Some(PATTERN_SIZE_LIMIT)),
                    )
                    .build(pattern)
                    .map_err(|error| format!("the pattern {pattern:?} cannot stream: {error}"))?;
                // A match of ASCII text alone is one of the pattern read with ASCII classes
                // and case folding; a pattern that cannot be read so (`\p{..}`) keeps
                // its longest match.
                let longest_ascii = regex_syntax::ParserBuilder::new()
                    .unicode(false)
                    .utf8(false)
                    .build()
                    .parse(pattern)
                    .ok()
                    .and_then(|ascii| ascii.properties().maximum_len())
                    .unwrap_or(longest);
                MatchFinder::Dfa(Arc::new(DfaWatch::new(
                    dfa,
                    (longest, longest_ascii),
                    GramFilter::new(&hir),
                )))
            }
        };
        let back = match &finder {
            MatchFinder::Literals {
                back: Some(back), ..
            } => (*back).min(longest),
            MatchFinder::Literals { back: None, .. } | MatchFinder::Dfa(_) => longest,
        };
        Ok(Stage {
            back,
            policy_index,
            policy_id: policy_id.to_owned(),
            regex: Arc::new(regex),
            pattern: pattern.to_owned(),
            action,
            window: longest + lookahead + 3,
            span: longest + lookahead,
            finder,
            own_literals: false,
            looks_around: !properties.look_set().is_empty(),
        })
    }
}

/// Whether every literal `stage` watches for in its text is one of the answer's own, whatever
/// the stages before it (`earlier`) replace: each replacement is text that none of the
/// literals can overlap, so no literal lies in one or across its edge. (An empty
/// replacement could join the text on either side into one.)
fn own_literals(stage: &Stage, earlier: &[Stage]) -> bool {
    let MatchFinder::Literals { literals, .. } = &stage.finder else {
        return false;
    };
    earlier.iter().all(|before| match &before.action {
        StageAction::Deny { .. } => true,
        StageAction::Replace { replacement } => {
            !replacement.is_empty()
                && literals
                    .iter()
                    .all(|literal| !overlaps(literal, replacement.as_bytes()))
        }
    })
}

/// Whether `literal` can lie over at least one byte of `text`, somewhere in a longer text
/// around it: at some offset, the bytes of the two that meet are equal.
fn overlaps(literal: &[u8], text: &[u8]) -> bool {
    // `literal` starts `shift` bytes before the end of `text`: from its first byte on the
    // last byte of `text` to its last byte on the first byte of `text`.
    (1..text.len() + literal.len()).any(|shift| {
        let start = text.len().saturating_sub(shift);
        let skipped = shift.saturating_sub(text.len());
        text.get(start..)
            .into_iter()
            .flatten()
            .zip(literal.iter().skip(skipped))
            .all(|(a, b)| a == b)
    })
}

/// Literals one of which every match of `hir` contains, when there are few enough of them for a
/// fast search: the prefixes of the whole pattern, or of one part of a concatenation (every
/// match of `a@b` contains a match of `@`). Of several candidates the one with the longest
/// shortest literal wins, then the one whose literals start with bytes that are rarer in
/// prose, all of them together (see [`prose_share`]: the ten digits of `[0-9]{4} [0-9]{4}`
/// rather than its one space), then the one with fewer literals.
pub(super) fn required_literals(hir: &Hir) -> Option<MatchFinder> {
    /// More literals than this search no faster than the DFA steps.
    const MOST_LITERALS: usize = 32;
    let mut hir = hir;
    while let HirKind::Capture(capture) = hir.kind() {
        hir = &capture.sub;
    }
    // Each part, with the most bytes a match can have before the part's own match (none
    // when the parts before it have no bound).
    let mut parts = vec![(hir, Some(0))];
    if let HirKind::Concat(subs) = hir.kind() {
        let mut before = Some(0);
        for sub in subs {
            parts.push((sub, before));
            before = before
                .zip(sub.properties().maximum_len())
                .map(|(before, most)| before + most);
        }
    }
    let mut extractor = Extractor::new();
    extractor.kind(ExtractKind::Prefix);
    let mut candidates = Vec::new();
    for (part, back) in parts {
        let seq = extractor.extract(part);
        if seq.literals().is_none_or(<[_]>::is_empty) {
            continue;
        }
        let shortest = seq.min_literal_len().unwrap_or(0);
        if shortest == 0 {
            continue;
        }
        // Case-insensitive text gives many literals: shorter prefixes of them are fewer, and
        // still one of them starts every match.
        let mut seq = seq.clone();
        let mut keep = shortest + 1;
        while seq.len().is_some_and(|count| count > MOST_LITERALS) && keep > 1 {
            keep -= 1;
            seq.keep_first_bytes(keep);
            seq.dedup();
        }
        let Some(literals) = seq.literals() else {
            continue;
        };
        if literals.len() > MOST_LITERALS {
            continue;
        }
        let bytes: Vec<Vec<u8>> = literals.iter().map(|l| l.as_bytes().to_vec()).collect();
        let shortest = bytes.iter().map(Vec::len).min().unwrap_or(0);
        let common: u32 = bytes
            .iter()
            .filter_map(|literal| literal.first())
            .map(|&byte| prose_share(byte))
            .sum();
        candidates.push((
            (
                shortest,
                std::cmp::Reverse(common),
                std::cmp::Reverse(bytes.len()),
            ),
            bytes,
            back,
        ));
    }
    candidates.sort_by_key(|(score, ..)| std::cmp::Reverse(*score));
    // A search the regex crate does not call fast (one that looks for one or two bytes of
    // several literals) still serves when the literals start with bytes prose seldom holds:
    // the quick filter clears a push's few bytes before it runs, and it runs only where one
    // may be.
    let (prefilter, literals, back) = candidates.into_iter().find_map(
        |((_, std::cmp::Reverse(common), _), literals, back)| {
            Prefilter::new(MatchKind::LeftmostFirst, &literals)
                .filter(|prefilter| prefilter.is_fast() || common <= RARE_IN_PROSE)
                .map(|prefilter| (prefilter, literals, back))
        },
    )?;
    let mut filter = LiteralFilter::empty();
    filter.add(&literals);
    Some(MatchFinder::Literals {
        literals,
        back,
        longest: prefilter.max_needle_len(),
        prefilter,
        filter: Arc::new(filter),
    })
}

/// The most bytes in ten thousand of prose ([`prose_share`]) that may start a literal of a
/// search the regex crate does not call fast, for a stage to watch with it.
const RARE_IN_PROSE: u32 = 100;

/// About how many of ten thousand bytes of English prose are `byte` (rounded up, so that no
/// byte counts as never seen): how often a literal starting with it would send the stream to
/// its slower search.
fn prose_share(byte: u8) -> u32 {
    match byte {
        b' ' => 1700,
        b'e' => 950,
        b't' => 700,
        b'a' | b'o' | b'i' | b'n' => 600,
        b's' | b'r' => 500,
        b'h' => 450,
        b'l' | b'd' => 320,
        b'c' | b'u' => 220,
        b'm' | b'f' => 190,
        b'p' | b'g' | b'w' | b'y' => 150,
        b'b' | b',' | b'.' => 100,
        b'v' | b'\n' => 80,
        b'k' => 60,
        b'T' | b'S' | b'A' | b'I' | b'C' | b'W' | b'O' | b'P' | b'M' | b'B' | b'H' => 25,
        b'x' | b'j' | b'q' | b'z' | b'\'' | b'"' => 15,
        byte if byte.is_ascii_uppercase() => 8,
        b'-' | b':' | b';' | b'(' | b')' | b'\t' => 6,
        byte if byte.is_ascii_digit() => 5,
        _ => 1,
    }
}

/// A search for literals built for the few bytes a push adds, where a SIMD search costs more
/// to start than to run: vector comparisons of a literal's first three bytes (see [`Lanes`]),
/// or one bit set of byte pairs, looked up once per byte. A pair is marked when a literal
/// starts with it, and every pair ending in a one-byte literal is marked too.
/// [`clear`](Self::clear) is conservative: `false` means a literal may occur (the prefilter
/// then decides), `true` that none does.
///
/// A test of the text from `new` on looks at what starts two bytes before it too: a
/// literal's first three bytes may have begun there, and only now be whole.
#[derive(Clone)]
pub(super) struct LiteralFilter {
    /// Bit `first * 256 + second`.
    pairs: Box<[u64; 1024]>,
    /// A one-byte literal: the first byte of a text is tested on its own.
    single: [bool; 256],
    /// The same test as a few comparisons of 16 bytes at once, when the literals start with
    /// few enough distinct bytes (see [`Lanes`]).
    lanes: Option<Lanes>,
    /// The one-byte tests and the tests of first bytes of longer literals the few slots
    /// hold (see [`clear_push`](Self::clear_push)).
    few: (usize, usize),
}

/// Calls `$call::<ES, EP>` on `$filter` with the fewest one-byte slots (none, one or all
/// four) and slots of first bytes (one, two or all four) that hold its tests: empty slots
/// cost as much as full ones.
macro_rules! on_fewest_slots {
    ($filter:expr, $call:ident($($argument:expr),*)) => {
        match $filter.few {
            (0, 0 | 1) => $filter.$call::<0, 1>($($argument),*),
            (0, 2) => $filter.$call::<0, 2>($($argument),*),
            (0, _) => $filter.$call::<0, 4>($($argument),*),
            (1, 0 | 1) => $filter.$call::<1, 1>($($argument),*),
            (1, 2) => $filter.$call::<1, 2>($($argument),*),
            (1, _) => $filter.$call::<1, 4>($($argument),*),
            (_, 0 | 1) => $filter.$call::<4, 1>($($argument),*),
            (_, 2) => $filter.$call::<4, 2>($($argument),*),
            (_, _) => $filter.$call::<4, 4>($($argument),*),
        }
    };
}

/// The literals' first bytes as comparisons the compiler turns into 16-byte vector
/// instructions: one byte equal to a one-byte literal, or three consecutive bytes equal to
/// the first three bytes of a longer one (the first equal to anything for a literal of two
/// bytes, the third when literals that start with the same two bytes go on with different
/// ones).
/// Prose holds the first two bytes of many a literal (`to` of `token-`); it holds the first
/// three far less often. An ASCII letter is compared with its case folded, so the case
/// variants of a literal (`Ev`, `eV`, ...) share one comparison; that can only flag more
/// text, never less.
#[derive(Clone)]
struct Lanes {
    /// Each one-byte literal: what to `|` the text's byte with, and what that must equal.
    singles: Vec<[Lane; 2]>,
    /// Each run of a literal's first bytes: the same for the first byte, then for the second
    /// and the third.
    pairs: Vec<[Lane; 6]>,
    /// The same tests in a fixed number of slots, the fewest that hold them.
    slots: Slots,
}

/// The tests of [`Lanes`] in fixed slots: a test of a window is then a straight run of a few
/// dozen vector instructions, without loops or branches.
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "the few slots every push tests stay in line, one pointer less to follow"
)]
enum Slots {
    Few(Tests<FEW_SINGLES, 4>),
    More(Box<Tests<8, 8>>),
}

/// The one-byte tests the few slots hold ([`Slots::Few`]).
const FEW_SINGLES: usize = 4;

/// `S` one-byte tests and `P` tests of a literal's first bytes; slots without a test never
/// match.
#[derive(Clone)]
struct Tests<const S: usize, const P: usize> {
    singles: [[Lane; 2]; S],
    pairs: [[Lane; 6]; P],
}

/// One byte 16 times over, aligned so that a comparison can read it straight from memory.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(align(16))]
struct Lane([u8; 16]);

/// A byte of a literal as one [`Lanes`] test compares it: the mask that folds the text's byte
/// to lowercase when the literal's byte is an ASCII letter, and the byte so folded.
fn lane_byte(byte: u8) -> [Lane; 2] {
    let (mask, byte) = if byte.is_ascii_alphabetic() {
        (0x20, byte | 0x20)
    } else {
        (0, byte)
    };
    [Lane([mask; 16]), Lane([byte; 16])]
}

/// The first 16 bytes of an 18-byte window and the 16 one byte on: where a literal's first
/// and second bytes are compared (its third, and a one-byte literal, in the last 16).
#[inline(always)]
fn leading(window: &[u8; 18]) -> Option<(&[u8; 16], &[u8; 16])> {
    Some((
        window.first_chunk::<16>()?,
        window.get(1..17)?.first_chunk::<16>()?,
    ))
}

/// A byte test that no byte passes: any byte `| 0xff` is 0xff, never 0.
const NEVER: [Lane; 2] = [Lane([0xff; 16]), Lane([0; 16])];

/// A byte test that every byte passes: any byte `| 0xff` is 0xff.
const ANY: [Lane; 2] = [Lane([0xff; 16]), Lane([0xff; 16])];

impl<const S: usize, const P: usize> Tests<S, P> {
    /// No tests in any slot.
    const EMPTY: Self = Tests {
        singles: [NEVER; S],
        pairs: [[NEVER[0], NEVER[1], NEVER[0], NEVER[1], ANY[0], ANY[1]]; P],
    };

    /// The tests in slots, when they fit.
    fn new(singles: &[[Lane; 2]], pairs: &[[Lane; 6]]) -> Option<Self> {
        if singles.len() > S || pairs.len() > P {
            return None;
        }
        let mut tests = Self::EMPTY;
        tests.singles[..singles.len()].copy_from_slice(singles);
        tests.pairs[..pairs.len()].copy_from_slice(pairs);
        Some(tests)
    }

    /// Whether no one-byte literal is in `third` and no literal's first bytes start in
    /// `first` (`second` is `first` one byte on, `third` two bytes).
    #[inline(always)]
    fn clear(&self, [first, second, third]: [&[u8; 16]; 3]) -> bool {
        clear_in(&self.singles, &self.pairs, [first, second, third])
    }

    /// [`clear`](Self::clear) on the first `ES` one-byte slots and the first `EP` pair slots
    /// alone (the others empty); on all of them when there are fewer.
    #[inline(always)]
    fn clear_first<const ES: usize, const EP: usize>(&self, window: [&[u8; 16]; 3]) -> bool {
        match (
            self.singles.first_chunk::<ES>(),
            self.pairs.first_chunk::<EP>(),
        ) {
            (Some(singles), Some(pairs)) => clear_in(singles, pairs, window),
            _ => self.clear(window),
        }
    }
}

/// Whether no one-byte literal of `singles` is in `third` and no run of `pairs` starts in
/// `first` (`second` is `first` one byte on, `third` two bytes). Written as loops over 16
/// lanes without branches, which the compiler unrolls into four vector instructions per
/// one-byte test and a dozen per run.
#[inline(always)]
fn clear_in<const S: usize, const P: usize>(
    singles: &[[Lane; 2]; S],
    pairs: &[[Lane; 6]; P],
    [first, second, third]: [&[u8; 16]; 3],
) -> bool {
    let mut hit = [false; 16];
    for [mask, byte] in singles {
        for lane in 0..16 {
            hit[lane] |= (third[lane] | mask.0[lane]) == byte.0[lane];
        }
    }
    for [a_mask, a, b_mask, b, c_mask, c] in pairs {
        for lane in 0..16 {
            hit[lane] |= ((first[lane] | a_mask.0[lane]) == a.0[lane])
                & ((second[lane] | b_mask.0[lane]) == b.0[lane])
                & ((third[lane] | c_mask.0[lane]) == c.0[lane]);
        }
    }
    // Folded like this, the lanes are read with one instruction.
    hit.iter().fold(0u8, |any, &lane| any | u8::from(lane)) == 0
}

impl Lanes {
    /// No tests yet.
    fn new() -> Lanes {
        Lanes {
            singles: Vec::new(),
            pairs: Vec::new(),
            slots: Slots::Few(Tests::EMPTY),
        }
    }

    /// Adds the test of a literal: of its one byte, or of its first three bytes. A literal of
    /// two bytes is tested as the last two of three, the first anything, so that every test
    /// is of bytes that end where a literal's first three (or fewer) end. Literals that
    /// start with the same two bytes share one test; when their third bytes differ, its third
    /// byte is anything.
    fn add(&mut self, literal: &[u8]) {
        let test = match *literal {
            [] => return,
            [byte] => {
                let test = lane_byte(byte);
                if !self.singles.contains(&test) {
                    self.singles.push(test);
                }
                return;
            }
            [first, second] => {
                let ([b_mask, b], [c_mask, c]) = (lane_byte(first), lane_byte(second));
                [ANY[0], ANY[1], b_mask, b, c_mask, c]
            }
            [first, second, third, ..] => {
                let ([a_mask, a], [b_mask, b]) = (lane_byte(first), lane_byte(second));
                let [c_mask, c] = lane_byte(third);
                [a_mask, a, b_mask, b, c_mask, c]
            }
        };
        if self.pairs.contains(&test) {
            return;
        }
        let widened = test[..2] != ANY
            && self
                .pairs
                .iter_mut()
                .find(|known| known[..4] == test[..4])
                .map(|known| (known[4], known[5]) = (ANY[0], ANY[1]))
                .is_some();
        if !widened {
            self.pairs.push(test);
        }
    }

    /// Makes one test of the one-byte tests of bytes that differ only in their low four bits
    /// (the ten digits, say): `byte | 0x0f` equal to theirs. The test then flags the other
    /// bytes of those sixteen too (`:` and `;` beside the digits), which only sends a little
    /// more text to the prefilters; it never clears a byte it tested before. Letters, whose
    /// tests fold their case, keep their own.
    fn coarsen(&mut self) {
        let block = |[mask, byte]: &[Lane; 2]| (mask.0[0] == 0).then_some(byte.0[0] | 0x0f);
        let mut coarse: Vec<[Lane; 2]> = Vec::new();
        for test in &self.singles {
            let shared = block(test).filter(|key| {
                self.singles
                    .iter()
                    .filter(|other| block(other) == Some(*key))
                    .count()
                    > 1
            });
            let test = match shared {
                Some(key) => [Lane([0x0f; 16]), Lane([key; 16])],
                None => *test,
            };
            if !coarse.contains(&test) {
                coarse.push(test);
            }
        }
        self.singles = coarse;
    }

    /// Adds what `other` tests for.
    fn merge(&mut self, other: &Lanes) {
        for test in &other.singles {
            if !self.singles.contains(test) {
                self.singles.push(*test);
            }
        }
        for test in &other.pairs {
            if !self.pairs.contains(test) {
                self.pairs.push(*test);
            }
        }
    }

    /// Puts the tests in slots; `None` when there are too many of them for the largest.
    /// One-byte tests beyond the few slots first share tests where they can: see
    /// [`coarsen`](Self::coarsen).
    fn slotted(mut self) -> Option<Lanes> {
        if self.singles.len() > FEW_SINGLES {
            self.coarsen();
        }
        self.slots = match Tests::new(&self.singles, &self.pairs) {
            Some(few) => Slots::Few(few),
            None => Slots::More(Box::new(Tests::new(&self.singles, &self.pairs)?)),
        };
        Some(self)
    }

    /// Whether `window` (18 bytes) holds no one-byte literal in its last 16 bytes and no run
    /// of a literal's first bytes starting in its first 16, with the vector test on `ES`
    /// one-byte slots and `EP` slots of first bytes of the few (see
    /// [`LiteralFilter::clear_push_exact`]).
    #[inline(always)]
    fn clear_window_exact<const ES: usize, const EP: usize>(&self, window: &[u8; 18]) -> bool {
        let (Some((first, second)), Some(third)) = (leading(window), window.last_chunk::<16>())
        else {
            return true;
        };
        match &self.slots {
            Slots::Few(tests) => tests.clear_first::<ES, EP>([first, second, third]),
            Slots::More(tests) => tests.clear([first, second, third]),
        }
    }
}

impl std::fmt::Debug for LiteralFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiteralFilter").finish_non_exhaustive()
    }
}

impl LiteralFilter {
    /// Text this long or longer goes straight to the prefilter.
    pub(super) const SHORT: usize = 64;

    pub(super) fn empty() -> Self {
        LiteralFilter {
            pairs: Box::new([0; 1024]),
            single: [false; 256],
            lanes: Some(Lanes::new()),
            few: (0, 0),
        }
    }

    fn mark(&mut self, first: u8, second: u8) {
        let pair = usize::from(first) << 8 | usize::from(second);
        self.pairs[pair >> 6] |= 1 << (pair & 63);
    }

    /// Adds `literals` (none of them empty) to what the filter looks for.
    pub(super) fn add(&mut self, literals: &[Vec<u8>]) {
        for literal in literals {
            match literal[..] {
                [byte] => {
                    self.single[usize::from(byte)] = true;
                    for first in 0..=u8::MAX {
                        self.mark(first, byte);
                    }
                }
                [first, second, ..] => self.mark(first, second),
                [] => {}
            }
            if let Some(lanes) = &mut self.lanes {
                lanes.add(literal);
            }
        }
        self.limit_lanes();
    }

    /// Puts the vector tests in slots, or gives them up when there are too many of them.
    fn limit_lanes(&mut self) {
        self.lanes = self.lanes.take().and_then(Lanes::slotted);
        self.few = self.few_tests().unwrap_or((0, 0));
    }

    /// Adds what `other` looks for.
    pub(super) fn merge(&mut self, other: &LiteralFilter) {
        for (mine, theirs) in self.single.iter_mut().zip(&other.single) {
            *mine |= *theirs;
        }
        for (mine, theirs) in self.pairs.iter_mut().zip(other.pairs.iter()) {
            *mine |= *theirs;
        }
        match (&mut self.lanes, &other.lanes) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine, None) => *mine = None,
            (None, Some(_)) => {}
        }
        self.limit_lanes();
    }

    /// The one-byte tests and the pair tests the vector test holds, when they fit the few
    /// slots: [`clear_push_exact`](Self::clear_push_exact) can run on exactly as many.
    pub(super) fn few_tests(&self) -> Option<(usize, usize)> {
        match &self.lanes {
            Some(Lanes {
                singles,
                pairs,
                slots: Slots::Few(_),
            }) => Some((singles.len(), pairs.len())),
            _ => None,
        }
    }

    /// [`clear_push`](Self::clear_push) whose vector test runs on `ES` one-byte slots and
    /// `EP` pair slots alone: exactly the tests the literals need (see
    /// [`few_tests`](Self::few_tests)), without the empty slots' work.
    #[inline(always)]
    pub(super) fn clear_push_exact<const ES: usize, const EP: usize>(
        &self,
        text: &[u8],
        new: usize,
        delta: &[u8],
    ) -> bool {
        let len = text.len();
        if let Some(Lanes {
            slots: Slots::Few(tests),
            ..
        }) = &self.lanes
            && new > 1
            && len - new <= 16
            && let Some(third) = delta.last_chunk::<16>()
            && let Some(&[before, after]) = len
                .checked_sub(18)
                .and_then(|at| text.get(at..at + 2))
                .and_then(|bytes| bytes.first_chunk::<2>())
        {
            // Built like this, the window's first 16 bytes and the next 16 are `third`
            // shifted by two bytes and by one in a register.
            let mut window = [before; 18];
            window[1] = after;
            window[2..].copy_from_slice(third);
            if let Some((first, second)) = leading(&window) {
                return tests.clear_first::<ES, EP>([first, second, third]);
            }
        }
        self.clear_from_exact::<ES, EP>(text, new)
    }

    /// [`clear_from`](Self::clear_from) after a push of `delta`, which ends `text`. The usual
    /// push, 16 new bytes, is tested in one window read from `delta` and the bytes before it:
    /// a window read from `text` would straddle the copies of this push and the last one
    /// into it, and a processor forwards a read from two recent writes slowly.
    ///
    /// The vector test runs on the fewest slots that hold the literals' tests (empty slots
    /// cost as much as full ones).
    #[inline(always)]
    pub(super) fn clear_push(&self, text: &[u8], new: usize, delta: &[u8]) -> bool {
        on_fewest_slots!(self, clear_push_exact(text, new, delta))
    }

    /// [`clear_16_exact`](Self::clear_16_exact) on the fewest slots, as
    /// [`clear_push`](Self::clear_push).
    #[inline(always)]
    pub(super) fn clear_16(&self, text: &[u8], from: usize) -> bool {
        on_fewest_slots!(self, clear_16_exact(text, from))
    }

    /// Whether no literal starts in the 16 bytes of `text` from `from`: a literal's first
    /// three bytes (two, for one of two), the first at `from - 2` or later, or a one-byte
    /// literal, in `text[from - 2..from + 16]` ([`clear_from`](Self::clear_from) of one
    /// window).
    /// The vector test runs on `ES` one-byte slots and `EP` pair slots (see
    /// [`clear_push_exact`](Self::clear_push_exact)).
    #[inline(always)]
    pub(super) fn clear_16_exact<const ES: usize, const EP: usize>(
        &self,
        text: &[u8],
        from: usize,
    ) -> bool {
        let window = from
            .checked_sub(2)
            .and_then(|start| text.get(start..))
            .and_then(<[u8]>::first_chunk::<18>);
        match (&self.lanes, window) {
            (Some(lanes), Some(window)) => lanes.clear_window_exact::<ES, EP>(window),
            _ => self.clear_from(text.get(..from + 16).unwrap_or(text), from),
        }
    }

    /// Whether no literal starts in `text` with a byte at `new` or later: no one-byte literal
    /// in `text[new..]`, and no longer literal whose third byte (second, for one of two)
    /// lies there (the text before `new` has been tested). `false` may be a false alarm (the
    /// prefilters then decide); `true` is certain.
    ///
    /// Fewer than [`SHORT`](Self::SHORT) new bytes, in a text of at least 18 bytes, are
    /// tested 16 bytes at a time; other text byte pair by byte pair (from two bytes before
    /// `new`: the pair test flags a literal's first two bytes alone).
    ///
    /// As [`clear_push`](Self::clear_push), the vector test runs on the fewest slots.
    #[inline(never)]
    pub(super) fn clear_from(&self, text: &[u8], new: usize) -> bool {
        on_fewest_slots!(self, clear_from_exact(text, new))
    }

    /// [`clear_from`](Self::clear_from) on `ES` one-byte slots and `EP` pair slots (see
    /// [`clear_push_exact`](Self::clear_push_exact)).
    #[inline(always)]
    pub(super) fn clear_from_exact<const ES: usize, const EP: usize>(
        &self,
        text: &[u8],
        new: usize,
    ) -> bool {
        let len = text.len();
        match &self.lanes {
            Some(lanes) if len >= 18 && len - new < Self::SHORT => {
                // A window of 18 bytes tests the runs of first bytes starting at its first 16
                // bytes and the one-byte literals at its last 16: the first window starts at
                // the last two tested bytes, the last one ends at the end of the text
                // (overlapping the one before). The text's first two bytes end no window's
                // run: when they are new, the byte pair test takes them.
                if new < 2 && !self.clear(text.get(..2).unwrap_or_default()) {
                    return false;
                }
                let mut at = new.saturating_sub(2);
                loop {
                    let start = at.min(len - 18);
                    let Some(window) = text[start..].first_chunk::<18>() else {
                        return true;
                    };
                    if !lanes.clear_window_exact::<ES, EP>(window) {
                        return false;
                    }
                    if start + 18 >= len {
                        return true;
                    }
                    at += 16;
                }
            }
            _ => self.clear(text.get(new.saturating_sub(2)..).unwrap_or_default()),
        }
    }

    /// Whether no literal occurs wholly within `text`.
    #[inline]
    pub(super) fn clear(&self, text: &[u8]) -> bool {
        let Some((&first, rest)) = text.split_first() else {
            return true;
        };
        // No early exit: a branch-free loop over a few bytes runs faster than one that can
        // stop.
        let mut marked = u64::from(self.single[usize::from(first)]);
        let mut previous = usize::from(first);
        for &byte in rest {
            let pair = previous << 8 | usize::from(byte);
            marked |= self.pairs[pair >> 6] >> (pair & 63);
            previous = usize::from(byte);
        }
        marked & 1 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether a literal starts in `text` with a byte at `new` or later (a one-byte literal
    /// at `new` or later, or the first three bytes of a longer one, the last at `new` or
    /// later): what [`LiteralFilter::clear_from`] must never call clear.
    fn starts_from(literals: &[Vec<u8>], text: &[u8], new: usize) -> bool {
        literals.iter().any(|literal| {
            let prefix = &literal[..literal.len().min(3)];
            (0..text.len()).any(|at| at + prefix.len() > new && text[at..].starts_with(prefix))
        })
    }

    /// [`LiteralFilter::clear_push_exact`] on `singles` one-byte slots and `pairs` pair slots.
    fn clear_push_on(
        filter: &LiteralFilter,
        singles: usize,
        pairs: usize,
        text: &[u8],
        new: usize,
        delta: &[u8],
    ) -> bool {
        macro_rules! on {
            ($($s:literal),*; $p:tt) => {
                match singles {
                    $($s => on!(@pairs $s; $p),)*
                    _ => unreachable!("{singles} one-byte tests"),
                }
            };
            (@pairs $s:literal; [$($p:literal),*]) => {
                match pairs {
                    $($p => filter.clear_push_exact::<$s, $p>(text, new, delta),)*
                    _ => unreachable!("{pairs} pair tests"),
                }
            };
        }
        on!(0, 1, 2, 3, 4; [0, 1, 2, 3, 4])
    }

    fn literal() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(b'a'),
                Just(b'A'),
                Just(b'z'),
                Just(b'@'),
                Just(b'`'),
                Just(b'-'),
                Just(b'\r'),
                Just(0xc3),
                Just(b'0'),
                Just(b'3'),
                Just(b'7'),
                Just(b'9'),
                Just(b';'),
            ],
            1..4,
        )
    }

    proptest! {
        #[test]
        fn the_quick_filter_never_clears_text_where_a_literal_starts(
            literals in proptest::collection::vec(
                prop_oneof![
                    2 => literal(),
                    // One-byte literals, often enough of them to share vector tests.
                    3 => proptest::sample::select(&b"03789;-@`"[..]).prop_map(|byte| vec![byte]),
                ],
                1..12,
            ),
            text in proptest::collection::vec(
                proptest::sample::select(&b"aZ@- \r\xc3`038:"[..]),
                0..80,
            ),
            new in 0usize..80,
            pushed in 0usize..24,
        ) {
            never_clears_a_start(&literals, &text, new, pushed)?;
        }
    }

    proptest! {
        // One-byte literals alone, enough of them to share vector tests (the ten digits), in
        // texts long enough for the vector test.
        #[test]
        fn the_quick_filter_never_clears_a_one_byte_literal(
            literals in proptest::collection::vec(
                proptest::sample::select(&b"0123456789;-@`"[..]).prop_map(|byte| vec![byte]),
                1..12,
            ),
            // Mostly bytes no literal starts with, so that a text often holds one literal
            // alone: the one the filter must flag.
            text in proptest::collection::vec(
                prop_oneof![
                    12 => proptest::sample::select(&b"aZ /"[..]),
                    1 => proptest::sample::select(&b"@-0123456789:;`"[..]),
                ],
                17..80,
            ),
            new in 1usize..80,
            pushed in 0usize..24,
        ) {
            never_clears_a_start(&literals, &text, new, pushed)?;
        }
    }

    /// The quick filter of `literals` clears no text where one of them starts at `new` or
    /// later ([`starts_from`]), tested from `new` and after a push of the text's last
    /// `pushed` bytes (at least the new ones), and gives the same answer on exactly as many
    /// slots as there are tests.
    fn never_clears_a_start(
        literals: &[Vec<u8>],
        text: &[u8],
        new: usize,
        pushed: usize,
    ) -> Result<(), TestCaseError> {
        let new = new.min(text.len());
        let mut filter = LiteralFilter::empty();
        filter.add(literals);
        if filter.clear_from(text, new) {
            prop_assert!(
                !starts_from(literals, text, new),
                "{literals:?} in {text:?} from {new}"
            );
        }
        let pushed = (text.len() - new).max(pushed).min(text.len());
        let delta = &text[text.len() - pushed..];
        let clear = filter.clear_push(text, new, delta);
        if clear {
            prop_assert!(
                !starts_from(literals, text, new),
                "{literals:?} in {text:?} from {new}, pushed {pushed}"
            );
        }
        if let Some((singles, pairs)) = filter.few_tests() {
            prop_assert_eq!(
                clear_push_on(&filter, singles, pairs, text, new, delta),
                clear
            );
        }
        Ok(())
    }

    /// The most bytes a match of `pattern` can start before the literal its stage watches for.
    fn back_of(pattern: &str) -> Option<usize> {
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .expect("a valid pattern");
        match required_literals(&hir) {
            Some(MatchFinder::Literals { back, .. }) => back,
            _ => panic!("{pattern} is not watched with literals"),
        }
    }

    #[test]
    fn a_match_starts_at_most_the_parts_before_its_literal_before_it() {
        // The `@` comes after at most 32 address characters.
        assert_eq!(
            back_of(r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}"),
            Some(32)
        );
        // The `-` after three digits (of up to four bytes each) and a boundary.
        assert_eq!(back_of(r"\b\d{3}-\d{2}-\d{4}\b"), Some(12));
        // Prefixes of the whole pattern start the match.
        assert_eq!(back_of(r"(?i:phishing\.example|evil\.invalid)"), Some(0));
        // Nothing bounds what comes before the `@`.
        assert_eq!(back_of(r"\w+@corp\.example"), None);
    }

    #[test]
    fn a_pair_begun_before_a_push_is_seen_with_it() {
        let mut filter = LiteralFilter::empty();
        filter.add(&[b"ev".to_vec(), b"@".to_vec()]);
        // `e` ends the last push, `v` starts this one.
        let text = [&[b'x'; 20][..], b"e", b"vxxxxxxxxxxxxxxx"].concat();
        let new = text.len() - 16;
        assert!(!filter.clear_push(&text, new, &text[new..]));
        assert!(!filter.clear_from(&text, new));
        let text = [&[b'x'; 20][..], b"x", b"vxxxxxxxxxxxxxxx"].concat();
        assert!(filter.clear_push(&text, new, &text[new..]));
    }

    #[test]
    fn a_literal_is_flagged_by_its_first_three_bytes_not_by_its_first_two() {
        let mut filter = LiteralFilter::empty();
        filter.add(&[
            b"token-".to_vec(),
            b"ev".to_vec(),
            b"ab1x".to_vec(),
            b"ab2x".to_vec(),
        ]);
        // One test each: `tok`, `ev` (as the last two of three bytes), and `ab` then anything.
        assert_eq!(filter.few_tests(), Some((0, 3)));
        let text = |tail: &[u8]| [&[b'x'; 20][..], tail].concat();
        for flagged in [&b"TOKen"[..], b"tok", b" ev", b"ev", b"ab1", b"ab7"] {
            assert!(!filter.clear_from(&text(flagged), 20), "{flagged:?}");
        }
        // Prose holds `to` (of `token-`) often: the vector test clears it, the byte pair test
        // of text shorter than its window does not.
        for clear in [&b"to see"[..], b"customers", b"e v", b"a b1"] {
            assert!(filter.clear_from(&text(clear), 20), "{clear:?}");
        }
        assert!(!filter.clear_from(b"to", 0));
        // `to` ends the last push, `k` starts this one (of 16 bytes, and of more).
        for after in [15, 20] {
            let text = [&[b'x'; 20][..], b"to", b"k", &vec![b'x'; after]].concat();
            let new = 22;
            assert!(!filter.clear_push(&text, new, &text[new..]));
            assert!(!filter.clear_from(&text, new));
        }
    }

    #[test]
    fn the_quick_filter_folds_only_letters() {
        let mut filter = LiteralFilter::empty();
        filter.add(&[b"@".to_vec(), b"Ev".to_vec(), b"-".to_vec()]);
        let text = |tail: &[u8]| [&[b'x'; 20][..], tail].concat();
        // Case variants of a letter pair are flagged; `` ` `` is not `@`, nor `\r` `-`.
        for flagged in [&b"eV"[..], b"EV", b"ev", b"@", b"-"] {
            assert!(!filter.clear_from(&text(flagged), 20), "{flagged:?}");
        }
        for clear in [&b"`"[..], b"\r", b"e", b"v", b"Ex"] {
            assert!(filter.clear_from(&text(clear), 20), "{clear:?}");
        }
    }

    #[test]
    fn the_ten_digits_share_one_vector_test() {
        let mut filter = LiteralFilter::empty();
        let mut literals: Vec<Vec<u8>> = (b'0'..=b'9').map(|digit| vec![digit]).collect();
        literals.push(b"-".to_vec());
        filter.add(&literals);
        // One test for the digits, one for the `-`: the few slots hold them.
        assert_eq!(filter.few_tests(), Some((2, 0)));
        let text = |tail: &[u8]| [&[b'x'; 20][..], tail].concat();
        // Every digit is flagged, and `:` beside them too; `/`, `.` and letters are not.
        for flagged in [&b"0"[..], b"5", b"9", b"-", b":"] {
            assert!(!filter.clear_from(&text(flagged), 20), "{flagged:?}");
        }
        for clear in [&b"/"[..], b".", b"a", b" "] {
            assert!(filter.clear_from(&text(clear), 20), "{clear:?}");
        }
    }

    /// Whether `literal` can lie over part of `text`, written out case by case: it holds
    /// `text`, `text` holds it, or it runs over one edge of `text`.
    fn overlaps_by_cases(literal: &[u8], text: &[u8]) -> bool {
        let holds = |outer: &[u8], inner: &[u8]| outer.windows(inner.len()).any(|w| w == inner);
        let shared = literal.len().min(text.len());
        holds(literal, text)
            || holds(text, literal)
            || (1..shared).any(|k| {
                text.ends_with(&literal[..k]) || text.starts_with(&literal[literal.len() - k..])
            })
    }

    proptest! {
        #[test]
        fn a_literal_overlaps_text_when_it_holds_it_is_held_or_runs_over_an_edge(
            literal in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'[')], 1..6),
            text in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b']')], 1..8),
        ) {
            prop_assert_eq!(overlaps(&literal, &text), overlaps_by_cases(&literal, &text));
        }
    }

    #[test]
    fn a_literal_overlaps_a_replacement_that_holds_part_of_it() {
        for (literal, replacement) in [
            ("evil.invalid", "x-ev"),
            ("evil.invalid", "lid]"),
            ("@", "id@ssn.org"),
            ("example", "[example]"),
            ("ab", "b"),
        ] {
            assert!(
                overlaps(literal.as_bytes(), replacement.as_bytes()),
                "{literal} over {replacement}"
            );
        }
        for (literal, replacement) in [("evil.invalid", "[EMAIL]"), ("-", "[SSN]"), ("ab", "c")] {
            assert!(
                !overlaps(literal.as_bytes(), replacement.as_bytes()),
                "{literal} over {replacement}"
            );
        }
    }

    /// Whether each of `rules`, compiled into stages in order, sees only the answer's own
    /// literals.
    fn own_literals_of(rules: &[StreamingRule]) -> Vec<bool> {
        let stages: Vec<Stage> = rules
            .iter()
            .map(|rule| Stage::compile(0, "rules", rule).expect("a streaming rule"))
            .collect();
        (0..stages.len())
            .map(|index| own_literals(&stages[index], &stages[..index]))
            .collect()
    }

    #[test]
    fn a_stage_sees_only_the_answers_literals_when_no_earlier_replacement_can_make_one() {
        let replace = |pattern: &str, replacement: &str| StreamingRule::Replace {
            pattern: pattern.into(),
            replacement: replacement.into(),
            max_match_len: None,
        };
        let domains = StreamingRule::deny_on_any(&["evil.invalid"], None);
        let email = r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}";
        let ssn = r"\b\d{3}-\d{2}-\d{4}\b";
        assert_eq!(
            own_literals_of(&[
                replace(ssn, "[SSN]"),
                replace(email, "[EMAIL]"),
                domains.clone()
            ]),
            [true, true, true]
        );
        // The SSN's replacement holds the e-mail stage's `@`.
        assert_eq!(
            own_literals_of(&[replace(ssn, "id@ssn.org"), replace(email, "[EMAIL]")]),
            [true, false]
        );
        // The replacement ends with the start of the blocked domain.
        assert_eq!(
            own_literals_of(&[replace(ssn, "x-ev"), domains.clone()]),
            [true, false]
        );
        // Nothing between the text before a match and the text after it.
        assert_eq!(own_literals_of(&[replace(ssn, ""), domains]), [true, false]);
    }
}
