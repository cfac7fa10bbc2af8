//! The contexts a policy sees, one per interception point, and the pieces they are made of:
//! plain data.
//!
//! An input context holds the messages about to go to the model, a tool-call context the tool
//! the model wants to run with its arguments, a tool-result context what a tool returned
//! before the model reads it, an output context the model's answer; each carries the
//! interaction's [`Metadata`]. Their JSON shape (the serde derives) is what
//! policies written in other languages see; `tests/wire.rs` pins it field by field.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// Who wrote a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions set by the application.
    System,
    /// Text from the end user.
    User,
    /// Text produced by the model.
    Assistant,
}

impl Role {
    /// The wire name of the role (`system`, `user` or `assistant`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One message of a conversation.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// The author of the message.
    pub role: Role,
    /// The text of the message.
    pub content: String,
}

impl Message {
    /// A message with the given role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

/// Metadata attached to every context.
///
/// Keys beyond the three required ones are kept in [`extra`](Metadata::extra) and
/// round-trip through serialization unchanged.
#[derive(Debug, PartialEq, Serialize)]
pub struct Metadata {
    /// The agent that owns the session.
    pub agent_id: String,
    /// The current session.
    pub session_id: String,
    /// When the interception happened, as an RFC 3339 timestamp.
    pub timestamp: String,
    /// Any further keys, kept as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Metadata {
    /// Metadata for `agent_id` and `session_id`, stamped with the current UTC time.
    pub fn new(agent_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        Metadata {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            timestamp: crate::time::rfc3339(std::time::SystemTime::now()),
            extra: Map::new(),
        }
    }

    /// Replaces the timestamp (an RFC 3339 string).
    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = timestamp.into();
        self
    }

    /// Adds an extra key.
    pub fn with_extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }
}

/// What input policies see: the messages about to be sent to the model.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputContext {
    /// The ordered message history to be forwarded to the model.
    pub messages: Vec<Message>,
    /// Metadata of the interaction.
    pub metadata: Metadata,
}

impl InputContext {
    /// An input context.
    pub fn new(messages: Vec<Message>, metadata: Metadata) -> Self {
        InputContext { messages, metadata }
    }
}

/// What tool-call policies see: the tool the model wants to run, with its arguments.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallContext {
    /// The name of the tool the model asked for.
    pub tool_name: String,
    /// The arguments the model gave (a JSON object).
    pub arguments: Map<String, Value>,
    /// The assistant message that asked for the call.
    pub calling_message: Message,
    /// Metadata of the interaction.
    pub metadata: Metadata,
}

impl ToolCallContext {
    /// A tool-call context. `calling_message` should have the `assistant` role.
    pub fn new(
        tool_name: impl Into<String>,
        arguments: Map<String, Value>,
        calling_message: Message,
        metadata: Metadata,
    ) -> Self {
        ToolCallContext {
            tool_name: tool_name.into(),
            arguments,
            calling_message,
            metadata,
        }
    }
}

/// What tool-result policies see: what a tool returned, before the model reads it (§18). A
/// fetched page, an email or a file can carry instructions meant for the model: this is the
/// point that judges them.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResultContext {
    /// The name of the tool that ran (`"unknown"` when the call it answers cannot be found).
    pub tool_name: String,
    /// The arguments the tool ran with (a JSON object; empty when they are not known).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// The result's text: its text blocks joined by newlines.
    pub content: String,
    /// The result's structured form, when the tool gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Whether the tool reported an error (`false` when absent; anything but a boolean is
    /// refused).
    #[serde(default, deserialize_with = "boolean_is_error")]
    pub is_error: bool,
    /// Metadata of the interaction.
    pub metadata: Metadata,
}

/// Reads `is_error`, refusing anything but a boolean with an error that names the field (a
/// `"false"` string must not pass for an answer either way).
fn boolean_is_error<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Bool(is_error) => Ok(is_error),
        other => {
            let found = match other {
                Value::Null => "null",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "a list",
                Value::Object(_) => "an object",
                Value::Bool(_) => "a boolean",
            };
            Err(serde::de::Error::custom(format!(
                "`is_error` must be a boolean (true or false), found {found}"
            )))
        }
    }
}

impl ToolResultContext {
    /// A tool-result context of a successful result with no structured form.
    pub fn new(
        tool_name: impl Into<String>,
        arguments: Map<String, Value>,
        content: impl Into<String>,
        metadata: Metadata,
    ) -> Self {
        ToolResultContext {
            tool_name: tool_name.into(),
            arguments,
            content: content.into(),
            structured: None,
            is_error: false,
            metadata,
        }
    }

    /// The same context, with the result's structured form.
    pub fn with_structured(mut self, structured: Value) -> Self {
        self.structured = Some(structured);
        self
    }

    /// The same context, marked as an error the tool reported (or not).
    pub fn with_error(mut self, is_error: bool) -> Self {
        self.is_error = is_error;
        self
    }
}

/// What output policies see: the model's answer.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputContext {
    /// The model's answer (role `assistant`).
    pub response: Message,
    /// Metadata of the interaction.
    pub metadata: Metadata,
}

impl OutputContext {
    /// An output context. `response` should have the `assistant` role.
    pub fn new(response: Message, metadata: Metadata) -> Self {
        OutputContext { response, metadata }
    }
}

// `Clone` by hand: `clone_from` reuses the target's buffers (the engine refills a context it
// keeps, instead of allocating a copy per evaluation).

impl Clone for Message {
    fn clone(&self) -> Self {
        Message {
            role: self.role,
            content: self.content.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let Message { role, content } = source;
        self.role = *role;
        self.content.clone_from(content);
    }
}

/// Read by hand rather than derived: a derive with a flattened `extra` would buffer every key
/// and value first and read them a second time, and every context carries metadata.
impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MetadataVisitor)
    }
}

/// A key of [`Metadata`]: one of its three fields, or an extra key.
enum MetadataKey {
    AgentId,
    SessionId,
    Timestamp,
    Extra(String),
}

impl<'de> Deserialize<'de> for MetadataKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(MetadataKeyVisitor)
    }
}

struct MetadataKeyVisitor;

impl MetadataKeyVisitor {
    /// The field `key` names, or `None` for an extra key.
    fn field(key: &str) -> Option<MetadataKey> {
        match key {
            "agent_id" => Some(MetadataKey::AgentId),
            "session_id" => Some(MetadataKey::SessionId),
            "timestamp" => Some(MetadataKey::Timestamp),
            _ => None,
        }
    }
}

impl serde::de::Visitor<'_> for MetadataKeyVisitor {
    type Value = MetadataKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a metadata key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<MetadataKey, E> {
        Ok(Self::field(key).unwrap_or_else(|| MetadataKey::Extra(key.to_owned())))
    }

    fn visit_string<E: serde::de::Error>(self, key: String) -> Result<MetadataKey, E> {
        Ok(Self::field(&key).unwrap_or(MetadataKey::Extra(key)))
    }
}

struct MetadataVisitor;

impl<'de> serde::de::Visitor<'de> for MetadataVisitor {
    type Value = Metadata;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct Metadata")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
        use serde::de::Error;

        /// Reads a field's value, refusing a second one.
        fn once<'de, A: serde::de::MapAccess<'de>>(
            map: &mut A,
            field: &mut Option<String>,
            name: &'static str,
        ) -> Result<(), A::Error> {
            if field.is_some() {
                return Err(A::Error::duplicate_field(name));
            }
            *field = Some(map.next_value()?);
            Ok(())
        }

        let (mut agent_id, mut session_id, mut timestamp) = (None, None, None);
        let mut extra = Map::new();
        while let Some(key) = map.next_key()? {
            match key {
                MetadataKey::AgentId => once(&mut map, &mut agent_id, "agent_id")?,
                MetadataKey::SessionId => once(&mut map, &mut session_id, "session_id")?,
                MetadataKey::Timestamp => once(&mut map, &mut timestamp, "timestamp")?,
                MetadataKey::Extra(key) => {
                    let value = map.next_value()?;
                    extra.insert(key, value);
                }
            }
        }
        Ok(Metadata {
            agent_id: agent_id.ok_or_else(|| A::Error::missing_field("agent_id"))?,
            session_id: session_id.ok_or_else(|| A::Error::missing_field("session_id"))?,
            timestamp: timestamp.ok_or_else(|| A::Error::missing_field("timestamp"))?,
            extra,
        })
    }
}

impl Clone for Metadata {
    fn clone(&self) -> Self {
        Metadata {
            agent_id: self.agent_id.clone(),
            session_id: self.session_id.clone(),
            timestamp: self.timestamp.clone(),
            extra: self.extra.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let Metadata {
            agent_id,
            session_id,
            timestamp,
            extra,
        } = source;
        self.agent_id.clone_from(agent_id);
        self.session_id.clone_from(session_id);
        self.timestamp.clone_from(timestamp);
        if extra.is_empty() {
            // Keeps the map's allocation (cloning an empty map would drop it).
            self.extra.clear();
        } else {
            self.extra.clone_from(extra);
        }
    }
}

impl Clone for InputContext {
    fn clone(&self) -> Self {
        InputContext {
            messages: self.messages.clone(),
            metadata: self.metadata.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let InputContext { messages, metadata } = source;
        self.messages.clone_from(messages);
        self.metadata.clone_from(metadata);
    }
}

impl Clone for ToolCallContext {
    fn clone(&self) -> Self {
        ToolCallContext {
            tool_name: self.tool_name.clone(),
            arguments: self.arguments.clone(),
            calling_message: self.calling_message.clone(),
            metadata: self.metadata.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let ToolCallContext {
            tool_name,
            arguments,
            calling_message,
            metadata,
        } = source;
        self.tool_name.clone_from(tool_name);
        self.arguments.clone_from(arguments);
        self.calling_message.clone_from(calling_message);
        self.metadata.clone_from(metadata);
    }
}

impl Clone for ToolResultContext {
    fn clone(&self) -> Self {
        ToolResultContext {
            tool_name: self.tool_name.clone(),
            arguments: self.arguments.clone(),
            content: self.content.clone(),
            structured: self.structured.clone(),
            is_error: self.is_error,
            metadata: self.metadata.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let ToolResultContext {
            tool_name,
            arguments,
            content,
            structured,
            is_error,
            metadata,
        } = source;
        self.tool_name.clone_from(tool_name);
        self.arguments.clone_from(arguments);
        self.content.clone_from(content);
        self.structured.clone_from(structured);
        self.is_error = *is_error;
        self.metadata.clone_from(metadata);
    }
}

impl Clone for OutputContext {
    fn clone(&self) -> Self {
        OutputContext {
            response: self.response.clone(),
            metadata: self.metadata.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let OutputContext { response, metadata } = source;
        self.response.clone_from(response);
        self.metadata.clone_from(metadata);
    }
}

/// Where in the agent loop the engine is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterceptionPoint {
    /// Before the request is sent to the model.
    Input,
    /// Before a tool runs.
    ToolCall,
    /// After a tool ran, before the model reads what it returned.
    ToolResult,
    /// After the model has answered.
    Output,
}

impl InterceptionPoint {
    /// Every point, in the order of the agent loop.
    pub const ALL: [InterceptionPoint; 4] = [
        InterceptionPoint::Input,
        InterceptionPoint::ToolCall,
        InterceptionPoint::ToolResult,
        InterceptionPoint::Output,
    ];

    /// The point whose wire name ([`as_str`](Self::as_str)) is `name`; `None` for any other
    /// name (no case folding, no aliases).
    pub fn from_name(name: &str) -> Option<InterceptionPoint> {
        InterceptionPoint::ALL
            .into_iter()
            .find(|point| point.as_str() == name)
    }

    /// The wire name: `input`, `tool_call`, `tool_result` or `output`.
    pub const fn as_str(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "input",
            InterceptionPoint::ToolCall => "tool_call",
            InterceptionPoint::ToolResult => "tool_result",
            InterceptionPoint::Output => "output",
        }
    }
}

impl fmt::Display for InterceptionPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A name that is not an interception point's (see [`InterceptionPoint::from_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPoint(pub String);

impl fmt::Display for UnknownPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown interception point {:?}: the points are input, tool_call, tool_result and output",
            self.0
        )
    }
}

impl std::error::Error for UnknownPoint {}

impl std::str::FromStr for InterceptionPoint {
    type Err = UnknownPoint;

    /// Parses a wire name; any other name is an error, never a default point.
    fn from_str(name: &str) -> Result<Self, UnknownPoint> {
        InterceptionPoint::from_name(name).ok_or_else(|| UnknownPoint(name.to_owned()))
    }
}

/// How deeply the open JSON values of a context (tool arguments, extra metadata) may nest.
/// `serde_json` refuses deeper documents when parsing (its limit is 128 too); contexts built
/// in code are checked by the engine before any policy runs.
pub const MAX_NESTING: usize = 128;

/// Whether `value` nests deeper than `limit` levels (counted without recursion).
fn nests_deeper_than(value: &Value, limit: usize) -> bool {
    let mut pending = vec![(value, 1usize)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth > limit {
            return true;
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    false
}

fn check_map_nesting(field: &str, map: &Map<String, Value>) -> Result<(), InvalidContext> {
    // The map itself is the first level.
    if map
        .values()
        .any(|value| nests_deeper_than(value, MAX_NESTING - 1))
    {
        Err(InvalidContext::new(format!(
            "`{field}` is nested deeper than {MAX_NESTING} levels"
        )))
    } else {
        Ok(())
    }
}

fn check_assistant(field: &str, message: &Message) -> Result<(), InvalidContext> {
    if message.role == Role::Assistant {
        Ok(())
    } else {
        Err(InvalidContext::new(format!(
            "`{field}.role` must be \"assistant\", found \"{}\"",
            message.role
        )))
    }
}

impl InputContext {
    /// Checks that no open JSON value (extra metadata) nests deeper than [`MAX_NESTING`].
    pub(crate) fn check_nesting_depth(&self) -> Result<(), InvalidContext> {
        check_map_nesting("metadata", &self.metadata.extra)
    }

    /// Checks the rules the type system cannot express.
    pub(crate) fn check_rules(&self) -> Result<(), InvalidContext> {
        Ok(())
    }
}

impl ToolCallContext {
    /// Checks that no open JSON value (arguments, extra metadata) nests deeper than
    /// [`MAX_NESTING`].
    pub(crate) fn check_nesting_depth(&self) -> Result<(), InvalidContext> {
        check_map_nesting("arguments", &self.arguments)?;
        check_map_nesting("metadata", &self.metadata.extra)
    }

    /// Checks the rules the type system cannot express: the calling message is the
    /// assistant's.
    pub(crate) fn check_rules(&self) -> Result<(), InvalidContext> {
        check_assistant("calling_message", &self.calling_message)
    }
}

impl ToolResultContext {
    /// Checks that no open JSON value (arguments, the structured result, extra metadata) nests
    /// deeper than [`MAX_NESTING`].
    pub(crate) fn check_nesting_depth(&self) -> Result<(), InvalidContext> {
        check_map_nesting("arguments", &self.arguments)?;
        if let Some(structured) = &self.structured
            && nests_deeper_than(structured, MAX_NESTING)
        {
            return Err(InvalidContext::new(format!(
                "`structured` is nested deeper than {MAX_NESTING} levels"
            )));
        }
        check_map_nesting("metadata", &self.metadata.extra)
    }

    /// Checks the rules the type system cannot express: none beyond its shape.
    pub(crate) fn check_rules(&self) -> Result<(), InvalidContext> {
        Ok(())
    }
}

impl OutputContext {
    /// Checks that no open JSON value (extra metadata) nests deeper than [`MAX_NESTING`].
    pub(crate) fn check_nesting_depth(&self) -> Result<(), InvalidContext> {
        check_map_nesting("metadata", &self.metadata.extra)
    }

    /// Checks the rules the type system cannot express: the answer is the assistant's.
    pub(crate) fn check_rules(&self) -> Result<(), InvalidContext> {
        check_assistant("response", &self.response)
    }
}

/// A context that breaks a rule of its shape (for example a tool call whose calling message
/// is not the assistant's, or tool arguments nested too deeply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidContext {
    problem: String,
}

impl InvalidContext {
    pub(crate) fn new(problem: impl Into<String>) -> Self {
        InvalidContext {
            problem: problem.into(),
        }
    }

    /// What is wrong, without the "invalid context" prefix.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for InvalidContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid context: {}", self.problem)
    }
}

impl std::error::Error for InvalidContext {}
