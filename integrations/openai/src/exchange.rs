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
use portcullis_engine::{
    EngineError, InputContext, Message, Metadata, PolicyDenialError, PolicyEngine, StreamItem,
    StreamItems, ToolCallContext,
};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::ToolDenial;
use crate::error::GuardError;
use crate::mapping::{self, Api, ToolCall};
/// The whole-answer side of an exchange.
pub(crate) use crate::response::guard_answer;

pub(crate) use crate::error::Failure;

/// Chunks in flight between a stream's guard and its reader.
pub(crate) const CHANNEL_CAPACITY: usize = 16;

/// The largest server-sent event a guarded stream accepts (an answer's text arrives in many
/// small events; one event this large is not an answer).
pub(crate) const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How an exchange is evaluated.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) engine: Arc<PolicyEngine>,
    pub(crate) agent_id: String,
    pub(crate) session_id: String,
    /// `metadata.framework` of every context.
    pub(crate) framework: String,
    pub(crate) tool_denial: ToolDenial,
    /// Whether a whole answer whose text an output policy denies is released with a refusal
    /// in place of the text (the proxy's choice) rather than failing the exchange.
    pub(crate) refuse_denied_answers: bool,
    pub(crate) pass_through: Vec<String>,
    /// Whether a request may refer to state the upstream keeps and the policies cannot read
    /// (`previous_response_id`, `conversation`, a stored `prompt`, item references).
    pub(crate) allow_server_state: bool,
    /// The largest server-sent event of a guarded stream.
    pub(crate) max_event_bytes: usize,
}

impl Settings {
    /// Settings evaluating with `engine` as `agent_id`, in session `default`.
    pub(crate) fn new(engine: Arc<PolicyEngine>, agent_id: &str, framework: &str) -> Self {
        Settings {
            engine,
            agent_id: agent_id.to_owned(),
            session_id: "default".to_owned(),
            framework: framework.to_owned(),
            tool_denial: ToolDenial::Refuse,
            refuse_denied_answers: false,
            pass_through: Vec::new(),
            allow_server_state: false,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }

    /// Whether the application listed `path` as one to forward unguarded.
    pub(crate) fn passes_through(&self, path: &str) -> bool {
        self.pass_through.iter().any(|listed| {
            path.strip_prefix(listed.trim_end_matches('/'))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

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

/// Runs the input policies on a request body to `api`: a body that is not one JSON object
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
    let (messages, slots) = api.input(&body)?;
    let context = InputContext::new(messages, metadata.clone());
    let evaluation = settings
        .engine
        .evaluate_input(&context)
        .await
        .map_err(Failure::from)?;
    let body = if evaluation.is_modified() {
        let mut body = Value::Object(body);
        mapping::write_input(&mut body, &slots, evaluation.into_context().messages)?;
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
