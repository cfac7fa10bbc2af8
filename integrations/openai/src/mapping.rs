//! From chat completion JSON to the policy contexts and back.

use portcullis_engine::{Message, Metadata, Role};
use serde_json::{Map, Value};

use crate::Settings;
use crate::error::GuardError;

/// The metadata of one request: ids from the request's `metadata` object when it has them,
/// otherwise the layer's; the model and the end-user ids as extras.
pub(crate) fn request_metadata(settings: &Settings, body: &Map<String, Value>) -> Metadata {
    let request_metadata = body.get("metadata").and_then(Value::as_object);
    let field = |key: &str| {
        request_metadata
            .and_then(|fields| fields.get(key))
            .and_then(Value::as_str)
    };
    let agent_id = field("agent_id").unwrap_or(&settings.agent_id);
    let session_id = field("session_id").unwrap_or(&settings.session_id);
    let mut metadata = Metadata::new(agent_id, session_id).with_extra("framework", "async-openai");
    for key in ["model", "user", "safety_identifier", "prompt_cache_key"] {
        if let Some(value) = body.get(key).and_then(Value::as_str) {
            metadata.extra.insert(key.to_owned(), Value::from(value));
        }
    }
    metadata
}

/// The OpenAI role as one of ours: `developer` is `system`; `tool` and `function` results
/// reach the model from outside, so they are evaluated as `user` text.
fn role_of(role: Option<&str>) -> Role {
    match role {
        Some("system" | "developer") => Role::System,
        Some("assistant") => Role::Assistant,
        _ => Role::User,
    }
}

/// Where a text the policies see lives in the request: a message, and a part of its content
/// when the content is an array of parts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    message: usize,
    part: Option<usize>,
}

/// The texts of the request's messages, one engine message per text.
pub(crate) fn input_messages(
    body: &Map<String, Value>,
) -> Result<(Vec<Message>, Vec<Slot>), GuardError> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(GuardError::InvalidRequest {
            problem: "the body has no \"messages\" array".to_owned(),
        });
    };
    let mut texts = Vec::new();
    let mut slots = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = role_of(message.get("role").and_then(Value::as_str));
        match message.get("content") {
            Some(Value::String(text)) => {
                texts.push(Message::new(role, text.clone()));
                slots.push(Slot {
                    message: index,
                    part: None,
                });
            }
            Some(Value::Array(parts)) => {
                for (part_index, part) in parts.iter().enumerate() {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        texts.push(Message::new(role, text));
                        slots.push(Slot {
                            message: index,
                            part: Some(part_index),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok((texts, slots))
}

/// Writes the evaluated texts back into the request body.
pub(crate) fn write_input(
    body: &mut Map<String, Value>,
    slots: &[Slot],
    evaluated: Vec<Message>,
) -> Result<(), GuardError> {
    if evaluated.len() != slots.len() {
        return Err(GuardError::MessagesReshaped {
            before: slots.len(),
            after: evaluated.len(),
        });
    }
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return Err(GuardError::InvalidRequest {
            problem: "the body has no \"messages\" array".to_owned(),
        });
    };
    for (slot, message) in slots.iter().zip(evaluated) {
        let target = messages
            .get_mut(slot.message)
            .and_then(|message| message.get_mut("content"));
        let target = match (target, slot.part) {
            (Some(content), None) => Some(content),
            (Some(content), Some(part)) => {
                content.get_mut(part).and_then(|part| part.get_mut("text"))
            }
            (None, _) => None,
        };
        if let Some(target) = target {
            *target = Value::String(message.content);
        }
    }
    Ok(())
}

/// A tool call of an answer, as tool-call policies see it.
#[derive(Debug)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: Map<String, Value>,
    /// `true` for `custom` tools, whose free-text input is seen as `arguments.input`.
    pub(crate) custom: bool,
}

/// Reads one entry of `tool_calls` (a function call, or a custom tool's free-text input).
pub(crate) fn read_tool_call(call: &Value) -> Result<ToolCall, GuardError> {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(custom) = call
        .get("custom")
        .filter(|_| call.get("function").is_none())
    {
        let name = custom
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let input = custom.get("input").cloned().unwrap_or(Value::Null);
        let mut arguments = Map::new();
        arguments.insert("input".to_owned(), input);
        return Ok(ToolCall {
            id,
            name,
            arguments,
            custom: true,
        });
    }
    let function = call.get("function");
    let name = function
        .and_then(|function| function.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let raw = function
        .and_then(|function| function.get("arguments"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let arguments = parse_arguments(raw).map_err(|problem| GuardError::InvalidToolArguments {
        tool_name: name.clone(),
        call_id: id.clone(),
        problem,
    })?;
    Ok(ToolCall {
        id,
        name,
        arguments,
        custom: false,
    })
}

/// Parses a JSON arguments string; an empty string is no arguments.
pub(crate) fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(other) => Err(format!("they are a JSON {}", json_kind(&other))),
        Err(error) => Err(error.to_string()),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Writes patched arguments back into a `tool_calls` entry.
pub(crate) fn write_tool_call(call: &mut Value, tool: &ToolCall, arguments: Map<String, Value>) {
    if tool.custom {
        if let Some(input) = call.get_mut("custom").and_then(Value::as_object_mut) {
            let value = arguments.get("input").cloned().unwrap_or(Value::Null);
            input.insert("input".to_owned(), value);
        }
    } else if let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) {
        function.insert(
            "arguments".to_owned(),
            Value::String(Value::Object(arguments).to_string()),
        );
    }
}
