//! What the policies make of the parts of an answer: a tool call the model made, the text a
//! streaming guard released. Shared by the whole-answer and the streaming guards.

use portcullis_engine::{
    EngineError, Message, Metadata, PolicyDenialError, StreamItem, StreamItems, ToolCallContext,
};
use serde_json::{Map, Value};

use crate::ToolDenial;
use crate::error::Failure;
use crate::mapping::ToolCall;
use crate::settings::Settings;

/// What the policies made of one tool call.
pub(crate) enum ToolOutcome {
    /// Forward the call; with new arguments when a policy patched them.
    Allowed(Option<Map<String, Value>>),
    /// Drop the call; the text replaces it.
    Refused(String),
}

/// Runs the tool-call policies on one call.
pub(crate) async fn evaluate_tool_call(
    settings: &Settings,
    metadata: &Metadata,
    tool: &ToolCall,
    calling_message: &str,
) -> Result<ToolOutcome, Failure> {
    let mut metadata = metadata.clone();
    metadata
        .extra
        .insert("tool_call_id".to_owned(), Value::from(tool.id.as_str()));
    let context = ToolCallContext::new(
        tool.name.clone(),
        tool.arguments.clone(),
        Message::assistant(calling_message),
        metadata,
    );
    match settings.engine.evaluate_tool_call(&context).await {
        Ok(evaluation) if evaluation.is_modified() => Ok(ToolOutcome::Allowed(Some(
            evaluation.into_context().arguments,
        ))),
        Ok(_) => Ok(ToolOutcome::Allowed(None)),
        Err(EngineError::Denied(denial)) if settings.tool_denial == ToolDenial::Refuse => {
            Ok(ToolOutcome::Refused(refusal(&tool.name, &denial)))
        }
        Err(error) => Err(Failure::from(error)),
    }
}

/// The text that replaces a denied tool call.
fn refusal(tool_name: &str, denial: &PolicyDenialError) -> String {
    let reason = denial
        .reason()
        .unwrap_or(portcullis_engine::error::DENIED_WITHOUT_REASON);
    format!(
        "[The call to tool \"{tool_name}\" was denied by policy \"{}\": {reason}]",
        denial.policy_id()
    )
}

/// The released text of a guard's items, or the denial or error that ends the stream.
pub(crate) fn collect(items: StreamItems) -> Result<String, Failure> {
    let mut text = String::new();
    for item in items {
        match item {
            StreamItem::Text(released) => text.push_str(&released),
            StreamItem::Denied(denial) => return Err(Failure::Denied(denial)),
            StreamItem::Error(error) => return Err(Failure::Evaluation(error)),
            StreamItem::ApprovalRequired(request) => {
                return Err(Failure::ApprovalRequired(request));
            }
        }
    }
    Ok(text)
}
