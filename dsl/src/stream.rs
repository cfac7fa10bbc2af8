//! The streaming form of output rules (see `Policy::streaming` in the engine): the rules
//! the streaming output guard can run as the answer arrives, deciding exactly as the rule does
//! on the whole text. Rules whose decision cannot be expressed exactly that way have none, and
//! the guard evaluates them on the whole text.

use portcullis_engine::StreamingRule;
use portcullis_engine::path::{FieldPath, Segment};

use crate::check::{CheckedCondition, CheckedRule};
use crate::model::Action;

/// The streaming form of `rule`, if it has one:
/// - `deny` when `response.content` contains one of the needles (a `contains` condition, or
///   an `any` of them), with ASCII needles: a case-insensitive pattern that matches exactly
///   where the lower-cased text contains a needle;
/// - `redact` with `always` and only `replace` redactions of `response.content`.
pub(crate) fn streaming_form(rule: &CheckedRule) -> Option<Vec<StreamingRule>> {
    match rule.rule.action {
        Action::Deny => {
            let mut needles = Vec::new();
            collect_needles(&rule.condition, &mut needles)?;
            // An empty needle holds on any text, even before the first byte arrives.
            if needles.iter().any(String::is_empty) {
                return None;
            }
            let alternatives = needles
                .iter()
                .map(|needle| needle_pattern(needle))
                .collect::<Option<Vec<_>>>()?;
            Some(vec![StreamingRule::DenyOnMatch {
                pattern: alternatives.join("|"),
                reason: rule.rule.reason.clone(),
                max_match_len: None,
            }])
        }
        Action::Redact
            if matches!(rule.condition, CheckedCondition::Always)
                && !rule.redactions.is_empty() =>
        {
            rule.redactions
                .iter()
                .map(|redaction| {
                    let pattern = redaction.pattern.clone()?;
                    let on_content = redaction.field == "response.content";
                    let replace =
                        redaction.strategy == portcullis_engine::RedactionStrategy::Replace;
                    (on_content && replace).then(|| StreamingRule::Replace {
                        pattern,
                        replacement: redaction.replacement_or_default().to_owned(),
                        max_match_len: None,
                    })
                })
                .collect()
        }
        _ => None,
    }
}

fn is_response_content(path: &FieldPath) -> bool {
    matches!(
        path.segments(),
        [Segment::Name(first), Segment::Name(second)] if first == "response" && second == "content"
    )
}

fn collect_needles(condition: &CheckedCondition, needles: &mut Vec<String>) -> Option<()> {
    match condition {
        CheckedCondition::Contains {
            path,
            needles: found,
        } if is_response_content(path) => {
            needles.extend(found.iter().cloned());
            Some(())
        }
        CheckedCondition::Any(items) => items
            .iter()
            .try_for_each(|item| collect_needles(item, needles)),
        _ => None,
    }
}

/// A pattern that matches exactly where the lower-cased text (`str::to_lowercase`) contains
/// `needle` (lower-cased, ASCII). Only two non-ASCII characters lower-case to something with
/// ASCII in it: the Kelvin sign (to `k`) and `İ` (to `i` and a combining dot, so it can only
/// stand for a needle's last `i`). No case folding is left to the regex engine, whose simple
/// case folding differs from lower-casing (`ſ` folds to `s`, but does not lower-case to it).
fn needle_pattern(needle: &str) -> Option<String> {
    if !needle.is_ascii() || needle.is_empty() {
        return None;
    }
    let last = needle.len() - 1;
    let mut pattern = String::new();
    for (at, byte) in needle.bytes().enumerate() {
        let character = char::from(byte);
        if character.is_ascii_lowercase() {
            pattern.push('[');
            pattern.push(character);
            pattern.push(character.to_ascii_uppercase());
            if character == 'k' {
                pattern.push('\u{212A}');
            }
            if character == 'i' && at == last {
                pattern.push('\u{0130}');
            }
            pattern.push(']');
        } else {
            pattern.push_str(&regex::escape(character.encode_utf8(&mut [0; 4])));
        }
    }
    Some(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needle_patterns_match_like_lower_casing() {
        let pattern = needle_pattern("api key.").expect("ascii");
        assert_eq!(pattern, "[aA][pP][iI] [kK\u{212A}][eE][yY]\\.");
        let regex = regex::Regex::new(&pattern).expect("valid");
        for (text, expected) in [
            ("my API KEY.", true),
            ("my api \u{212A}ey.", true),
            ("my apı key.", false),
            ("my api keyx", false),
        ] {
            assert_eq!(regex.is_match(text), expected, "{text}");
            assert_eq!(text.to_lowercase().contains("api key."), expected, "{text}");
        }
        let last_i = regex::Regex::new(&needle_pattern("hi").expect("ascii")).expect("valid");
        assert!(last_i.is_match("H\u{0130}"));
        assert!("H\u{0130}".to_lowercase().contains("hi"));
        let inner_i = regex::Regex::new(&needle_pattern("ix").expect("ascii")).expect("valid");
        assert!(!inner_i.is_match("\u{0130}x"));
        assert!(!"\u{0130}x".to_lowercase().contains("ix"));
        assert!(
            !regex::Regex::new(&needle_pattern("s").expect("ascii"))
                .expect("valid")
                .is_match("ſ")
        );
        assert_eq!(needle_pattern("straße"), None);
    }
}
