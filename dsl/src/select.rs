//! Selecting values in a typed context, without turning it into JSON.
//!
//! The walk follows the JSON shape of the context exactly (the shape its serde derives give;
//! the tests of `schema.rs` keep the two in step), so a path selects here what it would select
//! in the context's JSON: a name selects an object key, an integer a list element (negative:
//! from the end) or a key written as a number, `*` every element or value.
//! A final `length` on a list or a text gives its length (in characters for a text); on an
//! object it is a key like any other.

use portcullis_engine::path::{Segment, list_position};
use portcullis_engine::{
    AuditContext, InputContext, Message, Metadata, OutputContext, PolicyContext, ToolCallContext,
    ToolResultContext,
};
use serde_json::{Map, Value};

/// A value found in a context.
#[derive(Debug, Clone, Copy)]
pub enum Node<'a> {
    /// A string field.
    Str(&'a str),
    /// A length.
    Count(usize),
    /// A JSON value (below `arguments` or an extra metadata key).
    Json(&'a Value),
    /// A list of messages.
    Messages(&'a [Message]),
    /// One message.
    Message(&'a Message),
    /// Metadata.
    Metadata(&'a Metadata),
    /// A JSON object (`arguments`).
    Map(&'a Map<String, Value>),
    /// An input context.
    Input(&'a InputContext),
    /// A tool-call context.
    ToolCall(&'a ToolCallContext),
    /// A tool-result context.
    ToolResult(&'a ToolResultContext),
    /// An output context.
    Output(&'a OutputContext),
}

/// The contexts rules look into: the context of every point.
pub trait Root: PolicyContext {
    /// The context as the root of a walk.
    fn node(&self) -> Node<'_>;
}

impl<C: PolicyContext> Root for C {
    #[inline]
    fn node(&self) -> Node<'_> {
        match self.audit_context() {
            AuditContext::Input(context) => Node::Input(context),
            AuditContext::ToolCall(context) => Node::ToolCall(context),
            AuditContext::ToolResult(context) => Node::ToolResult(context),
            AuditContext::Output(context) => Node::Output(context),
        }
    }
}

/// Calls `visit` with every value `path` selects in `root`, in document order.
pub fn select<'a, S: AsRef<str>>(
    root: Node<'a>,
    path: &[Segment<S>],
    visit: &mut impl FnMut(Node<'a>) -> Walk,
) -> Walk {
    let Some((first, rest)) = path.split_first() else {
        return visit(root);
    };
    let segment = first.as_borrowed();
    if rest.is_empty()
        && segment == Segment::Name("length")
        && let Some(length) = length(root)
    {
        return visit(Node::Count(length));
    }
    match (root, segment) {
        (Node::Input(context), segment) => fields(
            segment,
            &[
                ("messages", Node::Messages(&context.messages)),
                ("metadata", Node::Metadata(&context.metadata)),
            ],
            rest,
            visit,
        ),
        (Node::ToolCall(context), segment) => fields(
            segment,
            &[
                ("tool_name", Node::Str(&context.tool_name)),
                ("arguments", Node::Map(&context.arguments)),
                ("calling_message", Node::Message(&context.calling_message)),
                ("metadata", Node::Metadata(&context.metadata)),
            ],
            rest,
            visit,
        ),
        (Node::ToolResult(context), segment) => {
            // `structured` is absent from the JSON shape when the tool gave none.
            let structured = context.structured.as_ref().map(Node::Json);
            let is_error = Node::Json(if context.is_error { &TRUE } else { &FALSE });
            let all = [
                ("tool_name", Node::Str(&context.tool_name)),
                ("arguments", Node::Map(&context.arguments)),
                ("content", Node::Str(&context.content)),
                ("is_error", is_error),
                ("metadata", Node::Metadata(&context.metadata)),
            ];
            match structured {
                Some(structured) => {
                    let [tool_name, arguments, content, is_error, metadata] = all;
                    fields(
                        segment,
                        &[
                            tool_name,
                            arguments,
                            content,
                            ("structured", structured),
                            is_error,
                            metadata,
                        ],
                        rest,
                        visit,
                    )
                }
                None => fields(segment, &all, rest, visit),
            }
        }
        (Node::Output(context), segment) => fields(
            segment,
            &[
                ("response", Node::Message(&context.response)),
                ("metadata", Node::Metadata(&context.metadata)),
            ],
            rest,
            visit,
        ),
        (Node::Message(message), segment) => fields(
            segment,
            &[
                ("role", Node::Str(message.role.as_str())),
                ("content", Node::Str(&message.content)),
            ],
            rest,
            visit,
        ),
        (Node::Metadata(metadata), segment) => {
            let fixed = [
                ("agent_id", Node::Str(&metadata.agent_id)),
                ("session_id", Node::Str(&metadata.session_id)),
                ("timestamp", Node::Str(&metadata.timestamp)),
            ];
            if fields(segment, &fixed, rest, visit) == Walk::Stop {
                return Walk::Stop;
            }
            map(&metadata.extra, segment, rest, visit)
        }
        (Node::Messages(messages), Segment::Index { index, .. }) => {
            match list_position(index, messages.len()).and_then(|at| messages.get(at)) {
                Some(message) => select(Node::Message(message), rest, visit),
                None => Walk::Continue,
            }
        }
        (Node::Messages(messages), Segment::Any) => {
            for message in messages {
                if select(Node::Message(message), rest, visit) == Walk::Stop {
                    return Walk::Stop;
                }
            }
            Walk::Continue
        }
        (Node::Map(object), segment) => map(object, segment, rest, visit),
        (Node::Json(Value::Object(object)), segment) => map(object, segment, rest, visit),
        (Node::Json(Value::Array(items)), Segment::Index { index, .. }) => {
            match list_position(index, items.len()).and_then(|at| items.get(at)) {
                Some(item) => select(Node::Json(item), rest, visit),
                None => Walk::Continue,
            }
        }
        (Node::Json(Value::Array(items)), Segment::Any) => {
            for item in items {
                if select(Node::Json(item), rest, visit) == Walk::Stop {
                    return Walk::Stop;
                }
            }
            Walk::Continue
        }
        _ => Walk::Continue,
    }
}

/// `is_error`'s values, for a walk to point at.
static TRUE: Value = Value::Bool(true);
static FALSE: Value = Value::Bool(false);

/// Whether a walk goes on after a value was visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Visit the next value.
    Continue,
    /// Stop here.
    Stop,
}

impl Walk {
    /// `Stop` when `stop` is true.
    pub fn stop_if(stop: bool) -> Walk {
        if stop { Walk::Stop } else { Walk::Continue }
    }
}

fn length(node: Node<'_>) -> Option<usize> {
    match node {
        Node::Messages(messages) => Some(messages.len()),
        Node::Str(text) => Some(text.chars().count()),
        Node::Json(Value::String(text)) => Some(text.chars().count()),
        Node::Json(Value::Array(items)) => Some(items.len()),
        _ => None,
    }
}

fn key(segment: Segment<&str>) -> Option<&str> {
    match segment {
        Segment::Name(name) | Segment::Index { text: name, .. } => Some(name),
        Segment::Any => None,
    }
}

fn fields<'a, S: AsRef<str>>(
    segment: Segment<&str>,
    fields: &[(&str, Node<'a>)],
    rest: &[Segment<S>],
    visit: &mut impl FnMut(Node<'a>) -> Walk,
) -> Walk {
    match key(segment) {
        Some(key) => match fields.iter().find(|(name, _)| *name == key) {
            Some((_, node)) => select(*node, rest, visit),
            None => Walk::Continue,
        },
        None => {
            for (_, node) in fields {
                if select(*node, rest, visit) == Walk::Stop {
                    return Walk::Stop;
                }
            }
            Walk::Continue
        }
    }
}

fn map<'a, S: AsRef<str>>(
    object: &'a Map<String, Value>,
    segment: Segment<&str>,
    rest: &[Segment<S>],
    visit: &mut impl FnMut(Node<'a>) -> Walk,
) -> Walk {
    match key(segment) {
        Some(key) => match object.get(key) {
            Some(value) => select(Node::Json(value), rest, visit),
            None => Walk::Continue,
        },
        None => {
            for value in object.values() {
                if select(Node::Json(value), rest, visit) == Walk::Stop {
                    return Walk::Stop;
                }
            }
            Walk::Continue
        }
    }
}

/// Whether some value selected by `path` satisfies `test`; `false` when the path selects
/// nothing.
pub fn any<C: Root, S: AsRef<str>>(
    context: &C,
    path: &[Segment<S>],
    mut test: impl FnMut(Node<'_>) -> bool,
) -> bool {
    select(context.node(), path, &mut |node| Walk::stop_if(test(node))) == Walk::Stop
}

impl<'a> Node<'a> {
    /// The text of a string value.
    pub fn text(self) -> Option<&'a str> {
        match self {
            Node::Str(text) => Some(text),
            Node::Json(Value::String(text)) => Some(text),
            _ => None,
        }
    }

    /// The value of a number (a length counts).
    pub fn number(self) -> Option<f64> {
        match self {
            #[allow(clippy::cast_precision_loss)]
            Node::Count(count) => Some(count as f64),
            Node::Json(Value::Number(number)) => number.as_f64(),
            _ => None,
        }
    }

    /// The value as JSON (a copy; used where a typed comparison does not apply).
    pub fn to_json(self) -> Value {
        match self {
            Node::Str(text) => Value::String(text.to_owned()),
            Node::Count(count) => Value::from(count),
            Node::Json(value) => value.clone(),
            Node::Messages(messages) => serde_json::to_value(messages).unwrap_or(Value::Null),
            Node::Message(message) => serde_json::to_value(message).unwrap_or(Value::Null),
            Node::Metadata(metadata) => serde_json::to_value(metadata).unwrap_or(Value::Null),
            Node::Map(object) => Value::Object(object.clone()),
            Node::Input(context) => serde_json::to_value(context).unwrap_or(Value::Null),
            Node::ToolCall(context) => serde_json::to_value(context).unwrap_or(Value::Null),
            Node::ToolResult(context) => serde_json::to_value(context).unwrap_or(Value::Null),
            Node::Output(context) => serde_json::to_value(context).unwrap_or(Value::Null),
        }
    }
}
