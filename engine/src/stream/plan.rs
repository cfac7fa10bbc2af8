//! The stream plan: how the guard runs a policy set's output policies, worked out once per
//! engine (the first time a stream is asked for).
//!
//! Each streaming rule becomes a [`Stage`]: its compiled regex, its window (the most text it
//! may hold back), and how it watches new text for a possible match (literals, or a lazy DFA).

use std::sync::Arc;

use regex::Regex;
use regex_automata::MatchKind;
use regex_automata::hybrid;
use regex_automata::util::prefilter::Prefilter;
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind};

use crate::pattern::{PATTERN_SIZE_LIMIT, compile_pattern};
use crate::set::PolicySet;
use crate::stream::report::StreamMode;
use crate::stream::rule::StreamingRule;

/// What the guard will do with a policy set's output policies, worked out when the set is
/// built.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub(super) mode: StreamMode,
    /// Bytes that arrive before the rules run again (incremental mode).
    pub(super) batch: usize,
    pub(super) stages: Vec<Stage>,
    /// Every stage watches for literals: text none of them occurs in can bypass the stages.
    pub(super) lane: bool,
    /// The literals of every stage, for the fast lane's quick test.
    pub(super) lane_filter: LiteralFilter,
    /// The windows of all stages together: what the pipeline holds back, and the fast lane
    /// too (a later stage may match around an earlier stage's replacement, so the lane cannot
    /// hold back less).
    pub(super) windows: usize,
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
    /// How the stage tells text that cannot hold a match from text that may.
    pub(super) watch: Watch,
}

/// What a stage runs over each new piece of text, so that the regex searches only where a match
/// may be.
#[derive(Debug, Clone)]
pub(super) enum Watch {
    /// Every match contains one of a few literals (`@` in an e-mail pattern, a prefix of each
    /// alternative of `foo|bar`): a SIMD literal search over the new text finds the places a
    /// match may be, and text far enough before the first of them is final.
    Literals {
        prefilter: Prefilter,
        /// The longest literal, in bytes: an occurrence may straddle two pushes.
        longest: usize,
        /// The quick test run before the prefilter on the few bytes of a push.
        filter: Arc<LiteralFilter>,
    },
    /// A lazy DFA stepped over each new byte. It gives up ("quits") on non-ASCII text when the
    /// pattern has a Unicode word boundary; the stage then searches its window on every push.
    Dfa(Arc<hybrid::dfa::DFA>),
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
        for (index, (entry, form)) in set.output.entries.iter().zip(forms).enumerate() {
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
        let lane = !stages.is_empty()
            && stages
                .iter()
                .all(|stage| matches!(stage.watch, Watch::Literals { .. }));
        let windows = stages.iter().map(|stage| stage.window).sum();
        let mut lane_filter = LiteralFilter::empty();
        for stage in &stages {
            if let Watch::Literals { filter, .. } = &stage.watch {
                lane_filter.merge(filter);
            }
        }
        StreamPlan {
            mode,
            batch,
            stages,
            lane,
            lane_filter,
            windows,
            whole_text_reasons: reasons,
        }
    }
}

impl Stage {
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
        let watch = match required_literals(&hir) {
            Some(watch) => watch,
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
                Watch::Dfa(Arc::new(dfa))
            }
        };
        Ok(Stage {
            policy_index,
            policy_id: policy_id.to_owned(),
            regex: Arc::new(regex),
            pattern: pattern.to_owned(),
            action,
            window: longest + lookahead + 3,
            watch,
        })
    }
}

/// Literals one of which every match of `hir` contains, when there are few enough of them for a
/// fast search: the prefixes of the whole pattern, or of one part of a concatenation (every
/// match of `a@b` contains a match of `@`). Of several candidates the one with the longest
/// shortest literal wins, then the one with fewer literals, then the one whose literals start
/// with a byte that is rare in prose.
pub(super) fn required_literals(hir: &Hir) -> Option<Watch> {
    /// More literals than this search no faster than the DFA steps.
    const MOST_LITERALS: usize = 32;
    let mut hir = hir;
    while let HirKind::Capture(capture) = hir.kind() {
        hir = &capture.sub;
    }
    let mut parts = vec![hir];
    if let HirKind::Concat(subs) = hir.kind() {
        parts.extend(subs.iter());
    }
    let mut extractor = Extractor::new();
    extractor.kind(ExtractKind::Prefix);
    let rarity = |literal: &[u8]| match literal.first() {
        Some(byte) if byte.is_ascii_alphanumeric() || b" .,;:'\"-\n\t".contains(byte) => 0,
        _ => 1,
    };
    let mut candidates = Vec::new();
    for part in parts {
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
        let rare = bytes.iter().map(|l| rarity(l)).min().unwrap_or(0);
        candidates.push(((shortest, std::cmp::Reverse(bytes.len()), rare), bytes));
    }
    candidates.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    let (prefilter, literals) = candidates.iter().find_map(|(_, literals)| {
        Prefilter::new(MatchKind::LeftmostFirst, literals)
            .filter(Prefilter::is_fast)
            .map(|prefilter| (prefilter, literals))
    })?;
    let mut filter = LiteralFilter::empty();
    filter.add(literals);
    Some(Watch::Literals {
        longest: prefilter.max_needle_len(),
        prefilter,
        filter: Arc::new(filter),
    })
}

/// A search for literals built for the few bytes a push adds, where a SIMD search costs more
/// to start than to run: one bit set of byte pairs, looked up once per byte. A pair is marked
/// when a literal starts with it, and every pair ending in a one-byte literal is marked too.
/// [`clear`](Self::clear) is conservative: `false` means a literal may occur (the prefilter
/// then decides), `true` that none does.
#[derive(Clone)]
pub(super) struct LiteralFilter {
    /// Bit `first * 256 + second`.
    pairs: Box<[u64; 1024]>,
    /// A one-byte literal: the first byte of a text is tested on its own.
    single: [bool; 256],
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
        }
    }

    /// Adds what `other` looks for.
    pub(super) fn merge(&mut self, other: &LiteralFilter) {
        for (mine, theirs) in self.single.iter_mut().zip(&other.single) {
            *mine |= *theirs;
        }
        for (mine, theirs) in self.pairs.iter_mut().zip(other.pairs.iter()) {
            *mine |= *theirs;
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
