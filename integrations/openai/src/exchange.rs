//! One guarded exchange, whatever the front door: the request body before it is sent, the
//! answer (whole, or as a stream of server-sent events) before it is released.
//!
//! Everything here works on JSON values and raw bytes, with no HTTP client in it, so the
//! async-openai layer and the proxy share one implementation. Unknown fields of a request,
//! an answer or an event are kept as they are.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use portcullis_engine::{InputContext, Metadata, ToolResultContext};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{Failure, GuardError};
use crate::mapping::{self, Api};
/// The whole-answer side of an exchange.
pub(crate) use crate::response::guard_answer;
use crate::settings::Settings;

/// Chunks in flight between a stream's guard and its reader.
const CHANNEL_CAPACITY: usize = 16;

/// A request the input policies cleared.
#[derive(Debug)]
pub(crate) struct ClearedRequest {
    /// The metadata of the exchange's contexts.
    pub(crate) metadata: Metadata,
    /// Whether the request asks for a stream (`"stream": true`).
    pub(crate) streaming: bool,
    /// The body to send instead of the original, when a policy changed a text.
    pub(crate) body: Option<Bytes>,
}

/// Runs the tool-result policies on the tool outputs of a request body to `api` (when the
/// set has any; see [`Api::request_texts`]), then the input policies on its texts: a body that is not one JSON object
/// with distinct keys, or that refers to state the upstream keeps (unless the settings allow
/// it), is refused. `bound_session` is the session the client is bound to, which the body's
/// `metadata.session_id` cannot change.
pub(crate) async fn guard_request(
    settings: &Settings,
    api: Api,
    body: &[u8],
    bound_session: Option<&str>,
) -> Result<ClearedRequest, Failure> {
    let body = match crate::strict_json::from_slice(body) {
        Ok(Value::Object(body)) => body,
        Ok(_) => {
            return Err(Failure::Guard(GuardError::InvalidRequest {
                problem: "the body is not a JSON object".to_owned(),
            }));
        }
        Err(problem) => {
            return Err(Failure::Guard(GuardError::InvalidRequest {
                problem: format!("the body is not JSON: {problem}"),
            }));
        }
    };
    if !settings.allow_server_state
        && let Some(field) = mapping::server_state(&body)
    {
        return Err(Failure::Guard(GuardError::InvalidRequest {
            problem: format!(
                "the request refers to state kept by the upstream ({field}), which the policies cannot read; the operator allows it with --allow-server-state"
            ),
        }));
    }
    let mut metadata = mapping::request_metadata(settings, api, &body);
    if let Some(session) = bound_session {
        metadata.session_id = session.to_owned();
    }
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    // With tool-result policies in the set, what the client's tools returned goes to them
    // (with the call each output answers); without, it stays `user` text of the input.
    let tool_results = !settings.engine.policy_set().tool_result().is_empty();
    let texts = api.request_texts(&body, tool_results)?;
    let mut changed_outputs = Vec::new();
    for output in texts.tool_outputs {
        let context = ToolResultContext::new(
            output.tool_name,
            output.arguments,
            output.content,
            metadata.clone(),
        );
        let evaluation = settings
            .engine
            .evaluate_tool_result(&context)
            .await
            .map_err(Failure::from)?;
        if evaluation.is_modified() {
            changed_outputs.push((output.pointer, evaluation.into_context().content));
        }
    }
    let context = InputContext::new(texts.messages, metadata.clone());
    let evaluation = settings
        .engine
        .evaluate_input(&context)
        .await
        .map_err(Failure::from)?;
    let body = if evaluation.is_modified() || !changed_outputs.is_empty() {
        let mut body = Value::Object(body);
        if evaluation.is_modified() {
            mapping::write_input(&mut body, &texts.slots, evaluation.into_context().messages)?;
        }
        for (pointer, content) in changed_outputs {
            mapping::write_tool_output(&mut body, &pointer, content);
        }
        Some(Bytes::from(body.to_string()))
    } else {
        None
    };
    Ok(ClearedRequest {
        metadata,
        streaming,
        body,
    })
}

/// Guards a stream of server-sent events from `api`: returns the events as released, in
/// order, written by a task that reads `upstream`. Text reaches the reader only once the
/// output policies cleared it; a failure ends the stream with an OpenAI-style error event.
/// When the reader is dropped, the task stops and drops `upstream`.
pub(crate) fn guard_stream<S, E>(
    settings: Arc<Settings>,
    api: Api,
    metadata: Metadata,
    upstream: S,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + 'static,
{
    let (sender, receiver) = mpsc::channel::<Result<Bytes, io::Error>>(CHANNEL_CAPACITY);
    let upstream = Box::pin(upstream);
    match api {
        Api::ChatCompletions => {
            tokio::spawn(crate::stream::run(settings, metadata, upstream, sender));
        }
        Api::Responses => {
            tokio::spawn(crate::responses_stream::run(
                settings, metadata, upstream, sender,
            ));
        }
    }
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}
