//! A quick test that text holds no match of a stage's DFA pattern, for patterns whose matches
//! all start with one of a few long enough literals (a `contains` list of words): four bytes
//! looked up every few bytes, rather than a DFA step on every byte.
//!
//! Every match starts with one of the pattern's prefixes of `prefix` bytes. Each byte is
//! folded (`| 0x20`, which maps an ASCII letter to its lowercase), and every run of four
//! bytes in a folded prefix is marked in a bit set. A prefix that lies wholly in a text holds
//! one of the runs that start every `prefix - 3` bytes, so when none of those is marked, no
//! match starts in the text at least `prefix` bytes before its end.

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, Hir, HirKind, Repetition};

/// Bytes in a run looked up.
const RUN: usize = 4;

/// The most bits the runs are hashed to: 8 KiB, which stays in the first-level cache.
const SLOT_BITS: u32 = 16;

/// Prefixes shorter than this leave the test too little to skip: it would look up nearly
/// every byte.
const SHORTEST_PREFIX: usize = RUN + 3;

/// Longer prefixes skip no more than this (12 bytes between two lookups).
const LONGEST_PREFIX: usize = RUN + 11;

/// More distinct runs than this would mark too much of the bit set for text to clear it.
const MOST_RUNS: usize = 2048;

/// A class of more characters than this stands for any byte (the extractor gives up on it).
const MOST_IN_CLASS: u32 = 10;

/// What every byte of the text and of the prefixes is folded with.
const FOLD: u8 = 0x20;

/// The test: see the [module](self) documentation.
pub(super) struct GramFilter {
    /// Bit `slot(run)` of every folded run of every prefix.
    marked: Box<[u64; 1 << (SLOT_BITS - 6)]>,
    /// The bytes of a match's prefix tested: every match is at least this long.
    prefix: usize,
}

impl std::fmt::Debug for GramFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GramFilter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl GramFilter {
    /// The test for `hir`, when every match starts with one of few enough literals of at least
    /// [`SHORTEST_PREFIX`] bytes.
    pub(super) fn new(hir: &Hir) -> Option<GramFilter> {
        let mut extractor = Extractor::new();
        extractor.kind(ExtractKind::Prefix);
        let mut prefixes = extractor.extract(&folded(hir));
        let prefix = prefixes.min_literal_len()?.min(LONGEST_PREFIX);
        if prefix < SHORTEST_PREFIX {
            return None;
        }
        prefixes.keep_first_bytes(prefix);
        prefixes.dedup();
        let mut runs: Vec<u32> = prefixes
            .literals()?
            .iter()
            .flat_map(|literal| literal.as_bytes().windows(RUN).filter_map(folded_run))
            .collect();
        runs.sort_unstable();
        runs.dedup();
        if runs.len() > MOST_RUNS {
            return None;
        }
        let mut marked = Box::new([0; 1 << (SLOT_BITS - 6)]);
        for run in runs {
            let slot = slot(run);
            marked[slot / 64] |= 1 << (slot % 64);
        }
        Some(GramFilter { marked, prefix })
    }

    /// Every match is at least this long; a match ending in text the test cleared starts
    /// before it, and so lies in it wholly.
    pub(super) fn prefix(&self) -> usize {
        self.prefix
    }

    /// Whether no match starts in `text` at least [`prefix`](Self::prefix) bytes before its
    /// end. (`false`: one may.)
    #[inline]
    pub(super) fn clear(&self, text: &[u8]) -> bool {
        let stride = self.prefix - RUN + 1;
        let mut at = 0;
        while let Some(run) = text.get(at..at + RUN).and_then(folded_run) {
            let slot = slot(run);
            if self.marked[slot / 64] & (1 << (slot % 64)) != 0 {
                return false;
            }
            at += stride;
        }
        true
    }
}

/// A run of four bytes, folded, as one number (`None` for fewer bytes).
#[inline(always)]
fn folded_run(bytes: &[u8]) -> Option<u32> {
    let run = <[u8; RUN]>::try_from(bytes).ok()?;
    Some(u32::from_ne_bytes(run) | u32::from_ne_bytes([FOLD; RUN]))
}

/// Where a folded run is marked.
#[inline(always)]
fn slot(run: u32) -> usize {
    (run.wrapping_mul(0x9e37_79b1) >> (32 - SLOT_BITS)) as usize
}

/// `hir` with every byte it matches folded: what matches a text also matches the text with
/// its bytes folded. A class too large to list stands for any byte.
fn folded(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Look(look) => Hir::look(*look),
        HirKind::Literal(literal) => {
            Hir::literal(literal.0.iter().map(|byte| byte | FOLD).collect::<Vec<_>>())
        }
        HirKind::Class(Class::Bytes(class)) => {
            let count: u32 = class
                .ranges()
                .iter()
                .map(|range| u32::from(range.end() - range.start()) + 1)
                .sum();
            if count > MOST_IN_CLASS {
                return any_byte();
            }
            let ranges = class
                .iter()
                .flat_map(|range| range.start()..=range.end())
                .map(|byte| ClassBytesRange::new(byte | FOLD, byte | FOLD));
            Hir::class(Class::Bytes(ClassBytes::new(ranges)))
        }
        HirKind::Class(Class::Unicode(class)) => {
            let count: u32 = class
                .ranges()
                .iter()
                .map(|range| u32::from(range.end()) - u32::from(range.start()) + 1)
                .sum();
            if count > MOST_IN_CLASS {
                return any_byte();
            }
            let mut encodings: Vec<Vec<u8>> = class
                .iter()
                .flat_map(|range| range.start()..=range.end())
                .map(|character| {
                    let mut buffer = [0; 4];
                    character
                        .encode_utf8(&mut buffer)
                        .bytes()
                        .map(|byte| byte | FOLD)
                        .collect()
                })
                .collect();
            encodings.sort_unstable();
            encodings.dedup();
            Hir::alternation(encodings.into_iter().map(Hir::literal).collect())
        }
        HirKind::Repetition(repetition) => Hir::repetition(Repetition {
            sub: Box::new(folded(&repetition.sub)),
            ..repetition.clone()
        }),
        HirKind::Capture(capture) => folded(&capture.sub),
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(folded).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(folded).collect()),
    }
}

/// A class of every byte.
fn any_byte() -> Hir {
    Hir::class(Class::Bytes(ClassBytes::new([ClassBytesRange::new(
        0, 0xff,
    )])))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn filter(pattern: &str) -> Option<GramFilter> {
        GramFilter::new(&regex_syntax::parse(pattern).unwrap())
    }

    #[test]
    fn a_list_of_words_is_tested_every_few_bytes_and_short_or_open_prefixes_are_not() {
        let words = filter("(?i:zorquavex|lumtrixbak|wire the funds)").unwrap();
        assert_eq!(words.prefix(), 9);
        // The SSN's first bytes are digits: a thousand prefixes of four bytes, too short.
        assert!(filter("[0-9]{3}-[0-9]{2}-[0-9]{4}").is_none());
        // `\w` is too large a class to list: no prefix.
        assert!(filter(r"\w+@example\.com").is_none());
        assert!(filter("(?i:ab|abcdefgh)").is_none());
    }

    #[test]
    fn text_holding_a_match_anywhere_is_never_cleared() {
        let pattern = "(?i:zorquavex|lumtrixbak|wire the funds|\\bgrif[0-9]{2}pol)";
        let filter = filter(pattern).unwrap();
        let regex = regex::Regex::new(pattern).unwrap();
        let prose = "The quarterly report shows steady growth across all regions. ";
        // A match of every kind (cases, the Kelvin sign, digits) at every offset of the text.
        for found in [
            "zorquavex",
            "ZorQuaVex",
            "LUMTRIXBA\u{212a}",
            "Wire The Funds",
            " grif42pol ",
            " GRIF07POL ",
        ] {
            for at in 0..prose.len() {
                let text = format!("{}{found}{}", &prose[..at], &prose[at..]);
                let found = regex.find(&text).unwrap();
                assert!(!filter.clear(text.as_bytes()), "{text:?}");
                // Cut just after the match, and so that the match's prefix is the text.
                assert!(!filter.clear(&text.as_bytes()[..found.end()]), "{text:?}");
                let prefix = &text.as_bytes()[found.start()..found.start() + filter.prefix()];
                assert!(!filter.clear(prefix), "{text:?}");
            }
        }
    }

    #[test]
    fn prose_is_cleared() {
        let prose = "Our team reviewed the proposal and agreed to move forward with the plan. \
                     Customers in the northern market asked for faster delivery and support.";
        let words = filter("(?i:zorquavex|lumtrixbak|nyxpolgrif)").unwrap();
        assert!(words.clear(prose.as_bytes()));
        assert!(!words.clear(b"we ZORQUAVEX"));
    }
}
