//! What a session store is: [`SessionStore`], the [`SessionFacts`] it keeps per session, the
//! [`SessionKey`] naming a session and the [`SessionUpdate`] recorded after a call.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::{InterceptionPoint, InvalidContext};
use crate::error::BoxError;

/// The policy id under which session-store failures are reported and audited.
pub const SESSION_POLICY_ID: &str = "portcullis.session";

/// The longest `agent_id` or `session_id` (in bytes) the engine accepts with a session store.
pub const MAX_SESSION_ID_BYTES: usize = 1024;

/// What a store knows of one session: the labels the decisions of its calls added, and how
/// many calls of each point proceeded.
///
/// Its JSON shape is what policies read in `metadata.session`:
///
/// ```
/// use portcullis_engine::session::SessionFacts;
///
/// let facts = SessionFacts::default();
/// assert_eq!(
///     serde_json::to_value(&facts).unwrap(),
///     serde_json::json!({
///         "labels": [],
///         "counters": {
///             "input": {"total": 0},
///             "output": {"total": 0},
///             "tool_call": {"total": 0, "by_tool": {}}
///         }
///     })
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFacts {
    /// The labels added so far, each once, in the order they were first added.
    #[serde(default)]
    pub labels: Vec<String>,
    /// How many calls of each point proceeded.
    #[serde(default)]
    pub counters: SessionCounters,
}

/// The counters of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCounters {
    /// Input calls that proceeded.
    #[serde(default)]
    pub input: PointCounter,
    /// Output calls (and finished streams) that proceeded.
    #[serde(default)]
    pub output: PointCounter,
    /// Tool calls that proceeded, in all and per tool.
    #[serde(default)]
    pub tool_call: ToolCallCounters,
}

/// The counter of one point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointCounter {
    /// How many calls proceeded.
    #[serde(default)]
    pub total: u64,
}

/// The counters of the tool-call point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallCounters {
    /// How many tool calls proceeded.
    #[serde(default)]
    pub total: u64,
    /// How many calls of each tool proceeded, by tool name.
    #[serde(default)]
    pub by_tool: BTreeMap<String, u64>,
}

impl SessionFacts {
    /// Applies one update: what a store does, atomically, when it records.
    pub fn apply(&mut self, update: &SessionUpdate<'_>) {
        match update.point {
            InterceptionPoint::Input => self.counters.input.total += 1,
            InterceptionPoint::Output => self.counters.output.total += 1,
            InterceptionPoint::ToolCall => {
                self.counters.tool_call.total += 1;
                if let Some(tool) = update.tool {
                    *self
                        .counters
                        .tool_call
                        .by_tool
                        .entry(tool.to_owned())
                        .or_default() += 1;
                }
            }
        }
        for label in update.labels {
            if !self.labels.iter().any(|known| known == label) {
                self.labels.push(label.clone());
            }
        }
    }

    /// The JSON value policies see in `metadata.session`.
    pub fn to_value(&self) -> Value {
        let counter = |total: u64| {
            let mut map = Map::with_capacity(1);
            map.insert("total".to_owned(), Value::from(total));
            map
        };
        let mut tool_call = counter(self.counters.tool_call.total);
        tool_call.insert(
            "by_tool".to_owned(),
            Value::Object(
                self.counters
                    .tool_call
                    .by_tool
                    .iter()
                    .map(|(tool, count)| (tool.clone(), Value::from(*count)))
                    .collect(),
            ),
        );
        let mut counters = Map::with_capacity(3);
        counters.insert(
            "input".to_owned(),
            Value::Object(counter(self.counters.input.total)),
        );
        counters.insert(
            "output".to_owned(),
            Value::Object(counter(self.counters.output.total)),
        );
        counters.insert("tool_call".to_owned(), Value::Object(tool_call));
        let mut facts = Map::with_capacity(2);
        facts.insert(
            "labels".to_owned(),
            Value::Array(self.labels.iter().cloned().map(Value::String).collect()),
        );
        facts.insert("counters".to_owned(), Value::Object(counters));
        Value::Object(facts)
    }
}

/// The session a call belongs to: `metadata.agent_id` and `metadata.session_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey<'a> {
    /// The agent.
    pub agent_id: &'a str,
    /// The session of that agent.
    pub session_id: &'a str,
}

impl<'a> SessionKey<'a> {
    /// The key of `agent_id`'s session `session_id`, checked: each part at most
    /// [`MAX_SESSION_ID_BYTES`] bytes long, non-empty, and free of control characters.
    pub fn new(agent_id: &'a str, session_id: &'a str) -> Result<Self, InvalidContext> {
        check_part("metadata.agent_id", agent_id)?;
        check_part("metadata.session_id", session_id)?;
        Ok(SessionKey {
            agent_id,
            session_id,
        })
    }
}

impl fmt::Display for SessionKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.agent_id, self.session_id)
    }
}

fn check_part(field: &str, value: &str) -> Result<(), InvalidContext> {
    if value.is_empty() {
        return Err(InvalidContext::new(format!(
            "{field} is empty; a session store needs it to name the session"
        )));
    }
    if value.len() > MAX_SESSION_ID_BYTES {
        return Err(InvalidContext::new(format!(
            "{field} is {} bytes long; with a session store the limit is {MAX_SESSION_ID_BYTES}",
            value.len()
        )));
    }
    if let Some(at) = value.find(char::is_control) {
        return Err(InvalidContext::new(format!(
            "{field} holds a control character at byte {at}; session ids are printable text"
        )));
    }
    Ok(())
}

/// What the engine records after a call that proceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionUpdate<'a> {
    /// The point of the call: its counter goes up by one.
    pub point: InterceptionPoint,
    /// For a tool call, the tool: its counter goes up by one too.
    pub tool: Option<&'a str>,
    /// The labels the call's enforced decisions carried, to add to the session.
    pub labels: &'a [String],
}

/// Where the engine keeps per-session facts.
///
/// The engine calls [`load`](Self::load) before a point's policies run and
/// [`record`](Self::record) once after a call that proceeds. An error from either is an
/// evaluation error of the policy id [`SESSION_POLICY_ID`],
/// so the policy set's `on_error` decides; a store should bound its own waiting (a time-out)
/// so that a slow backend turns into such an error rather than a hang.
///
/// `record` must be atomic per session: concurrent records of one session all count, none
/// twice.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// The facts of `key`'s session (empty facts for a session never seen or expired).
    async fn load(&self, key: SessionKey<'_>) -> Result<SessionFacts, BoxError>;

    /// Applies `update` to `key`'s session, atomically (see [`SessionFacts::apply`]).
    async fn record(&self, key: SessionKey<'_>, update: SessionUpdate<'_>) -> Result<(), BoxError>;
}
