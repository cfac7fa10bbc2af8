//! Dotted field paths into a context's JSON shape (`messages.0.content`, `arguments.query`).
//!
//! A path is a list of segments separated by dots:
//! - a name selects an object key;
//! - an integer selects a list element; a negative integer counts from the end
//!   (`messages.-1` is the latest message); on an object it is a key like any other;
//! - `*` selects every element of a list or every value of an object.
//!
//! An index or `*` may also be written in brackets after a name, as JavaScript and Python
//! write it: `messages[0].content` is `messages.0.content`, `messages[-1]` is `messages.-1`,
//! `items[0][1]` is `items.0.1`. The segments are the same either way, so messages built from
//! them (the checker's suggestions) say `messages.0.content`.
//!
//! Negative indexes and `*` go beyond the dotted paths of the schema; redactions and
//! transforms accept them, and so do DSL conditions.

use serde_json::Value;
use std::fmt;

/// One segment of a [`FieldPath`].
///
/// A parsed path owns its segments (`Segment<String>`, the default); the paths the
/// `dsl_policy!` macro writes out are constants (`Segment<&'static str>`); a walk borrows them
/// ([`as_borrowed`](Segment::as_borrowed)). One type, whatever holds the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Segment<S = String> {
    /// An object key.
    Name(S),
    /// A list index (negative: from the end), or an object key written as a number.
    Index {
        /// The segment as written, used as the key on objects.
        text: S,
        /// The index; `-1` is the last element.
        index: i64,
    },
    /// `*`: every element of a list or every value of an object.
    Any,
}

impl<S: AsRef<str>> Segment<S> {
    /// The segment as written.
    pub fn as_str(&self) -> &str {
        match self {
            Segment::Name(name) => name.as_ref(),
            Segment::Index { text, .. } => text.as_ref(),
            Segment::Any => "*",
        }
    }

    /// The key this segment selects on an object (`None` for `*`).
    pub fn key(&self) -> Option<&str> {
        match self {
            Segment::Name(name) | Segment::Index { text: name, .. } => Some(name.as_ref()),
            Segment::Any => None,
        }
    }

    /// The segment, borrowing its text.
    #[inline]
    pub fn as_borrowed(&self) -> Segment<&str> {
        match self {
            Segment::Name(name) => Segment::Name(name.as_ref()),
            Segment::Index { text, index } => Segment::Index {
                text: text.as_ref(),
                index: *index,
            },
            Segment::Any => Segment::Any,
        }
    }
}

/// The position a list index selects in a list of `len` elements, if any.
#[doc(hidden)]
pub fn list_position(index: i64, len: usize) -> Option<usize> {
    if index >= 0 {
        let position = usize::try_from(index).ok()?;
        (position < len).then_some(position)
    } else {
        let back = usize::try_from(index.unsigned_abs()).ok()?;
        len.checked_sub(back)
    }
}

/// Why a path could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    path: String,
    problem: &'static str,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid field path \"{}\": {}", self.path, self.problem)
    }
}

impl std::error::Error for PathError {}

/// A parsed dotted path.
///
/// ```
/// use portcullis_engine::path::{FieldPath, Segment};
///
/// let path: FieldPath = "messages.-1.content".parse().unwrap();
/// assert_eq!(path.segments()[1], Segment::Index { text: "-1".into(), index: -1 });
/// assert!("messages..content".parse::<FieldPath>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    text: String,
    segments: Vec<Segment>,
}

impl FieldPath {
    /// Parses a dotted path.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let error = |problem| PathError {
            path: text.to_owned(),
            problem,
        };
        if text.is_empty() {
            return Err(error("the path is empty"));
        }
        let mut segments = Vec::new();
        for (at, part) in text.split('.').enumerate() {
            push_segments(part, at == 0, &mut segments).map_err(error)?;
        }
        Ok(FieldPath {
            text: text.to_owned(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether any segment is `*` (the path may select several values, or none).
    pub fn has_wildcard(&self) -> bool {
        self.segments.contains(&Segment::Any)
    }

    /// Calls `visit` with every value the path selects in `root`, in document order.
    /// A segment that does not resolve selects nothing.
    pub fn select<'v>(&self, root: &'v Value, visit: &mut impl FnMut(&'v Value)) {
        select(root, &self.segments, visit);
    }

    /// The first value the path selects in `root`.
    pub fn first<'v>(&self, root: &'v Value) -> Option<&'v Value> {
        let mut found = None;
        self.select(root, &mut |value| {
            if found.is_none() {
                found = Some(value);
            }
        });
        found
    }
}

/// Adds the segments of one dot-separated part (`messages`, `0`, `items[0][1]`, `[0]` at the
/// start of a path) to `segments`.
fn push_segments(part: &str, first: bool, segments: &mut Vec<Segment>) -> Result<(), &'static str> {
    let (head, mut brackets) = match part.find(['[', ']']) {
        Some(at) => part.split_at(at),
        None => (part, ""),
    };
    if head.is_empty() && (brackets.is_empty() || !first) {
        return Err(if brackets.is_empty() {
            "it has an empty segment (two dots in a row, or a dot at an end)"
        } else {
            "a bracketed index follows a name (`messages[0]`), not a dot"
        });
    }
    if !head.is_empty() {
        segments.push(plain_segment(head));
    }
    while !brackets.is_empty() {
        let Some(rest) = brackets.strip_prefix('[') else {
            return Err("a `]` closes no `[`, or text follows a bracketed index");
        };
        let Some((inside, rest)) = rest.split_once(']') else {
            return Err("a `[` is never closed");
        };
        if inside.contains('[') {
            return Err("a `[` is never closed");
        }
        let segment = plain_segment(inside);
        if matches!(segment, Segment::Name(_)) {
            return Err("a bracket holds a list index (`[0]`, `[-1]`) or `*`");
        }
        segments.push(segment);
        brackets = rest;
    }
    Ok(())
}

/// A segment written without brackets.
fn plain_segment(segment: &str) -> Segment {
    if segment == "*" {
        Segment::Any
    } else if let Some(index) = parse_index(segment) {
        Segment::Index {
            text: segment.to_owned(),
            index,
        }
    } else {
        Segment::Name(segment.to_owned())
    }
}

fn parse_index(segment: &str) -> Option<i64> {
    let digits = segment.strip_prefix('-').unwrap_or(segment);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    segment.parse().ok()
}

fn select<'v>(value: &'v Value, segments: &[Segment], visit: &mut impl FnMut(&'v Value)) {
    let Some((segment, rest)) = segments.split_first() else {
        visit(value);
        return;
    };
    match (segment, value) {
        (Segment::Any, Value::Array(items)) => {
            for item in items {
                select(item, rest, visit);
            }
        }
        (Segment::Any, Value::Object(map)) => {
            for item in map.values() {
                select(item, rest, visit);
            }
        }
        (Segment::Index { index, .. }, Value::Array(items)) => {
            if let Some(item) = list_position(*index, items.len()).and_then(|at| items.get(at)) {
                select(item, rest, visit);
            }
        }
        (segment, Value::Object(map)) => {
            if let Some(item) = segment.key().and_then(|key| map.get(key)) {
                select(item, rest, visit);
            }
        }
        _ => {}
    }
}

impl std::str::FromStr for FieldPath {
    type Err = PathError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        FieldPath::parse(text)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all(path: &str, root: &Value) -> Vec<Value> {
        let mut found = Vec::new();
        FieldPath::parse(path)
            .unwrap()
            .select(root, &mut |value| found.push(value.clone()));
        found
    }

    #[test]
    fn parses_segments() {
        let path = FieldPath::parse("a.0.*.-2.b1").unwrap();
        assert_eq!(
            path.segments(),
            &[
                Segment::Name("a".into()),
                Segment::Index {
                    text: "0".into(),
                    index: 0
                },
                Segment::Any,
                Segment::Index {
                    text: "-2".into(),
                    index: -2
                },
                Segment::Name("b1".into()),
            ]
        );
        assert!(path.has_wildcard());
        assert_eq!(path.to_string(), "a.0.*.-2.b1");
    }

    #[test]
    fn rejects_empty_paths_and_segments() {
        for bad in ["", ".", "a.", ".a", "a..b"] {
            let error = FieldPath::parse(bad).unwrap_err();
            assert!(error.to_string().contains("invalid field path"), "{error}");
        }
        // A number too large for an index is a name.
        let path = FieldPath::parse("99999999999999999999").unwrap();
        assert_eq!(path.segments()[0].as_str(), "99999999999999999999");
    }

    #[test]
    fn reads_bracketed_indexes_as_dotted_ones() {
        for (bracketed, dotted) in [
            ("messages[0].content", "messages.0.content"),
            ("messages[-1].content", "messages.-1.content"),
            ("messages[*].content", "messages.*.content"),
            ("items[0][1]", "items.0.1"),
            ("a.b[2].c[3]", "a.b.2.c.3"),
            ("[0].content", "0.content"),
        ] {
            let path = FieldPath::parse(bracketed).unwrap();
            assert_eq!(
                path.segments(),
                FieldPath::parse(dotted).unwrap().segments(),
                "{bracketed}"
            );
            // The path is kept as written.
            assert_eq!(path.as_str(), bracketed);
        }
        let root = json!({"messages": [{"content": "a"}, {"content": "b"}]});
        assert_eq!(all("messages[1].content", &root), vec![json!("b")]);
        assert_eq!(all("messages[-2].content", &root), vec![json!("a")]);
    }

    #[test]
    fn rejects_malformed_brackets() {
        for (bad, problem) in [
            ("messages[0", "never closed"),
            ("messages[[0]]", "never closed"),
            ("messages0]", "closes no"),
            ("messages[0]x", "closes no"),
            ("messages[]", "list index"),
            ("messages[content]", "list index"),
            ("messages.[0]", "follows a name"),
            ("[0]", ""),
        ] {
            match FieldPath::parse(bad) {
                Err(error) => assert!(error.to_string().contains(problem), "{bad}: {error}"),
                // A path that is only an index is valid (it selects into a list root).
                Ok(path) => assert_eq!((bad, path.segments().len()), ("[0]", 1)),
            }
        }
    }

    #[test]
    fn selects_values() {
        let root = json!({"messages": [{"content": "a"}, {"content": "b"}], "arguments": {"0": "zero", "k": {"x": 1}}});
        assert_eq!(all("messages.0.content", &root), vec![json!("a")]);
        assert_eq!(all("messages.-1.content", &root), vec![json!("b")]);
        assert_eq!(all("messages.-2.content", &root), vec![json!("a")]);
        assert!(all("messages.-3.content", &root).is_empty());
        assert!(all("messages.2.content", &root).is_empty());
        assert_eq!(
            all("messages.*.content", &root),
            vec![json!("a"), json!("b")]
        );
        assert_eq!(all("arguments.0", &root), vec![json!("zero")]);
        assert_eq!(all("arguments.k.x", &root), vec![json!(1)]);
        assert!(all("arguments.k.x.y", &root).is_empty());
        assert!(all("messages.content", &root).is_empty());
    }

    #[test]
    fn list_positions() {
        assert_eq!(list_position(0, 3), Some(0));
        assert_eq!(list_position(2, 3), Some(2));
        assert_eq!(list_position(3, 3), None);
        assert_eq!(list_position(-1, 3), Some(2));
        assert_eq!(list_position(-3, 3), Some(0));
        assert_eq!(list_position(-4, 3), None);
        assert_eq!(list_position(i64::MIN, 3), None);
        assert_eq!(list_position(0, 0), None);
    }
}
