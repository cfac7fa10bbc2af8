//! Strings and regular expressions: `regex.*`, `strings.*`, `indexof_n`, `glob.quote_meta`.
//!
//! OPA's regular expressions are Go's (RE2 syntax). Patterns are translated to the `regex`
//! crate's syntax so that they mean what they mean in Go: `\d`, `\w`, `\s` and `\b` are ASCII,
//! `\Q…\E` quotes, a `{` that does not start a repetition is a literal, a repetition count
//! above 1000 is an error, and `[` inside a class is a literal. Compiled patterns are cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use regex::Regex;
use serde_json::Value;

use super::{
    BuiltinContext, BuiltinError, HostBuiltin, Outcome, VALUE_COST, arg, integer, string, type_name,
};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "regex.match",
        func: |args, _| Ok(Value::Bool(regex(args, 0)?.is_match(string(args, 1)?))),
    },
    HostBuiltin {
        name: "regex.is_valid",
        func: |args, _| {
            Ok(Value::Bool(
                args.first()
                    .and_then(Value::as_str)
                    .is_some_and(|pattern| compile(pattern).is_ok()),
            ))
        },
    },
    HostBuiltin {
        name: "regex.replace",
        func: regex_replace,
    },
    HostBuiltin {
        name: "regex.split",
        func: regex_split,
    },
    HostBuiltin {
        name: "regex.find_n",
        func: regex_find_n,
    },
    HostBuiltin {
        name: "regex.find_all_string_submatch_n",
        func: regex_submatches,
    },
    HostBuiltin {
        name: "strings.reverse",
        func: |args, context| {
            let text = string(args, 0)?;
            context.charge(text.len(), "strings.reverse's output")?;
            Ok(Value::from(text.chars().rev().collect::<String>()))
        },
    },
    HostBuiltin {
        name: "strings.any_prefix_match",
        func: |args, context| any_match(args, context, |s, p| s.starts_with(p)),
    },
    HostBuiltin {
        name: "strings.any_suffix_match",
        func: |args, context| any_match(args, context, |s, p| s.ends_with(p)),
    },
    HostBuiltin {
        name: "indexof_n",
        func: indexof_n,
    },
    HostBuiltin {
        name: "regex.template_match",
        func: template_match,
    },
    HostBuiltin {
        name: "regex.globs_match",
        func: super::globs::globs_match,
    },
    HostBuiltin {
        name: "strings.render_template",
        func: super::template::render_template,
    },
    HostBuiltin {
        name: "strings.count",
        func: |args, _| {
            let (text, part) = (string(args, 0)?, string(args, 1)?);
            // Go's `strings.Count`: non-overlapping; an empty substring counts the gaps.
            let count = if part.is_empty() {
                text.chars().count() + 1
            } else {
                text.matches(part).count()
            };
            Ok(Value::from(count))
        },
    },
    HostBuiltin {
        name: "glob.quote_meta",
        func: |args, context| {
            let text = string(args, 0)?;
            context.charge(text.len().saturating_mul(2), "glob.quote_meta's output")?;
            let mut out = String::with_capacity(text.len());
            for c in text.chars() {
                if matches!(c, '*' | '?' | '\\' | '[' | ']' | '{' | '}') {
                    out.push('\\');
                }
                out.push(c);
            }
            Ok(Value::from(out))
        },
    },
];

/// The most compiled patterns kept; the cache starts over when it is full.
const CACHE_CAPACITY: usize = 256;

/// `pattern` (Go syntax) compiled, from the cache when it was compiled before.
pub(crate) fn compile(pattern: &str) -> Result<Arc<Regex>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(found) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(pattern)
    {
        return Ok(Arc::clone(found));
    }
    let translated = translate(pattern)?;
    let compiled = regex::RegexBuilder::new(&translated)
        .octal(true)
        .build()
        .map(Arc::new)
        .map_err(|error| format!("error parsing regexp: {error}"))?;
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= CACHE_CAPACITY {
        cache.clear();
    }
    cache.insert(pattern.to_owned(), Arc::clone(&compiled));
    Ok(compiled)
}

fn regex(args: &[Value], index: usize) -> Result<Arc<Regex>, BuiltinError> {
    compile(string(args, index)?).map_err(BuiltinError::Failed)
}

/// Go's largest repetition count.
const MAX_REPEAT: u32 = 1000;

const ASCII_DIGIT: &str = "0-9";
const ASCII_WORD: &str = "0-9A-Za-z_";
const ASCII_SPACE: &str = r"\t\n\x0C\r\x20";

/// A Go (RE2) pattern in the `regex` crate's syntax, with Go's meaning.
pub(crate) fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut in_class = false;
    // Right after `[` or `[^`, where `]` is a literal.
    let mut class_start = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c == '\\' {
            let Some(&next) = chars.get(i) else {
                return Err("error parsing regexp: trailing backslash at end of expression".into());
            };
            i += 1;
            let class = |set: &str, negated: bool| match (in_class, negated) {
                (true, false) => set.to_owned(),
                (_, true) => format!("[^{set}]"),
                (false, false) => format!("[{set}]"),
            };
            match next {
                'Q' => {
                    let mut literal = String::new();
                    while i < chars.len() && !(chars[i] == '\\' && chars.get(i + 1) == Some(&'E')) {
                        literal.push(chars[i]);
                        i += 1;
                    }
                    if i < chars.len() {
                        i += 2;
                    }
                    for c in literal.chars() {
                        escape_char(&mut out, c);
                    }
                }
                'E' => {}
                'd' => out.push_str(&class(ASCII_DIGIT, false)),
                'D' => out.push_str(&class(ASCII_DIGIT, true)),
                'w' => out.push_str(&class(ASCII_WORD, false)),
                'W' => out.push_str(&class(ASCII_WORD, true)),
                's' => out.push_str(&class(ASCII_SPACE, false)),
                'S' => out.push_str(&class(ASCII_SPACE, true)),
                'b' if !in_class => out.push_str(r"(?-u:\b)"),
                'B' if !in_class => out.push_str(r"(?-u:\B)"),
                'C' => out.push_str("(?s:.)"),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
            class_start = false;
            continue;
        }
        if in_class {
            match c {
                ']' if !class_start => {
                    in_class = false;
                    out.push(']');
                }
                '^' if class_start && out.ends_with('[') => {
                    out.push('^');
                    continue;
                }
                '[' if chars.get(i) == Some(&':') => {
                    // A POSIX class, `[:alpha:]`: copied whole.
                    out.push('[');
                    while i < chars.len() {
                        out.push(chars[i]);
                        i += 1;
                        if chars[i - 1] == ']' {
                            break;
                        }
                    }
                }
                '[' | '&' | '~' => {
                    out.push('\\');
                    out.push(c);
                }
                '-' if chars.get(i) == Some(&'-') => out.push_str(r"\-"),
                _ => out.push(c),
            }
            class_start = false;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                class_start = true;
                out.push('[');
            }
            '{' => match repetition(&chars[i..])? {
                Some(len) => {
                    out.push('{');
                    out.extend(&chars[i..i + len]);
                    i += len;
                }
                None => out.push_str(r"\{"),
            },
            '}' => out.push_str(r"\}"),
            _ => out.push(c),
        }
    }
    Ok(out)
}

fn escape_char(out: &mut String, c: char) {
    if regex_syntax_meta(c) {
        out.push('\\');
    }
    out.push(c);
}

fn regex_syntax_meta(c: char) -> bool {
    matches!(
        c,
        '\\' | '.'
            | '+'
            | '*'
            | '?'
            | '('
            | ')'
            | '|'
            | '['
            | ']'
            | '{'
            | '}'
            | '^'
            | '$'
            | '#'
            | '&'
            | '-'
            | '~'
    )
}

/// After a `{`: the length of `n}`, `n,}` or `n,m}` when that is what follows (a repetition),
/// `None` when it is not (the `{` is a literal). A count above 1000 is an error, as in Go.
fn repetition(rest: &[char]) -> Result<Option<usize>, String> {
    let digits = |from: usize| {
        rest[from..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let count = |from: usize, len: usize| -> u64 {
        rest[from..from + len].iter().fold(0u64, |n, c| {
            n.saturating_mul(10)
                .saturating_add(u64::from(c.to_digit(10).unwrap_or(0)))
        })
    };
    let first = digits(0);
    if first == 0 {
        return Ok(None);
    }
    let mut i = first;
    let min = count(0, first);
    let mut max = Some(min);
    if rest.get(i) == Some(&',') {
        i += 1;
        let second = digits(i);
        max = (second > 0).then(|| count(i, second));
        i += second;
    }
    if rest.get(i) != Some(&'}') {
        return Ok(None);
    }
    let text: String = rest[..=i].iter().collect();
    if min > u64::from(MAX_REPEAT)
        || max.is_some_and(|max| max > u64::from(MAX_REPEAT) || max < min)
    {
        return Err(format!(
            "error parsing regexp: invalid repeat count: `{{{text}`"
        ));
    }
    Ok(Some(i + 1))
}

/// OPA's `regex.template_match(template, value, start, end)`: the template's parts between the
/// delimiters are regular expressions, the rest literal text, and the whole must match.
fn template_match(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let template = string(args, 0)?;
    let value = string(args, 1)?;
    let delimiter = |index: usize| -> Result<char, BuiltinError> {
        string(args, index)?
            .chars()
            .next()
            .ok_or_else(|| BuiltinError::Failed(format!("operand {} must not be empty", index + 1)))
    };
    let (open, close) = (delimiter(2)?, delimiter(3)?);
    context.charge(
        template.len().saturating_mul(2),
        "regex.template_match's pattern",
    )?;
    let mut pattern = String::from("^");
    let mut literal = String::new();
    let mut inner = String::new();
    let mut level = 0usize;
    for c in template.chars() {
        if c == open {
            level += 1;
            if level == 1 {
                for l in literal.drain(..) {
                    escape_char(&mut pattern, l);
                }
                continue;
            }
        } else if c == close && level > 0 {
            level -= 1;
            if level == 0 {
                pattern.push('(');
                pattern.push_str(&inner);
                pattern.push(')');
                inner.clear();
                continue;
            }
        } else if c == close {
            return Err(BuiltinError::Failed(format!(
                "unbalanced braces in {template:?}"
            )));
        }
        if level > 0 {
            inner.push(c);
        } else {
            literal.push(c);
        }
    }
    if level > 0 {
        return Err(BuiltinError::Failed(format!(
            "unbalanced braces in {template:?}"
        )));
    }
    for l in literal.drain(..) {
        escape_char(&mut pattern, l);
    }
    pattern.push('$');
    Ok(Value::Bool(
        compile(&pattern)
            .map_err(BuiltinError::Failed)?
            .is_match(value),
    ))
}

/// The count operand of the `_n` builtins: negative is "all".
fn limit(args: &[Value], index: usize) -> Result<usize, BuiltinError> {
    let n = integer(args, index)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

fn regex_replace(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?;
    let pattern = regex(args, 1)?;
    let replacement = string(args, 2)?;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for captures in pattern.captures_iter(text) {
        context.check_time()?;
        let Some(whole) = captures.get(0) else {
            continue;
        };
        out.push_str(&text[last..whole.start()]);
        let before = out.len();
        captures.expand(replacement, &mut out);
        context.charge(
            out.len() - before + whole.start() - last,
            "regex.replace's output",
        )?;
        last = whole.end();
    }
    out.push_str(&text[last..]);
    Ok(Value::from(out))
}

/// Go's `regexp.Split(s, -1)`: an empty match at the start or the end leaves no empty piece.
fn regex_split(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let pattern = regex(args, 0)?;
    let text = string(args, 1)?;
    if text.is_empty() {
        return Ok(Value::from(vec![Value::from("")]));
    }
    let mut pieces = Vec::new();
    let (mut begin, mut end) = (0, 0);
    for found in pattern.find_iter(text) {
        context.check_time()?;
        context.charge(VALUE_COST, "regex.split's pieces")?;
        end = found.start();
        if found.end() != 0 {
            pieces.push(Value::from(&text[begin..end]));
        }
        begin = found.end();
    }
    if end != text.len() {
        pieces.push(Value::from(&text[begin..]));
    }
    context.charge(text.len(), "regex.split's pieces")?;
    Ok(Value::from(pieces))
}

fn regex_find_n(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let pattern = regex(args, 0)?;
    let text = string(args, 1)?;
    let n = limit(args, 2)?;
    let mut found = Vec::new();
    for m in pattern.find_iter(text).take(n) {
        context.check_time()?;
        context.charge(VALUE_COST + m.len(), "regex.find_n's matches")?;
        found.push(Value::from(m.as_str()));
    }
    Ok(Value::from(found))
}

fn regex_submatches(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let pattern = regex(args, 0)?;
    let text = string(args, 1)?;
    let n = limit(args, 2)?;
    let mut found = Vec::new();
    for captures in pattern.captures_iter(text).take(n) {
        context.check_time()?;
        let mut groups = Vec::with_capacity(captures.len());
        for group in captures.iter() {
            let group = group.map_or("", |m| m.as_str());
            context.charge(
                VALUE_COST + group.len(),
                "regex.find_all_string_submatch_n's matches",
            )?;
            groups.push(Value::from(group));
        }
        found.push(Value::from(groups));
    }
    Ok(Value::from(found))
}

fn strings_of(value: &Value) -> Result<Vec<&str>, BuiltinError> {
    match value {
        Value::String(s) => Ok(vec![s.as_str()]),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str().ok_or_else(|| {
                    BuiltinError::Failed(format!("expected strings, got {}", type_name(item)))
                })
            })
            .collect(),
        other => Err(BuiltinError::Failed(format!(
            "expected a string or an array of strings, got {}",
            type_name(other)
        ))),
    }
}

fn any_match(
    args: &[Value],
    context: &mut BuiltinContext,
    test: fn(&str, &str) -> bool,
) -> Outcome {
    let search = strings_of(arg(args, 0)?)?;
    let base = strings_of(arg(args, 1)?)?;
    for s in &search {
        for b in &base {
            context.check_time()?;
            if test(s, b) {
                return Ok(Value::Bool(true));
            }
        }
    }
    Ok(Value::Bool(false))
}

/// Every index (in characters) where `needle` starts in `haystack`, overlapping matches
/// included, as OPA's `indexof_n`. Linear: Knuth–Morris–Pratt over the bytes (a match of
/// UTF-8 text in UTF-8 text starts on a character boundary).
fn indexof_n(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let haystack = string(args, 0)?.as_bytes();
    let needle = string(args, 1)?.as_bytes();
    if needle.is_empty() {
        return Err("empty search character".into());
    }
    context.charge(needle.len() * size_of::<usize>(), "indexof_n's table")?;
    let mut failure = vec![0usize; needle.len()];
    let mut k = 0;
    for i in 1..needle.len() {
        while k > 0 && needle[i] != needle[k] {
            k = failure[k - 1];
        }
        if needle[i] == needle[k] {
            k += 1;
        }
        failure[i] = k;
    }
    let mut found = Vec::new();
    let (mut chars_before, mut counted_to) = (0usize, 0usize);
    let mut matched = 0;
    for (i, &byte) in haystack.iter().enumerate() {
        context.check_time()?;
        while matched > 0 && byte != needle[matched] {
            matched = failure[matched - 1];
        }
        if byte == needle[matched] {
            matched += 1;
        }
        if matched == needle.len() {
            let start = i + 1 - needle.len();
            chars_before += haystack[counted_to..start]
                .iter()
                .filter(|&&b| (b as i8) >= -0x40)
                .count();
            counted_to = start;
            context.charge(VALUE_COST, "indexof_n's indices")?;
            found.push(Value::from(chars_before));
            matched = failure[matched - 1];
        }
    }
    Ok(Value::from(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Outcome {
        let Value::Array(args) = args else {
            unreachable!()
        };
        let builtin = TABLE.iter().find(|b| b.name == name).expect(name);
        (builtin.func)(&args, &mut BuiltinContext::default())
    }

    #[test]
    fn string_and_regex_builtins() {
        assert_eq!(
            call("regex.replace", json!(["a1b22", "[0-9]+", "#"])),
            Ok(json!("a#b#"))
        );
        assert_eq!(
            call("regex.replace", json!(["ab", "(a)(b)", "$2$1${1}x"])),
            Ok(json!("baax"))
        );
        assert_eq!(
            call("regex.split", json!([",\\s*", "a, b,c"])),
            Ok(json!(["a", "b", "c"]))
        );
        assert_eq!(
            call("regex.find_n", json!(["[0-9]", "a1b2c3", 2])),
            Ok(json!(["1", "2"]))
        );
        assert_eq!(
            call(
                "regex.find_all_string_submatch_n",
                json!(["(a)(b)?", "ab a", -1])
            ),
            Ok(json!([["ab", "a", "b"], ["a", "a", ""]]))
        );
        assert!(call("regex.match", json!(["(", "x"])).is_err());
        assert_eq!(
            call("strings.reverse", json!(["héllo"])),
            Ok(json!("olléh"))
        );
        assert_eq!(
            call("strings.any_prefix_match", json!([["x/y", "a/b"], "a/"])),
            Ok(json!(true))
        );
        assert_eq!(
            call("indexof_n", json!(["aéaa", "a"])),
            Ok(json!([0, 2, 3]))
        );
    }

    /// Each line: OPA v1.20's answer (Go's `regexp`, RE2 syntax).
    #[test]
    fn regular_expressions_mean_what_they_mean_in_go() {
        let is_match = |pattern: &str, text: &str| call("regex.match", json!([pattern, text]));
        // `\d`, `\w`, `\s` and `\b` are ASCII.
        assert_eq!(is_match(r"^\d+$", "١٢٣"), Ok(json!(false)));
        assert_eq!(is_match(r"^\d+$", "123"), Ok(json!(true)));
        assert_eq!(is_match(r"^\w+$", "héllo"), Ok(json!(false)));
        assert_eq!(is_match(r"^\s$", "\u{a0}"), Ok(json!(false)));
        assert_eq!(is_match(r"^\s$", "\u{b}"), Ok(json!(false)));
        assert_eq!(is_match(r"^[\d\s]+$", "1 2"), Ok(json!(true)));
        assert_eq!(is_match(r"^[^\D]+$", "12"), Ok(json!(true)));
        assert_eq!(is_match(r"\bé", "é"), Ok(json!(false)));
        // `{` that starts no repetition is a literal; counts above 1000 are errors.
        assert_eq!(is_match(r"^a{$", "a{"), Ok(json!(true)));
        assert_eq!(is_match(r"^a{,2}$", "a{,2}"), Ok(json!(true)));
        assert_eq!(is_match(r"^a{2}$", "aa"), Ok(json!(true)));
        assert!(is_match(r"a{1001}", "a").is_err());
        assert!(is_match(r"a{2,1}", "a").is_err());
        assert_eq!(call("regex.is_valid", json!(["a{1000}"])), Ok(json!(true)));
        assert_eq!(call("regex.is_valid", json!(["a{1001}"])), Ok(json!(false)));
        // `\Q…\E` quotes; `[` in a class is a literal.
        assert_eq!(is_match(r"^\Q.*+\E$", ".*+"), Ok(json!(true)));
        assert_eq!(is_match(r"^\Q.*", "x.*"), Ok(json!(false)));
        assert_eq!(is_match(r"^[a[]+$", "a[a"), Ok(json!(true)));
        assert_eq!(is_match(r"^[a&&b]+$", "a&b"), Ok(json!(true)));
        assert_eq!(is_match(r"^[[:alpha:]]+$", "ab"), Ok(json!(true)));
        assert_eq!(is_match(r"^\101$", "A"), Ok(json!(true)));
    }

    /// Go's `regexp.Split(s, -1)`.
    #[test]
    fn split_as_go_does() {
        let split = |pattern: &str, text: &str| call("regex.split", json!([pattern, text]));
        assert_eq!(split("", "abc"), Ok(json!(["a", "b", "c"])));
        assert_eq!(split("x*", "axbc"), Ok(json!(["a", "b", "c"])));
        assert_eq!(split(",", ",a,"), Ok(json!(["", "a", ""])));
        assert_eq!(split(",", ""), Ok(json!([""])));
        assert_eq!(split("a", "a"), Ok(json!(["", ""])));
        assert_eq!(
            call("regex.find_n", json!(["a*", "baaab", -1])),
            Ok(json!(["", "aaa", ""]))
        );
        assert_eq!(call("regex.find_n", json!(["a", "aaa", 0])), Ok(json!([])));
    }

    /// The examples of OPA's documentation.
    #[test]
    fn templates_match_as_opa_does() {
        let matches = |template: &str, value: &str| {
            call("regex.template_match", json!([template, value, "{", "}"]))
        };
        assert_eq!(matches("urn:foo:{.*}", "urn:foo:bar:baz"), Ok(json!(true)));
        assert_eq!(
            matches("urn:foo.bar.com:{.*}", "urn:foo.bar.com:bar:baz"),
            Ok(json!(true))
        );
        assert_eq!(
            matches("urn:foo.bar.com:{.*}", "urn:foo_bar_com:bar:baz"),
            Ok(json!(false))
        );
        assert_eq!(
            matches("urn:foo:{[a-z]{2}}:x", "urn:foo:ab:x"),
            Ok(json!(true))
        );
        assert_eq!(
            matches("urn:foo:{[a-z]{2}}:x", "urn:foo:abc:x"),
            Ok(json!(false))
        );
        assert!(matches("urn:foo:{.*", "urn:foo:x").is_err());
        assert_eq!(
            call(
                "regex.template_match",
                json!(["a<[0-9]+>b", "a12b", "<", ">"])
            ),
            Ok(json!(true))
        );
    }

    /// The examples of OPA's documentation.
    #[test]
    fn counts_and_quotes_answer_as_opa_does() {
        assert_eq!(call("strings.count", json!(["cheese", "e"])), Ok(json!(3)));
        assert_eq!(call("strings.count", json!(["aaaa", "aa"])), Ok(json!(2)));
        assert_eq!(call("strings.count", json!(["héllo", ""])), Ok(json!(6)));
        assert_eq!(
            call("glob.quote_meta", json!(["*.github.com"])),
            Ok(json!("\\*.github.com"))
        );
        assert_eq!(
            call("glob.quote_meta", json!(["[a]{b}?\\"])),
            Ok(json!("\\[a\\]\\{b\\}\\?\\\\"))
        );
    }

    #[test]
    fn indexof_n_counts_overlapping_matches_in_characters() {
        assert_eq!(call("indexof_n", json!(["aaa", "aa"])), Ok(json!([0, 1])));
        assert_eq!(
            call("indexof_n", json!(["éaéaé", "éaé"])),
            Ok(json!([0, 2]))
        );
        assert_eq!(call("indexof_n", json!(["abc", "d"])), Ok(json!([])));
        assert!(call("indexof_n", json!(["abc", ""])).is_err());
    }

    #[test]
    fn long_runs_stay_linear_and_bounded() {
        // A run of a million `a`s and a needle of half a million: quadratic would be 2.5e11 steps.
        let haystack = "a".repeat(1_000_000);
        let needle = "a".repeat(500_000);
        let found = call("indexof_n", json!([haystack, needle])).expect("indexof_n");
        assert_eq!(found.as_array().map(Vec::len), Some(500_001));
        // Matches cost memory: under a small limit, the indices do not fit.
        let mut context = BuiltinContext::new(1 << 16, u64::MAX, |_| false);
        context.begin_call();
        let error = indexof_n(&[json!(haystack), json!("a")], &mut context);
        assert!(
            matches!(error, Err(BuiltinError::MemoryLimit(_))),
            "{error:?}"
        );
        // And the deadline stops it.
        let mut context = BuiltinContext::new(usize::MAX, 0, |_| true);
        context.begin_call();
        assert_eq!(
            indexof_n(&[json!(haystack), json!("a")], &mut context),
            Err(BuiltinError::TimeLimit)
        );
    }

    #[test]
    fn replacements_are_bounded() {
        let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
        context.begin_call();
        let text = "a".repeat(10_000);
        let replacement = "$0".repeat(1_000);
        let error = regex_replace(&[json!(text), json!("a"), json!(replacement)], &mut context);
        assert!(
            matches!(error, Err(BuiltinError::MemoryLimit(_))),
            "{error:?}"
        );
    }
}
