//! `regex.globs_match`: whether two globs have a non-empty string in common.
//!
//! A glob here is OPA's restricted regular expression, anchored at both ends: `.` is any
//! character, `[…]` a class of characters and ranges (`[a-z0-9]`), `*` and `+` repeat the token
//! before them, `\` makes any character literal; every other character stands for itself.
//! Deciding whether two such globs intersect follows OPA's algorithm step by step (strip the
//! common literal prefix and suffix, then walk both globs, letting a repeated token take up
//! tokens of the other glob), so the answers are OPA's, including where that algorithm is
//! approximate.
//!
//! The walk backtracks: it is exponential in the number of repeated tokens. It reads the
//! evaluation's clock as it goes and stops at the time limit, and it refuses globs whose
//! repetitions nest deeper than [`MAX_DEPTH`] instead of recursing without end.

use serde_json::Value;

use super::{BuiltinContext, BuiltinError, Outcome, string};

/// How deep the walk may recurse: up to two levels per repeated token of the two globs.
const MAX_DEPTH: usize = 1_000;

/// How a token repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    Once,
    Plus,
    Star,
}

/// What one token matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// One character.
    Char(char),
    /// Any character.
    Dot,
    /// A class: sorted, disjoint, non-adjacent ranges of code points.
    Set(Vec<(u32, u32)>),
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    flag: Flag,
}

/// The builtin: `regex.globs_match(glob1, glob2)`.
pub(super) fn globs_match(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let (left, right) = (string(args, 0)?, string(args, 1)?);
    let left = parse(left, context)?;
    let right = parse(right, context)?;
    let Some((left, right)) = trim(&left, &right) else {
        return Ok(Value::Bool(false));
    };
    let mut walk = Walk { context, depth: 0 };
    Ok(Value::Bool(walk.normal(left, right)?))
}

/// A glob's tokens, simplified: a repeated token followed by an equal repeated token is one
/// token (`+` winning over `*`).
fn parse(glob: &str, context: &mut BuiltinContext) -> Result<Vec<Token>, BuiltinError> {
    let input: Vec<char> = glob.chars().collect();
    context.charge(
        input
            .len()
            .saturating_mul(size_of::<Token>() + size_of::<char>()),
        "regex.globs_match's tokens",
    )?;
    let mut tokens: Vec<Token> = Vec::new();
    let mut index = 0;
    while index < input.len() {
        context.check_time()?;
        let (next, kind) = token(&input, index, context)?;
        let (next, flag) = flag(&input, next)?;
        index = next;
        let token = Token { kind, flag };
        match tokens.last_mut() {
            Some(last)
                if flag != Flag::Once && last.flag != Flag::Once && last.kind == token.kind =>
            {
                if flag == Flag::Plus {
                    last.flag = Flag::Plus;
                }
            }
            _ => tokens.push(token),
        }
    }
    Ok(tokens)
}

/// An error about `input` at character `pos`, worded as OPA words it.
fn invalid(input: &[char], pos: usize, message: &str) -> BuiltinError {
    let input: String = input.iter().collect();
    BuiltinError::Failed(format!(
        "input:{input}, pos:{pos}, {message}: the input provided is invalid"
    ))
}

/// The character at `index`, a backslash making the one after it literal: the index after it,
/// the character, and whether it was escaped. `None` at the end of the input.
fn next_char(input: &[char], index: usize) -> Result<Option<(usize, char, bool)>, BuiltinError> {
    match input.get(index) {
        None => Ok(None),
        Some('\\') => match input.get(index + 1) {
            Some(&c) => Ok(Some((index + 2, c, true))),
            None => Err(invalid(
                input,
                index,
                "input ends with a \\ (escape) character",
            )),
        },
        Some(&c) => Ok(Some((index + 1, c, false))),
    }
}

/// The token starting at `index` (which is before the end), and the index after it.
fn token(
    input: &[char],
    index: usize,
    context: &mut BuiltinContext,
) -> Result<(usize, Kind), BuiltinError> {
    let Some((next, c, escaped)) = next_char(input, index)? else {
        return Err(invalid(input, index, "reached end of input"));
    };
    if escaped {
        return Ok((next, Kind::Char(c)));
    }
    match c {
        '.' => Ok((next, Kind::Dot)),
        ']' => Err(invalid(input, next, "set-close ']' with no preceding '['")),
        '+' | '*' => Err(invalid(
            input,
            next,
            &format!("flag '{c}' must be preceded by a non-flag"),
        )),
        '[' => set(input, next, context),
        _ => Ok((next, Kind::Char(c))),
    }
}

/// The class whose `[` ends right before `index`.
fn set(
    input: &[char],
    mut index: usize,
    context: &mut BuiltinContext,
) -> Result<(usize, Kind), BuiltinError> {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    let mut previous: Option<char> = None;
    loop {
        context.check_time()?;
        let Some((next, c, escaped)) = next_char(input, index)? else {
            return Err(invalid(input, index, "found [ without matching ]"));
        };
        index = next;
        if escaped {
            ranges.push((u32::from(c), u32::from(c)));
            previous = Some(c);
            continue;
        }
        match c {
            ']' => break,
            '-' => {
                let Some(low) = previous else {
                    return Err(invalid(
                        input,
                        index,
                        "range character '-' must be preceded by a Unicode character",
                    ));
                };
                if index + 1 >= input.len() {
                    return Err(invalid(
                        input,
                        index,
                        "range character '-' must be followed by a Unicode character",
                    ));
                }
                let Some((next, high, escaped)) = next_char(input, index)? else {
                    return Err(invalid(input, index, "found [ without matching ]"));
                };
                index = next;
                if !escaped && (high == ']' || high == '-') {
                    return Err(invalid(
                        input,
                        index,
                        "range character '-' cannot be followed by a special symbol",
                    ));
                }
                if high < low {
                    return Err(invalid(
                        input,
                        index,
                        &format!("range is out of order: '{high}' comes before '{low}' in Unicode"),
                    ));
                }
                ranges.push((u32::from(low), u32::from(high)));
                previous = None;
            }
            _ => {
                ranges.push((u32::from(c), u32::from(c)));
                previous = Some(c);
            }
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match merged.last_mut() {
            Some(last) if low <= last.1.saturating_add(1) => last.1 = last.1.max(high),
            _ => merged.push((low, high)),
        }
    }
    Ok((index, Kind::Set(merged)))
}

/// The repetition after a token, if any, and the index after it.
fn flag(input: &[char], index: usize) -> Result<(usize, Flag), BuiltinError> {
    Ok(match next_char(input, index)? {
        Some((next, '+', false)) => (next, Flag::Plus),
        Some((next, '*', false)) => (next, Flag::Star),
        _ => (index, Flag::Once),
    })
}

/// Whether two tokens, their repetitions aside, have a character in common.
fn matches(a: &Token, b: &Token) -> bool {
    match (&a.kind, &b.kind) {
        (Kind::Dot, _) | (_, Kind::Dot) => true,
        (Kind::Char(x), Kind::Char(y)) => x == y,
        (Kind::Char(c), Kind::Set(set)) | (Kind::Set(set), Kind::Char(c)) => {
            let c = u32::from(*c);
            set.iter().any(|&(low, high)| low <= c && c <= high)
        }
        (Kind::Set(x), Kind::Set(y)) => {
            let (mut i, mut j) = (0, 0);
            while let (Some(&(a_low, a_high)), Some(&(b_low, b_high))) = (x.get(i), y.get(j)) {
                if a_low.max(b_low) <= a_high.min(b_high) {
                    return true;
                }
                if a_high < b_high {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            false
        }
    }
}

/// Strips the literal prefix and suffix both globs share, leaving one token of each so that
/// neither glob becomes empty; `None` when a literal token of one cannot match the other's.
fn trim<'g>(g1: &'g [Token], g2: &'g [Token]) -> Option<(&'g [Token], &'g [Token])> {
    let literal = |token: &Token| token.flag == Flag::Once;
    let mut left = 0;
    while left < g1.len() && left < g2.len() && literal(&g1[left]) && literal(&g2[left]) {
        if !matches(&g1[left], &g2[left]) {
            return None;
        }
        left += 1;
    }
    left = left.saturating_sub(1);
    // One past the last token kept of each.
    let (mut end1, mut end2) = (g1.len(), g2.len());
    while end1 > left && end2 > left && literal(&g1[end1 - 1]) && literal(&g2[end2 - 1]) {
        if !matches(&g1[end1 - 1], &g2[end2 - 1]) {
            return None;
        }
        end1 -= 1;
        end2 -= 1;
    }
    if end1 < g1.len() {
        end1 += 1;
        end2 += 1;
    }
    Some((g1.get(left..end1)?, g2.get(left..end2)?))
}

/// The backtracking walk over two globs, bounded by the clock and by [`MAX_DEPTH`].
struct Walk<'c> {
    context: &'c mut BuiltinContext,
    depth: usize,
}

impl Walk<'_> {
    fn enter(&mut self) -> Result<(), BuiltinError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(BuiltinError::Failed(format!(
                "regex.globs_match: the globs repeat too many tokens to compare (more than {MAX_DEPTH} nested steps)"
            )));
        }
        self.context.check_time()
    }

    /// Walks both globs token by token while neither repeats; hands over at a repetition.
    fn normal(&mut self, g1: &[Token], g2: &[Token]) -> Result<bool, BuiltinError> {
        self.enter()?;
        let result = self.normal_inner(g1, g2);
        self.depth -= 1;
        result
    }

    fn normal_inner(&mut self, g1: &[Token], g2: &[Token]) -> Result<bool, BuiltinError> {
        let mut i = 0;
        while i < g1.len() && i < g2.len() {
            self.context.check_time()?;
            if g1[i].flag == Flag::Once && g2[i].flag == Flag::Once {
                if !matches(&g1[i], &g2[i]) {
                    return Ok(false);
                }
            } else {
                return self.special(&g1[i..], &g2[i..]);
            }
            i += 1;
        }
        Ok(i == g1.len() && i == g2.len())
    }

    /// One of the globs starts with a repeated token.
    fn special(&mut self, g1: &[Token], g2: &[Token]) -> Result<bool, BuiltinError> {
        let (repeated, other) = match g1.first().map(|token| token.flag) {
            Some(Flag::Plus | Flag::Star) => (g1, g2),
            _ => (g2, g1),
        };
        match repeated.first().map(|token| token.flag) {
            Some(Flag::Plus) => self.plus(repeated, other),
            Some(Flag::Star) => self.star(repeated, other),
            _ => Ok(false),
        }
    }

    /// `plussed` starts with a token repeated once or more: it takes at least the first
    /// token of `other`.
    fn plus(&mut self, plussed: &[Token], other: &[Token]) -> Result<bool, BuiltinError> {
        self.enter()?;
        let result = self.plus_inner(plussed, other);
        self.depth -= 1;
        result
    }

    fn plus_inner(&mut self, plussed: &[Token], other: &[Token]) -> Result<bool, BuiltinError> {
        let (Some(first), Some(head)) = (plussed.first(), other.first()) else {
            return Ok(false);
        };
        if !matches(first, head) {
            return Ok(false);
        }
        if self.star(plussed, &other[1..])? {
            return Ok(true);
        }
        Ok(head.flag != Flag::Once && self.normal(&plussed[1..], other)?)
    }

    /// `starred` starts with a token repeated any number of times: it takes tokens of
    /// `other` until the rest of both globs intersect.
    fn star(&mut self, starred: &[Token], other: &[Token]) -> Result<bool, BuiltinError> {
        self.enter()?;
        let result = self.star_inner(starred, other);
        self.depth -= 1;
        result
    }

    fn star_inner(&mut self, starred: &[Token], other: &[Token]) -> Result<bool, BuiltinError> {
        let Some(star) = starred.first() else {
            return Ok(false);
        };
        let next = starred.get(1);
        for (i, token) in other.iter().enumerate() {
            self.context.check_time()?;
            if next.is_some_and(|next| matches(token, next)) {
                if self.normal(&starred[1..], &other[i..])? {
                    return Ok(true);
                }
                if !matches(token, star) {
                    return Ok(false);
                }
            } else if !matches(token, star) {
                return Ok(false);
            }
        }
        Ok(next.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn globs_match_of(left: &str, right: &str) -> Outcome {
        globs_match(&[json!(left), json!(right)], &mut BuiltinContext::default())
    }

    /// The cases of OPA's own tests of `regex.globs_match`.
    #[test]
    fn intersections_as_opa_finds_them() {
        let non_empty: &[(&str, &[&str])] = &[
            ("abcd", &["abcd", "....", "[a-d]*"]),
            ("pqrs", &[".qrs", "p.rs", "pq.s", "pqr."]),
            (".*", &["asdklfj", "jasdfh", "asdhfajfh", "asdflkasdfjl"]),
            ("d*", &["[abcd][abcd]", "d[a-z]+", ".....", "[d]*"]),
            ("[a-p]+", &["[p-z]+", "apapapaapapapap", ".*", "abcdefgh*"]),
            (
                "abcd[a-c]z+",
                &["abcd[b-d][yz]*", "abcdazzzz", "abcdbzzz", "abcdcz"],
            ),
            (".*\\\\", &[".*", "asdfasdf\\\\"]),
            (".a.a", &["b.b.", "c.c.", "d.d.", "e.e."]),
            (
                ".*.*.*.*.*.*.*.*.*.*.*.*.*.*.*",
                &[".*.*.*.*.*.*.*.*.*.*.*"],
            ),
            ("foo.*bar", &["foobar", "fooalkdsjfbar"]),
            ("[ab]+c", &["[bc]+", "[bc]*"]),
        ];
        for (left, rights) in non_empty {
            for right in *rights {
                assert_eq!(
                    globs_match_of(left, right),
                    Ok(json!(true)),
                    "{left} ~ {right}"
                );
            }
        }
        let empty: &[(&str, &[&str])] = &[
            ("abcd", &["lsdfhda", "abcdla", "asdlfk", "ksdfj"]),
            ("[a-d]+", &["xyz", "p+", "[e-f]+"]),
            ("[0-9]*", &["[a-z]", ".\\*"]),
            ("mamama.*", &["dadada.*", "nanana.*"]),
            (".*mamama", &[".*dadada", ".*nanana"]),
            (".xyz.", &["paaap", ".*pqr.*"]),
            ("ab+", &["a", "b", "abc"]),
            (".*.*.*.*f", &[".*.*.*.*g"]),
            (".*", &[""]),
        ];
        for (left, rights) in empty {
            for right in *rights {
                assert_eq!(
                    globs_match_of(left, right),
                    Ok(json!(false)),
                    "{left} ~ {right}"
                );
            }
        }
        // OPA's documentation.
        assert_eq!(globs_match_of("a.a.", ".b.b"), Ok(json!(true)));
        assert_eq!(globs_match_of("[a-z]+", "[0-9]*"), Ok(json!(false)));
    }

    #[test]
    fn malformed_globs_are_errors() {
        for glob in [
            "a\\", "]", "*a", "a**", "[a", "[-a]", "[a-]", "[z-a]", "[a--]", "[a-",
        ] {
            let answer = globs_match_of(glob, "a");
            assert!(
                matches!(&answer, Err(BuiltinError::Failed(message)) if message.contains("invalid")),
                "{glob}: {answer:?}"
            );
        }
        // Escapes make the special characters literal.
        assert_eq!(globs_match_of("\\*\\[\\.", "\\*.\\."), Ok(json!(true)));
        assert_eq!(globs_match_of("\\*", "a"), Ok(json!(false)));
        assert_eq!(globs_match_of("[\\]]", "\\]"), Ok(json!(true)));
        assert_eq!(globs_match_of("[\\--\\/]", "\\."), Ok(json!(true)));
    }

    #[test]
    fn wide_classes_cost_nothing_and_deep_walks_stop() {
        // A class over all of Unicode is one range, not a million characters.
        assert_eq!(
            globs_match_of("[\u{0}-\u{10FFFF}]+", "[é]"),
            Ok(json!(true))
        );
        // Many repetitions: a clear error, never a stack overflow.
        let many = "a*b*".repeat(5_000);
        let answer = globs_match_of(&many, &format!("{}c", "ab".repeat(5_000)));
        assert!(
            matches!(&answer, Err(BuiltinError::Failed(message)) if message.contains("too many")),
            "{answer:?}"
        );
        // The deadline stops an exponential walk: each `.*a` may take any of the `a`s.
        let mut context = BuiltinContext::new(usize::MAX, 0, |_| true);
        context.begin_call();
        let slow = globs_match(
            &[
                json!(".*a".repeat(20) + ".*b.*"),
                json!("a".repeat(60) + "c"),
            ],
            &mut context,
        );
        assert_eq!(slow, Err(BuiltinError::TimeLimit));
    }
}
