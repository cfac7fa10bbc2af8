//! The host's turn at `regex.match`: the patterns it matches exactly as the guest's RE2 does,
//! with the `regex` crate, cached per instance.
//!
//! OPA's runtime matches with RE2 compiled into the module, and spends more on copying the
//! pattern and the text into C++ strings and on its pattern cache than on the match itself
//! (see `meter::RegexPlan` for how the calls reach the host). The host answers only when it is
//! sure to answer as RE2 would, and leaves everything else to the module:
//!
//! - the pattern is read as RE2 syntax by [`translate`], which takes a subset both libraries
//!   read alike: literals, `.`, classes without Unicode names or set operations, the anchors
//!   `^ $ \A \z`, `\b \B`, groups (`(?P<name>…)` with a plain name), the flags `i m s U`,
//!   alternation, and repetitions up to RE2's limit of 1000 (nested ones multiplied). Where the
//!   two differ in meaning, it writes the RE2 meaning out: `\d \w \s` and `\b \B` are ASCII
//!   in RE2 (`\s` without the vertical tab), Unicode in the `regex` crate. A case-insensitive
//!   pattern is taken only when it is all ASCII and has no Perl, POSIX or negated classes.
//!   Anything else (a Unicode class, `\pL`, a syntax only one of them reads) is the module's;
//! - a pattern the `regex` crate does not compile within a small size limit is the module's
//!   (RE2's own limit is far larger, so whatever compiles here compiles there);
//! - a text that is not UTF-8 (RE2 matches such bytes its own way) is the module's, and so is
//!   a text longer than [`MAX_TEXT`], or one whose length times the pattern's weight (its
//!   length times its nested repetition counts, a bound on its automaton) passes
//!   [`MAX_WORK`]: the module's loops check the time limit as they go, the host only after the
//!   call, so the host takes only what it can match well within a millisecond or so even when
//!   its lazy DFA gives up;
//! - a pattern with a NUL byte is the module's (OPA hands RE2 the pattern as a C string).
//!
//! The compiled patterns live outside the module's memory and its limit: at most
//! [`MAX_PATTERNS`] per instance, each within [`SIZE_LIMIT`] and with a lazy DFA within the
//! same.
//!
//! A module opts in only after a probe (`probe_regex`) found its answers and the host's the
//! same on a set of patterns.

use regex::bytes::{Regex, RegexBuilder};

use regex_syntax::ast::{
    self, Assertion, AssertionKind, Ast, ClassPerlKind, ClassSet, ClassSetItem, Flag,
    FlagsItemKind, GroupKind, HexLiteralKind, Literal, LiteralKind, RepetitionKind,
    RepetitionRange,
};

/// The longest text the host matches; longer ones are the module's.
pub(super) const MAX_TEXT: usize = 64 * 1024;
/// The most work the host takes on for one call: the text's length times the pattern's weight.
const MAX_WORK: usize = 1 << 21;
/// The longest pattern the host takes.
const MAX_PATTERN: usize = 4096;
/// How many compiled patterns an instance keeps (the oldest goes first).
const MAX_PATTERNS: usize = 16;
/// The size limits of one compiled pattern and of its lazy DFA.
const SIZE_LIMIT: usize = 256 * 1024;
/// RE2's largest repetition count, also the limit of nested counts multiplied.
const MAX_REPEAT: u32 = 1000;

/// A pattern compiled, and its weight.
type Compiled = (Regex, usize);

/// The patterns an instance has seen: each compiled, or `None` when it is the module's.
#[derive(Default)]
pub(super) struct Regexes {
    /// Each pattern seen, compiled with its weight.
    patterns: Vec<(Box<[u8]>, Option<Compiled>)>,
    /// How many calls the host answered.
    decided: u64,
}

impl Regexes {
    /// Whether `pattern` matches somewhere in `text`, or `None` when the module decides.
    pub(super) fn is_match(&mut self, pattern: &[u8], text: &[u8]) -> Option<bool> {
        if text.len() > MAX_TEXT {
            return None;
        }
        let index = match self
            .patterns
            .iter()
            .position(|(seen, _)| **seen == *pattern)
        {
            Some(index) => index,
            None => {
                if self.patterns.len() >= MAX_PATTERNS {
                    self.patterns.remove(0);
                }
                self.patterns.push((pattern.into(), compile(pattern)));
                self.patterns.len() - 1
            }
        };
        let (regex, weight) = self.patterns[index].1.as_ref()?;
        if weight.saturating_mul(text.len()) > MAX_WORK {
            return None;
        }
        std::str::from_utf8(text).ok()?;
        self.decided += 1;
        Some(regex.is_match(text))
    }

    /// How many calls the host answered.
    pub(super) fn decided(&self) -> u64 {
        self.decided
    }
}

/// The pattern compiled as RE2 reads it, and its weight, or `None` when the module decides.
fn compile(pattern: &[u8]) -> Option<Compiled> {
    let pattern = std::str::from_utf8(pattern).ok()?;
    let (translated, weight) = translate(pattern)?;
    let regex = RegexBuilder::new(&translated)
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(SIZE_LIMIT)
        .build()
        .ok()?;
    Some((regex, weight))
}

/// `pattern` (RE2 syntax) in the `regex` crate's syntax with RE2's meaning, and its weight
/// (its length times the largest product of nested repetition counts), or `None` when it is
/// not in the subset the host takes (see the module docs).
pub(super) fn translate(pattern: &str) -> Option<(String, usize)> {
    if pattern.len() > MAX_PATTERN || pattern.contains('\0') {
        return None;
    }
    let ast = ast::parse::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    let mut walk = Walk {
        pattern,
        fold: false,
        edits: Vec::new(),
        product: 1,
    };
    walk.fold = folds(&ast);
    if walk.fold && !pattern.is_ascii() {
        return None;
    }
    walk.ast(&ast, 1)?;
    let mut out = String::with_capacity(pattern.len() + 16 * walk.edits.len());
    let mut copied = 0;
    for (start, end, text) in walk.edits {
        out.push_str(pattern.get(copied..start)?);
        out.push_str(text);
        copied = end;
    }
    out.push_str(pattern.get(copied..)?);
    let weight = out.len().checked_mul(usize::try_from(walk.product).ok()?)?;
    Some((out, weight))
}

/// Whether the pattern turns case-insensitivity on anywhere.
fn folds(ast: &Ast) -> bool {
    let flags_fold = |flags: &ast::Flags| {
        flags
            .items
            .iter()
            .any(|item| item.kind == FlagsItemKind::Flag(Flag::CaseInsensitive))
    };
    match ast {
        Ast::Flags(set) => flags_fold(&set.flags),
        Ast::Group(group) => {
            matches!(&group.kind, GroupKind::NonCapturing(flags) if flags_fold(flags))
                || folds(&group.ast)
        }
        Ast::Repetition(repetition) => folds(&repetition.ast),
        Ast::Alternation(alternation) => alternation.asts.iter().any(folds),
        Ast::Concat(concat) => concat.asts.iter().any(folds),
        _ => false,
    }
}

/// The check of a pattern against the subset, and the spans to write out in RE2's meaning.
struct Walk<'a> {
    pattern: &'a str,
    /// The pattern is case-insensitive somewhere.
    fold: bool,
    /// `(start, end, replacement)`, in the order of the pattern.
    edits: Vec<(usize, usize, &'static str)>,
    /// The largest product of nested repetition counts.
    product: u32,
}

impl Walk<'_> {
    /// `product`: the counts of the repetitions around, multiplied.
    fn ast(&mut self, ast: &Ast, product: u32) -> Option<()> {
        match ast {
            Ast::Empty(_) | Ast::Dot(_) => Some(()),
            Ast::Flags(set) => {
                if set.flags.items.is_empty() {
                    return None;
                }
                flags(&set.flags)
            }
            Ast::Literal(literal) => self.literal(literal),
            Ast::Assertion(assertion) => self.assertion(assertion),
            Ast::ClassUnicode(_) => None,
            Ast::ClassPerl(perl) => {
                if self.fold {
                    return None;
                }
                let text = match (&perl.kind, perl.negated) {
                    (ClassPerlKind::Digit, false) => "[0-9]",
                    (ClassPerlKind::Digit, true) => "[^0-9]",
                    (ClassPerlKind::Word, false) => "[0-9A-Za-z_]",
                    (ClassPerlKind::Word, true) => "[^0-9A-Za-z_]",
                    (ClassPerlKind::Space, false) => r"[\t\n\x0C\r ]",
                    (ClassPerlKind::Space, true) => r"[^\t\n\x0C\r ]",
                };
                self.edits
                    .push((perl.span.start.offset, perl.span.end.offset, text));
                Some(())
            }
            Ast::ClassBracketed(class) => {
                if self.fold && class.negated {
                    return None;
                }
                self.class_set(&class.kind)
            }
            Ast::Repetition(repetition) => {
                // RE2 refuses a repetition of a repetition (`a**`), of an assertion or of
                // nothing.
                if matches!(
                    &*repetition.ast,
                    Ast::Repetition(_) | Ast::Assertion(_) | Ast::Empty(_) | Ast::Flags(_)
                ) {
                    return None;
                }
                let product = match &repetition.op.kind {
                    RepetitionKind::ZeroOrOne
                    | RepetitionKind::ZeroOrMore
                    | RepetitionKind::OneOrMore => product,
                    RepetitionKind::Range(range) => {
                        // RE2 reads `{,n}` as text.
                        let (min, max) = match *range {
                            RepetitionRange::Exactly(n) => (n, n),
                            RepetitionRange::AtLeast(n) => (n, n),
                            RepetitionRange::Bounded(m, n) => (m, n),
                        };
                        if min > MAX_REPEAT || max > MAX_REPEAT {
                            return None;
                        }
                        let product = product.checked_mul(max.max(1))?;
                        if product > MAX_REPEAT {
                            return None;
                        }
                        self.product = self.product.max(product);
                        product
                    }
                };
                if let RepetitionKind::Range(_) = &repetition.op.kind {
                    self.counted(repetition.op.span)?;
                }
                self.ast(&repetition.ast, product)
            }
            Ast::Group(group) => {
                match &group.kind {
                    GroupKind::CaptureIndex(_) => {}
                    GroupKind::CaptureName {
                        starts_with_p,
                        name,
                    } => {
                        let mut chars = name.name.chars();
                        let plain = chars
                            .next()
                            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                        if !*starts_with_p || !plain {
                            return None;
                        }
                    }
                    GroupKind::NonCapturing(set) => flags(set)?,
                }
                self.ast(&group.ast, product)
            }
            Ast::Alternation(alternation) => {
                for ast in &alternation.asts {
                    self.ast(ast, product)?;
                }
                Some(())
            }
            Ast::Concat(concat) => {
                for ast in &concat.asts {
                    self.ast(ast, product)?;
                }
                Some(())
            }
        }
    }

    /// A counted repetition must be written `{n}`, `{n,}` or `{n,m}` (RE2 reads `{,m}` as text).
    fn counted(&self, span: ast::Span) -> Option<()> {
        let mut op = self
            .pattern
            .get(span.start.offset..span.end.offset)?
            .chars();
        (op.next() == Some('{') && op.next().is_some_and(|c| c.is_ascii_digit())).then_some(())
    }

    fn literal(&mut self, literal: &Literal) -> Option<()> {
        // Case folding is taken for ASCII only (`\x{e9}` is ASCII text for a letter that is
        // not).
        if self.fold && !literal.c.is_ascii() {
            return None;
        }
        let ok = match &literal.kind {
            LiteralKind::Verbatim | LiteralKind::Meta => true,
            // RE2 takes an escaped ASCII character that is neither a letter nor a digit as
            // itself (older releases not `\_`).
            LiteralKind::Superfluous => {
                literal.c.is_ascii() && !literal.c.is_ascii_alphanumeric() && literal.c != '_'
            }
            LiteralKind::HexFixed(HexLiteralKind::X) | LiteralKind::HexBrace(HexLiteralKind::X) => {
                true
            }
            LiteralKind::Special(_) => true,
            LiteralKind::Octal | LiteralKind::HexFixed(_) | LiteralKind::HexBrace(_) => false,
        };
        ok.then_some(())
    }

    fn assertion(&mut self, assertion: &Assertion) -> Option<()> {
        let text = match assertion.kind {
            AssertionKind::StartLine
            | AssertionKind::EndLine
            | AssertionKind::StartText
            | AssertionKind::EndText => return Some(()),
            AssertionKind::WordBoundary => r"(?-u:\b)",
            AssertionKind::NotWordBoundary => r"(?-u:\B)",
            _ => return None,
        };
        self.edits
            .push((assertion.span.start.offset, assertion.span.end.offset, text));
        Some(())
    }

    fn class_set(&mut self, set: &ClassSet) -> Option<()> {
        match set {
            ClassSet::BinaryOp(_) => None,
            ClassSet::Item(item) => self.class_item(item),
        }
    }

    fn class_item(&mut self, item: &ClassSetItem) -> Option<()> {
        match item {
            ClassSetItem::Empty(_) => Some(()),
            ClassSetItem::Literal(literal) => self.literal(literal),
            ClassSetItem::Range(range) => {
                self.literal(&range.start)?;
                self.literal(&range.end)
            }
            ClassSetItem::Ascii(_) => (!self.fold).then_some(()),
            ClassSetItem::Unicode(_) | ClassSetItem::Bracketed(_) => None,
            ClassSetItem::Perl(perl) => {
                if self.fold {
                    return None;
                }
                let text = match (&perl.kind, perl.negated) {
                    (ClassPerlKind::Digit, false) => "[:digit:]",
                    (ClassPerlKind::Digit, true) => "[:^digit:]",
                    (ClassPerlKind::Word, false) => "[:word:]",
                    (ClassPerlKind::Word, true) => "[:^word:]",
                    (ClassPerlKind::Space, false) => r"\t\n\x0C\r ",
                    // RE2's `\S` is not a POSIX class; not written out inside a class.
                    (ClassPerlKind::Space, true) => return None,
                };
                self.edits
                    .push((perl.span.start.offset, perl.span.end.offset, text));
                Some(())
            }
            ClassSetItem::Union(union) => {
                for item in &union.items {
                    self.class_item(item)?;
                }
                Some(())
            }
        }
    }
}

/// Flags RE2 reads too: `i m s U` and negation.
fn flags(flags: &ast::Flags) -> Option<()> {
    flags
        .items
        .iter()
        .all(|item| {
            matches!(
                item.kind,
                FlagsItemKind::Negation
                    | FlagsItemKind::Flag(
                        Flag::CaseInsensitive
                            | Flag::MultiLine
                            | Flag::DotMatchesNewLine
                            | Flag::SwapGreed
                    )
            )
        })
        .then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re2s_meaning_is_written_out() {
        for (pattern, expected) in [
            (r"\b[0-9]{3}\b", r"(?-u:\b)[0-9]{3}(?-u:\b)"),
            (r"\d\D\w\W", r"[0-9][^0-9][0-9A-Za-z_][^0-9A-Za-z_]"),
            (r"\s\S\B", r"[\t\n\x0C\r ][^\t\n\x0C\r ](?-u:\B)"),
            (r"[\d\s_]", r"[[:digit:]\t\n\x0C\r _]"),
            (r"[^\W]", r"[^[:^word:]]"),
            (
                r"(?P<year>a{2,1000})(?i:x)(?sm)^.$\A\z",
                r"(?P<year>a{2,1000})(?i:x)(?sm)^.$\A\z",
            ),
            (r"\.\-\x41\x{e9}\t", r"\.\-\x41\x{e9}\t"),
            ("é+", "é+"),
        ] {
            let translated = translate(pattern).map(|(translated, _)| translated);
            assert_eq!(translated.as_deref(), Some(expected), "{pattern}");
        }
    }

    #[test]
    fn what_the_two_read_differently_is_left_to_the_module() {
        for pattern in [
            r"\pL",
            r"\p{Greek}",
            r"[\pL]",
            "[a&&b]",
            "[a--b]",
            "[[a]]",
            "a**",
            "a{2}{3}",
            "x{1001}",
            "(?:a{100}){11}",
            "a{,5}",
            "(?x)a b",
            "(?R)a",
            "(?u)a",
            "(?<name>a)",
            "(?P<1x>a)",
            r"\<a",
            r"\b{start}a",
            r"\u0041",
            r"\_",
            "(?i)é",
            r"(?i)\x{e9}",
            r"(?i)\d",
            "(?i)[^a]",
            "(?i)[[:upper:]]",
            r"[^\S]",
            "a\0b",
            "(",
            "^*",
        ] {
            assert_eq!(translate(pattern), None, "{pattern}");
        }
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_patterns() {
        let mut regexes = Regexes::default();
        for index in 0..100 {
            let pattern = format!("a{index}");
            assert_eq!(
                regexes.is_match(pattern.as_bytes(), b"a5"),
                Some(index == 5)
            );
            assert!(regexes.patterns.len() <= MAX_PATTERNS);
        }
        // Left to the module: a text too long, not UTF-8, a pattern outside the subset.
        assert_eq!(regexes.is_match(b"a", &vec![b'a'; MAX_TEXT + 1]), None);
        assert_eq!(regexes.is_match(b"a", b"a\xff"), None);
        assert_eq!(regexes.is_match(br"\pL", b"a"), None);
        assert_eq!(regexes.decided(), 100);
    }

    #[test]
    fn a_long_text_for_a_heavy_pattern_is_left_to_the_module() {
        // 16 bytes, 1000 times nested: a weight of 16 000.
        let heavy = "(?:[a-c]x){1000}";
        assert_eq!(translate(heavy).map(|(_, weight)| weight), Some(16_000));
        let mut regexes = Regexes::default();
        let text = "ax".repeat(64);
        assert_eq!(
            regexes.is_match(heavy.as_bytes(), text.as_bytes()),
            Some(false)
        );
        let text = "ax".repeat(1000);
        assert_eq!(regexes.is_match(heavy.as_bytes(), text.as_bytes()), None);
        // A light pattern on the same text: the host's.
        assert_eq!(regexes.is_match(b"x$", text.as_bytes()), Some(true));
    }
}
