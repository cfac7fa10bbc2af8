//! The three contexts a policy sees, and the pieces they are made of (SPEC §1).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

use crate::audit::AuditContext;
use crate::policy::{InputPolicy, OutputPolicy, ToolCallPolicy};
use crate::{BoxError, BoxFuture, PointPolicies, PolicyDecision, PolicySet};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// What output policies see: the model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Where in the agent loop the engine is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterceptionPoint {
    /// Before the request is sent to the model.
    Input,
    /// Before a tool runs.
    ToolCall,
    /// After the model has answered.
    Output,
}

impl InterceptionPoint {
    /// The wire name: `input`, `tool_call` or `output`.
    pub const fn as_str(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "input",
            InterceptionPoint::ToolCall => "tool_call",
            InterceptionPoint::Output => "output",
        }
    }
}

impl fmt::Display for InterceptionPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::InputContext {}
    impl Sealed for super::ToolCallContext {}
    impl Sealed for super::OutputContext {}
}

/// The contexts of the three interception points, for code that is generic over them.
///
/// This trait is sealed: [`InputContext`], [`ToolCallContext`] and [`OutputContext`] are the only
/// implementations.
pub trait PolicyContext:
    sealed::Sealed
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The interception point this context belongs to.
    const POINT: InterceptionPoint;

    /// The object-safe policy trait of this point (`dyn InputPolicy` for [`InputContext`], …).
    type Policy: ?Sized + Send + Sync;

    /// The policies of this point in a set.
    #[doc(hidden)]
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy>;

    /// The id of a policy of this point.
    fn policy_id(policy: &Self::Policy) -> &str;

    /// Evaluates a policy of this point on `self`.
    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>>;

    /// A borrowed view of this context, as audit records hold it.
    fn audit_context(&self) -> AuditContext<'_>;

    /// Checks that no open JSON value of the context (tool arguments, extra metadata) is
    /// nested deeper than [`MAX_NESTING`] levels. The engine runs this before any policy, so
    /// no policy, serializer or matcher ever recurses into a hostile depth.
    fn check_nesting(&self) -> Result<(), String>;

    /// Checks the rules the type system cannot express (for example that a tool call's
    /// `calling_message` has the `assistant` role). Used after redactions and transforms.
    fn check(&self) -> Result<(), String>;
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

fn check_map_nesting(field: &str, map: &Map<String, Value>) -> Result<(), String> {
    // The map itself is the first level.
    if map
        .values()
        .any(|value| nests_deeper_than(value, MAX_NESTING - 1))
    {
        Err(format!(
            "`{field}` is nested deeper than {MAX_NESTING} levels"
        ))
    } else {
        Ok(())
    }
}

fn check_assistant(field: &str, message: &Message) -> Result<(), String> {
    if message.role == Role::Assistant {
        Ok(())
    } else {
        Err(format!(
            "`{field}.role` must be \"assistant\", found \"{}\"",
            message.role
        ))
    }
}

impl PolicyContext for InputContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.input
    }

    const POINT: InterceptionPoint = InterceptionPoint::Input;
    type Policy = dyn InputPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::Input(self)
    }

    fn check_nesting(&self) -> Result<(), String> {
        check_map_nesting("metadata", &self.metadata.extra)
    }

    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl PolicyContext for ToolCallContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.tool_call
    }

    const POINT: InterceptionPoint = InterceptionPoint::ToolCall;
    type Policy = dyn ToolCallPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::ToolCall(self)
    }

    fn check_nesting(&self) -> Result<(), String> {
        check_map_nesting("arguments", &self.arguments)?;
        check_map_nesting("metadata", &self.metadata.extra)
    }

    fn check(&self) -> Result<(), String> {
        check_assistant("calling_message", &self.calling_message)
    }
}

impl PolicyContext for OutputContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.output
    }

    const POINT: InterceptionPoint = InterceptionPoint::Output;
    type Policy = dyn OutputPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::Output(self)
    }

    fn check_nesting(&self) -> Result<(), String> {
        check_map_nesting("metadata", &self.metadata.extra)
    }

    fn check(&self) -> Result<(), String> {
        check_assistant("response", &self.response)
    }
}
