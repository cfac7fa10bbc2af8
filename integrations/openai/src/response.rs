//! Whole answers: output policies on each choice's text, tool-call policies on its calls.

use async_openai::error::OpenAIError;
use portcullis_engine::{Message, Metadata, OutputContext};
use serde_json::{Map, Value};

use crate::error::{self, GuardError};
use crate::{Settings, ToolOutcome, evaluate_tool_call, mapping, rebuild};

/// Evaluates a whole chat completion and returns it, possibly changed.
pub(crate) async fn guard_response(
    settings: &Settings,
    metadata: Metadata,
    response: reqwest::Response,
) -> Result<reqwest::Response, OpenAIError> {
    let status = response.status();
    let version = response.version();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.map_err(|problem| {
        error::from_guard(GuardError::Body {
            problem: problem.to_string(),
        })
    })?;
    let mut answer = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(answer)) if answer.get("choices").is_some_and(Value::is_array) => answer,
        // Not a chat completion: async-openai reports what it is.
        _ => return Ok(rebuild(status, version, headers, bytes.into())),
    };
    let mut metadata = metadata;
    if let Some(id) = answer.get("id").and_then(Value::as_str) {
        metadata
            .extra
            .insert("response_id".to_owned(), Value::from(id));
    }
    if let Some(Value::Array(choices)) = answer.get_mut("choices") {
        for (position, choice) in choices.iter_mut().enumerate() {
            if let Value::Object(choice) = choice {
                guard_choice(settings, &metadata, position, choice).await?;
            }
        }
    }
    let body = Value::Object(answer).to_string();
    Ok(rebuild(status, version, headers, body.into()))
}

async fn guard_choice(
    settings: &Settings,
    metadata: &Metadata,
    position: usize,
    choice: &mut Map<String, Value>,
) -> Result<(), OpenAIError> {
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
        let context = OutputContext::new(Message::assistant(content.as_str()), metadata.clone());
        let evaluation = settings
            .engine
            .evaluate_output(&context)
            .await
            .map_err(error::from_engine)?;
        text = evaluation.context().response.content.clone();
        if evaluation.is_modified() {
            message.insert("content".to_owned(), Value::String(text.clone()));
        }
    }

    // A refusal the model wrote is text it sends too.
    if let Some(Value::String(refusal)) = message.get("refusal") {
        let context = OutputContext::new(Message::assistant(refusal.as_str()), metadata.clone());
        let evaluation = settings
            .engine
            .evaluate_output(&context)
            .await
            .map_err(error::from_engine)?;
        if evaluation.is_modified() {
            let refusal = evaluation.into_context().response.content;
            message.insert("refusal".to_owned(), Value::String(refusal));
        }
    }

    let Some(Value::Array(calls)) = message.remove("tool_calls") else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(calls.len());
    let mut refusals = Vec::new();
    for mut call in calls {
        let tool = mapping::read_tool_call(&call).map_err(error::from_guard)?;
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
