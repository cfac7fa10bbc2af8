//! What a stream's audit records report: [`StreamReport`] and [`StreamMode`].
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
