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
///             "tool_call": {"total": 0, "by_tool": {}},
///             "tool_result": {"total": 0, "by_tool": {}}
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
    pub tool_call: ToolCounters,
    /// Tool results that proceeded, in all and per tool.
    #[serde(default)]
    pub tool_result: ToolCounters,
}

/// The counter of one point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointCounter {
    /// How many calls proceeded.
    #[serde(default)]
    pub total: u64,
}

/// The counters of a point about one tool (`tool_call`, `tool_result`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCounters {
    /// How many calls of the point proceeded.
    #[serde(default)]
    pub total: u64,
    /// How many calls of the point proceeded for each tool, by tool name.
    #[serde(default)]
    pub by_tool: BTreeMap<String, u64>,
}

impl SessionFacts {
    /// Applies one update: what a store does, atomically, when it records.
    pub fn apply(&mut self, update: &SessionUpdate<'_>) {
        match update.point {
            InterceptionPoint::Input => self.counters.input.total += 1,
            InterceptionPoint::Output => self.counters.output.total += 1,
            InterceptionPoint::ToolCall => self.counters.tool_call.count(update.tool),
            InterceptionPoint::ToolResult => self.counters.tool_result.count(update.tool),
        }
        for label in update.labels {
            if !self.labels.iter().any(|known| known == label) {
                self.labels.push(label.clone());
            }
        }
    }

    /// The JSON value policies see in `metadata.session`.
    pub fn to_value(&self) -> Value {
        let mut value = Value::Null;
        self.write_value(&mut value);
        value
    }

    /// Makes `value` the JSON value of these facts ([`to_value`](Self::to_value)), reusing
    /// what `value` holds: a value of the same shape (the facts of an earlier call) changes
    /// in place, without an allocation when no label or tool is new.
    pub(crate) fn write_value(&self, value: &mut Value) {
        if !self.update_value(value) {
            let mut facts = Map::with_capacity(2);
            facts.insert("labels".to_owned(), Value::Array(Vec::new()));
            let counter = || {
                let mut map = Map::with_capacity(1);
                map.insert("total".to_owned(), Value::from(0));
                Value::Object(map)
            };
            let tool_counter = || {
                let mut map = Map::with_capacity(2);
                map.insert("total".to_owned(), Value::from(0));
                map.insert("by_tool".to_owned(), Value::Object(Map::new()));
                Value::Object(map)
            };
            let mut counters = Map::with_capacity(4);
            counters.insert("input".to_owned(), counter());
            counters.insert("output".to_owned(), counter());
            counters.insert("tool_call".to_owned(), tool_counter());
            counters.insert("tool_result".to_owned(), tool_counter());
            facts.insert("counters".to_owned(), Value::Object(counters));
            *value = Value::Object(facts);
            let updated = self.update_value(value);
            debug_assert!(updated, "the shape just built is the shape updated");
        }
    }

    /// [`write_value`](Self::write_value) into a `value` written from `previous` before:
    /// only the parts that differ are written.
    pub(crate) fn write_value_over(&self, value: &mut Value, previous: &SessionFacts) {
        let written = (|| {
            let facts = value.as_object_mut()?;
            if self.labels != previous.labels {
                write_labels(facts.get_mut("labels")?.as_array_mut()?, &self.labels);
            }
            let (now, before) = (&self.counters, &previous.counters);
            let counters = facts.get_mut("counters")?.as_object_mut()?;
            for (name, total, was) in [
                ("input", now.input.total, before.input.total),
                ("output", now.output.total, before.output.total),
            ] {
                if total != was {
                    *counters.get_mut(name)?.get_mut("total")? = Value::from(total);
                }
            }
            for (name, now, before) in [
                ("tool_call", &now.tool_call, &before.tool_call),
                ("tool_result", &now.tool_result, &before.tool_result),
            ] {
                if now != before {
                    let counter = counters.get_mut(name)?;
                    *counter.get_mut("total")? = Value::from(now.total);
                    let by_tool = counter.get_mut("by_tool")?.as_object_mut()?;
                    write_by_tool(by_tool, &now.by_tool);
                }
            }
            Some(())
        })();
        if written.is_none() {
            self.write_value(value);
        }
    }

    /// Writes the facts into `value` when it has their shape; `false` (with `value` perhaps
    /// half written) when it has not.
    fn update_value(&self, value: &mut Value) -> bool {
        let Value::Object(facts) = value else {
            return false;
        };
        if facts.len() != 2 {
            return false;
        }
        for (key, value) in facts.iter_mut() {
            let written = match (key.as_str(), value) {
                ("labels", Value::Array(labels)) => {
                    write_labels(labels, &self.labels);
                    true
                }
                ("counters", Value::Object(counters)) => self.counters.update_value(counters),
                _ => false,
            };
            if !written {
                return false;
            }
        }
        true
    }
}

impl SessionCounters {
    fn update_value(&self, counters: &mut Map<String, Value>) -> bool {
        if counters.len() != 4 {
            return false;
        }
        counters
            .iter_mut()
            .all(|(key, value)| match (key.as_str(), value) {
                ("input", Value::Object(input)) => write_total(input, self.input.total, 1),
                ("output", Value::Object(output)) => write_total(output, self.output.total, 1),
                ("tool_call", Value::Object(counter)) => self.tool_call.update_value(counter),
                ("tool_result", Value::Object(counter)) => self.tool_result.update_value(counter),
                _ => false,
            })
    }
}

impl ToolCounters {
    /// Counts one call that proceeded, of `tool` when the call names one.
    fn count(&mut self, tool: Option<&str>) {
        self.total += 1;
        if let Some(tool) = tool {
            // The name is copied only for a tool new to the session.
            match self.by_tool.get_mut(tool) {
                Some(count) => *count += 1,
                None => {
                    self.by_tool.insert(tool.to_owned(), 1);
                }
            }
        }
    }

    fn update_value(&self, counter: &mut Map<String, Value>) -> bool {
        write_total(counter, self.total, 2)
            && counter
                .iter_mut()
                .all(|(key, value)| match (key.as_str(), value) {
                    ("total", _) => true,
                    ("by_tool", Value::Object(by_tool)) => {
                        write_by_tool(by_tool, &self.by_tool);
                        true
                    }
                    _ => false,
                })
    }
}

/// Sets the `total` of a counter object of `len` keys.
fn write_total(counter: &mut Map<String, Value>, total: u64, len: usize) -> bool {
    if counter.len() != len {
        return false;
    }
    match counter.iter_mut().find(|(key, _)| *key == "total") {
        Some((_, value)) => {
            *value = Value::from(total);
            true
        }
        None => false,
    }
}

fn write_labels(values: &mut Vec<Value>, labels: &[String]) {
    values.truncate(labels.len());
    for (value, label) in values.iter_mut().zip(labels) {
        match value {
            Value::String(text) if text == label => {}
            Value::String(text) => text.clone_from(label),
            other => *other = Value::String(label.clone()),
        }
    }
    let written = values.len();
    values.extend(labels[written..].iter().cloned().map(Value::String));
}

fn write_by_tool(values: &mut Map<String, Value>, by_tool: &BTreeMap<String, u64>) {
    let same_tools = values.len() == by_tool.len()
        && values
            .keys()
            .zip(by_tool.keys())
            .all(|(known, tool)| known == tool);
    if same_tools {
        for (value, count) in values.values_mut().zip(by_tool.values()) {
            *value = Value::from(*count);
        }
    } else {
        values.clear();
        for (tool, count) in by_tool {
            values.insert(tool.clone(), Value::from(*count));
        }
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

/// The bytes a control character starts with: C0 and DEL, and 0xC2 (C1 is U+0080-U+009F).
const MAY_BE_CONTROL: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[0x7f] = true;
    table[0xc2] = true;
    table
};

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
    // Control characters are C0 and DEL (one byte each) and C1 (two bytes, the first 0xC2):
    // a scan of the bytes settles most ids without decoding them.
    let suspect = value.bytes().any(|byte| MAY_BE_CONTROL[usize::from(byte)]);
    if suspect && let Some(at) = value.find(char::is_control) {
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

    /// [`load`](Self::load) for a store that answers without waiting (one in memory):
    /// `Some` with what `load` would return, which spares the engine its future. The default,
    /// `None`, makes the engine call `load`.
    fn load_now(&self, key: SessionKey<'_>) -> Option<Result<SessionFacts, BoxError>> {
        let _ = key;
        None
    }

    /// [`record`](Self::record) for a store that answers without waiting: `Some` when it
    /// recorded (or failed to), `None` to have the engine call `record`.
    fn record_now(
        &self,
        key: SessionKey<'_>,
        update: SessionUpdate<'_>,
    ) -> Option<Result<(), BoxError>> {
        let _ = (key, update);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_with_control_characters_are_refused_and_others_kept() {
        for bad in ["a\u{7f}b", "a\u{85}b", "\u{9f}", "x\u{1}", "\u{80}"] {
            let error = SessionKey::new("agent", bad).expect_err(bad);
            assert!(error.problem().contains("control character"), "{bad:?}");
        }
        // 0xC2 also starts printable characters (U+00A0 to U+00BF).
        for good in ["ª", "a\u{a0}b", "¿qué?", "s-1", "会话"] {
            assert!(SessionKey::new("agent", good).is_ok(), "{good:?}");
        }
    }
}
