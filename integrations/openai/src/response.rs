//! Whole answers: output policies on each text (a chat choice's message, a Responses API
//! message item), then tool-call policies on each call the answer makes.

use bytes::Bytes;
use portcullis_engine::{EngineError, Message, Metadata, OutputContext};
use serde_json::{Map, Value};

use crate::exchange::{Failure, Settings, ToolOutcome, evaluate_tool_call, from_engine};
use crate::mapping::{self, Api};

/// Evaluates a whole answer; returns the body to release instead (`None`: the body is not an
/// answer of this endpoint, an error for one, and goes as it is).
pub(crate) async fn guard_answer(
    settings: &Settings,
    api: Api,
    metadata: Metadata,
    body: &[u8],
) -> Result<Option<Bytes>, Failure> {
    let key = match api {
        Api::ChatCompletions => "choices",
        Api::Responses => "output",
    };
    let mut answer = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(answer)) if answer.get(key).is_some_and(Value::is_array) => answer,
        _ => return Ok(None),
    };
    let mut metadata = metadata;
    if let Some(id) = answer.get("id").and_then(Value::as_str) {
        metadata
            .extra
            .insert("response_id".to_owned(), Value::from(id));
    }
    if api == Api::Responses {
        if let Some(Value::Array(output)) = answer.get_mut("output") {
            guard_output(settings, &metadata, output).await?;
        }
    } else if let Some(Value::Array(choices)) = answer.get_mut("choices") {
        for (position, choice) in choices.iter_mut().enumerate() {
            if let Value::Object(choice) = choice {
                guard_choice(settings, &metadata, position, choice).await?;
            }
        }
    }
    Ok(Some(Bytes::from(Value::Object(answer).to_string())))
}

/// What the output policies made of one text of a whole answer.
enum Cleared {
    /// Forward this text (`modified`: a policy changed it).
    Text { text: String, modified: bool },
    /// A policy denied the text and denied answers are refused: this refusal replaces it.
    Refused(String),
}

/// Runs the output policies on one text of a whole answer. A denial fails the exchange,
/// unless the settings refuse denied answers in the answer itself.
async fn clear_text(
    settings: &Settings,
    metadata: &Metadata,
    text: &str,
) -> Result<Cleared, Failure> {
    let context = OutputContext::new(Message::assistant(text), metadata.clone());
    match settings.engine.evaluate_output(&context).await {
        Ok(evaluation) => {
            let modified = evaluation.is_modified();
            Ok(Cleared::Text {
                text: evaluation.into_context().response.content,
                modified,
            })
        }
        Err(EngineError::Denied(denial)) if settings.refuse_denied_answers => {
            let reason = denial
                .reason()
                .unwrap_or(portcullis_engine::error::DENIED_WITHOUT_REASON);
            Ok(Cleared::Refused(format!(
                "[The answer was withheld by policy \"{}\": {reason}]",
                denial.policy_id()
            )))
        }
        Err(error) => Err(from_engine(error)),
    }
}

async fn guard_choice(
    settings: &Settings,
    metadata: &Metadata,
    position: usize,
    choice: &mut Map<String, Value>,
) -> Result<(), Failure> {
    let index = choice
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(position as u64);
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("choice_index".to_owned(), Value::from(index));
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Ok(());
    };

    // The text first: tool-call policies see the text as it will be forwarded.
    let mut text = String::new();
    if let Some(Value::String(content)) = message.get("content") {
        match clear_text(settings, &metadata, content).await? {
            Cleared::Text {
                text: cleared,
                modified,
            } => {
                if modified {
                    message.insert("content".to_owned(), Value::String(cleared.clone()));
                }
                text = cleared;
            }
            Cleared::Refused(refusal) => {
                // The whole answer is withheld: its text, and the calls it made.
                message.insert("content".to_owned(), Value::String(refusal));
                message.remove("tool_calls");
                if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                    choice.insert("finish_reason".to_owned(), Value::from("stop"));
                }
                return Ok(());
            }
        }
    }

    // A refusal the model wrote is text it sends too.
    if let Some(Value::String(refusal)) = message.get("refusal") {
        match clear_text(settings, &metadata, refusal).await? {
            Cleared::Text {
                modified: false, ..
            } => {}
            Cleared::Text { text, .. } | Cleared::Refused(text) => {
                message.insert("refusal".to_owned(), Value::String(text));
            }
        }
    }

    let Some(Value::Array(calls)) = message.remove("tool_calls") else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(calls.len());
    let mut refusals = Vec::new();
    for mut call in calls {
        let tool = mapping::read_tool_call(&call)?;
        match evaluate_tool_call(settings, &metadata, &tool, &text).await? {
            ToolOutcome::Allowed(None) => kept.push(call),
            ToolOutcome::Allowed(Some(arguments)) => {
                mapping::write_tool_call(&mut call, &tool, arguments);
                kept.push(call);
            }
            ToolOutcome::Refused(refusal) => refusals.push(refusal),
        }
    }
    if !refusals.is_empty() {
        let mut content = text;
        for refusal in refusals {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&refusal);
        }
        message.insert("content".to_owned(), Value::String(content));
    }
    if kept.is_empty() {
        if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
            choice.insert("finish_reason".to_owned(), Value::from("stop"));
        }
    } else if let Some(Value::Object(message)) = choice.get_mut("message") {
        message.insert("tool_calls".to_owned(), Value::Array(kept));
    }
    Ok(())
}

/// The metadata of one output item of a Responses API answer.
pub(crate) fn item_metadata(metadata: &Metadata, output_index: u64) -> Metadata {
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("output_index".to_owned(), Value::from(output_index));
    metadata
}

/// Evaluates the `output` items of a Responses API answer in place: the text of every
/// message item first, then every call, with the answer's text as its calling message.
pub(crate) async fn guard_output(
    settings: &Settings,
    metadata: &Metadata,
    output: &mut [Value],
) -> Result<(), Failure> {
    let mut text = String::new();
    for (index, item) in output.iter_mut().enumerate() {
        let item_text =
            guard_message_item(settings, &item_metadata(metadata, index as u64), item).await?;
        join(&mut text, &item_text);
    }
    for (index, item) in output.iter_mut().enumerate() {
        let metadata = item_metadata(metadata, index as u64);
        if let Some(refusal) = guard_call_item(settings, &metadata, item, &text).await? {
            join(&mut text, &refusal);
        }
    }
    Ok(())
}

/// Appends `more` to `text` on a new line.
pub(crate) fn join(text: &mut String, more: &str) {
    if more.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(more);
}

/// Runs the output policies on each `output_text` and `refusal` part of a message item,
/// writing back what they change; returns the item's text as forwarded. Other items are
/// left alone.
pub(crate) async fn guard_message_item(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
) -> Result<String, Failure> {
    let mut text = String::new();
    if item.get("type").and_then(Value::as_str) != Some("message") {
        return Ok(text);
    }
    let Some(Value::Array(parts)) = item.get_mut("content") else {
        return Ok(text);
    };
    for part in parts {
        let key = match part.get("type").and_then(Value::as_str) {
            Some("output_text") => "text",
            Some("refusal") => "refusal",
            _ => continue,
        };
        let Some(Value::String(content)) = part.get(key) else {
            continue;
        };
        let forwarded = match clear_text(settings, metadata, content).await? {
            Cleared::Text { text, .. } | Cleared::Refused(text) => text,
        };
        join(&mut text, &forwarded);
        part[key] = Value::String(forwarded);
    }
    Ok(text)
}

/// Runs the tool-call policies on a `function_call` or `custom_tool_call` item: patched
/// arguments are written back; a refused call is replaced by an assistant message item
/// saying so, whose text is returned. Other items are left alone.
pub(crate) async fn guard_call_item(
    settings: &Settings,
    metadata: &Metadata,
    item: &mut Value,
    calling_message: &str,
) -> Result<Option<String>, Failure> {
    let Some(tool) = mapping::read_output_call(item)? else {
        return Ok(None);
    };
    match evaluate_tool_call(settings, metadata, &tool, calling_message).await? {
        ToolOutcome::Allowed(None) => Ok(None),
        ToolOutcome::Allowed(Some(arguments)) => {
            mapping::write_output_call(item, &tool, arguments);
            Ok(None)
        }
        ToolOutcome::Refused(refusal) => {
            *item = mapping::refusal_item(&tool.id, &refusal);
            Ok(Some(refusal))
        }
    }
}
