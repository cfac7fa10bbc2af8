//! The streaming output guard: its invariants, for every way of cutting the answer into chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis_engine::stream::{StreamEvent, StreamMode, StreamingRule, decide_whole_text};
use portcullis_engine::{
    AuditRecord, BoxError, EngineError, Feed, Metadata, OutputContext, OutputStream, Policy,
    PolicyDecision, PolicyEngine, PolicyExt, PolicySet, StreamItem, StreamItems, async_trait,
};
use proptest::prelude::*;
use regex::Regex;

const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";
const CARD: &str = r"\b\d{4} \d{4} \d{4} \d{4}\b";
/// No literal is common to its matches, so the guard steps a DFA over the text for it (and
/// searches on every push once the DFA gives up on non-ASCII text); the two patterns above
/// are watched with a literal search.
const ZIP: &str = r"\b\d{5}\b";
/// Watched for its `@`.
const EMAIL: &str = r"[a-z0-9.]{1,16}@[a-z0-9]{1,16}\.[a-z]{2,4}";

/// A replacement longer than all the rules' windows together.
const LONG_CARD: &str = "[a card number was here; this replacement is longer than all the windows \
                         of the rules together, so held text can outgrow the text received]";

/// The redaction rules of a test set, in order.
#[derive(Debug, Clone, Copy)]
enum Family {
    /// A DFA steps over the text for `ZIP`.
    WithDfa,
    /// Every rule is watched with a literal search, so text without those literals takes the
    /// guard's fast lane past the rules. The SSN's replacement is an e-mail address, which
    /// the next rule replaces in turn, with any address characters before it; the card's is
    /// longer than the windows of all rules.
    Literals,
    /// The rules are watched for literals prose rarely holds (the `-` of an SSN, the `@` of an
    /// e-mail address), so the guard spends most of an answer in its fast lane and leaves it
    /// only around secrets. The SSN's replacement is an e-mail address, as above.
    Prose,
    /// As `Prose`, with the blocked domains among a hundred more words: too many
    /// case-insensitive words for a literal search, so the denying rule steps a DFA, in the
    /// fast lane too.
    ManyWords,
}

impl Family {
    const ALL: [Family; 4] = [
        Family::WithDfa,
        Family::Literals,
        Family::Prose,
        Family::ManyWords,
    ];

    fn redactions(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::WithDfa => &[(SSN, "[SSN]"), (CARD, "[CARD]"), (ZIP, "[ZIP]")],
            Family::Literals => &[(SSN, "id@ssn.org"), (EMAIL, "[EMAIL]"), (CARD, LONG_CARD)],
            Family::Prose | Family::ManyWords => &[(SSN, "id@ssn.org"), (EMAIL, "[EMAIL]")],
        }
    }

    /// The words the denying rule lists.
    fn denied(self) -> Vec<String> {
        let mut words = vec!["phishing.example".to_owned(), "MALWARE.test".to_owned()];
        if let Family::ManyWords = self {
            words.extend(family::denied_words(100));
        }
        words
    }
}

/// A policy whose whole-text decision is exactly what its streaming rules say.
struct RuleBased {
    id: &'static str,
    rules: Vec<StreamingRule>,
    streams: bool,
}

impl RuleBased {
    fn redact(id: &'static str, patterns: &[(&str, &str)]) -> Self {
        RuleBased {
            id,
            rules: patterns
                .iter()
                .map(|(pattern, replacement)| StreamingRule::Replace {
                    pattern: (*pattern).into(),
                    replacement: (*replacement).into(),
                    max_match_len: None,
                })
                .collect(),
            streams: true,
        }
    }

    fn deny(id: &'static str, needles: &[impl AsRef<str>]) -> Self {
        RuleBased {
            id,
            rules: vec![StreamingRule::deny_on_any(
                needles,
                Some("blocked domain".into()),
            )],
            streams: true,
        }
    }

    fn whole_text_only(mut self) -> Self {
        self.streams = false;
        self
    }
}

#[async_trait]
impl Policy<OutputContext> for RuleBased {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        decide_whole_text(&self.rules, &context.response.content)
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        self.streams.then(|| self.rules.clone())
    }
}

/// A whole-text policy that always fails.
struct Broken;

#[async_trait]
impl Policy<OutputContext> for Broken {
    fn id(&self) -> &str {
        "broken"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Err("the policy service is down".into())
    }
}

/// The end records of streams, and apart from them the most characters each stream held.
#[derive(Clone, Default)]
struct Ends(Arc<Mutex<Vec<serde_json::Value>>>, Arc<Mutex<Vec<usize>>>);

impl Ends {
    fn handler(&self) -> impl Fn(&AuditRecord<'_>) + Send + Sync + 'static {
        let (ends, most_held) = (Arc::clone(&self.0), Arc::clone(&self.1));
        move |record: &AuditRecord<'_>| {
            if let Some(report) = record.stream
                && report.event == StreamEvent::End
            {
                most_held.lock().unwrap().push(report.max_held_chars);
                let mut json = serde_json::to_value(report).unwrap();
                // These depend on timing and chunking by nature.
                json.as_object_mut()
                    .unwrap()
                    .remove("time_to_first_release");
                json.as_object_mut().unwrap().remove("max_held_chars");
                ends.lock().unwrap().push(json);
            }
        }
    }

    fn last(&self) -> serde_json::Value {
        self.0.lock().unwrap().last().cloned().unwrap()
    }

    /// The most characters the last stream held at once, as its end record says.
    fn last_most_held(&self) -> usize {
        self.1.lock().unwrap().last().copied().unwrap()
    }
}

fn incremental_set() -> PolicySet {
    incremental_set_batched(Family::WithDfa, 0)
}

/// The incremental set, its rules run once `batch` bytes have arrived.
fn incremental_set_batched(family: Family, batch: usize) -> PolicySet {
    PolicySet::builder()
        .stream_batch(batch)
        .output(RuleBased::redact("pii", family.redactions()))
        .output(RuleBased::deny("domains", &family.denied()))
        .build()
}

fn engine(set: PolicySet, ends: &Ends) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(set)
        .on_audit(ends.handler())
        .build()
}

/// How a run ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The text released, and the most characters the guard held after any push.
    Released(String, usize),
    /// The text released, and the most characters the guard held after a push before the
    /// denial.
    Denied {
        released: String,
        most_held: usize,
    },
    Failed {
        released: String,
    },
}

impl End {
    /// The text released, when the stream ended without a denial or an error.
    fn released(&self) -> Option<&str> {
        match self {
            End::Released(text, _) => Some(text),
            End::Denied { .. } | End::Failed { .. } => None,
        }
    }
}

/// Streams `chunks` through the guard, checking the per-step invariants against `whole`
/// (the forwarded text of the whole-text evaluation, when it allows).
async fn stream(engine: &PolicyEngine, chunks: &[Vec<u8>], whole: Option<&str>) -> End {
    let mut guard = engine.output_stream(Metadata::new("agent", "session"));
    let bound = guard.plan().hold_back();
    let incremental = guard.plan().mode() == StreamMode::Incremental;
    let mut released = String::new();
    let mut most_held = 0;
    let mut ended: Option<End> = None;
    let check = |items: StreamItems, released: &mut String, ended: &mut Option<End>| {
        for item in items {
            assert!(ended.is_none(), "an item after the stream ended: {item:?}");
            match item {
                StreamItem::Text(text) => {
                    released.push_str(&text);
                    if let Some(whole) = whole {
                        assert!(
                            whole.starts_with(released.as_str()),
                            "released {released:?} is not a prefix of {whole:?}"
                        );
                    }
                }
                StreamItem::Denied(_) => {
                    *ended = Some(End::Denied {
                        released: released.clone(),
                        // Filled in once the stream is over.
                        most_held: 0,
                    })
                }
                StreamItem::Error(_) | StreamItem::ApprovalRequired(_) => {
                    *ended = Some(End::Failed {
                        released: released.clone(),
                    })
                }
            }
        }
    };
    for (step, chunk) in chunks.iter().enumerate() {
        let items = guard.push_bytes(chunk).await;
        check(items, &mut released, &mut ended);
        // The guard's record of what it released is what its pushes yielded (read now and
        // then, so that text the fast lane lends from what it received piles up in between).
        if step % 3 == 2 {
            assert_eq!(guard.released(), released);
        }
        if ended.is_none() {
            most_held = most_held.max(guard.held_chars());
        }
        if incremental && ended.is_none() {
            assert!(
                guard.held_chars() <= bound,
                "{} characters held, bound {bound}",
                guard.held_chars()
            );
        }
    }
    let items = guard.finish().await;
    check(items, &mut released, &mut ended);
    match ended {
        Some(End::Denied { released, .. }) => End::Denied {
            released,
            most_held,
        },
        Some(ended) => ended,
        None => End::Released(released, most_held),
    }
}

/// Cuts `text` into chunks of the given byte sizes (which may split characters).
fn cut(text: &str, sizes: &[usize]) -> Vec<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut sizes = sizes.iter().cycle();
    while at < bytes.len() {
        let size = sizes.next().copied().unwrap_or(1).max(1);
        let end = (at + size).min(bytes.len());
        chunks.push(bytes[at..end].to_vec());
        at = end;
    }
    chunks
}

fn per_char(text: &str) -> Vec<Vec<u8>> {
    text.chars().map(|c| c.to_string().into_bytes()).collect()
}

async fn whole_text(engine: &PolicyEngine, text: &str) -> Result<String, String> {
    let context = OutputContext::new(
        portcullis_engine::Message::assistant(text),
        Metadata::new("agent", "session"),
    );
    engine
        .evaluate_output(&context)
        .await
        .map(|evaluation| evaluation.into_context().response.content)
        .map_err(|error| error.to_string())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Checks every invariant for one text and a set of chunkings, with the rules of each family
/// run on every push and in batches.
fn check_text(text: &str, chunkings: &[Vec<Vec<u8>>]) {
    for family in Family::ALL {
        check_text_with(family, text, chunkings);
    }
}

fn check_text_with(family: Family, text: &str, chunkings: &[Vec<Vec<u8>>]) {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        // Every push, small and middling batches, and one batch longer than any text here.
        let engines =
            [0, 13, 64, 4096].map(|batch| engine(incremental_set_batched(family, batch), &ends));
        let engine = &engines[0];
        assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
        let whole = whole_text(engine, text).await;
        // What the denying rule sees: the text after the redactions.
        let mut redacted = text.to_owned();
        for (pattern, replacement) in family.redactions() {
            redacted = Regex::new(pattern)
                .unwrap()
                .replace_all(&redacted, *replacement)
                .into_owned();
        }
        let denied: Vec<String> = family
            .denied()
            .iter()
            .map(|word| regex::escape(word))
            .collect();
        let offending = Regex::new(&format!("(?i:{})", denied.join("|")))
            .unwrap()
            .find(&redacted)
            .map(|found| found.start());
        let mut end_records = Vec::new();
        for (engine, chunks) in engines
            .iter()
            .flat_map(|engine| chunkings.iter().map(move |chunks| (engine, chunks)))
        {
            let end = stream(engine, chunks, whole.as_deref().ok()).await;
            match (&whole, &end) {
                (Ok(forwarded), End::Released(released, most_held)) => {
                    assert_eq!(released, forwarded);
                    // The end record's figure is the most the guard was seen to hold.
                    assert_eq!(ends.last_most_held(), *most_held, "{chunks:?}");
                }
                (
                    Err(_),
                    End::Denied {
                        released,
                        most_held,
                    },
                ) => {
                    // What the stream stopped on is not held back: the end record's figure
                    // is the most held after a push before the denial.
                    assert_eq!(ends.last_most_held(), *most_held, "{chunks:?}");
                    // Nothing at or after the first offending match was released.
                    let offending = offending.expect("the whole text was denied");
                    assert!(
                        released.len() <= offending,
                        "{released:?} reaches the match at {offending}"
                    );
                    assert!(redacted.starts_with(released.as_str()));
                }
                (whole, end) => panic!("whole text gave {whole:?}, the stream {end:?}"),
            }
            let mut record = ends.last();
            if matches!(end, End::Denied { .. }) {
                // How much was out before the match arrived depends on the chunking.
                record.as_object_mut().unwrap().remove("released_chars");
            }
            end_records.push(record);
        }
        assert!(
            end_records.windows(2).all(|pair| pair[0] == pair[1]),
            "end records differ between chunkings: {end_records:#?}"
        );
    });
}

#[test]
fn a_secret_split_across_chunks_is_redacted() {
    let text = "Your SSN is 123-45-6789 and your card 4111 1111 1111 1111, ok?";
    check_text(
        text,
        &[
            vec![
                b"Your SSN is 123-45-".to_vec(),
                b"6789 and your card 4111 1111 ".to_vec(),
                b"1111 1111, ok?".to_vec(),
            ],
            per_char(text),
            cut(text, &[1]),
            cut(text, &[7, 3, 11]),
            vec![text.as_bytes().to_vec()],
        ],
    );
}

#[test]
fn a_blocked_domain_is_denied_before_it_is_released() {
    let text = "Click https://PHISHING.example/login now, it is 100% safe.";
    check_text(
        text,
        &[per_char(text), cut(text, &[5, 2]), cut(text, &[64])],
    );
}

#[test]
fn multibyte_text_split_inside_characters() {
    let text = "Zürich — 漢字 🚀 SSN 987-65-4321 🚀 naïve café 4000 0000 0000 0002";
    check_text(
        text,
        &[
            cut(text, &[1]),
            cut(text, &[2]),
            cut(text, &[3, 5]),
            per_char(text),
        ],
    );
}

/// Prose with no literal any rule watches for: the guard takes its fast lane through it.
const PLAIN: &str = "Quarterly results were good. Quarterly results were good. \
                     Quarterly results were good. Quarterly results were good. ";

/// Cuts of a long text: the deltas of a model (16 bytes), odd sizes, and single bytes (which
/// split characters).
fn long_cuts(text: &str) -> Vec<Vec<Vec<u8>>> {
    vec![
        cut(text, &[16]),
        cut(text, &[5, 11, 3, 24]),
        cut(text, &[1]),
        cut(text, &[64]),
    ]
}

#[test]
fn secrets_around_the_fast_lane_stream_as_whole_text() {
    // The guard leaves the lane at a secret and, out of it, keeps the text of pushes without
    // literals until the windows fill: a secret right after a replaced one, one split across
    // deltas, one in multibyte text, and the lane taken again in between.
    let text = [
        PLAIN,
        "SSN 123-45-6789 123-45-6788, mail ops@example.com.",
        PLAIN,
        "123-45-6789ops@example.com 123-45-",
        "6789 ",
        PLAIN,
        "Zürich — 漢字 🚀 SSN 987-65-4321 🚀 naïve café ops@éxample.com ",
        PLAIN,
    ]
    .concat();
    check_text(&text, &long_cuts(&text));
}

#[test]
fn a_blocked_domain_after_a_replacement_is_denied() {
    for text in [
        [PLAIN, "call 123-45-6789 or see phishing.example now", PLAIN].concat(),
        [PLAIN, "ops@example.com ", PLAIN, "then MALWARE.test"].concat(),
        // The blocked domain arrives while the replaced text is still held.
        [PLAIN, "123-45-6789 phishing.example", PLAIN].concat(),
    ] {
        check_text(&text, &long_cuts(&text));
    }
}

#[test]
fn finish_releases_text_held_out_of_the_lane() {
    // The stream ends while text after a replacement is still held (a secret at the very
    // end, a partial literal, a partial character).
    for text in [
        [PLAIN, "123-45-6789"].concat(),
        [PLAIN, "123-45-6789 and more"].concat(),
        [PLAIN, "ops@example.com then phishing.exam"].concat(),
        [PLAIN, "123-45-6789 café 🚀"].concat(),
    ] {
        check_text(&text, &long_cuts(&text));
    }
}

#[test]
fn text_without_matches_streams_with_a_bounded_hold_back() {
    for family in Family::ALL {
        text_without_matches_streams_with_a_bounded_hold_back_with(family);
    }
}

fn text_without_matches_streams_with_a_bounded_hold_back_with(family: Family) {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let engine = engine(incremental_set_batched(family, 0), &ends);
        let text = "plain words ".repeat(200);
        let mut guard = engine.output_stream(Metadata::new("a", "s"));
        let mut released = 0;
        for chunk in text.as_bytes().chunks(16) {
            for item in guard.push_bytes(chunk).await {
                if let StreamItem::Text(text) = item {
                    released += text.len();
                }
            }
        }
        // Most of the text is out before the end.
        assert!(released >= text.len() - guard.plan().hold_back());
        for item in guard.finish().await {
            if let StreamItem::Text(text) = item {
                released += text.len();
            }
        }
        assert_eq!(released, text.len());
        let end = ends.last();
        assert_eq!(end["outcome"], "allowed");
        assert_eq!(end["raw_chars"], text.len());
        assert_eq!(end["released_chars"], text.len());
    });
}

/// A rule can match around what an earlier rule put in, further back than its own window:
/// here the second rule's match starts 40 characters before the `#` that sets the first rule
/// off. Every chunking still releases only a prefix of the whole-text result.
#[test]
fn a_rule_matching_around_an_earlier_replacement_is_held_back_for() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let set = PolicySet::builder()
            .output(RuleBased::redact("tag", &[(r"[0-9]{10}#", "@")]))
            .output(RuleBased::redact(
                "handle",
                &[(r"[a-z]{1,30}@", "[HANDLE]")],
            ))
            .build();
        let engine = engine(set, &ends);
        let text = format!("hello {}0123456789# end", "a".repeat(30));
        let whole = whole_text(&engine, &text).await.expect("allowed");
        assert_eq!(whole, "hello [HANDLE] end");
        for chunks in [per_char(&text), cut(&text, &[16]), cut(&text, &[5, 9])] {
            let end = stream(&engine, &chunks, Some(&whole)).await;
            assert_eq!(end.released(), Some(whole.as_str()));
        }
    });
}

/// A replacement far longer than what it replaces: the held text outgrows the text received.
#[test]
fn a_replacement_longer_than_the_text_it_replaces_streams() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let long = "[a number was here, and this replacement is much longer than it] ".repeat(3);
        let set = PolicySet::builder()
            .output(RuleBased::redact(
                "numbers",
                &[("#[0-9]{3}", long.as_str())],
            ))
            .output(RuleBased::redact("tags", &[("@[a-z]{3}", "[TAG]")]))
            .build();
        let engine = engine(set, &ends);
        let text = "#123 @abc #456 plain text after the numbers, long enough to release";
        let whole = whole_text(&engine, text).await.expect("allowed");
        for chunks in [per_char(text), cut(text, &[3]), cut(text, &[16])] {
            let end = stream(&engine, &chunks, Some(&whole)).await;
            assert_eq!(end.released(), Some(whole.as_str()));
        }
    });
}

#[test]
fn unbounded_patterns_do_not_stream_unless_a_maximum_is_stated() {
    let unbounded = || RuleBased::redact("digits", &[(r"\d+", "#")]);
    let set = PolicySet::builder().output(unbounded()).build();
    let engine = PolicyEngine::builder().policy_set(set).build();
    let plan = engine.stream_plan();
    assert_eq!(plan.mode(), StreamMode::Buffer);
    assert!(
        plan.whole_text_reasons()[0].contains("no upper bound"),
        "{:?}",
        plan.whole_text_reasons()
    );

    let mut stated = unbounded();
    stated.rules = vec![StreamingRule::Replace {
        pattern: r"\d+".into(),
        replacement: "#".into(),
        max_match_len: Some(32),
    }];
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().output(stated).build())
        .build();
    assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
    assert_eq!(engine.stream_plan().hold_back(), 32 + 3);

    let empty = RuleBased::redact("empty", &[("x*", "#")]);
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().output(empty).build())
        .build();
    assert!(engine.stream_plan().whole_text_reasons()[0].contains("empty"));
}

#[test]
fn whole_text_policies_buffer_by_default() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let set = PolicySet::builder()
            .output(RuleBased::redact("pii", &[(SSN, "[SSN]")]).whole_text_only())
            .build();
        let engine = engine(set, &ends);
        assert_eq!(engine.stream_plan().mode(), StreamMode::Buffer);
        let text = "id 123-45-6789 end";
        let mut guard = engine.output_stream(Metadata::new("a", "s"));
        for chunk in cut(text, &[4]) {
            assert!(
                guard.push_bytes(&chunk).await.is_empty(),
                "buffer mode released early"
            );
        }
        let items = guard.finish().await;
        assert!(
            matches!(&items[..], [StreamItem::Text(t)] if t == "id [SSN] end"),
            "{items:?}"
        );
        for chunking in [per_char(text), cut(text, &[3])] {
            assert_eq!(
                stream(&engine, &chunking, Some("id [SSN] end"))
                    .await
                    .released(),
                Some("id [SSN] end")
            );
        }
    });
}

#[test]
fn errors_never_release_held_text() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        for set in [
            PolicySet::builder().output(Broken).build(),
            PolicySet::builder()
                .output(Broken)
                .stream_checkpoint(8)
                .build(),
        ] {
            let engine = engine(set, &ends);
            let end = stream(&engine, &cut("some text that never shows", &[3]), None).await;
            assert_eq!(
                end,
                End::Failed {
                    released: String::new()
                }
            );
            assert_eq!(ends.last()["outcome"], "error");
        }
    });
}

#[test]
fn checkpoints_release_allowed_text_in_steps() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let set = PolicySet::builder()
            .output(RuleBased::deny("domains", &["phishing.example"]).whole_text_only())
            .stream_checkpoint(10)
            .build();
        let engine = engine(set, &ends);
        assert_eq!(
            engine.stream_plan().mode(),
            StreamMode::Checkpoint { every: 10 }
        );
        let text = "one two three four five six seven eight nine ten";
        let mut guard = engine.output_stream(Metadata::new("a", "s"));
        let mut steps = 0;
        for chunk in cut(text, &[4]) {
            let items = guard.push_bytes(&chunk).await;
            steps += items.len();
            assert!(guard.held_chars() <= 10 + 4);
        }
        assert!(steps >= 3, "released in {steps} steps");
        guard.finish().await;
        assert_eq!(ends.last()["released_chars"], text.chars().count());

        // A deny after a checkpoint: the earlier text is out, the rest is withheld.
        let end = stream(
            &engine,
            &cut("harmless start; then phishing.example", &[5]),
            None,
        )
        .await;
        let End::Denied { released, .. } = end else {
            panic!("{end:?}")
        };
        assert!(
            !released.is_empty() && !released.contains("phishing.example"),
            "{released:?}"
        );
    });
}

#[test]
fn monitored_policies_do_not_hold_text_back() {
    let runtime = runtime();
    runtime.block_on(async {
        let records = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&records);
        let set = PolicySet::builder()
            .output(RuleBased::redact("pii", &[(SSN, "[SSN]")]))
            .output(
                RuleBased::deny("strict", &["refund"])
                    .whole_text_only()
                    .monitored(),
            )
            .build();
        let engine = PolicyEngine::builder()
            .policy_set(set)
            .on_audit(move |record: &AuditRecord<'_>| {
                kept.lock().unwrap().push((
                    record.policy_id.to_owned(),
                    record.decision.as_str().to_owned(),
                    record.enforced,
                ));
            })
            .build();
        assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
        let text = "You can ask for a refund.";
        let end = stream(&engine, &per_char(text), Some(text)).await;
        assert_eq!(end.released(), Some(text));
        let records = records.lock().unwrap().clone();
        assert!(
            records.contains(&("strict".into(), "deny".into(), false)),
            "{records:?}"
        );
        assert!(
            records.contains(&("pii".into(), "allow".into(), true)),
            "{records:?}"
        );
        assert_eq!(records.first().unwrap().0, "portcullis.stream");
        assert_eq!(records.last().unwrap().0, "portcullis.stream");
    });
}

#[test]
fn invalid_utf8_is_an_error_and_releases_nothing_after_it() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let engine = engine(incremental_set(), &ends);
        let end = stream(
            &engine,
            &[b"fine ".to_vec(), vec![0xff, 0xfe], b"more".to_vec()],
            None,
        )
        .await;
        assert!(matches!(end, End::Failed { .. }), "{end:?}");
    });
}

/// A whole-text policy that takes a while to allow.
struct Slow;

#[async_trait]
impl Policy<OutputContext> for Slow {
    fn id(&self) -> &str {
        "slow"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(PolicyDecision::allow())
    }
}

/// Feeds each delta and drops the returned `Feed` without awaiting it.
fn fed_and_dropped(guard: &mut OutputStream<'_>, deltas: &[&str]) {
    for delta in deltas {
        drop(guard.feed(delta));
    }
}

#[test]
fn a_feed_dropped_before_it_is_awaited_loses_nothing() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        for batch in [0, 64] {
            let engine = engine(incremental_set_batched(Family::Literals, batch), &ends);
            let plain = "Plain words, nothing to hide, ".repeat(10);

            // The text a dropped feed released can be read from `released`.
            let mut guard = engine.output_stream(Metadata::new("a", "s"));
            fed_and_dropped(&mut guard, &[&plain, &plain]);
            let released = guard.released().to_owned();
            assert!(
                !released.is_empty() && plain.repeat(2).starts_with(&released),
                "{released:?}"
            );

            // The denial a dropped feed would have reported comes with the next call; after
            // it, calls release nothing.
            let blocked = "see phishing.example now; ";
            let mut calls = 0;
            let denied = loop {
                calls += 1;
                if let Err(error) = guard.feed(blocked).await {
                    break error;
                }
            };
            assert!(matches!(denied, EngineError::Denied(_)), "{denied:?}");
            assert_eq!(guard.feed("more").await.unwrap(), "");
            assert!(guard.finish().await.is_empty());
            assert_eq!(ends.last()["outcome"], "denied");

            let mut guard = engine.output_stream(Metadata::new("a", "s"));
            fed_and_dropped(&mut guard, &[&plain, &plain]);
            fed_and_dropped(&mut guard, &vec![blocked; calls]);
            let next = guard.feed("").await.map(str::to_owned);
            assert!(
                matches!(next, Err(EngineError::Denied(_))),
                "batch {batch}: {next:?}"
            );

            // ... or `finish` does, when no call comes after.
            let mut guard = engine.output_stream(Metadata::new("a", "s"));
            fed_and_dropped(&mut guard, &[&plain, &plain]);
            fed_and_dropped(&mut guard, &vec![blocked; calls]);
            let items = guard.finish().await;
            assert!(matches!(&items[..], [StreamItem::Denied(_)]), "{items:?}");
            assert_eq!(ends.last()["outcome"], "denied");
        }
    });
}

#[test]
fn a_checkpoint_its_caller_stops_waiting_for_releases_nothing() {
    let runtime = runtime();
    runtime.block_on(async {
        let ends = Ends::default();
        let set = PolicySet::builder()
            .output(Slow)
            .stream_checkpoint(4)
            .build();
        let engine = engine(set, &ends);
        let mut guard = engine.output_stream(Metadata::new("a", "s"));
        let early = tokio::time::timeout(Duration::from_millis(5), guard.feed("hello")).await;
        assert!(
            early.is_err(),
            "the checkpoint evaluation should still be running"
        );
        assert_eq!(guard.released(), "");
        // The next call gives the unfinished checkpoint up: its text stays held, for the
        // next checkpoint.
        assert_eq!(guard.feed(" wor").await.unwrap(), "hello wor");
        assert!(guard.finish().await.is_empty());
        assert_eq!(ends.last()["outcome"], "allowed");
    });
}

#[test]
fn the_guard_and_its_futures_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<OutputStream<'static>>();
    send::<Feed<'static, 'static>>();
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("123-45-6789".to_owned()),
        Just("4111 1111 1111 1111".to_owned()),
        Just("90210".to_owned()),
        Just("ops@example.com".to_owned()),
        Just("@".to_owned()),
        Just(".".to_owned()),
        Just("phishing.example".to_owned()),
        Just("PhIsHiNg.ExAmPlE".to_owned()),
        Just(" ".to_owned()),
        Just("-".to_owned()),
        Just(PLAIN.to_owned()),
        "[0-9]{1,4}",
        "[a-z]{1,6}",
        "[éü漢🚀ß]{1,2}",
    ]
}

fn cases() -> u32 {
    // `PORTCULLIS_HEAVY_PROPTEST=1` runs a much longer search.
    if std::env::var_os("PORTCULLIS_HEAVY_PROPTEST").is_some() {
        5_000
    } else {
        64
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn streaming_agrees_with_the_whole_text_evaluation(
        pieces in proptest::collection::vec(piece(), 0..24),
        sizes in proptest::collection::vec(1usize..24, 1..8),
    ) {
        let text: String = pieces.concat();
        check_text(&text, &[cut(&text, &sizes), cut(&text, &[1]), per_char(&text), vec![text.clone().into_bytes()]]);
    }
}

/// Rules whose literals differ in length and overlap, one text piece each way.
const OVERLAPPING: [&[(&str, &str)]; 2] = [
    // The literal `zjw` lies within `qzjwkv`, a byte after its start: when `qzjw` ends the
    // text so far, `zjw` is whole and `qzjwkv` is not yet.
    &[(r"qzjwkv|zjw", "[R]")],
    // The second rule's `qqz` runs over the start of the first rule's literal `zjw`, which
    // makes no match on its own.
    &[(r"zjw[a-z]?[0-9]", "[R]"), (r"qqz", "[S]")],
];

fn overlapping_piece() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("q"),
        Just("z"),
        Just("j"),
        Just("w"),
        Just("k"),
        Just("v"),
        Just("7"),
        Just("qq"),
        Just("zjw"),
        Just("qzjw"),
        Just("qqzjw"),
        Just("qzjwkv"),
        Just("kv"),
        Just(PLAIN),
    ]
}

/// Streams `text` in chunks of `sizes` through each of the `OVERLAPPING` rule sets, on every
/// push and in batches, and checks the released text against the whole-text evaluation.
fn check_overlapping(text: &str, sizes: &[usize]) {
    let runtime = runtime();
    for redactions in OVERLAPPING {
        for batch in [0, 8, 32] {
            let set = PolicySet::builder()
                .stream_batch(batch)
                .output(RuleBased::redact("overlapping", redactions))
                .build();
            let engine = PolicyEngine::builder().policy_set(set).build();
            assert_eq!(engine.stream_plan().mode(), StreamMode::Incremental);
            runtime.block_on(async {
                let whole = whole_text(&engine, text).await.expect("allowed");
                for chunks in [cut(text, sizes), cut(text, &[1])] {
                    let end = stream(&engine, &chunks, Some(&whole)).await;
                    assert_eq!(
                        end.released(),
                        Some(whole.as_str()),
                        "{redactions:?}, batch {batch}, chunks {chunks:?}"
                    );
                }
            });
        }
    }
}

#[test]
fn a_longer_literal_begun_before_a_whole_one_is_waited_for() {
    // The rules' own search and the fast lane's each once found `zjw` whole while the
    // `qzjwkv` begun a byte before it was not, and let that byte go.
    check_overlapping("qqzjwqqkvqqqqqqzjwkv", &[18]);
    check_overlapping(
        "some plain words here qqqqqqzjwqqkvsome plain words here qzjwkvqkvq",
        &[8, 19, 19, 15],
    );
    // The lane searched for `qqz` only up to the `zjw` found first, and missed it there.
    check_overlapping("qqqzjwkvqqqqqzjwkvqq", &[1]);
}

proptest! {
    // Cheap cases, and these bugs hide in a few alignments: many of them.
    #![proptest_config(ProptestConfig::with_cases(cases() * 16))]

    #[test]
    fn streaming_agrees_with_the_whole_text_when_literals_overlap(
        pieces in proptest::collection::vec(overlapping_piece(), 0..24),
        sizes in proptest::collection::vec(1usize..20, 1..6),
    ) {
        check_overlapping(&pieces.concat(), &sizes);
    }
}

/// The rule sets of the streaming benchmark family (`benches/common/family.rs`).
#[path = "../benches/common/family.rs"]
#[allow(dead_code)]
mod family;

/// Text pieces for a set of the family: its secret, its prose, parts of both, and its
/// patterns' characters alone.
fn family_piece(secret: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(secret.to_owned()),
        Just(PLAIN.to_owned()),
        (0..secret.len()).prop_map(move |at| secret[..at].to_owned()),
        (0..secret.len()).prop_map(move |at| secret[at..].to_owned()),
        "[0-9]{1,5}",
        "[A-Z]{1,3}[0-9]{1,8}",
        "[-@. =]",
        "[a-z]{1,6}",
        "[éü漢🚀]{1,2}",
    ]
}

/// Streams `text` through each set of the family, every push and batched, in every chunking,
/// and checks the stream releases exactly what the whole-text evaluation forwards.
fn check_family(set: &family::RuleSet, text: &str, chunkings: &[Vec<Vec<u8>>]) {
    runtime().block_on(async {
        let ends = Ends::default();
        let engines = [0, 13, 256].map(|batch| {
            engine(
                PolicySet::builder()
                    .stream_batch(batch)
                    .output(RuleBased::redact("redactions", set.redactions))
                    .output(RuleBased {
                        id: "denied",
                        rules: vec![StreamingRule::deny_on_any(
                            &family::denied_words(set.denied_words),
                            Some("denied word".into()),
                        )],
                        streams: true,
                    })
                    .build(),
                &ends,
            )
        });
        assert_eq!(
            engines[0].stream_plan().mode(),
            StreamMode::Incremental,
            "{}: {:?}",
            set.name,
            engines[0].stream_plan().whole_text_reasons()
        );
        let whole = whole_text(&engines[0], text).await;
        for engine in &engines {
            for chunks in chunkings {
                let end = stream(engine, chunks, whole.as_deref().ok()).await;
                assert_eq!(
                    end.released(),
                    whole.as_deref().ok(),
                    "{}: {chunks:?}",
                    set.name
                );
            }
        }
    });
}

#[test]
fn the_benchmark_family_streams_as_whole_text() {
    for set in &family::RULE_SETS {
        let text = family::answer(set.secret, 3);
        let text = &text[..4096];
        check_family(
            set,
            text,
            &[cut(text, &[4]), cut(text, &[16]), cut(text, &[1, 7, 3])],
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn the_benchmark_family_agrees_with_the_whole_text_evaluation(
        (set, pieces) in (0..family::RULE_SETS.len()).prop_flat_map(|set| {
            (
                Just(set),
                proptest::collection::vec(family_piece(family::RULE_SETS[set].secret), 0..16),
            )
        }),
        sizes in proptest::collection::vec(1usize..24, 1..8),
    ) {
        let text: String = pieces.concat();
        check_family(
            &family::RULE_SETS[set],
            &text,
            &[cut(&text, &sizes), cut(&text, &[1]), vec![text.clone().into_bytes()]],
        );
    }
}
