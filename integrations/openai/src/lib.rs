//! Portcullis for [async-openai]: a tower layer that applies a [`PolicyEngine`] to chat
//! completions and to the Responses API.
//!
//! async-openai's `middleware` feature lets a client send its requests through a tower
//! service ([`Client::with_http_service`]). [`PortcullisLayer`] is a layer for that stack.
//! Both model endpoints, `POST …/chat/completions` and `POST …/responses`, streamed or not,
//! go through the same steps:
//!
//! - **input policies** see the request's texts before it leaves (chat `messages`; the
//!   Responses API's `instructions` and `input` items); redactions and transformations
//!   rewrite the text that is sent, a denial stops the request (the server is never called);
//! - **tool-result policies**, when the set has any (SPEC §18), see what the client's tools
//!   returned instead of the input policies: each chat `role: "tool"` message and each
//!   Responses `function_call_output` or `custom_tool_call_output` item is a
//!   `ToolResultContext` whose `tool_name` and `arguments` are those of the call it answers,
//!   found in the same request by its id (`"unknown"` and `{}` when the call is not there or
//!   its arguments do not parse), and whose `content` is its text (a list of parts joined by
//!   newlines). A redaction or transformation rewrites the output, written back as one
//!   string; a denial stops the request. Without tool-result policies, outputs stay `user`
//!   text of the input, as the tables below say;
//! - **output policies** see each text of the answer (each `choices[].message.content`; each
//!   `output_text` part of an `output` message item), each refusal the model wrote, and the
//!   reasoning a Responses answer shows (each `summary_text` part of a reasoning item's
//!   `summary` and each `reasoning_text` part of its `content`): a redaction rewrites the
//!   text, a denial is handled as for the answer's text;
//! - **tool-call policies** see each call of the answer (`choices[].message.tool_calls[]`
//!   and the deprecated `choices[].message.function_call`;
//!   `function_call` and `custom_tool_call` output items, and the output items asking the
//!   client to run a built-in tool: `local_shell_call`, `shell_call`, `apply_patch_call`,
//!   `computer_call`): the arguments are parsed, evaluated, and re-serialized (or written
//!   back as the item's action) when a policy patched them. A denied call is either removed
//!   and replaced by refusal text ([`ToolDenial::Refuse`], the default: the application never
//!   sees it; in a chat answer the text joins the message and `finish_reason` becomes
//!   `"stop"` when no call is left, in a Responses answer an assistant message item takes the
//!   call's place) or fails the whole call ([`ToolDenial::Fail`]);
//! - **streamed answers** (`"stream": true`, server-sent events) go through the engine's
//!   streaming output guard ([`PolicyEngine::output_stream`]), one guard per chat choice or
//!   per part of a Responses message item (content parts) or reasoning item (summary parts
//!   and reasoning text, each with a guard of its own), so only cleared text reaches the
//!   reader. Calls are held back until they are complete (chat tool-call and
//!   `function_call` deltas until the choice finishes; a Responses call item with its
//!   `response.function_call_arguments.*` events, or the `response.shell_call_command.*`
//!   and `response.apply_patch_call_operation_diff.*` events of a built-in tool's call,
//!   until its `response.output_item.done`), then evaluated whole and released as one
//!   complete delta (chat) or as a complete item: `response.output_item.added`, one
//!   arguments delta, `…arguments.done`, `response.output_item.done` (a built-in tool's call:
//!   added complete, then done). In a Responses stream
//!   a part's `…part.added` event carries it blank, the `…done` events of a text, its item
//!   and the final `response.completed` carry the released text, and every event is
//!   numbered again (`sequence_number`) in order.
//!
//! **Every other request is refused** with [`GuardError::Unguarded`] before it is sent, so
//! nothing reaches the server unguarded by default (listing models, embeddings, files, the
//! other Responses API routes such as `GET …/responses/{id}`). The application lists the
//! paths it wants forwarded as they are with [`PortcullisLayer::pass_through`].
//!
//! The mapping between the endpoints' JSON and the policy contexts, and the guarding of
//! whole and streamed answers, are plain functions of JSON values and byte streams (no HTTP
//! client in them). Two front doors share them: this layer, and the OpenAI-compatible proxy
//! (`proxy::OpenAIProxy`, feature `proxy`) that agents in any language point their base URL
//! at. Fields the guard does not know pass through unchanged.
//!
//! # Errors
//!
//! A denial, a policy that could not be evaluated (with `on_error: deny`), or a request or
//! answer the guard cannot map ([`GuardError`]) fails the call with
//! [`OpenAIError::Boxed`]; [`denial`] and [`evaluation_error`] find the engine's error in it.
//! In a stream (chat or Responses), text already released stays released and the stream ends
//! with an error event (`{"error": {"type": "policy_denied", "code": <policy id>, ...}}`)
//! that async-openai yields as the stream's last item, an error; [`denial`] reads the denial
//! from it.
//!
//! # A custom service replaces async-openai's default stack
//!
//! `with_http_service` replaces the client's whole HTTP stack, including the retry layer it
//! uses by default. Put [`OpenAIRetryLayer`] back, *inside* the guard so retried attempts
//! are not evaluated twice, or use [`PortcullisLayer::into_default_service`], which does it.
//!
//! # TLS
//!
//! This crate turns async-openai's default features off, so it does not choose a TLS stack
//! for you: the application's own `async-openai` dependency does (its default feature is
//! `rustls`; Cargo unifies the features).
//!
//! # From async-openai to the policy contexts
//!
//! Chat completions:
//!
//! | Policy context | Taken from |
//! |---|---|
//! | `InputContext.messages[]` | each text of `messages[]`: a string `content`, or each `text` (and `refusal`) of an array `content`, and an assistant message's `refusal`; roles `system` and `developer` are `system`, `assistant` is `assistant`, `user`, `tool` and `function` are `user` |
//! | `ToolCallContext.tool_name` | `tool_calls[].function.name` (`custom.name` for custom tools; `function_call.name` for the deprecated single call, evaluated, patched or refused like the others) |
//! | `ToolCallContext.arguments` | `tool_calls[].function.arguments` parsed as a JSON object (`{"input": custom.input}` for custom tools; `function_call.arguments`) |
//! | `ToolCallContext.calling_message` | the assistant text of the same choice, after output policies |
//! | `OutputContext.response` | `choices[].message.content` (a string, or each `text` part's `text` and `refusal` part's `refusal` of a list of parts, each on its own, a redaction written back into its part), `choices[].message.refusal`, the `reasoning_content` (or `reasoning`) some OpenAI-compatible servers send and `choices[].message.audio.transcript`, each on its own (in a stream, the released text of the same fields of `choices[].delta`; a delta's list of parts is read as one text and released as a string); each string of `choices[].message.annotations` (a delta's `annotations`), the citations a search added |
//! | `metadata.extra` | for answers `response_id`, `choice_index` and `text_kind` (`content`, `refusal`, `reasoning_content`, `reasoning` or `audio_transcript`); `content_index` for a part of a whole answer's `content` list |
//!
//! An audio answer's `audio.data` speaks what its transcript said before the policies saw
//! it, and no policy reads audio: it is released only with a transcript the policies left as
//! it was (held until the choice finishes in a stream), and emptied otherwise. Likewise the
//! `logprobs` of an answer (chat `choices[].logprobs`, the `logprobs` of a Responses
//! `output_text` part) spell out the text as the model wrote it, token by token: they go only
//! with texts the policies left as they were (`null` or `[]` otherwise). In a chat stream
//! they are held until the choice finishes; in a Responses stream the deltas carry none and
//! the part's `…done` events carry them.
//!
//! The Responses API:
//!
//! | Policy context | Taken from |
//! |---|---|
//! | `InputContext.messages[]` | `instructions` as `system`; a string `input` as `user`; for an `input` list, each text of a message item's `content` (a string, or each `text` of its parts) with the item's role as above, and what a tool returned as `user`: each text of a `function_call_output` or `custom_tool_call_output` item's `output`, the `output` string of a `local_shell_call_output`, `apply_patch_call_output` or `mcp_call` item, an `mcp_call` item's non-empty `error` (a string, or the `message` and each `content` text of the object async-openai writes), each non-empty `stdout` and `stderr` of a `shell_call_output` item's `output` chunks, each non-empty `text` of a `file_search_call` item's `results`, each non-empty `logs` of a `logs` entry of a `code_interpreter_call` item's `outputs`, an `mcp_list_tools` item's non-empty `error` and, of each of its `tools`, the non-empty `description`, every non-empty string anywhere in its `input_schema` and every name it gives a property or a definition (the keys of `properties`, `patternProperties`, `$defs`, `definitions`, `dependentSchemas`; read, never rewritten: a policy that changes one refuses the request), but a `type` made of type names, and its `annotations`' `title` (what a server says of its tools reaches the model and can smuggle instructions to it; a schema nested more than 64 levels deep, or more than 10,000 such texts in a request, is refused as an invalid request), an `image_generation_call` item's non-empty `error` `message`; an `mcp_approval_response` item's non-empty `reason`, the client's own text, as `user`; what the model wrote before as `assistant`: each `summary_text` part's `text` of a replayed `reasoning` item's `summary` and each `reasoning_text` part's `text` of its `content` (its `encrypted_content` goes as it is), an `image_generation_call` item's non-empty `revised_prompt` (its `result` image goes as it is), a `function_call`'s `arguments`, a `custom_tool_call`'s `input`, an `mcp_call`'s or `mcp_approval_request`'s `arguments`, a `file_search_call`'s `queries`, a `code_interpreter_call`'s `code`, and every string of a `web_search_call`'s, `local_shell_call`'s, `shell_call`'s or `computer_call`'s `action` and of an `apply_patch_call`'s `operation` (ids and kinds aside). Each string is a text of its own, and a redaction rewrites the string it was read from; a `computer_call_output` is a screenshot with no text and goes as it is, and so does an `item_reference`. An item of any other type, a `content` or `output` that is neither a string nor a list of part objects, and a part whose `text` is not a string are refused as an invalid request |
//! | `ToolCallContext.tool_name` | a `function_call` or `custom_tool_call` item's `name`; for the call of a built-in tool the client runs, its item type without `_call`: `local_shell`, `shell`, `apply_patch`, `computer` |
//! | `ToolCallContext.arguments` | its `arguments` parsed as a JSON object (`{"input": input}` for custom tools); for a built-in tool, the item's `action` object (`{"type": "exec", "command": [..], "env", "working_directory", "timeout_ms", "user"}` for `local_shell`, `{"commands": [..], "timeout_ms", "max_output_length"}` for `shell`, `{"type": "click", ..}` and the like for `computer`, each action of a batched `actions` list as a call of its own) or its `operation` for `apply_patch` (`{"type": "create_file" \| "update_file" \| "delete_file", "path", "diff"}`); a transformation rewrites that object, a denial refuses the whole item as it refuses a function call |
//! | `ToolCallContext.calling_message` | the text of the answer's message items, after output policies |
//! | `OutputContext.response` | each `output_text` part's `text` and each `refusal` part's `refusal` of a message item, each `summary_text` part's `text` of a reasoning item's `summary` and each `reasoning_text` part's `text` of its `content`, each on its own (in a stream the released text of its `response.output_text.delta`, `response.refusal.delta`, `response.reasoning_summary_text.delta` or `response.reasoning_text.delta` events); each string of a text part's `annotations` (citation titles, URLs, file names); in a stream, the audio transcript (`response.audio.transcript.delta`); every string of the item of a tool the server runs itself (`web_search_call`, `file_search_call`, `code_interpreter_call`, `image_generation_call`, `mcp_call`, `mcp_list_tools`, `mcp_approval_request`, `shell_call_output`: queries, code, arguments, outputs, logs, results, errors) but its ids, `status`, `server_label`, `encrypted_content` and an image call's `result` image, each on its own |
//! | `metadata.extra` | for answers `response_id`, `output_index` and `text_kind`, the type of the part the text lives in (`output_text`, `refusal`, `summary_text` or `reasoning_text`: reasoning is told from the answer by it), `annotation`, `audio_transcript`, or a hosted tool's item type (with `text_field`, the JSON pointer of the string in the item or in the part's `annotations`); in a stream also `content_index` (or `summary_index` for a summary part) |
//!
//! # What the guard cannot read is not released
//!
//! An answer is released only as far as the policies read it. A chat choice that is not an
//! object, a `content` that is neither a string nor a list of `text` and `refusal` parts, a
//! `refusal`, `reasoning_content`, `reasoning` or audio transcript that is not a string, a
//! `function_call` that is not an object; a Responses API output item, content part or
//! stream event of a type the guard does not know, or an `output_item` event without its
//! `output_index`: a whole answer is refused (the proxy
//! answers `502` with an OpenAI-shaped `upstream_error`; the layer fails with
//! [`GuardError::Body`]), a stream ends with an error event and releases nothing of it. A
//! hosted tool's item is held until it is done (its code, arguments and output deltas are not
//! written), then released whole, read; the status events of hosted tools go with their
//! type, `item_id` and `output_index` only. A streamed audio answer's data is held until its
//! transcript is done, and released only if the policies left the transcript as it was.
//! Fields of an answer the guard does not know (vendor extensions) are kept as they are.
//!
//! An escalation never hands the held answer (or call) to the client: the proxy's `403`, and
//! the error event that ends a stream, name the approval request (its `id`,
//! `interception_point`, `policy_ids`, `reasons` and `action_digest`) without its `context`.
//!
//! Both:
//!
//! | Policy context | Taken from |
//! |---|---|
//! | `metadata.agent_id` | the request's `metadata.agent_id`, else [`PortcullisLayer::agent_id`] |
//! | `metadata.session_id` | the request's `metadata.session_id`, else [`PortcullisLayer::session_id`] |
//! | `metadata.extra` | `framework: "async-openai"` (`"openai-proxy"` through the proxy), `api` (`"chat.completions"` or `"responses"`), the request's `model`, `user`, `safety_identifier`, `prompt_cache_key`; for tool calls `tool_call_id` (the call's `id`, or `call_id` in the Responses API) |
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use async_openai::{Client, config::OpenAIConfig};
//! use portcullis_engine::{PolicyEngine, PolicySet};
//! use portcullis_openai::PortcullisLayer;
//!
//! let engine = PolicyEngine::builder().policy_set(PolicySet::builder().build()).build();
//! let service = PortcullisLayer::new(engine).session_id("support-42").into_default_service();
//! let client = Client::with_config(OpenAIConfig::new()).with_http_service(service);
//! # drop(client);
//! ```
//!
//! The crate's tests and the `openai_client` example run the whole path against a scripted
//! OpenAI-compatible server on 127.0.0.1.
//!
//! [async-openai]: https://docs.rs/async-openai
//! [`Client::with_http_service`]: async_openai::Client::with_http_service
//! [`OpenAIRetryLayer`]: async_openai::middleware::retry::OpenAIRetryLayer
//! [`OpenAIError::Boxed`]: async_openai::error::OpenAIError::Boxed

mod error;
mod exchange;
mod judge;
mod mapping;
#[cfg(feature = "proxy")]
pub mod proxy;
#[cfg(feature = "proxy")]
mod request_path;
mod response;
mod responses_stream;
mod settings;
mod sse;
mod stream;
mod strict_json;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_openai::error::OpenAIError;
use async_openai::middleware::retry::{OpenAIRetry, OpenAIRetryLayer};
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use bytes::Bytes;
use portcullis_engine::PolicyEngine;
use tower::{Layer, Service};

pub use error::{GuardError, approval_request, denial, evaluation_error};

/// The async-openai this crate was built against, for applications that want the same one.
pub use async_openai;

use crate::mapping::Api;
use crate::settings::Settings;

/// What happens when a tool-call policy denies a call the model made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolDenial {
    /// Remove the call and put a refusal in the message text (the default). The application
    /// never sees the call; when no call is left, `finish_reason` becomes `"stop"`.
    #[default]
    Refuse,
    /// Fail the whole chat completion with the denial (see [`denial`]).
    Fail,
}

/// The tower layer that guards async-openai chat completions; see the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct PortcullisLayer {
    settings: Arc<Settings>,
}

impl PortcullisLayer {
    /// A layer that evaluates with `engine`, as agent `async-openai`, session `default`.
    pub fn new(engine: impl Into<Arc<PolicyEngine>>) -> Self {
        let mut settings = Settings::new(engine.into(), "async-openai", "async-openai");
        // The layer runs inside the application, which chose its stored state itself.
        settings.allow_server_state = true;
        PortcullisLayer {
            settings: Arc::new(settings),
        }
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// The agent id of requests whose `metadata` has no `agent_id`.
    pub fn agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.settings_mut().agent_id = agent_id.into();
        self
    }

    /// The session id of requests whose `metadata` has no `session_id`.
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.settings_mut().session_id = session_id.into();
        self
    }

    /// What a tool-call denial does (default [`ToolDenial::Refuse`]).
    pub fn on_tool_denial(mut self, tool_denial: ToolDenial) -> Self {
        self.settings_mut().tool_denial = tool_denial;
        self
    }

    /// Forwards requests under `path` unguarded (all methods): requests whose URL path is
    /// `path` or continues it after a `/`. Call it once per path.
    ///
    /// Only chat completions and the Responses API (`POST …/chat/completions`,
    /// `POST …/responses`) go through the policies; any other request is refused with
    /// [`GuardError::Unguarded`] unless listed here, so nothing reaches a model unguarded by
    /// default. The path is the whole URL path, with the API base's own path: with the
    /// default base `https://api.openai.com/v1`, list `/v1/models` to let
    /// `client.models().list()` and `retrieve(..)` through, or `/v1/embeddings`; `/`
    /// forwards every request the guard does not map (the old, unguarded default).
    pub fn pass_through(mut self, path: impl Into<String>) -> Self {
        self.settings_mut().pass_through.push(path.into());
        self
    }

    /// The guard over async-openai's default stack: its retry layer around a
    /// [`ReqwestService`] with a new `reqwest::Client`.
    pub fn into_default_service(self) -> PortcullisService<OpenAIRetry<ReqwestService>> {
        self.into_service_with(openai_reqwest::Client::new())
    }

    /// The guard over async-openai's retry layer around a [`ReqwestService`] using `client`.
    pub fn into_service_with(
        self,
        client: openai_reqwest::Client,
    ) -> PortcullisService<OpenAIRetry<ReqwestService>> {
        let inner = OpenAIRetryLayer::default().layer(ReqwestService::new(client));
        self.layer(inner)
    }
}

impl<S> Layer<S> for PortcullisLayer {
    type Service = PortcullisService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PortcullisService {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The guarding service made by [`PortcullisLayer`]; give it to
/// [`Client::with_http_service`](async_openai::Client::with_http_service).
#[derive(Clone)]
pub struct PortcullisService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> fmt::Debug for PortcullisService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortcullisService")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<openai_reqwest::Response, OpenAIError>> + Send + 'static>>;

impl<S> Service<HttpRequestFactory> for PortcullisService<S>
where
    S: Service<HttpRequestFactory, Response = openai_reqwest::Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<OpenAIError>,
{
    type Response = openai_reqwest::Response;
    type Error = OpenAIError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        // The ready clone is the one to call; leave a fresh clone in its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        Box::pin(guard(settings, inner, factory))
    }
}

/// One guarded exchange: input, the inner service, then the answer.
async fn guard<S>(
    settings: Arc<Settings>,
    mut inner: S,
    factory: HttpRequestFactory,
) -> Result<openai_reqwest::Response, OpenAIError>
where
    S: Service<HttpRequestFactory, Response = openai_reqwest::Response>,
    S::Error: Into<OpenAIError>,
{
    let request = factory.build().await?;
    let Some(api) = Api::of(request.method().as_str(), request.url().path()) else {
        if settings.passes_through(request.url().path()) {
            return inner.call(factory).await.map_err(Into::into);
        }
        return Err(error::from_guard(GuardError::Unguarded {
            method: request.method().to_string(),
            path: request.url().path().to_owned(),
        }));
    };
    let body = request
        .body()
        .and_then(openai_reqwest::Body::as_bytes)
        .ok_or_else(|| {
            error::from_guard(GuardError::InvalidRequest {
                problem: "the body is not a JSON document in memory".to_owned(),
            })
        })?;
    let cleared = exchange::guard_request(&settings, api, body, None)
        .await
        .map_err(|failure| OpenAIError::Boxed(failure.into_boxed()))?;
    let metadata = cleared.metadata;
    let factory = match cleared.body {
        Some(body) => rewritten(&request, body),
        None => factory,
    };

    let response = inner.call(factory).await.map_err(Into::into)?;
    if !response.status().is_success() {
        return Ok(response);
    }
    let event_stream = response
        .headers()
        .get(openai_reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let status = response.status();
    let version = response.version();
    let headers = response.headers().clone();
    if cleared.streaming || event_stream {
        let released = exchange::guard_stream(settings, api, metadata, response.bytes_stream());
        return Ok(rebuild(
            status,
            version,
            headers,
            openai_reqwest::Body::wrap_stream(released),
        ));
    }
    let bytes = response.bytes().await.map_err(|problem| {
        error::from_guard(GuardError::Body {
            problem: problem.to_string(),
        })
    })?;
    // A body that is not an answer of the endpoint could carry anything: it is not released.
    let body = exchange::guard_answer(&settings, api, metadata, &bytes)
        .await
        .map_err(|failure| OpenAIError::Boxed(failure.into_boxed()))?
        .ok_or_else(|| {
            error::from_guard(GuardError::Body {
                problem: format!("the answer is not {}; it is not released", api.answer()),
            })
        })?;
    Ok(rebuild(status, version, headers, body.into()))
}

/// A factory for `request` with a new body (the redacted or transformed messages).
fn rewritten(request: &openai_reqwest::Request, body: Bytes) -> HttpRequestFactory {
    let method = request.method().clone();
    let url = request.url().clone();
    let mut headers = request.headers().clone();
    headers.remove(openai_reqwest::header::CONTENT_LENGTH);
    let version = request.version();
    let timeout = request.timeout().copied();
    HttpRequestFactory::new(move || {
        let mut request = openai_reqwest::Request::new(method.clone(), url.clone());
        *request.headers_mut() = headers.clone();
        *request.version_mut() = version;
        *request.timeout_mut() = timeout;
        *request.body_mut() = Some(openai_reqwest::Body::from(body.clone()));
        async move { Ok(request) }
    })
}

/// Rebuilds a response around a new body, keeping status, version and headers.
fn rebuild(
    status: openai_reqwest::StatusCode,
    version: openai_reqwest::Version,
    mut headers: openai_reqwest::header::HeaderMap,
    body: openai_reqwest::Body,
) -> openai_reqwest::Response {
    headers.remove(openai_reqwest::header::CONTENT_LENGTH);
    headers.remove(openai_reqwest::header::TRANSFER_ENCODING);
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    openai_reqwest::Response::from(response)
}
