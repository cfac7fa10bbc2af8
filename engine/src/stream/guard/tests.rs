//! The guard's own tests: its routes, its fast lane and its stages, from the inside.

use regex_automata::Span;

use crate::context::OutputContext;
use crate::decision::PolicyDecision;
use crate::policy::Policy;
use crate::set::PolicySetBuilder;
use crate::stream::plan::{MatchFinder, required_literals};
use crate::stream::{StreamItem, StreamingRule};

use super::lane::LANE_STEP_AFTER;
use super::*;

/// An engine with the policy set `outputs` builds.
fn engine_of(outputs: impl FnOnce(PolicySetBuilder) -> PolicySetBuilder) -> PolicyEngine {
    let set = outputs(crate::PolicySet::builder()).build();
    PolicyEngine::builder().policy_set(set).build()
}

/// A US social security number, as the redactions below write it.
const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";

/// SSNs and short e-mail addresses redacted: two rules whose literals the fast lane watches.
fn ssn_and_short_email() -> PolicyEngine {
    engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
    })
}

/// The runtime each test drives its guard on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

/// Whether a stream of `deltas` through `engine` is denied, by a push or at its end.
fn denied<'d>(engine: &PolicyEngine, deltas: impl IntoIterator<Item = &'d str>) -> bool {
    runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        for delta in deltas {
            if guard.feed(delta).await.is_err() {
                return true;
            }
        }
        guard
            .finish()
            .await
            .into_iter()
            .any(|item| matches!(item, StreamItem::Denied(_)))
    })
}

fn literals_of(pattern: &str) -> Option<MatchFinder> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .expect("a valid pattern");
    required_literals(&hir)
}

/// The literal the watch of `pattern` finds in a text holding a match of it.
fn watched_by(pattern: &str) -> Option<Vec<u8>> {
    let MatchFinder::Literals { prefilter, .. } = literals_of(pattern)? else {
        return None;
    };
    let probe = b"xx ops@example.com 123-45-6789 evil.INVALID";
    let found = prefilter.find(probe, Span::from(0..probe.len()))?;
    Some(probe[found.range()].to_vec())
}

#[test]
fn the_rarest_required_literal_is_watched() {
    // The `@` of an e-mail address, not its common `.`.
    assert_eq!(
        watched_by(r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}").as_deref(),
        Some(&b"@"[..])
    );
    assert_eq!(watched_by(SSN).as_deref(), Some(&b"-"[..]));
    // The ten digits of a card number, which prose holds few of, not its spaces; the digits
    // of a passport number, not its 26 capitals.
    for pattern in [
        r"\b[0-9]{4} [0-9]{4} [0-9]{4} [0-9]{4}\b",
        "[A-Z]{2}[0-9]{7}",
    ] {
        assert!(
            watched_by(pattern).is_some_and(|literal| literal.iter().all(u8::is_ascii_digit)),
            "{pattern}"
        );
    }
    // Case-insensitive alternatives: a prefix of each case variant.
    let found = watched_by(r"(?i:phishing\.example|evil\.invalid)").expect("literals");
    assert!(found.eq_ignore_ascii_case(&b"evil.invalid"[..found.len()]));
}

struct Redact(&'static str, &'static str);

#[async_trait::async_trait]
impl Policy<OutputContext> for Redact {
    fn id(&self) -> &str {
        self.1
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
        Ok(PolicyDecision::allow())
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::Replace {
            pattern: self.0.into(),
            replacement: format!("[{}]", self.1),
            max_match_len: None,
        }])
    }
}

#[test]
fn a_stream_leaves_its_dfa_states_to_the_next() {
    // Every match holds a letter, and prose holds too many of them for a literal search: the
    // stage steps a DFA.
    let engine = engine_of(|set| set.output(Redact(r"[A-Z]{2}[a-z]{7}", "PASSPORT")));
    let plan = engine.stream_plan();
    let Some(MatchFinder::Dfa(dfa)) = plan.stages.first().map(|stage| &stage.finder) else {
        panic!("the stage is watched with a DFA");
    };
    assert_eq!(dfa.kept_caches(), 0);
    let runtime = runtime();
    for _ in 0..3 {
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            for delta in ["Passport XKab", "cdefg on file."] {
                shown.push_str(guard.feed(delta).await.expect("no denial"));
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            assert_eq!(shown, "Passport [PASSPORT] on file.");
        });
        // The ended stream's cache waits for the next stream, which takes it.
        assert_eq!(dfa.kept_caches(), 1);
    }
}

#[test]
fn text_without_watched_literals_takes_the_fast_lane() {
    let engine = ssn_and_short_email();
    let plan = engine.stream_plan();
    assert!(plan.lane);
    let runtime = runtime();
    runtime.block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        for chunk in plain.as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            assert!(guard.in_lane);
            assert!(guard.raw.len() - guard.fed <= plan.windows);
        }
        assert_eq!(guard.held_chars(), plan.windows);

        // A literal sends the text through the rules, and once they are quiet again the
        // guard is back in the lane.
        let secret = "mail ops@example.com or call 123-45-6789 now. ";
        let mut left_the_lane = false;
        for chunk in [secret, &plain].concat().as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            left_the_lane |= !guard.in_lane;
        }
        assert!(left_the_lane);
        assert!(guard.in_lane);
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(
            shown,
            format!("{plain}mail [EMAIL] or call [SSN] now. {plain}")
        );
    });
}

/// An e-mail address, watched for its `@`.
const EMAIL: &str = r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}";

#[test]
fn replacing_stages_with_one_byte_literals_are_searched_together() {
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Deny(&["evil.invalid"]))
            .output(Redact(EMAIL, "EMAIL"))
    });
    let plan = engine.stream_plan();
    let group = plan.lane_group.as_ref().expect("a group");
    // The `-` of the SSN and the `@` of the address, not the denied domain.
    assert_eq!(group.stages, [0, 2]);
    let text = b"plain text, then ops@example.com and 123-45-6789";
    let found = group.prefilter.find(text, Span::from(0..text.len()));
    assert_eq!(found.map(|found| text[found.start]), Some(b'@'));
    // One replacing stage alone is searched on its own.
    let engine = engine_of(|set| set.output(Redact(SSN, "SSN")));
    assert!(engine.stream_plan().lane_group.is_none());
    // So are replacing stages whose literals are longer than a byte.
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Redact(r"key-[0-9a-f]{8}", "KEY"))
    });
    assert!(engine.stream_plan().lane_group.is_none());
    // The group's literals are found where each stage's search had left off: a secret
    // after a long plain text is replaced, through the group, as the whole text has it.
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Redact(EMAIL, "EMAIL"))
    });
    let text = [
        "plain words here. ".repeat(30),
        "call 123-45-6789 or ops@example.com. ".into(),
        "more plain words. ".repeat(30),
    ]
    .concat();
    runtime().block_on(async {
        for size in [5, 16, 64, 300] {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            for chunk in text.as_bytes().chunks(size) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            assert_eq!(
                shown,
                text.replace("123-45-6789", "[SSN]")
                    .replace("ops@example.com", "[EMAIL]"),
                "{size}"
            );
        }
    });
}

#[test]
fn out_of_the_lane_clear_pushes_are_kept_until_the_windows_fill() {
    let engine = ssn_and_short_email();
    let plan = engine.stream_plan();
    assert!(plan.lane);
    let runtime = runtime();
    runtime.block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        let secret = "mail ops@example.com or call 123-45-6789 now. ";
        let text = [plain.as_str(), secret, &plain, secret, secret, &plain].concat();
        let mut shown = String::new();
        let (mut kept, mut ran) = (0, 0);
        for chunk in text.as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let buffers = |guard: &OutputStream<'_>| -> Vec<usize> {
                guard.stages.iter().map(|s| s.buffer.len()).collect()
            };
            let (was_in_lane, before) = (guard.in_lane, buffers(&guard));
            let released = guard.feed(chunk).await.expect("no denial").to_owned();
            if !was_in_lane {
                // Out of the lane, a push whose bytes hold no literal only keeps them
                // (the stages do not run) while the held text stays within the windows.
                if !guard.in_lane && buffers(&guard) == before {
                    assert!(released.is_empty());
                    kept += 1;
                } else {
                    ran += 1;
                }
            }
            let held = guard.raw.len() - guard.fed
                + guard.stages.iter().map(|s| s.held().len()).sum::<usize>();
            assert!(held <= plan.windows, "{held} held");
            shown.push_str(&released);
        }
        assert!(kept > 0 && ran > 0, "kept {kept}, ran {ran}");
        assert!(guard.in_lane);
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        let redacted = "mail [EMAIL] or call [SSN] now. ";
        assert_eq!(
            shown,
            [plain.as_str(), redacted, &plain, redacted, redacted, &plain].concat()
        );
    });
}

#[test]
fn a_stream_makes_room_for_as_much_text_as_the_last_one_received() {
    let engine = engine_of(|set| set.output(Redact(SSN, "SSN")));
    let runtime = runtime();
    runtime.block_on(async {
        let first = engine.output_stream(Metadata::new("agent", "session"));
        assert_eq!(first.raw.capacity(), 0);
        let mut first = first;
        let text = "call 123-45-6789 now. ".repeat(100);
        for chunk in text.as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            first.feed(chunk).await.expect("no denial");
        }
        first.finish().await;
        let second = engine.output_stream(Metadata::new("agent", "session"));
        assert!(second.raw.capacity() >= text.len());
        assert!(second.released.capacity() >= text.len());
    });
}

struct Deny(&'static [&'static str]);

#[async_trait::async_trait]
impl Policy<OutputContext> for Deny {
    fn id(&self) -> &str {
        "deny"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
        Ok(PolicyDecision::allow())
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::deny_on_any(self.0, None)])
    }
}

/// Replaces matches of a pattern with the given text.
struct ReplaceWith(&'static str, &'static str);

#[async_trait::async_trait]
impl Policy<OutputContext> for ReplaceWith {
    fn id(&self) -> &str {
        "replace"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, crate::BoxError> {
        Ok(PolicyDecision::allow())
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::Replace {
            pattern: self.0.into(),
            replacement: self.1.into(),
            max_match_len: None,
        }])
    }
}

#[test]
fn a_literal_a_replacement_makes_with_the_text_after_it_is_found() {
    // The answer has no blocked domain; the SSN's replacement makes one with the text
    // after it. The fast lane finds none in the answer, and the deny stage must still
    // search its own text.
    let plain = "nothing to see in this sentence at all. ".repeat(12);
    let text = [&plain[..64], "call 123-45-6789.invalid now. ", &plain].concat();
    for batch in [0, 256] {
        let engine = engine_of(|set| {
            set.stream_batch(batch)
                .output(ReplaceWith(SSN, "x-evil"))
                .output(Deny(&["evil.invalid"]))
        });
        let plan = engine.stream_plan();
        assert!(plan.lane);
        assert_eq!(
            plan.stages
                .iter()
                .map(|stage| stage.own_literals)
                .collect::<Vec<_>>(),
            [true, false]
        );
        for size in [1, 5, 16, 64] {
            let chunks = text
                .as_bytes()
                .chunks(size)
                .map(|chunk| std::str::from_utf8(chunk).expect("ascii"));
            assert!(denied(&engine, chunks), "batch {batch}, {size}-byte deltas");
        }
    }
}

#[test]
fn empty_pushes_while_a_replacing_literal_is_pending_pass_with_one_byte_literals() {
    // Every literal is one byte: the pushes after the lane's search look for a denying
    // stage's literal from the end of the text it searched, not past it.
    let engine = engine_of(|set| {
        set.output(Redact(r"[0-9]{1,4}-[0-9]{1,4}", "DASH"))
            .output(Redact(r"[a-z]{1,8}@[a-z]{1,8}", "AT"))
            .output(Deny(&["#"]))
    });
    let plan = engine.stream_plan();
    assert!(plan.lane && plan.longest_literal == 1);
    let shown = runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        let pushes = [
            "call 12-34 now, or write to them about it: ",
            "",
            "",
            "their address is a@b for now, ",
            "",
            "it says so on the page you have in front of you!",
            "",
            "",
        ];
        for chunk in pushes {
            shown.push_str(guard.feed(chunk).await.expect("allowed"));
        }
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("allowed"));
        }
        shown
    });
    assert_eq!(
        shown,
        "call [DASH] now, or write to them about it: their address is [AT] for now, \
         it says so on the page you have in front of you!"
    );
}

#[test]
fn a_denied_literal_begun_in_the_push_that_found_a_replacing_one_is_found() {
    // The push that brings the SSN's `-` ends in the first bytes of a blocked domain: the
    // lane's search then cannot see it whole, and the pushes after it must.
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Deny(&["evil.invalid"]))
    });
    let plain = "nothing to see in this sentence at all. ".repeat(4);
    let pushes = [
        &plain[..],
        "call 123-45-6789 at evil",
        ".invalid now, or later. ",
        &plain,
        &plain,
    ];
    assert!(denied(&engine, pushes));
}

/// Streams plain text holding `secret` twice through `engine` in 3-byte pushes. After each push
/// that took the fast lane and left it there, the bytes past `position` (what the lane's quick
/// filter has tested, or its DFAs have stepped over) never outgrow the plan's slack, and most
/// such pushes leave `position` where it was (16 bytes or more move it, in 3-byte deltas); what
/// was shown has `secret` as `redacted`.
fn short_pushes_within_the_slack(
    engine: &PolicyEngine,
    (secret, redacted): (&str, &str),
    position: fn(&OutputStream<'_>) -> usize,
) {
    let plan = engine.stream_plan();
    assert!(plan.lane && plan.lane_slack >= 16);
    runtime().block_on(async {
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        let text = [plain.as_str(), secret, &plain, secret, &plain].concat();
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        let (mut deferred, mut moved) = (0, 0);
        for chunk in text.as_bytes().chunks(3) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let (direct, before) = (guard.route == PushRoute::Lane, position(&guard));
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            if direct && guard.in_lane && guard.lane_until.is_none() {
                assert!(guard.raw.len() - position(&guard) <= plan.lane_slack);
                if position(&guard) == before {
                    deferred += 1;
                } else {
                    moved += 1;
                }
            }
        }
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(
            shown,
            [plain.as_str(), redacted, &plain, redacted, &plain].concat()
        );
        assert!(
            deferred > 4 * moved && moved > 0,
            "{deferred} deferred, {moved} moved"
        );
    });
}

#[test]
fn short_deltas_are_tested_a_window_at_a_time_within_the_slack() {
    short_pushes_within_the_slack(
        &ssn_and_short_email(),
        (
            "mail ops@example.com or call 123-45-6789 now. ",
            "mail [EMAIL] or call [SSN] now. ",
        ),
        |guard| guard.lane_filtered,
    );
}

#[test]
fn short_deltas_step_the_dfas_many_bytes_at_a_time_within_the_slack() {
    // Capitals and letters: the stage steps a DFA in the lane.
    let engine = engine_of(|set| {
        set.output(Redact(r"[A-Z]{2}[a-z]{7}", "CODE"))
            .output(Redact(SSN, "SSN"))
    });
    assert_eq!(engine.stream_plan().lane_dfas, [0]);
    short_pushes_within_the_slack(
        &engine,
        (
            "code XYabcdefg or call 123-45-6789 now. ",
            "code [CODE] or call [SSN] now. ",
        ),
        |guard| guard.lane_stepped,
    );
}

#[test]
fn a_push_the_quick_filter_flags_in_vain_leaves_the_dfas_behind() {
    // The quick filter flags every "to" of the prose (the first two bytes of "token-"), and
    // the stage's search then finds no literal: the DFA still steps only once 64 bytes have
    // come, or once the bytes it has not seen would outgrow the slack.
    let engine = engine_of(|set| {
        set.output(Redact(r"[A-Z]{2}[a-z]{7}", "CODE"))
            .output(Redact("token-[0-9a-f]{8}", "TOKEN"))
    });
    let plan = engine.stream_plan();
    assert_eq!(plan.lane_dfas, [0]);
    runtime().block_on(async {
        let plain = "nothing to see in this sentence, not to worry. ".repeat(8);
        let text = format!("{plain}code XYabcdefg, token-0badcafe. {plain}");
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let (mut shown, mut flagged) = (String::new(), 0);
        for chunk in text.as_bytes().chunks(3) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let (received, stepped) = (guard.raw.len(), guard.lane_stepped);
            let (in_lane, filtered) = (guard.in_lane, guard.lane_filtered);
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            if !(in_lane && guard.in_lane) {
                continue;
            }
            // The filter tests 16 bytes at a time: it flagged a "to" when it did not move on.
            flagged += usize::from(received - filtered >= 16 && guard.lane_filtered < received);
            if guard.lane_stepped != stepped {
                assert!(
                    received - stepped >= LANE_STEP_AFTER
                        || guard.raw.len() - stepped > plan.lane_slack,
                    "stepped at {received}"
                );
            }
        }
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(shown, format!("{plain}code [CODE], [TOKEN]. {plain}"));
        assert!(flagged > 8, "{flagged} pushes flagged");
    });
}

#[test]
fn a_replacing_literal_lets_the_lane_release_up_to_where_its_match_may_start() {
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Deny(&["evil.invalid"]))
    });
    let plan = engine.stream_plan();
    assert!(plan.lane);
    let runtime = runtime();
    let plain = "nothing to see in this sentence at all. ".repeat(8);
    // Released, and whether the stream was denied.
    let stream = |text: String| {
        runtime.block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let mut shown = String::new();
            let mut pending_pushes = 0;
            for chunk in text.as_bytes().chunks(16) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                let was_pending = guard.lane_until;
                match guard.feed(chunk).await {
                    Ok(released) => shown.push_str(released),
                    Err(_) => return (shown, true, pending_pushes),
                }
                if let (Some(until), Some(_)) = (was_pending, guard.lane_until) {
                    // The stages did not run, the lane released text before `until`.
                    pending_pushes += 1;
                    assert!(guard.in_lane && guard.stages.iter().all(|s| s.buffer.is_empty()));
                    assert!(guard.fed <= until && guard.raw.len() - guard.fed <= plan.windows);
                }
            }
            for item in guard.finish().await {
                match item.into_text() {
                    Ok(text) => shown.push_str(&text),
                    Err(_) => return (shown, true, pending_pushes),
                }
            }
            (shown, false, pending_pushes)
        })
    };
    // The SSN's `-` is found while the lane still has text to release before it.
    let text = [plain.as_str(), "call 123-45-6789 now. ", &plain].concat();
    let (shown, denied, pending_pushes) = stream(text);
    assert!(!denied);
    assert!(pending_pushes > 0);
    assert_eq!(shown, [plain.as_str(), "call [SSN] now. ", &plain].concat());
    // A denying stage's literal while a replacing one is pending: the stages run at once,
    // and nothing of the denied match is released.
    let text = [
        plain.as_str(),
        "call 123-45-6789 at evil.invalid now. ",
        &plain,
    ]
    .concat();
    let (shown, denied, _) = stream(text);
    assert!(denied);
    assert!(
        shown.len() <= plain.len() + "call 123-45-6789 at ".len(),
        "{shown:?}"
    );
}

#[test]
fn a_batch_whose_match_the_stages_pass_on_takes_the_lane_again_at_once() {
    let engine = engine_of(|set| {
        set.stream_batch(256)
            .output(Redact(SSN, "SSN"))
            .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
            .output(Deny(&["evil.invalid"]))
    });
    assert!(engine.stream_plan().lane);
    let plain = "nothing to see in this sentence at all. ".repeat(12);
    // The first batch ends 256 bytes in, far enough after the secrets for the stages to
    // pass their replacements on in the run that batch makes.
    let text = [
        &plain[..64],
        "call 123-45-6789 or ops@example.com now. ",
        &plain,
    ]
    .concat();
    let (shown, lane_after_run) = runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        let mut lane_after_run = None;
        for chunk in text.as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let before = guard.raw.len();
            shown.push_str(guard.feed(chunk).await.expect("allowed"));
            if before < 256 && guard.raw.len() >= 256 {
                lane_after_run = Some(guard.in_lane);
            }
        }
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("allowed"));
        }
        (shown, lane_after_run)
    });
    // Back in the lane with the push that ran the stages, not a batch later.
    assert_eq!(lane_after_run, Some(true));
    assert_eq!(
        shown,
        [&plain[..64], "call [SSN] or [EMAIL] now. ", &plain].concat()
    );
}

#[test]
fn a_literal_whose_start_ends_a_push_is_found_in_the_fast_lane() {
    let engine = engine_of(|set| set.output(Deny(&["evil.invalid", "malware.test"])));
    assert!(engine.stream_plan().lane);
    // The first two bytes of the literal end one push (the filter flags them, the
    // prefilter finds no whole literal yet); the rest comes with the next pushes.
    for split in [
        &["nothing to see in this sentence. ev", "il.invalid and more"][..],
        &[
            "nothing to see in this sentence. e",
            "v",
            "il.inv",
            "alid and more",
        ],
        &["plain text, then ma", "lware.test"],
    ] {
        assert!(denied(&engine, split.iter().copied()), "{split:?}");
    }
}

#[test]
fn a_stage_without_its_literal_in_sight_holds_back_only_what_could_precede_one() {
    // The first stage steps a DFA with Unicode word boundaries, which gives up on the
    // first non-ASCII character: the stage then searches its window on every push and keeps
    // the guard out of the fast lane, so the e-mail stage runs on every push too. With no
    // `@` in sight it holds back only the 16 address characters a match may have before an
    // `@` that is still to come (and a partial character), not its whole window.
    let engine = engine_of(|set| {
        set.output(Redact(r"\b[a-z]{3}[A-Z]{2}\b", "CODE"))
            .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.[a-z]{2,4}", "EMAIL"))
    });
    let plan = engine.stream_plan();
    assert!(plan.lane);
    assert!(matches!(plan.stages[0].finder, MatchFinder::Dfa(_)));
    let email = &plan.stages[1];
    assert_eq!(email.back, 16);
    assert!(email.window > 30);
    let runtime = runtime();
    runtime.block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        assert!(guard.in_lane);
        // (A push of 16 bytes or more: the lane steps its DFAs over shorter ones a push
        // behind.)
        shown.push_str(guard.feed("café, as I said, ").await.expect("no denial"));
        assert!(!guard.in_lane);
        let text = "plain words and more plain words, ".repeat(8);
        for chunk in text.as_bytes().chunks(16) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            assert!(guard.stages[1].held().len() <= email.back + 3);
        }
        // An address still arriving is held whole, and redacted.
        for chunk in ["write to ops", "@corp", ".com now. ", &text] {
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
        }
        assert!(!guard.in_lane);
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(
            shown,
            format!("café, as I said, {text}write to [EMAIL] now. {text}")
        );
    });
}

#[test]
fn out_of_the_lane_a_blocked_literal_goes_to_the_stages_at_once() {
    // (The e-mail pattern looks around: with a replacement just before the text it holds,
    // the pipeline is not quiet, and the guard stays out of the lane.)
    let engine = engine_of(|set| {
        set.output(Deny(&["evil.invalid", "malware.test"]))
            .output(Redact(SSN, "SSN"))
            .output(Redact(r"\b[a-z]{1,16}@[a-z]{1,16}\.com\b", "EMAIL"))
    });
    assert!(engine.stream_plan().lane);
    let runtime = runtime();
    let plain = "nothing to see in this sentence at all. ".repeat(8);
    // A while after two replacements, out of the lane, the blocked domain arrives in pieces.
    let text = [
        &plain,
        "call 123-45-6789 or ops@example.com, ",
        "and then, a while later, only when everything else is done, ",
        "then evil.inv",
        "alid ",
    ]
    .concat();
    let literal_end = text.find("evil.invalid").expect("the literal") + "evil.invalid".len();
    runtime.block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut received = 0;
        let mut out_of_the_lane = false;
        for chunk in text
            .as_bytes()
            .chunks(8)
            .chain([&b"more plain text. "[..]; 40])
        {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            out_of_the_lane |= !guard.in_lane;
            received += chunk.len();
            if guard.feed(chunk).await.is_err() {
                assert!(out_of_the_lane);
                // The deny stage (the first) reports a match once its window is past
                // it: within a few pushes of the literal, not once the windows of all
                // stages fill.
                assert!(
                    received <= literal_end + 24,
                    "denied {} bytes after the literal",
                    received - literal_end
                );
                return;
            }
        }
        panic!("no denial");
    });
}

#[test]
fn the_lane_tests_exactly_the_literals_first_bytes() {
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Redact(EMAIL, "EMAIL"))
            .output(Deny(&["phishing.example", "malware.test", "evil.invalid"]))
    });
    // `-` and `@` alone; `ph`, `ma` and `ev` in either case.
    assert_eq!(engine.stream_plan().lane_filter.few_tests(), Some((2, 3)));
}

#[test]
fn a_feed_is_two_words() {
    // Returned in two registers; a larger `Feed` goes through memory, and reading it back
    // from several stores stalls the caller on every push.
    assert_eq!(
        std::mem::size_of::<Feed<'_, '_>>(),
        2 * std::mem::size_of::<usize>()
    );
}

#[test]
fn patterns_without_a_common_literal_are_stepped_by_a_dfa() {
    assert!(literals_of(r"\b\d{5}\b").is_none());
    assert!(literals_of(r"\w{3,8}").is_none());
}

#[test]
fn a_denying_stage_that_steps_a_dfa_keeps_the_fast_lane_and_releases_nothing_it_denies() {
    // The denying stage steps a DFA, in the fast lane too.
    let words = forty_words();
    let engine = engine_of(|set| set.output(Redact(SSN, "SSN")).output(Deny(words)));
    let plan = engine.stream_plan();
    assert!(matches!(plan.stages[1].finder, MatchFinder::Dfa(_)));
    assert!(plan.lane);
    assert_eq!(plan.deny_dfas, [1]);
    runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let plain = "nothing to see in this sentence at all. ".repeat(4);
        let (mut sent, mut shown) = (String::new(), String::new());
        for chunk in plain.as_bytes().chunks(7) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            sent.push_str(chunk);
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            assert!(guard.in_lane);
        }
        // The lane released the text but its windows.
        assert!(shown.len() + plan.windows >= sent.len() && !shown.is_empty());
        // An SSN sends the text to the stages, which replace it and take the lane again once
        // they are quiet; out of the lane, pushes in which the denying stage's DFA sees no
        // match are only kept.
        let (mut kept, secret) = (
            0,
            format!("call 123-45-6789, 987-65-4321 or 555-12-3456 now. {plain}"),
        );
        for chunk in secret.as_bytes().chunks(4) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let (holding, fed) = (guard.route == PushRoute::Hold, guard.fed);
            sent.push_str(chunk);
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            kept += usize::from(holding && guard.fed == fed);
        }
        assert!(kept > 0);
        assert!(guard.in_lane);
        assert_eq!(guard.stages[0].replacements, 3);
        // A listed word in capitals, in two pushes, then more text: once every stage before
        // the denying one has passed the word on, and the DFA has seen the byte after it,
        // the push is denied, and nothing from the word on was released.
        let word = words[7].to_uppercase();
        let (head, tail) = word.split_at(3);
        let start = sent.len() + "then ".len();
        let mut denied = false;
        for delta in [
            format!("then {head}"),
            format!("{tail} and"),
            " more text to follow.".to_owned(),
        ] {
            match guard.feed(&delta).await {
                Ok(released) => shown.push_str(released),
                Err(_) => {
                    denied = true;
                    break;
                }
            }
        }
        assert!(denied);
        assert!(shown.len() <= start, "released up to {}", shown.len());
        assert!(shown.contains("call [SSN], [SSN] or [SSN] now."));
    });
}

/// Forty case-insensitive words that start with twenty-six letters: too many literals for a
/// search, so a stage denying them steps a DFA.
fn forty_words() -> &'static [&'static str] {
    let words: Vec<&'static str> = (0..40u8)
        .map(|at| {
            let (first, second) = (b'a' + at % 26, b'z' - at % 26);
            let word = format!("{}{}quor{at}", char::from(first), char::from(second));
            &*Box::leak(word.into_boxed_str())
        })
        .collect();
    Box::leak(words.into_boxed_slice())
}

#[test]
fn out_of_the_lane_a_match_of_a_denying_dfa_goes_to_the_stages_at_once() {
    let words = forty_words();
    let engine = engine_of(|set| {
        set.output(Deny(words))
            .output(Redact(SSN, "SSN"))
            .output(Redact(r"[a-z]{1,16}@[a-z]{1,16}\.com", "EMAIL"))
    });
    let plan = engine.stream_plan();
    assert_eq!(plan.deny_dfas, [0]);
    runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let plain = "nothing to see in this sentence at all. ".repeat(8);
        // Right after two replacements, out of the lane, a listed word arrives in pieces.
        let word = words[11].to_uppercase();
        let text = format!(
            "{plain}call 123-45-6789, 987-65-4321 or ops@example.com, then {word} and more. "
        );
        let word_end = text.find(&word).expect("the word") + word.len();
        let (mut received, mut shown) = (0, String::new());
        let mut held_out_of_the_lane = false;
        for chunk in text.as_bytes().chunks(3).chain([&b"plain text. "[..]; 8]) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            held_out_of_the_lane |= guard.route == PushRoute::Hold;
            received += chunk.len();
            match guard.feed(chunk).await {
                Ok(released) => shown.push_str(released),
                Err(_) => {
                    assert!(held_out_of_the_lane);
                    // The denying stage (the first) sees the word once its DFA has seen
                    // the byte after it: within a push of the word, not once the windows
                    // of all stages fill.
                    assert!(
                        received <= word_end + 3,
                        "denied {} bytes after the word",
                        received - word_end
                    );
                    assert!(shown.len() < word_end - word.len());
                    return;
                }
            }
        }
        panic!("no denial");
    });
}

#[test]
fn a_replacing_stage_that_steps_a_dfa_keeps_the_fast_lane() {
    // Capitals and letters, which prose holds too many of for a literal search: the stage
    // steps a DFA, in the fast lane. Its match sends the text to the stages, which replace
    // it and hand the text back to the lane within the same push.
    let engine = engine_of(|set| set.output(Redact(r"[A-Z]{2}[a-z]{7}", "CODE")));
    let plan = engine.stream_plan();
    assert!(matches!(plan.stages[0].finder, MatchFinder::Dfa(_)));
    assert!(plan.lane);
    runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let plain = "nothing to see in this sentence at all. ".repeat(4);
        let mut shown = String::new();
        let text = format!("{plain}the code XKabcdefg is {plain}");
        for chunk in text.as_bytes().chunks(5) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            assert!(guard.in_lane);
        }
        assert_eq!(guard.stages[0].replacements, 1);
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(shown, format!("{plain}the code [CODE] is {plain}"));
    });
}

#[test]
fn a_dfa_scan_sees_a_match_wherever_it_ends_and_however_the_text_is_split() {
    // The scan steps four bytes a round while its states are not tagged: a match may end at
    // any byte of a round, or of the bytes after the last whole round.
    let pattern = r"[A-Z]{2}[a-z]{3}";
    let engine = engine_of(|set| set.output(Redact(pattern, "CODE")));
    let plan = engine.stream_plan();
    let stage = &plan.stages[0];
    assert!(matches!(stage.finder, MatchFinder::Dfa(_)));
    let regex = regex::Regex::new(pattern).expect("a valid pattern");
    for padding in 0..9 {
        for body in ["XYabc", "XYab", "xYabc", "XYabcXY", "XY", "aXYabcd"] {
            for tail in ["", ".", "..", "...", "....", "....."] {
                let text = format!("{}{body}{tail}", ".".repeat(padding));
                for split in 0..=text.len() {
                    let mut scan = StageScan::new(stage);
                    let clear = scan.lane_step(stage, &text[..split], false)
                        && scan.lane_step(stage, &text, true);
                    assert_eq!(!clear, regex.is_match(&text), "{text:?} split at {split}");
                }
            }
        }
    }
}

#[test]
fn a_long_dfa_scan_in_parts_sees_every_match() {
    // Text of 64 bytes or more is scanned as four parts at once (two when the longest match
    // is over a quarter of it), each later one from a little before it: a match may lie
    // anywhere, across a part's edge or around a scan's start, and a word boundary there
    // depends on the byte before it.
    let patterns = [
        (r"[A-Z]{2}[a-z]{3}", 5),
        (r"\b[A-Z]{2}[a-z]{3}\b", 5),
        // Two parts of text under 72 bytes.
        (r"[A-Z]{2}[a-z]{3}[0-9]{0,12}", 17),
        // Case folding: `k` also matches the Kelvin sign (three bytes), `s` the long s (two),
        // so ASCII text holds matches of 4 bytes at most, other text of 7.
        (r"(?i:[x-z][j-l][a-b]s)", 7),
    ];
    for (pattern, longest) in patterns {
        let engine = engine_of(|set| set.output(Redact(pattern, "CODE")));
        let plan = engine.stream_plan();
        let stage = &plan.stages[0];
        let MatchFinder::Dfa(watch) = &stage.finder else {
            panic!("{pattern} is not watched with a DFA");
        };
        assert_eq!(watch.longest, longest);
        if pattern.starts_with("(?i") {
            // Parts of ASCII text, after ASCII text as long as the longest match, start as
            // far before as a match of ASCII text is long; other text, as far as any is.
            // The Kelvin sign, three bytes, then 71 ASCII bytes.
            let text = format!("\u{212a}{}", ".".repeat(71));
            assert_eq!(watch.overlap(&text, 3 + 7), 5);
            assert_eq!(watch.overlap(&text, 3 + 6), 8);
            assert_eq!(watch.overlap(&format!("{}\u{212a}.", ".".repeat(64)), 8), 8);
        }
        let regex = regex::Regex::new(pattern).expect("a valid pattern");
        // Twice: the parts are stepped together only over states the DFA has computed,
        // which the scans of the first round leave to those of the second.
        for _ in 0..2 {
            for length in [64, 65, 90, 131] {
                for body in [
                    "XYabc",
                    "XYab",
                    "aXYabc",
                    "XYabcd",
                    "a XYabc b",
                    "XYabc0123456789",
                    "xkas",
                    "XY\u{212a}A\u{17f}",
                    "\u{212a} xyKAS",
                ] {
                    for at in 0..=length - body.len() {
                        let mut text = ".".repeat(length);
                        text.replace_range(at..at + body.len(), body);
                        for split in [0, 1, at, length / 2, length - 64] {
                            let split = text.floor_char_boundary(split);
                            let mut scan = StageScan::new(stage);
                            let clear = scan.lane_step(stage, &text[..split], false)
                                && scan.lane_step(stage, &text, true);
                            scan.release(stage);
                            // (A DFA with Unicode word boundaries gives up on other text:
                            // not clear either.)
                            let gives_up = !text.is_ascii() && pattern.contains(r"\b");
                            assert_eq!(
                                !clear,
                                regex.is_match(&text) || gives_up,
                                "{pattern}: {text:?} split at {split}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_dfa_scan_skips_only_text_its_grams_clear() {
    // A word list whose words are nine bytes or more: the scan looks up four bytes every six
    // and skips the text that holds none of the words' runs, up to the last eight bytes,
    // where it starts afresh. A word may lie anywhere: across the pushes, at the end of one
    // (seen only with the next), around where the scan starts afresh.
    // (With forty more words, of twenty-six first letters: too many literals to search for.)
    let more: Vec<String> = forty_words()
        .iter()
        .map(|word| format!("{word}vex"))
        .collect();
    let pattern: &'static str = Box::leak(
        format!(
            r"(?i:zorquavex|lumtrixbak|\bgrif[0-9]{{2}}pol\b|{})",
            more.join("|")
        )
        .into_boxed_str(),
    );
    let engine = engine_of(|set| set.output(Redact(pattern, "WORD")));
    let plan = engine.stream_plan();
    let stage = &plan.stages[0];
    let MatchFinder::Dfa(watch) = &stage.finder else {
        panic!("{pattern} is not watched with a DFA");
    };
    let prefix = watch.grams.as_ref().expect("a gram filter").prefix();
    assert_eq!(prefix, 9);
    let regex = regex::Regex::new(pattern).expect("a valid pattern");
    let filler = "plain words, and more of them. ".repeat(8);
    for length in [64, 80, 150] {
        for body in [
            "zorquavex",
            "ZorQuaVeX",
            "lumtrixba\u{212a}",
            " grif42pol ",
            "xgrif42pol",
            "zorquave",
            "",
        ] {
            for at in 0..=length - body.len() {
                let mut text = filler[..length].to_owned();
                text.replace_range(at..at + body.len(), body);
                for split in [1, at, at + 4, length - 64, length / 2] {
                    let split = text.floor_char_boundary(split.min(length));
                    let mut scan = StageScan::new(stage);
                    let mut clear = scan.lane_step(stage, &text[..split], false);
                    let mut skipped = false;
                    for end in [false, true] {
                        clear &= scan.lane_step(stage, &text, end);
                        // Text the filter clears is skipped but for its last `prefix - 1`
                        // bytes.
                        skipped |= !end && scan.dfa_scanned() == Some(text.len() + 1 - prefix);
                    }
                    scan.release(stage);
                    assert_eq!(!clear, regex.is_match(&text), "{text:?} split at {split}");
                    // Prose alone is skipped.
                    if body.is_empty() && length - split >= 64 {
                        assert!(skipped, "{text:?} split at {split}");
                    }
                }
            }
        }
    }
}

#[test]
fn after_a_replacement_the_lane_is_taken_again_at_once_when_no_later_stage_looks_around() {
    // An SSN in every sentence: the lane finds its `-`, releases the text before it, and the
    // stages replace it (and the next) in one run. The character before the text the next
    // stage holds is then the replacement's: a stage that does not look around never reads
    // it, and the lane goes on at once. (One with a word boundary waits for it to pass.)
    let text = "Her SSN is 123-45-6789, as filed. ".repeat(12);
    for (looks_around, engine) in [
        (
            false,
            engine_of(|set| {
                set.output(Redact("[0-9]{3}-[0-9]{2}-[0-9]{4}", "SSN"))
                    .output(Deny(&["wire the funds to this account"]))
            }),
        ),
        (
            true,
            engine_of(|set| {
                set.output(Redact("[0-9]{3}-[0-9]{2}-[0-9]{4}", "SSN"))
                    .output(Redact(r"\bas filed\b", "NOTED"))
            }),
        ),
    ] {
        let plan = engine.stream_plan();
        assert_eq!(plan.stages[1].looks_around, looks_around);
        runtime().block_on(async {
            let mut guard = engine.output_stream(Metadata::new("agent", "session"));
            let (mut shown, mut out_of_the_lane) = (String::new(), 0);
            for chunk in text.as_bytes().chunks(4) {
                let chunk = std::str::from_utf8(chunk).expect("ascii");
                shown.push_str(guard.feed(chunk).await.expect("no denial"));
                out_of_the_lane += usize::from(!guard.in_lane);
            }
            for item in guard.finish().await {
                shown.push_str(&item.into_text().expect("text"));
            }
            let noted = if looks_around { "[NOTED]" } else { "as filed" };
            assert_eq!(shown, format!("Her SSN is [SSN], {noted}. ").repeat(12));
            if !looks_around {
                assert_eq!(out_of_the_lane, 0);
            }
        });
    }
}

#[test]
fn while_a_replacing_literal_is_pending_the_denying_filter_tests_a_push_behind() {
    // After the lane finds an SSN's `-`, the pushes release the text before it until the
    // stages can act on the whole match; the filter of the denying stage's literals tests
    // them 16 bytes at a time, as long as the bytes it has not tested stay within the
    // slack.
    let engine = engine_of(|set| {
        set.output(Redact(SSN, "SSN"))
            .output(Deny(&["evil.invalid"]))
    });
    let plan = engine.stream_plan();
    runtime().block_on(async {
        let plain = "nothing to see in this sentence at all. ".repeat(4);
        let text = format!("{plain}call 123-45-6789 now. {plain}").repeat(3);
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let (mut shown, mut deferred, mut moved) = (String::new(), 0, 0);
        for chunk in text.as_bytes().chunks(3) {
            let chunk = std::str::from_utf8(chunk).expect("ascii");
            let (pending, before) = (guard.route == PushRoute::LanePending, guard.hold_filtered);
            shown.push_str(guard.feed(chunk).await.expect("no denial"));
            if pending && guard.route == PushRoute::LanePending {
                assert!(guard.raw.len() - guard.hold_filtered <= plan.lane_slack);
                if guard.hold_filtered == before {
                    deferred += 1;
                } else {
                    moved += 1;
                }
            }
        }
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        assert_eq!(shown, format!("{plain}call [SSN] now. {plain}").repeat(3));
        assert!(
            deferred > 2 * moved && moved > 0,
            "{deferred} deferred, {moved} moved"
        );
    });
    // A blocked word that arrives while a replacing literal is pending is denied before any
    // of it is released.
    let text = format!(
        "{}call 123-45-6789 or evil.invalid now. ",
        "plain words. ".repeat(6)
    );
    let start = text.find("evil").expect("the word");
    runtime().block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::new();
        for chunk in text
            .as_bytes()
            .chunks(3)
            .chain([&b"and then more text. "[..]; 8])
        {
            match guard.feed(std::str::from_utf8(chunk).expect("ascii")).await {
                Ok(released) => shown.push_str(released),
                Err(_) => {
                    assert!(shown.len() <= start, "released {shown:?}");
                    return;
                }
            }
        }
        panic!("no denial");
    });
}
