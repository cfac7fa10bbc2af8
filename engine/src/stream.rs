//! Streaming output: release only text the output policies have cleared.
//!
//! Models stream their answers. [`PolicyEngine::output_stream`] returns an [`OutputStream`]
//! guard: push each delta as it arrives, and release only what the guard yields as
//! [`StreamItem::Text`]. The guard never yields text its output policies have not cleared,
//! and holds back only as much as the policies need.
//!
//! # Modes
//!
//! The mode is chosen once, when the policy set is built (see [`StreamPlan`]):
//!
//! - **Incremental**, when every enforced output policy has a streaming form
//!   ([`OutputPolicy::streaming`]): DSL `contains` rules and
//!   regex redactions of `response.content`. Each rule scans the text once, as it arrives,
//!   with its state kept between pushes, and holds back at most its *window*: the longest
//!   possible match plus one character of look-ahead when the pattern has a boundary
//!   assertion (`\b`, `$`). Rules run as a pipeline in declared order, so a rule sees the text
//!   as the rules before it changed it, exactly as in [`PolicyEngine::evaluate_output`]. A
//!   pattern with no upper bound on its match length (`\d+`) cannot stream unless the rule
//!   states a maximum; nor can a pattern that matches the empty string. Guarantees: the
//!   released text is always a prefix of what the whole-text evaluation forwards, and at the
//!   end it equals it; a denial is reported before any byte of the offending match (or after
//!   it) is released.
//! - **Buffer** (the default when any enforced output policy is whole-text only: code
//!   policies without a streaming form, Rego, remote): nothing is released until the whole
//!   answer has been evaluated at [`finish`](OutputStream::finish).
//! - **Checkpoint** (opt-in with [`PolicySetBuilder::stream_checkpoint`]): the accumulated text
//!   is evaluated every N characters, and released up to that point when the evaluation
//!   allows it unchanged; the final evaluation runs before the tail is released. A later
//!   evaluation can deny after earlier text was released: checkpoint mode trades that
//!   guarantee for latency. Errors and time-outs fail closed: held text is never released.
//!
//! Policies in monitor mode never hold text back: they are evaluated once, on the whole text,
//! when the stream finishes.
//!
//! After a denial or an error nothing more is released.
//!
//! [`PolicySetBuilder::stream_checkpoint`]: crate::PolicySetBuilder::stream_checkpoint

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;
use regex_automata::hybrid::{self, LazyStateID};
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use serde::Serialize;

use crate::apply::compile_pattern;
use crate::audit::{AuditDecision, AuditRecord};
use crate::engine::PolicyEngine;
use crate::error::{PolicyDenialError, PolicyEvaluationError};
use crate::set::PointPolicies;
use crate::{
    EngineError, InterceptionPoint, Message, Metadata, OutputContext, OutputPolicy, PolicyDecision,
    Redaction,
};

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

    fn pattern(&self) -> &str {
        match self {
            StreamingRule::DenyOnMatch { pattern, .. } | StreamingRule::Replace { pattern, .. } => {
                pattern
            }
        }
    }

    fn stated_max(&self) -> Option<usize> {
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
/// An output policy whose [`evaluate`](crate::OutputPolicy::evaluate) returns this for its own
/// rules decides exactly as the streaming guard does when it runs them incrementally.
pub fn decide_whole_text(
    rules: &[StreamingRule],
    text: &str,
) -> Result<PolicyDecision, crate::BoxError> {
    let mut current = Cow::Borrowed(text);
    let mut redactions = Vec::new();
    for rule in rules {
        let regex = crate::apply::cached_regex(rule.pattern())?;
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
        PolicyDecision::Redact { redactions }
    })
}

/// How the guard runs the output policies of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Every enforced output policy streams: text is released as soon as no rule can still
    /// match it.
    Incremental,
    /// Nothing is released until the whole answer has been evaluated.
    Buffer,
    /// The accumulated text is evaluated every `n` characters.
    Checkpoint {
        /// Characters between evaluations.
        every: usize,
    },
}

/// What the guard will do with a policy set's output policies, worked out when the set is
/// built.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    mode: StreamMode,
    stages: Vec<Stage>,
    whole_text_reasons: Vec<String>,
}

#[derive(Debug, Clone)]
struct Stage {
    policy_index: usize,
    policy_id: String,
    regex: Arc<Regex>,
    pattern: String,
    action: StageAction,
    /// Bytes this stage may hold back: longest match, look-ahead, and a partial character.
    window: usize,
    /// A lazy DFA stepped over each new byte, so text is searched only when a match may be in
    /// it. It gives up ("quits") on non-ASCII text when the pattern has a Unicode word
    /// boundary; the stage then searches its window on every push.
    dfa: Arc<hybrid::dfa::DFA>,
}

#[derive(Debug, Clone)]
enum StageAction {
    Deny { reason: Option<String> },
    Replace { replacement: String },
}

impl StreamPlan {
    /// The mode.
    pub fn mode(&self) -> StreamMode {
        self.mode
    }

    /// The most text, in bytes, the incremental mode holds back (0 in the other modes, which
    /// hold back everything or everything since the last checkpoint).
    pub fn hold_back(&self) -> usize {
        self.stages.iter().map(|stage| stage.window).sum()
    }

    /// Why the set cannot stream incrementally, one line per enforced output policy that
    /// cannot (empty in incremental mode).
    pub fn whole_text_reasons(&self) -> &[String] {
        &self.whole_text_reasons
    }

    pub(crate) fn build(
        output: &PointPolicies<dyn OutputPolicy>,
        forms: &[Option<Vec<StreamingRule>>],
        checkpoint: Option<usize>,
    ) -> StreamPlan {
        let mut stages = Vec::new();
        let mut reasons = Vec::new();
        for (index, (entry, form)) in output.entries.iter().zip(forms).enumerate() {
            if entry.monitor {
                continue;
            }
            let id = entry.policy.id();
            match form {
                None => reasons.push(format!("`{id}` has no streaming form")),
                Some(rules) => match rules
                    .iter()
                    .map(|rule| Stage::compile(index, id, rule))
                    .collect::<Result<Vec<_>, String>>()
                {
                    Ok(compiled) => stages.extend(compiled),
                    Err(problem) => reasons.push(format!("`{id}` cannot stream: {problem}")),
                },
            }
        }
        let mode = if reasons.is_empty() {
            StreamMode::Incremental
        } else {
            stages.clear();
            match checkpoint {
                Some(every) => StreamMode::Checkpoint {
                    every: every.max(1),
                },
                None => StreamMode::Buffer,
            }
        };
        StreamPlan {
            mode,
            stages,
            whole_text_reasons: reasons,
        }
    }
}

impl Stage {
    fn compile(
        policy_index: usize,
        policy_id: &str,
        rule: &StreamingRule,
    ) -> Result<Stage, String> {
        let pattern = rule.pattern();
        let regex = compile_pattern(pattern)?;
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .map_err(|error| format!("invalid pattern {pattern:?}: {error}"))?;
        let properties = hir.properties();
        if properties.minimum_len() == Some(0) {
            return Err(format!("the pattern {pattern:?} can match empty text"));
        }
        let longest = match (properties.maximum_len(), rule.stated_max()) {
            (_, Some(stated)) => stated,
            (Some(bound), None) => bound,
            (None, None) => {
                return Err(format!(
                    "the pattern {pattern:?} has no upper bound on its match length; state a maximum"
                ));
            }
        };
        // One more character of look-ahead for boundary assertions, and up to three bytes to
        // stop at a character boundary.
        let lookahead = if properties.look_set().is_empty() {
            0
        } else {
            4
        };
        let action = match rule {
            StreamingRule::DenyOnMatch { reason, .. } => StageAction::Deny {
                reason: reason.clone(),
            },
            StreamingRule::Replace { replacement, .. } => StageAction::Replace {
                replacement: replacement.clone(),
            },
        };
        let dfa = hybrid::dfa::DFA::builder()
            .configure(
                hybrid::dfa::DFA::config()
                    .match_kind(MatchKind::LeftmostFirst)
                    .unicode_word_boundary(true)
                    .cache_capacity(4 * crate::apply::PATTERN_SIZE_LIMIT),
            )
            .thompson(
                regex_automata::nfa::thompson::Config::new()
                    .nfa_size_limit(Some(crate::apply::PATTERN_SIZE_LIMIT)),
            )
            .build(pattern)
            .map_err(|error| format!("the pattern {pattern:?} cannot stream: {error}"))?;
        Ok(Stage {
            policy_index,
            policy_id: policy_id.to_owned(),
            regex: Arc::new(regex),
            pattern: pattern.to_owned(),
            action,
            window: longest + lookahead + 3,
            dfa: Arc::new(dfa),
        })
    }
}

/// What a push or the end of a stream yields.
#[derive(Debug)]
pub enum StreamItem {
    /// Checked text, to release to the reader.
    Text(String),
    /// A policy denied the answer; nothing more is released.
    Denied(PolicyDenialError),
    /// A policy could not be evaluated; nothing more is released.
    Error(PolicyEvaluationError),
}

/// The numbers of a stream, as the start and end audit records report them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// `start` or `end`.
    pub event: &'static str,
    /// The mode.
    pub mode: StreamMode,
    /// At the end: `allowed`, `denied` or `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
    /// Characters received.
    pub raw_chars: usize,
    /// Characters released. For a denied stream this depends on how far the answer had got
    /// when the offending text arrived.
    pub released_chars: usize,
    /// The most text held back at once, in characters.
    pub max_held_chars: usize,
    /// Time from the start of the stream to the first released byte.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "millis")]
    pub time_to_first_release: Option<Duration>,
}

fn millis<S: serde::Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(duration) => serializer.serialize_f64(duration.as_secs_f64() * 1000.0),
        None => serializer.serialize_none(),
    }
}

/// The id audit records of the stream itself carry.
pub const STREAM_POLICY_ID: &str = "portcullis.stream";

/// The text one incremental stage has not passed on yet, and its scanning state.
struct StageState {
    /// One character of already-passed text (look-behind context), then the held text.
    buffer: String,
    /// Where the held text starts in `buffer`.
    held_from: usize,
    /// Replacements made.
    replacements: usize,
    scanner: Option<Scanner>,
}

/// The DFA's state over the text since the last reset point.
struct Scanner {
    cache: hybrid::dfa::Cache,
    state: LazyStateID,
    /// The DFA has seen a match since the last reset point.
    matched: bool,
}

enum StageOutput {
    Passed(String),
    Matched,
}

impl StageState {
    fn new(stage: &Stage) -> Self {
        let mut state = StageState {
            buffer: String::new(),
            held_from: 0,
            replacements: 0,
            scanner: None,
        };
        state.reset_scanner(stage);
        state
    }

    fn held(&self) -> &str {
        &self.buffer[self.held_from..]
    }

    /// Restarts the DFA at `held_from`, with the byte before it as look-behind, and steps it
    /// over the held text.
    fn reset_scanner(&mut self, stage: &Stage) {
        let look_behind = self.buffer.as_bytes()[..self.held_from].last().copied();
        let config = start::Config::new()
            .anchored(Anchored::No)
            .look_behind(look_behind);
        let mut cache = match self.scanner.take() {
            Some(scanner) => scanner.cache,
            None => stage.dfa.create_cache(),
        };
        self.scanner = stage
            .dfa
            .start_state(&mut cache, &config)
            .ok()
            .map(|state| Scanner {
                cache,
                state,
                matched: false,
            });
        let from = self.held_from;
        self.scan(stage, from, false);
    }

    /// Steps the DFA over `buffer[from..]`; drops it if it gives up.
    fn scan(&mut self, stage: &Stage, from: usize, end: bool) {
        let Some(scanner) = &mut self.scanner else {
            return;
        };
        if scanner.matched {
            return;
        }
        let mut state = scanner.state;
        for &byte in &self.buffer.as_bytes()[from..] {
            match stage.dfa.next_state(&mut scanner.cache, state, byte) {
                Ok(next) => state = next,
                Err(_) => {
                    self.scanner = None;
                    return;
                }
            }
            if state.is_tagged() {
                if state.is_match() {
                    scanner.matched = true;
                    break;
                }
                if state.is_quit() {
                    self.scanner = None;
                    return;
                }
            }
        }
        if end && !scanner.matched {
            match stage.dfa.next_eoi_state(&mut scanner.cache, state) {
                Ok(next) if next.is_match() => scanner.matched = true,
                Ok(next) if next.is_quit() => {
                    self.scanner = None;
                    return;
                }
                Ok(_) => {}
                Err(_) => {
                    self.scanner = None;
                    return;
                }
            }
        }
        scanner.state = state;
    }

    /// Adds `input` and passes on what is final; with `end`, everything is final.
    fn feed(&mut self, stage: &Stage, input: &str, end: bool) -> StageOutput {
        let from = self.buffer.len();
        self.buffer.push_str(input);
        self.scan(stage, from, end);
        let len = self.buffer.len();
        let mut horizon = if end {
            len
        } else {
            len.saturating_sub(stage.window).max(self.held_from)
        };
        while !self.buffer.is_char_boundary(horizon) {
            horizon -= 1;
        }
        let clean = matches!(&self.scanner, Some(scanner) if !scanner.matched);
        if clean {
            // No match anywhere since the reset point: everything before the horizon is final.
            let passed = self.buffer[self.held_from..horizon].to_owned();
            self.cut_at(horizon);
            return StageOutput::Passed(passed);
        }
        if matches!(stage.action, StageAction::Deny { .. }) && self.scanner.is_some() {
            // The DFA saw a complete match: the whole text contains it too.
            return StageOutput::Matched;
        }
        let mut passed = String::new();
        let mut position = self.held_from;
        while let Some(found) = stage.regex.find_at(&self.buffer, position) {
            if found.start() >= horizon && !end {
                break;
            }
            match &stage.action {
                StageAction::Deny { .. } => return StageOutput::Matched,
                StageAction::Replace { replacement } => {
                    passed.push_str(&self.buffer[position..found.start()]);
                    passed.push_str(replacement);
                    self.replacements += 1;
                    position = found.end();
                }
            }
            if end && position >= len {
                break;
            }
        }
        let cut = position.max(horizon);
        passed.push_str(&self.buffer[position..cut]);
        self.cut_at(cut);
        if self.scanner.is_some() {
            self.reset_scanner(stage);
        }
        StageOutput::Passed(passed)
    }

    /// Drops the text before `cut`, keeping one character before it as look-behind context.
    fn cut_at(&mut self, cut: usize) {
        let keep_from = self.buffer[..cut]
            .char_indices()
            .next_back()
            .map_or(cut, |(at, _)| at);
        self.buffer.drain(..keep_from);
        self.held_from = cut - keep_from;
    }
}

/// The streaming output guard; see the [module docs](self).
pub struct OutputStream<'e> {
    engine: &'e PolicyEngine,
    plan: &'e StreamPlan,
    metadata: Metadata,
    stages: Vec<StageState>,
    /// Everything received.
    raw: String,
    raw_chars: usize,
    /// Everything released.
    released: String,
    released_chars: usize,
    /// Bytes of `raw` covered by released text (buffer and checkpoint modes).
    released_raw: usize,
    next_checkpoint: usize,
    incomplete_utf8: Vec<u8>,
    started: Instant,
    first_release: Option<Duration>,
    max_held_chars: usize,
    finished: Option<&'static str>,
    reported_end: bool,
}

impl PolicyEngine {
    /// Starts guarding a streamed answer; see [`stream`](crate::stream).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use portcullis_engine::stream::{StreamItem, StreamingRule};
    /// use portcullis_engine::{
    ///     async_trait, BoxError, Metadata, OutputContext, OutputPolicy, PolicyDecision,
    ///     PolicyEngine, PolicySet, Redaction,
    /// };
    ///
    /// /// Replaces SSNs, in whole answers and in streams.
    /// struct RedactSsn;
    ///
    /// const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";
    ///
    /// #[async_trait]
    /// impl OutputPolicy for RedactSsn {
    ///     fn id(&self) -> &str {
    ///         "redact_ssn"
    ///     }
    ///
    ///     async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
    ///         Ok(PolicyDecision::redact([Redaction::replace("response.content", SSN)]))
    ///     }
    ///
    ///     fn streaming(&self) -> Option<Vec<StreamingRule>> {
    ///         Some(vec![StreamingRule::Replace {
    ///             pattern: SSN.into(),
    ///             replacement: "[REDACTED]".into(),
    ///             max_match_len: None,
    ///         }])
    ///     }
    /// }
    ///
    /// let engine = PolicyEngine::builder()
    ///     .policy_set(PolicySet::builder().output(RedactSsn).build())
    ///     .build();
    /// let mut guard = engine.output_stream(Metadata::new("agent", "session"));
    /// let mut shown = String::new();
    /// for delta in ["Your SSN is 123-45-", "6789, keep it ", "safe."] {
    ///     for item in guard.push(delta).await {
    ///         if let StreamItem::Text(text) = item {
    ///             shown.push_str(&text);
    ///         }
    ///     }
    /// }
    /// for item in guard.finish().await {
    ///     if let StreamItem::Text(text) = item {
    ///         shown.push_str(&text);
    ///     }
    /// }
    /// assert_eq!(shown, "Your SSN is [REDACTED], keep it safe.");
    /// # });
    /// ```
    pub fn output_stream(&self, metadata: Metadata) -> OutputStream<'_> {
        let plan = &self.policy_set().stream_plan;
        let mut stream = OutputStream {
            engine: self,
            plan,
            metadata,
            stages: plan.stages.iter().map(StageState::new).collect(),
            raw: String::new(),
            raw_chars: 0,
            released: String::new(),
            released_chars: 0,
            released_raw: 0,
            next_checkpoint: match plan.mode {
                StreamMode::Checkpoint { every } => every,
                _ => usize::MAX,
            },
            incomplete_utf8: Vec::new(),
            started: Instant::now(),
            first_release: None,
            max_held_chars: 0,
            finished: None,
            reported_end: false,
        };
        stream.report("start");
        stream
    }

    /// How this engine's output policies stream.
    pub fn stream_plan(&self) -> &StreamPlan {
        &self.policy_set().stream_plan
    }
}

impl OutputStream<'_> {
    /// The stream's plan.
    pub fn plan(&self) -> &StreamPlan {
        self.plan
    }

    /// Everything released so far.
    pub fn released(&self) -> &str {
        &self.released
    }

    /// Characters received but not released yet.
    pub fn held_chars(&self) -> usize {
        self.raw_chars.saturating_sub(self.released_chars_of_raw())
    }

    fn released_chars_of_raw(&self) -> usize {
        match self.plan.mode {
            StreamMode::Incremental => {
                let held: usize = self
                    .stages
                    .iter()
                    .map(|state| state.held().chars().count())
                    .sum();
                self.raw_chars.saturating_sub(held)
            }
            _ => self.raw[..self.released_raw].chars().count(),
        }
    }

    /// Adds a delta of the answer and returns what can be released now.
    pub async fn push(&mut self, delta: &str) -> Vec<StreamItem> {
        // Text pushed after the end still counts as received, so the end record says how
        // much the stream carried whatever the chunking.
        self.raw_chars += delta.chars().count();
        if self.finished.is_some() {
            return Vec::new();
        }
        self.raw.push_str(delta);
        let items = match self.plan.mode {
            StreamMode::Incremental => self.run_stages(delta, false),
            StreamMode::Buffer => Vec::new(),
            StreamMode::Checkpoint { every } => self.checkpoint(every).await,
        };
        self.note_held();
        items
    }

    /// Adds raw bytes of the answer (for example from a network body), which may split a
    /// UTF-8 character; the incomplete end is kept until the next bytes. Invalid UTF-8 is an
    /// evaluation error.
    pub async fn push_bytes(&mut self, bytes: &[u8]) -> Vec<StreamItem> {
        self.incomplete_utf8.extend_from_slice(bytes);
        let pending = std::mem::take(&mut self.incomplete_utf8);
        match std::str::from_utf8(&pending) {
            Ok(text) => self.push(text).await,
            Err(error) if error.error_len().is_none() => {
                let (valid, rest) = pending.split_at(error.valid_up_to());
                self.incomplete_utf8 = rest.to_vec();
                // `valid` is valid UTF-8 by construction.
                let text = String::from_utf8_lossy(valid).into_owned();
                self.push(&text).await
            }
            Err(_) if self.finished.is_some() => {
                self.raw_chars += String::from_utf8_lossy(&pending).chars().count();
                Vec::new()
            }
            Err(error) => self.fail(Box::new(error)),
        }
    }

    /// Ends the stream: runs the final evaluation and releases the rest.
    pub async fn finish(mut self) -> Vec<StreamItem> {
        if self.finished.is_some() {
            self.report("end");
            return Vec::new();
        }
        let mut items = if self.incomplete_utf8.is_empty() {
            Vec::new()
        } else {
            let bytes = std::mem::take(&mut self.incomplete_utf8);
            match std::str::from_utf8(&bytes) {
                Ok(_) => Vec::new(),
                Err(error) => self.fail(Box::new(error)),
            }
        };
        if self.finished.is_none() {
            items.extend(match self.plan.mode {
                StreamMode::Incremental => {
                    let mut items = self.run_stages("", true);
                    if self.finished.is_none() {
                        self.record_stage_decisions();
                        self.evaluate_monitored().await;
                    }
                    items.retain(|item| !matches!(item, StreamItem::Text(text) if text.is_empty()));
                    items
                }
                StreamMode::Buffer | StreamMode::Checkpoint { .. } => self.final_evaluation().await,
            });
        }
        if self.finished.is_none() {
            self.finished = Some("allowed");
        }
        self.report("end");
        items
    }

    fn release(&mut self, text: String) -> Option<StreamItem> {
        if text.is_empty() {
            return None;
        }
        if self.first_release.is_none() {
            self.first_release = Some(self.started.elapsed());
        }
        self.released.push_str(&text);
        self.released_chars += text.chars().count();
        Some(StreamItem::Text(text))
    }

    fn note_held(&mut self) {
        // Characters never outnumber bytes: count them only when the bytes could set a record.
        let held_bytes = match self.plan.mode {
            StreamMode::Incremental => self.stages.iter().map(|state| state.held().len()).sum(),
            _ => self.raw.len() - self.released_raw,
        };
        if held_bytes > self.max_held_chars {
            let held = self.held_chars();
            self.max_held_chars = self.max_held_chars.max(held);
        }
    }

    fn run_stages(&mut self, delta: &str, end: bool) -> Vec<StreamItem> {
        let mut carried = Cow::Borrowed(delta);
        for (index, stage) in self.plan.stages.iter().enumerate() {
            match self.stages[index].feed(stage, &carried, end) {
                StageOutput::Passed(text) => carried = Cow::Owned(text),
                StageOutput::Matched => {
                    let StageAction::Deny { reason } = &stage.action else {
                        continue;
                    };
                    self.record_stage(
                        stage,
                        PolicyDecision::Deny {
                            reason: reason.clone(),
                            policy_id: None,
                        },
                    );
                    self.finished = Some("denied");
                    return vec![StreamItem::Denied(PolicyDenialError::new(
                        stage.policy_id.clone(),
                        InterceptionPoint::Output,
                        reason.clone(),
                    ))];
                }
            }
        }
        self.release(carried.into_owned()).into_iter().collect()
    }

    /// One record per incremental policy at the end: `redact` if it replaced anything,
    /// `allow` otherwise.
    fn record_stage_decisions(&self) {
        let mut index = 0;
        while index < self.plan.stages.len() {
            let policy_index = self.plan.stages[index].policy_index;
            let mut redactions = Vec::new();
            let first = &self.plan.stages[index];
            while index < self.plan.stages.len()
                && self.plan.stages[index].policy_index == policy_index
            {
                let stage = &self.plan.stages[index];
                if let StageAction::Replace { replacement } = &stage.action
                    && self.stages[index].replacements > 0
                {
                    redactions.push(
                        Redaction::replace("response.content", stage.pattern.clone())
                            .with_replacement(replacement.clone()),
                    );
                }
                index += 1;
            }
            let decision = if redactions.is_empty() {
                PolicyDecision::allow()
            } else {
                PolicyDecision::Redact { redactions }
            };
            self.record_stage(first, decision);
        }
    }

    fn record_stage(&self, stage: &Stage, decision: PolicyDecision) {
        let context =
            OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone());
        self.engine.emit(AuditRecord {
            policy_id: &stage.policy_id,
            decision: AuditDecision::from(&decision),
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: crate::AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: None,
        });
    }

    /// Evaluates the monitored output policies on the whole text (they never hold text back).
    async fn evaluate_monitored(&self) {
        let output = &self.engine.policy_set().output;
        if !output.entries.iter().any(|entry| entry.monitor) {
            return;
        }
        let context = self.whole_context();
        self.engine.evaluate_monitored_output(&context).await;
    }

    fn whole_context(&self) -> OutputContext {
        OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone())
    }

    async fn checkpoint(&mut self, every: usize) -> Vec<StreamItem> {
        if self.raw_chars < self.next_checkpoint {
            return Vec::new();
        }
        self.next_checkpoint = self.raw_chars + every;
        let context = self.whole_context();
        match self.engine.evaluate_output(&context).await {
            Ok(evaluation) if !evaluation.is_modified() => {
                let text = self.raw[self.released_raw..].to_owned();
                self.released_raw = self.raw.len();
                self.release(text).into_iter().collect()
            }
            // A change to the accumulated text: hold until the final evaluation.
            Ok(_) => Vec::new(),
            Err(error) => vec![self.stop(error)],
        }
    }

    async fn final_evaluation(&mut self) -> Vec<StreamItem> {
        let context = self.whole_context();
        let result = self.engine.evaluate_output(&context).await;
        match result {
            Ok(evaluation) => {
                let forwarded = &evaluation.context().response.content;
                match forwarded.strip_prefix(self.released.as_str()) {
                    Some(rest) => {
                        let rest = rest.to_owned();
                        self.released_raw = self.raw.len();
                        self.release(rest).into_iter().collect()
                    }
                    None => self.fail(
                        "the final evaluation changed text already released at a checkpoint; \
                         the rest is withheld"
                            .into(),
                    ),
                }
            }
            Err(error) => vec![self.stop(error)],
        }
    }

    fn stop(&mut self, error: EngineError) -> StreamItem {
        match error {
            EngineError::Denied(denial) => {
                self.finished = Some("denied");
                StreamItem::Denied(denial)
            }
            EngineError::Evaluation(error) => {
                self.finished = Some("error");
                StreamItem::Error(error)
            }
        }
    }

    fn fail(&mut self, cause: crate::BoxError) -> Vec<StreamItem> {
        self.finished = Some("error");
        vec![StreamItem::Error(PolicyEvaluationError::new(
            STREAM_POLICY_ID,
            InterceptionPoint::Output,
            cause,
        ))]
    }

    fn report(&mut self, event: &'static str) {
        if event == "end" {
            if self.reported_end {
                return;
            }
            self.reported_end = true;
        }
        let report = StreamReport {
            event,
            mode: self.plan.mode,
            outcome: if event == "end" { self.finished } else { None },
            raw_chars: self.raw_chars,
            released_chars: self.released_chars,
            max_held_chars: self.max_held_chars,
            time_to_first_release: self.first_release,
        };
        let reason = match report.outcome {
            Some(outcome) => format!("stream ended: {outcome}"),
            None => "stream started".to_owned(),
        };
        let context = OutputContext::new(Message::assistant(String::new()), self.metadata.clone());
        let decision = PolicyDecision::Audit {
            reason: Some(reason),
        };
        self.engine.emit(AuditRecord {
            policy_id: STREAM_POLICY_ID,
            decision: AuditDecision::Audit,
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: crate::AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: Some(&report),
        });
    }
}

impl Drop for OutputStream<'_> {
    fn drop(&mut self) {
        // A stream dropped without `finish` (the reader went away) still gets its end record.
        if self.finished.is_none() {
            self.finished = Some("abandoned");
        }
        self.report("end");
    }
}
