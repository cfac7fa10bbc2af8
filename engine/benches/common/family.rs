//! The streaming benchmark family: rule sets people write, not only the benchmarked one.
//!
//! Each set mixes `replace` redactions (patterns led by a literal, by a class, or with no
//! literal at all) with a `contains` denial of 1, 10 or 100 words; each runs over a 64 KiB
//! plain-prose answer whose secrets (one match of every redaction of the set) come in every
//! sentence (dense) or every hundredth (sparse). No denied word occurs in the answer, so every
//! stream runs to its end. The `ratios` benchmark measures each member; the streaming property
//! tests (`tests/stream.rs`) run over the same sets.

/// One rule set of the family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleSet {
    pub(crate) name: &'static str,
    /// `replace` redactions, in order: pattern and replacement.
    pub(crate) redactions: &'static [(&'static str, &'static str)],
    /// How many words the `contains` denial lists.
    pub(crate) denied_words: usize,
    /// A sentence holding one match of every redaction.
    pub(crate) secret: &'static str,
}

/// The sets of the family.
pub(crate) const RULE_SETS: [RuleSet; 4] = [
    // The set of issue 42: a class-led SSN (no literal prefix) and one denied phrase.
    RuleSet {
        name: "ssn+phrase",
        redactions: &[("[0-9]{3}-[0-9]{2}-[0-9]{4}", "[SSN]")],
        denied_words: 1,
        secret: "Her SSN is 123-45-6789, as filed. ",
    },
    // Class-led patterns, one of which has no literal any match must contain.
    RuleSet {
        name: "class-led",
        redactions: &[
            ("[0-9]{3}-[0-9]{2}-[0-9]{4}", "[SSN]"),
            ("[A-Z]{2}[0-9]{7}", "[PASSPORT]"),
            // (`\w` here would be Unicode's: too large a program to stream.)
            (r"\b[A-Za-z0-9._]{2,20}@[a-z0-9]{2,20}\.com\b", "[EMAIL]"),
        ],
        denied_words: 10,
        secret: "Passport XK1234567, SSN 123-45-6789, mail ann@example.com today. ",
    },
    // Patterns led by a literal.
    RuleSet {
        name: "literal-led",
        redactions: &[
            ("api_key=[A-Za-z0-9]{16}", "api_key=[KEY]"),
            ("Bearer [A-Za-z0-9]{20,40}", "Bearer [TOKEN]"),
        ],
        denied_words: 100,
        secret: "Use api_key=AbCdEfGh12345678 with Bearer abcdefghij0123456789xyz now. ",
    },
    // Both kinds, with word boundaries.
    RuleSet {
        name: "mixed",
        redactions: &[
            (r"\b\d{3}-\d{2}-\d{4}\b", "[SSN]"),
            ("token-[0-9a-f]{8}", "[TOKEN]"),
            (r"\b[0-9]{4} [0-9]{4} [0-9]{4} [0-9]{4}\b", "[CARD]"),
        ],
        denied_words: 100,
        secret: "Card 4111 1111 1111 1111, token-0badcafe, SSN 123-45-6789 on file. ",
    },
];

/// `count` made-up words, none of which occurs in [`answer`]'s prose.
pub(crate) fn denied_words(count: usize) -> Vec<String> {
    const SYLLABLES: [&str; 10] = [
        "zor", "qua", "vex", "lum", "trix", "bak", "nyx", "pol", "grif", "fum",
    ];
    (0..count)
        .map(|at| match count {
            1 => "wire the funds to this account".to_owned(),
            _ => format!(
                "{}{}{}",
                SYLLABLES[at % 10],
                SYLLABLES[(at / 10) % 10],
                SYLLABLES[(at * 7 + 3) % 10]
            ),
        })
        .collect()
}

/// Plain sentences, cycled.
const PROSE: [&str; 4] = [
    "The quarterly report shows steady growth across all regions and segments. ",
    "Our team reviewed the proposal and agreed to move forward with the plan. ",
    "Customers in the northern market asked for faster delivery and better support. ",
    "We expect the new product line to launch early next year, pending review. ",
];

/// A 64 KiB answer of plain prose with `secret` every `sentences_per_secret` sentences.
pub(crate) fn answer(secret: &str, sentences_per_secret: usize) -> String {
    let mut text = String::with_capacity(64 * 1024 + 128);
    let mut sentence = 0;
    while text.len() < 64 * 1024 {
        if sentence % sentences_per_secret == sentences_per_secret / 2 {
            text.push_str(secret);
        } else {
            text.push_str(PROSE[sentence % PROSE.len()]);
        }
        sentence += 1;
    }
    text.truncate(64 * 1024);
    text
}
