//! What a stream's audit records report: [`StreamReport`], its [`StreamEvent`] and
//! [`StreamOutcome`], and the [`StreamMode`].
//!
//! A leaf: audit records carry a report, so it depends on nothing above plain data.

use std::time::Duration;

use serde::Serialize;

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

/// Which of a stream's two records a report belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEvent {
    /// The stream started.
    Start,
    /// The stream ended (finished, stopped, or dropped unfinished).
    End,
}

impl StreamEvent {
    /// The wire name: `start` or `end`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StreamEvent::Start => "start",
            StreamEvent::End => "end",
        }
    }
}

impl std::fmt::Display for StreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamOutcome {
    /// Finished; everything the policies allowed was released.
    Allowed,
    /// An output policy denied; nothing more was released.
    Denied,
    /// An evaluation error stopped the stream; nothing more was released.
    Error,
    /// An output policy escalated and no approval came; nothing more was released.
    ApprovalRequired,
    /// The guard was dropped before it finished (the reader went away).
    Abandoned,
}

impl StreamOutcome {
    /// The wire name: `allowed`, `denied`, `error`, `approval_required` or
    /// `abandoned`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StreamOutcome::Allowed => "allowed",
            StreamOutcome::Denied => "denied",
            StreamOutcome::Error => "error",
            StreamOutcome::ApprovalRequired => "approval_required",
            StreamOutcome::Abandoned => "abandoned",
        }
    }
}

impl std::fmt::Display for StreamOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The numbers of a stream, as the start and end audit records report them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// The record's event (serialized `start` or `end`).
    pub event: StreamEvent,
    /// The mode.
    pub mode: StreamMode,
    /// At the end: how the stream ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<StreamOutcome>,
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
