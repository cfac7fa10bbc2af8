//! The streaming workload shared by the `stream` and `ratios` benchmarks: three rules (an SSN
//! and an e-mail address replaced, blocked domains denied) and a 64 KiB answer; and the
//! benchmark family of `family`.

#[allow(dead_code)] // the `stream` benchmark has no use for it
pub(crate) mod family;

use portcullis_engine::stream::decide_whole_text;
use portcullis_engine::{
    BoxError, OutputContext, Policy, PolicyDecision, PolicyEngine, PolicySet, StreamingRule,
    async_trait,
};

/// A US social security number.
#[allow(dead_code)] // the `stream` benchmark has no use for it on its own
pub(crate) const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";

/// A policy whose whole-text and streaming forms are the same rules.
struct Rules {
    id: &'static str,
    rules: Vec<StreamingRule>,
}

#[async_trait]
impl Policy<OutputContext> for Rules {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        decide_whole_text(&self.rules, &context.response.content)
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(self.rules.clone())
    }
}

fn replace(pattern: &str, replacement: &str) -> StreamingRule {
    StreamingRule::Replace {
        pattern: pattern.into(),
        replacement: replacement.into(),
        max_match_len: None,
    }
}

/// An engine of one output policy per entry of `policies` (its id and its rules); with
/// `batch` > 0 the guard runs the rules once that many bytes have arrived.
pub(crate) fn rules_engine(
    batch: usize,
    policies: Vec<(&'static str, Vec<StreamingRule>)>,
) -> PolicyEngine {
    let mut set = PolicySet::builder().stream_batch(batch);
    for (id, rules) in policies {
        set = set.output(Rules { id, rules });
    }
    PolicyEngine::builder().policy_set(set.build()).build()
}

/// The three rules of the streaming benchmarks; with `batch` > 0 the guard runs them once
/// that many bytes have arrived.
pub(crate) fn stream_engine(batch: usize) -> PolicyEngine {
    rules_engine(
        batch,
        vec![
            ("ssn", vec![replace(SSN, "[SSN]")]),
            (
                "email",
                vec![replace(
                    r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}",
                    "[EMAIL]",
                )],
            ),
            (
                "domains",
                vec![StreamingRule::deny_on_any(
                    &["phishing.example", "malware.test", "evil.invalid"],
                    Some("blocked domain".into()),
                )],
            ),
        ],
    )
}

/// The engine of a set of the benchmark family: its redactions as one policy, its denial as
/// another.
#[allow(dead_code)] // the `stream` benchmark has no use for it
pub(crate) fn family_engine(set: &family::RuleSet, batch: usize) -> PolicyEngine {
    let redactions = set
        .redactions
        .iter()
        .map(|(pattern, replacement)| replace(pattern, replacement))
        .collect();
    rules_engine(
        batch,
        vec![
            ("redactions", redactions),
            (
                "denied",
                vec![StreamingRule::deny_on_any(
                    &family::denied_words(set.denied_words),
                    Some("denied word".into()),
                )],
            ),
        ],
    )
}

/// A 64 KiB answer; `sentences_per_secret` plain sentences come between two sentences that
/// hold an SSN and an e-mail address.
pub(crate) fn answer(sentences_per_secret: usize) -> String {
    let plain = "The quarterly report shows steady growth across all regions and segments. ";
    let secret = "Contact 123-45-6789 or ops@example.com for details. ";
    let mut text = String::new();
    let mut sentence = 0;
    while text.len() < 64 * 1024 {
        text.push_str(if sentence % sentences_per_secret == 0 {
            secret
        } else {
            plain
        });
        sentence += 1;
    }
    text.truncate(64 * 1024);
    text
}
