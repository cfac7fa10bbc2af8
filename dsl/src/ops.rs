//! The condition operators and template rendering, shared by the runtime policies and the
//! code that `dsl_policy!` generates (through [`crate::__private`]), so both decide alike.

use std::collections::HashSet;

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::{Number, Value};

use crate::select::{Node, Root, Walk, any, select};
use portcullis_engine::path::Segment;

/// The needles of a `contains` condition, lower-cased, in a multi-pattern matcher.
///
/// A text matches when its lower-cased form (`str::to_lowercase`, Unicode-aware) contains one
/// of the needles. ASCII texts are lower-cased into a buffer on the stack (texts over 4 KiB
/// piece by piece, never copied whole) in one pass that also checks that they are ASCII,
/// without the full Unicode tables; other texts are lower-cased with `str::to_lowercase`.
#[derive(Debug, Clone)]
pub struct Needles {
    matcher: Matcher,
    /// The length in bytes of the longest needle.
    longest: usize,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// A SIMD multi-substring searcher (Teddy), where the CPU has it: many times faster than
    /// the automaton on prose, where an automaton's prefilter keeps finding candidates.
    Packed(aho_corasick::packed::Searcher),
    Automaton(AhoCorasick),
    /// Used only if the automaton cannot be built (it has size limits).
    Plain(Vec<String>),
}

impl Needles {
    /// A matcher for needles that are already lower-cased (the checker lower-cases them, and
    /// so does the code generator, at build time).
    pub fn from_lowercase<I, T>(needles: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let needles: Vec<String> = needles
            .into_iter()
            .map(|needle| needle.as_ref().to_owned())
            .collect();
        let longest = needles.iter().map(String::len).max().unwrap_or(0);
        // Any match semantics answer "is there a match" alike.
        let packed = aho_corasick::packed::Config::new()
            .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
            .builder()
            .extend(&needles)
            .build();
        let matcher = match packed {
            Some(searcher) => Matcher::Packed(searcher),
            None => match AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(&needles)
            {
                Ok(automaton) => Matcher::Automaton(automaton),
                Err(_) => Matcher::Plain(needles),
            },
        };
        Needles { matcher, longest }
    }

    /// Whether `text`, lower-cased, contains one of the needles.
    pub fn matches(&self, text: &str) -> bool {
        // ASCII texts are lower-cased into a buffer on the stack sized to the text (zeroing
        // a buffer much larger than the text would cost more than lower-casing it).
        let lowered = match text.len() {
            0..=128 => self.matches_ascii::<128>(text),
            129..=1024 => self.matches_ascii::<1024>(text),
            1025..=STACK_TEXT => self.matches_ascii::<STACK_TEXT>(text),
            _ => self.matches_long_ascii(text.as_bytes()),
        };
        lowered.unwrap_or_else(|| self.search(text.to_lowercase().as_bytes()))
    }

    /// Lower-cases an ASCII `text` of at most `N` bytes on the stack and searches it; `None`
    /// when the text is not ASCII (or longer than `N`).
    fn matches_ascii<const N: usize>(&self, text: &str) -> Option<bool> {
        let mut buffer = [0u8; N];
        let lowered = buffer.get_mut(..text.len())?;
        lower_ascii(text.as_bytes(), lowered).then(|| self.search(lowered))
    }

    /// A longer ASCII text, lower-cased and searched in pieces of [`STACK_TEXT`] bytes that
    /// overlap by one byte less than the longest needle, so that a match across two pieces
    /// lies whole in one of them: no copy of the whole text. `None` when the text is not ASCII.
    fn matches_long_ascii(&self, text: &[u8]) -> Option<bool> {
        let overlap = self.longest.saturating_sub(1);
        if overlap >= STACK_TEXT / 2 {
            // Needles this long would make the pieces overlap more than they advance.
            return text
                .is_ascii()
                .then(|| self.search(&text.to_ascii_lowercase()));
        }
        let mut buffer = [0u8; STACK_TEXT];
        let mut start = 0;
        loop {
            let end = (start + STACK_TEXT).min(text.len());
            let piece = &text[start..end];
            let lowered = &mut buffer[..piece.len()];
            if !lower_ascii(piece, lowered) {
                return None;
            }
            if self.search(lowered) {
                return Some(true);
            }
            if end == text.len() {
                return Some(false);
            }
            start = end - overlap;
        }
    }

    fn search(&self, lowered: &[u8]) -> bool {
        match &self.matcher {
            Matcher::Packed(searcher) => searcher.find(lowered).is_some(),
            Matcher::Automaton(automaton) => automaton.is_match(lowered),
            Matcher::Plain(needles) => needles.iter().any(|needle| {
                lowered
                    .windows(needle.len().max(1))
                    .any(|window| window == needle.as_bytes())
            }),
        }
    }
}

/// ASCII texts up to this many bytes are lower-cased on the stack.
const STACK_TEXT: usize = 4096;

/// Copies `text` into `lowered` with ASCII letters lower-cased, in one pass that also tells
/// whether the text is ASCII (when it is not, `lowered` is to be ignored). Written so that the
/// compiler turns it into vector instructions.
fn lower_ascii(text: &[u8], lowered: &mut [u8]) -> bool {
    let mut seen = 0u8;
    for (out, &byte) in lowered.iter_mut().zip(text) {
        seen |= byte;
        *out = byte | (u8::from(byte.wrapping_sub(b'A') < 26) << 5);
    }
    seen.is_ascii()
}

/// The values of a `not_in` condition, with strings in a hash set (or, for a few strings, a
/// list compared by length first, which is faster than hashing).
#[derive(Debug, Clone)]
pub struct ValueSet {
    strings: Strings,
    others: Vec<Value>,
}

#[derive(Debug, Clone)]
enum Strings {
    Few(Vec<String>),
    Many(HashSet<String>),
}

/// Up to this many strings, a `not_in` set is a list.
const FEW_STRINGS: usize = 32;

impl ValueSet {
    /// A set of the values.
    pub fn new(values: impl IntoIterator<Item = Value>) -> Self {
        let mut strings = Vec::new();
        let mut others = Vec::new();
        for value in values {
            match value {
                Value::String(text) => strings.push(text),
                other => others.push(other),
            }
        }
        strings.sort();
        strings.dedup();
        let strings = if strings.len() <= FEW_STRINGS {
            Strings::Few(strings)
        } else {
            Strings::Many(strings.into_iter().collect())
        };
        ValueSet { strings, others }
    }

    /// Whether `node` equals one of the values.
    pub fn holds(&self, node: Node<'_>) -> bool {
        match node.text() {
            Some(text) => match &self.strings {
                Strings::Few(strings) => strings
                    .iter()
                    .any(|candidate| candidate.len() == text.len() && candidate == text),
                Strings::Many(strings) => strings.contains(text),
            },
            None => self.others.iter().any(|value| node_equals(node, value)),
        }
    }
}

/// JSON equality, numbers compared by value (`1` equals `1.0`).
pub fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(left), Value::Number(right)) => number_equal(left, right),
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len()
                && left
                    .iter()
                    .zip(right)
                    .all(|(left, right)| json_equal(left, right))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left.iter().all(|(key, value)| {
                    right.get(key).is_some_and(|other| json_equal(value, other))
                })
        }
        (left, right) => left == right,
    }
}

fn number_equal(left: &Number, right: &Number) -> bool {
    if let (Some(left), Some(right)) = (left.as_i64(), right.as_i64()) {
        return left == right;
    }
    if let (Some(left), Some(right)) = (left.as_u64(), right.as_u64()) {
        return left == right;
    }
    match (left.as_f64(), right.as_f64()) {
        (Some(left), Some(right)) => left == right,
        _ => false,
    }
}

/// Whether a selected value equals `value` (JSON equality).
pub fn node_equals(node: Node<'_>, value: &Value) -> bool {
    match (node, value) {
        (Node::Str(text), Value::String(other)) => text == other,
        (Node::Str(_), _) => false,
        (Node::Count(count), Value::Number(number)) => {
            number_equal(&Number::from(count as u64), number)
        }
        (Node::Count(_), _) => false,
        (Node::Json(json), value) => json_equal(json, value),
        (node, value) => json_equal(&node.to_json(), value),
    }
}

/// `contains`: some selected text contains one of the needles, ignoring case.
pub fn contains<C: Root, S: AsRef<str>>(
    context: &C,
    path: &[Segment<S>],
    needles: &Needles,
) -> bool {
    any(context, path, |node| {
        node.text().is_some_and(|text| needles.matches(text))
    })
}

/// `contains` on the session's labels (`metadata.session.labels`): a label equals one of
/// `labels` exactly (labels are names, not text to search).
pub fn has_label<C: Root, S: AsRef<str>, L: AsRef<str>>(
    context: &C,
    path: &[Segment<S>],
    labels: &[L],
) -> bool {
    let wanted = |text: &str| labels.iter().any(|label| label.as_ref() == text);
    any(context, path, |node| match node {
        Node::Json(Value::Array(items)) => {
            items.iter().any(|item| item.as_str().is_some_and(wanted))
        }
        node => node.text().is_some_and(wanted),
    })
}

/// `equals`: some selected value equals `value`.
pub fn equals<C: Root, S: AsRef<str>>(context: &C, path: &[Segment<S>], value: &Value) -> bool {
    any(context, path, |node| node_equals(node, value))
}

/// `not_in`: some selected value is none of the values.
pub fn not_in<C: Root, S: AsRef<str>>(context: &C, path: &[Segment<S>], values: &ValueSet) -> bool {
    any(context, path, |node| !values.holds(node))
}

/// `greater_than`: some selected number (or length) is greater than `threshold`.
pub fn greater_than<C: Root, S: AsRef<str>>(
    context: &C,
    path: &[Segment<S>],
    threshold: f64,
) -> bool {
    any(context, path, |node| {
        node.number().is_some_and(|number| number > threshold)
    })
}

/// Appends the first value `path` selects to `out`, as a template shows it: a string as it
/// is, any other value as JSON text; nothing when the path selects nothing.
pub fn push_field<C: Root, S: AsRef<str>>(out: &mut String, context: &C, path: &[Segment<S>]) {
    select(context.node(), path, &mut |node| {
        match node {
            Node::Str(text) => out.push_str(text),
            Node::Json(Value::String(text)) => out.push_str(text),
            Node::Count(count) => out.push_str(&count.to_string()),
            Node::Json(value) => out.push_str(&value.to_string()),
            other => out.push_str(&other.to_json().to_string()),
        }
        Walk::Stop
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `needle` in a long ASCII text at `at`, with an upper-case letter in it.
    fn text_with(needle: &str, at: usize, len: usize) -> String {
        let mut text = "x".repeat(len);
        text.replace_range(at..at + needle.len(), &needle.to_uppercase());
        text
    }

    #[test]
    fn a_needle_across_the_pieces_of_a_long_text_is_found() {
        let needles = Needles::from_lowercase(["secret key", "zz"]);
        for boundary in [STACK_TEXT, 2 * STACK_TEXT - 9] {
            for at in boundary - 12..boundary + 2 {
                let text = text_with("secret key", at, 3 * STACK_TEXT);
                assert!(needles.matches(&text), "needle at {at}");
            }
        }
        assert!(!needles.matches(&"x".repeat(3 * STACK_TEXT)));
        // The last piece is short.
        assert!(needles.matches(&text_with("zz", 3 * STACK_TEXT - 2, 3 * STACK_TEXT)));
    }

    #[test]
    fn long_texts_that_are_not_ascii_are_lower_cased_whole() {
        let needles = Needles::from_lowercase(["ésecret"]);
        let mut text = text_with("secret", 5000, 9000);
        text.replace_range(4999..5000, "É");
        assert!(needles.matches(&text));
        // A non-ASCII letter far after an ASCII needle.
        let needles = Needles::from_lowercase(["api key"]);
        let mut text = text_with("api key", 10, 9000);
        text.push('É');
        assert!(needles.matches(&text));
        assert!(!Needles::from_lowercase(["api keys"]).matches(&text));
    }

    #[test]
    fn needles_longer_than_half_a_piece_search_the_whole_text() {
        let long = "k".repeat(STACK_TEXT);
        let needles = Needles::from_lowercase([long.as_str()]);
        assert!(needles.matches(&text_with(&long, 3000, 3 * STACK_TEXT)));
        assert!(!needles.matches(&"x".repeat(3 * STACK_TEXT)));
    }
}
