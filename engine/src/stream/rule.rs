//! What an output policy declares to stream: [`StreamingRule`], and the whole-text decision
//! a list of rules stands for.
//!
//! A leaf: policies name these types, so they depend on nothing above plain data.

use std::borrow::Cow;

use crate::decision::{PolicyDecision, Redaction};
use crate::error::BoxError;
use crate::pattern::cached_regex;

/// One rule of a policy's streaming form: a regular expression over `response.content`.
///
/// A policy that returns streaming rules promises that its whole-text decision is what the
/// rules give: `deny` when a [`DenyOnMatch`](StreamingRule::DenyOnMatch) pattern matches,
/// otherwise a `redact` of `response.content` with the
/// [`Replace`](StreamingRule::Replace) rules in order (or `allow` when nothing matched).
/// [`decide_whole_text`] computes exactly that decision, so an `evaluate` built on it keeps the
/// promise by construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamingRule {
    /// Deny as soon as `pattern` matches.
    DenyOnMatch {
        /// The regular expression.
        pattern: String,
        /// The denial's reason.
        reason: Option<String>,
        /// The longest match, in bytes, when the pattern itself has no bound.
        max_match_len: Option<usize>,
    },
    /// Replace every match of `pattern` with `replacement`.
    Replace {
        /// The regular expression.
        pattern: String,
        /// The replacement text, inserted literally.
        replacement: String,
        /// The longest match, in bytes, when the pattern itself has no bound.
        max_match_len: Option<usize>,
    },
}

impl StreamingRule {
    /// A rule that denies when any of `needles` occurs, ignoring case (Unicode simple case
    /// folding), as a DSL `contains` rule does.
    pub fn deny_on_any(needles: &[impl AsRef<str>], reason: Option<String>) -> Self {
        let alternatives: Vec<String> = needles
            .iter()
            .map(|needle| regex::escape(needle.as_ref()))
            .collect();
        StreamingRule::DenyOnMatch {
            pattern: format!("(?i:{})", alternatives.join("|")),
            reason,
            max_match_len: None,
        }
    }

    pub(crate) fn pattern(&self) -> &str {
        match self {
            StreamingRule::DenyOnMatch { pattern, .. } | StreamingRule::Replace { pattern, .. } => {
                pattern
            }
        }
    }

    pub(crate) fn stated_max(&self) -> Option<usize> {
        match self {
            StreamingRule::DenyOnMatch { max_match_len, .. }
            | StreamingRule::Replace { max_match_len, .. } => *max_match_len,
        }
    }
}

/// The whole-text decision a list of streaming rules stands for, on `text` (the answer's
/// `response.content`): rules apply in order, a [`Replace`](StreamingRule::Replace) changes the
/// text later rules see, and the first [`DenyOnMatch`](StreamingRule::DenyOnMatch) that
/// matches denies. Otherwise the decision is a `redact` of `response.content` with the
/// replace rules that matched, or `allow`.
///
/// An output policy whose [`evaluate`](crate::Policy::evaluate) returns this for its own
/// rules decides exactly as the streaming guard does when it runs them incrementally.
pub fn decide_whole_text(rules: &[StreamingRule], text: &str) -> Result<PolicyDecision, BoxError> {
    let mut current = Cow::Borrowed(text);
    let mut redactions = Vec::new();
    for rule in rules {
        let regex = cached_regex(rule.pattern())?;
        match rule {
            StreamingRule::DenyOnMatch { reason, .. } => {
                if regex.is_match(&current) {
                    return Ok(PolicyDecision::Deny {
                        reason: reason.clone(),
                        policy_id: None,
                    });
                }
            }
            StreamingRule::Replace {
                pattern,
                replacement,
                ..
            } => {
                if let Cow::Owned(replaced) =
                    regex.replace_all(&current, regex::NoExpand(replacement))
                {
                    current = Cow::Owned(replaced);
                    redactions.push(
                        Redaction::replace("response.content", pattern.clone())
                            .with_replacement(replacement.clone()),
                    );
                }
            }
        }
    }
    Ok(if redactions.is_empty() {
        PolicyDecision::allow()
    } else {
        PolicyDecision::redact(redactions)
    })
}
