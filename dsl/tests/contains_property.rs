//! Property: `contains` agrees with a naive reference (lower-case both sides, then look for a
//! substring) on random contexts, ASCII and not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_dsl::DslInputPolicy;
use portcullis_engine::{InputContext, Message, Metadata};
use proptest::prelude::*;

/// Characters that make case folding interesting: ASCII letters of both cases, letters whose
/// lower case differs in length (İ, ẞ), the final sigma, the Kelvin sign, and spaces.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            'a', 'b', 'A', 'B', 'k', 'K', ' ', '-', 'é', 'É', 'ß', 'ẞ', 'İ', 'i', 'ı', 'Σ', 'σ',
            'ς', '\u{212A}', '1',
        ]),
        0..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn needle() -> impl Strategy<Value = String> {
    text().prop_filter("needles are not empty", |needle| !needle.is_empty())
}

fn reference(messages: &[String], needles: &[String]) -> bool {
    messages.iter().any(|message| {
        let message = message.to_lowercase();
        needles
            .iter()
            .any(|needle| message.contains(&needle.to_lowercase()))
    })
}

/// Whether a `contains` rule over `field` with `needles` denies a conversation of `messages`.
fn denies(field: &str, messages: &[String], needles: &[String]) -> Result<bool, TestCaseError> {
    let rule = serde_json::json!({
        "condition": { "field": field, "contains": needles },
        "action": "deny",
    });
    let policy = DslInputPolicy::from_source("p", &rule.to_string(), "p.json")
        .map_err(|error| TestCaseError::fail(error.to_string()))?;
    let context = InputContext::new(
        messages
            .iter()
            .map(|text| Message::user(text.clone()))
            .collect(),
        Metadata::new("agent", "session"),
    );
    Ok(policy.decide(&context).is_deny())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn contains_agrees_with_the_naive_reference(
        messages in prop::collection::vec(text(), 0..4),
        needles in prop::collection::vec(needle(), 1..5),
        // Also look for a piece of a message, so that matches are frequent.
        borrow in prop::option::of((0usize..4, 0usize..24, 1usize..6)),
    ) {
        let mut needles = needles;
        if let Some((which, start, length)) = borrow
            && let Some(message) = messages.get(which % messages.len().max(1))
        {
            let piece: String = message.chars().skip(start % (message.chars().count() + 1)).take(length).collect();
            if !piece.is_empty() {
                needles.push(piece.to_uppercase());
            }
        }
        prop_assert_eq!(
            denies("messages.*.content", &messages, &needles)?,
            reference(&messages, &needles)
        );
    }

    #[test]
    fn ascii_texts_agree_too(
        message in "[ -~]{0,200}",
        needles in prop::collection::vec("[ -~]{1,6}", 1..5),
    ) {
        let messages = [message];
        prop_assert_eq!(
            denies("messages.-1.content", &messages, &needles)?,
            reference(&messages, &needles)
        );
    }

    /// Texts of every size the matcher treats differently (lower-cased in stack buffers of
    /// 128, 1,024 and 4,096 bytes, or in overlapping pieces of 4,096), ASCII or with one
    /// non-ASCII letter.
    #[test]
    fn texts_of_every_size_agree(
        length in prop_oneof![0usize..300, 900usize..1200, 3900usize..4300, 4300usize..6000],
        seed in "[ -~]{1,40}",
        non_ascii in prop::option::of((any::<prop::sample::Index>(), prop::sample::select(vec!['É', 'İ', '\u{212A}', 'ß']))),
        piece in (any::<prop::sample::Index>(), 1usize..8),
        extra in "[ -~]{1,6}",
    ) {
        let mut message: String = seed.chars().cycle().take(length).collect();
        if let Some((at, letter)) = non_ascii
            && !message.is_empty()
        {
            message.insert(at.index(message.len()), letter);
        }
        let mut needles = vec![extra];
        if !message.is_empty() {
            let chars: Vec<char> = message.chars().collect();
            let start = piece.0.index(chars.len());
            let taken: String = chars[start..].iter().take(piece.1).collect();
            needles.push(taken.to_uppercase());
        }
        let messages = [message];
        prop_assert_eq!(
            denies("messages.-1.content", &messages, &needles)?,
            reference(&messages, &needles)
        );
    }
}
