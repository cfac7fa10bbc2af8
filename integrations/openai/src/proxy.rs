//! The OpenAI-compatible guard proxy: an HTTP server that agents in any language point their
//! base URL at (feature `proxy`; the `portcullis proxy openai` command runs it).
//!
//! It guards `POST …/chat/completions` and `POST …/responses`, streamed or not, with the
//! same functions as [`PortcullisLayer`](crate::PortcullisLayer): one mapping, two front
//! doors. It works on the raw JSON and event bytes, so fields it does not know pass through
//! unchanged.
//!
//! - The request's texts go through the input policies; a denial answers
//!   `403 {"error": {"message", "type": "policy_denied", "code": <policy id>}}` and nothing
//!   is sent upstream.
//! - The cleared request goes to the upstream: its origin (and path prefix) followed by the
//!   request's path and query, with the request's headers (the upstream's `Authorization`
//!   or `api-key` among them) but for the hop-by-hop ones and `Accept-Encoding` (the proxy
//!   reads the answer, so it asks for it uncompressed).
//! - A whole answer goes through the output and tool-call policies before any byte of it is
//!   released. A denied tool call is removed and replaced by a refusal in the answer
//!   ([`ToolDenial::Refuse`], the default) or fails the request with the denial
//!   ([`ToolDenial::Fail`]); a denied text fails it (`403`, as above) or is replaced by a
//!   refusal ([`refuse_denied_answers`](OpenAIProxy::refuse_denied_answers)).
//! - A streamed answer goes through the engine's streaming guard: only cleared text is
//!   released, tool calls are held until complete and evaluated whole; a denial ends the
//!   stream with an error event of the same shape.
//! - Any other path answers `404` unless listed with
//!   [`pass_through`](OpenAIProxy::pass_through): nothing reaches the upstream unguarded by
//!   default.
//!
//! # Faults
//!
//! The proxy fails closed and stays up. A request body over the limit is `413`; a body that
//! is not a request of the endpoint is `400`; an upstream that cannot be reached, or answers
//! with something that is not an answer of the endpoint, is `502`; one that sends nothing for
//! the [`timeout`](OpenAIProxy::timeout) is `504`. In a stream, the same faults end the
//! stream with an error event after the text released so far: text the guards still held is
//! never released. An answer the upstream marks as an error (a status other than 2xx) reaches
//! the client as it is. A client that goes away mid-stream stops the guard, which drops the
//! upstream connection.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_engine::{PolicyEngine, PolicySet};
//! use portcullis_openai::proxy::OpenAIProxy;
//!
//! let engine = PolicyEngine::builder().policy_set(PolicySet::builder().build()).build();
//! let proxy = OpenAIProxy::new(engine, "https://api.openai.com")?.pass_through("/v1/models");
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?;
//! proxy.serve(listener).await?;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Body, Frame};
use hyper_util::rt::TokioIo;
use portcullis_engine::{EngineError, PolicyDenialError, PolicyEngine, PolicyEvaluationError};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::ToolDenial;
use crate::error::{self, GuardError};
use crate::exchange::{self, Failure, Settings};
use crate::mapping::Api;

/// The body of the proxy's answers.
pub type ProxyBody = UnsyncBoxBody<Bytes, io::Error>;

/// The largest request body the proxy reads unless told otherwise: 32 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How long the proxy waits for the upstream unless told otherwise: ten minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A proxy that cannot be built: the upstream URL is not an `http` or `https` origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyError {
    message: String,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProxyError {}

/// The OpenAI-compatible guard proxy; see the [module docs](self).
///
/// Cheap to clone: clones share the engine and the upstream's connection pool.
#[derive(Clone)]
pub struct OpenAIProxy {
    settings: Arc<Settings>,
    /// The upstream's origin and path prefix, without a trailing `/`.
    upstream: String,
    client: reqwest::Client,
    max_body_bytes: usize,
    timeout: Duration,
}

impl fmt::Debug for OpenAIProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAIProxy")
            .field("upstream", &self.upstream)
            .field("settings", &self.settings)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OpenAIProxy {
    /// A proxy that evaluates with `engine` and forwards to `upstream`: an `http` or `https`
    /// origin, optionally with a path prefix (`https://api.openai.com`,
    /// `https://example.com/openai`); the request's path is appended to it unchanged.
    ///
    /// Contexts carry agent id `openai-proxy`, session `default` (or the request's
    /// `metadata.agent_id` and `metadata.session_id`) and `metadata.framework =
    /// "openai-proxy"`.
    pub fn new(engine: impl Into<Arc<PolicyEngine>>, upstream: &str) -> Result<Self, ProxyError> {
        let invalid = |problem: &str| ProxyError {
            message: format!("the upstream {upstream:?} is not usable: {problem}"),
        };
        let url = reqwest::Url::parse(upstream).map_err(|error| invalid(&error.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme is neither http nor https"));
        }
        if url.host_str().is_none() {
            return Err(invalid("it has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid(
                "an origin with a path prefix takes no query or fragment",
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|error| ProxyError {
                message: format!(
                    "cannot start the HTTP client: {}",
                    portcullis_engine::error::error_chain(&error)
                ),
            })?;
        Ok(OpenAIProxy {
            settings: Arc::new(Settings::new(engine.into(), "openai-proxy", "openai-proxy")),
            upstream: url.as_str().trim_end_matches('/').to_owned(),
            client,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// The agent id of requests whose `metadata` has no `agent_id` (default `openai-proxy`).
    pub fn agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.settings_mut().agent_id = agent_id.into();
        self
    }

    /// The session id of requests whose `metadata` has no `session_id` (default `default`).
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.settings_mut().session_id = session_id.into();
        self
    }

    /// What a tool-call denial in an answer does (default [`ToolDenial::Refuse`]: the call
    /// is replaced by a refusal in the answer; [`ToolDenial::Fail`]: the request fails with
    /// the denial, or the stream ends with it).
    pub fn on_tool_denial(mut self, tool_denial: ToolDenial) -> Self {
        self.settings_mut().tool_denial = tool_denial;
        self
    }

    /// Whether a whole answer whose text an output policy denies is released with a refusal
    /// in place of its text (`[The answer was withheld by policy "<id>": <reason>]`; in a
    /// chat answer its tool calls are dropped too and `finish_reason` becomes `"stop"`)
    /// instead of failing the request with `403` (the default, `false`). A streamed answer
    /// ends with the error event either way: text released before the denial cannot be
    /// taken back.
    pub fn refuse_denied_answers(mut self, refuse: bool) -> Self {
        self.settings_mut().refuse_denied_answers = refuse;
        self
    }

    /// Forwards requests under `path` unguarded (all methods): requests whose path is `path`
    /// or continues it after a `/` (`/v1/models`, `/v1/embeddings`). Call it once per path.
    pub fn pass_through(mut self, path: impl Into<String>) -> Self {
        self.settings_mut().pass_through.push(path.into());
        self
    }

    /// The largest request body read (default [`DEFAULT_MAX_BODY_BYTES`]); also the largest
    /// whole answer, and the largest event of a streamed one.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self.settings_mut().max_event_bytes = bytes;
        self
    }

    /// How long the upstream may keep the proxy waiting (default [`DEFAULT_TIMEOUT`]): for
    /// its answer's headers, for a whole answer, and between two chunks of a stream.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Serves on `listener` until the process ends; a failed connection does not stop it.
    pub async fn serve(self, listener: TcpListener) -> io::Result<()> {
        self.serve_until(listener, std::future::pending()).await
    }

    /// Serves on `listener` until `shutdown` completes; then stops accepting connections
    /// (those open finish on their own).
    pub async fn serve_until(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut shutdown = pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => return Ok(()),
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors, a connection reset before it was accepted: the
                // listener is still good; wait a little and go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let proxy = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                });
                // A connection that fails (the client went away) ends on its own.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    /// Answers one request: guarded, passed through, or refused.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = request.uri().path().to_owned();
        match Api::of(request.method().as_str(), &path) {
            Some(api) => self.guarded(api, request).await,
            None if self.settings.passes_through(&path) => self.passed_through(request).await,
            None => error_response(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                Some("unguarded_path"),
                &format!(
                    "portcullis: {} {path} is not guarded: only POST …/chat/completions and POST …/responses are; the proxy forwards other paths only when they are listed with --pass-through",
                    request.method()
                ),
            ),
        }
    }

    /// The upstream URL of a request: the upstream's origin and prefix, then the request's
    /// path and query.
    fn upstream_url(&self, request: &http::request::Parts) -> String {
        let path_and_query = request
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        format!("{}{path_and_query}", self.upstream)
    }

    async fn guarded<B>(&self, api: Api, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let body = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(body) => body.to_bytes(),
            Err(problem) => {
                if problem.is::<http_body_util::LengthLimitError>() {
                    return error_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "invalid_request_error",
                        Some("request_too_large"),
                        &format!(
                            "portcullis: the request body is larger than {} bytes",
                            self.max_body_bytes
                        ),
                    );
                }
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    None,
                    &format!("portcullis: cannot read the request body: {problem}"),
                );
            }
        };
        let cleared = match exchange::guard_request(&self.settings, api, &body).await {
            Ok(cleared) => cleared,
            Err(failure) => return failure_response(&failure),
        };
        let mut headers = forwarded_headers(&parts.headers);
        headers.remove(header::ACCEPT_ENCODING);
        let upstream = self
            .client
            .request(parts.method.clone(), self.upstream_url(&parts))
            .headers(headers)
            .body(cleared.body.unwrap_or(body));
        let response = match tokio::time::timeout(self.timeout, upstream.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return upstream_failure(&error),
            Err(_) => return self.timed_out(),
        };
        let status = response.status();
        let mut headers = answer_headers(response.headers());
        if !status.is_success() {
            // The upstream's own error: no model text in it; the client reads it as written.
            return build(status, headers, stream_body(response.bytes_stream()));
        }
        let event_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        headers.remove(header::CONTENT_ENCODING);
        if cleared.streaming || event_stream {
            let upstream = idle_limited(response.bytes_stream(), self.timeout);
            let released =
                exchange::guard_stream(Arc::clone(&self.settings), api, cleared.metadata, upstream);
            return build(status, headers, stream_body(released));
        }
        let answer =
            match tokio::time::timeout(self.timeout, read_limited(response, self.max_body_bytes))
                .await
            {
                Ok(Ok(answer)) => answer,
                Ok(Err(failure)) => return failure_response(&failure),
                Err(_) => return self.timed_out(),
            };
        match exchange::guard_answer(&self.settings, api, cleared.metadata, &answer).await {
            Ok(Some(body)) => build(status, headers, full(body)),
            Ok(None) => error_response(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                None,
                &format!(
                    "portcullis: the upstream's answer is not {}; it is not released",
                    match api {
                        Api::ChatCompletions => "a chat completion",
                        Api::Responses => "a Responses API response",
                    }
                ),
            ),
            Err(failure) => failure_response(&failure),
        }
    }

    async fn passed_through<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let body = reqwest::Body::wrap_stream(body.into_data_stream());
        let upstream = self
            .client
            .request(parts.method.clone(), self.upstream_url(&parts))
            .headers(forwarded_headers(&parts.headers))
            .body(body);
        let response = match tokio::time::timeout(self.timeout, upstream.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return upstream_failure(&error),
            Err(_) => return self.timed_out(),
        };
        let status = response.status();
        let headers = answer_headers(response.headers());
        let body = idle_limited(response.bytes_stream(), self.timeout).map_err(io::Error::other);
        build(status, headers, stream_body(body))
    }

    fn timed_out(&self) -> Response<ProxyBody> {
        error_response(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            Some("upstream_timeout"),
            &format!(
                "portcullis: the upstream did not answer within {:?}",
                self.timeout
            ),
        )
    }
}

/// Headers that concern one connection, not the request: never forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// The request's headers as sent upstream: all of them (authorization included) but those
/// of the connection, the host and the length (the client sets them).
fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
    let mut forwarded = headers.clone();
    for name in HOP_BY_HOP {
        forwarded.remove(name);
    }
    forwarded.remove(header::HOST);
    forwarded.remove(header::CONTENT_LENGTH);
    forwarded.remove(header::TRANSFER_ENCODING);
    forwarded
}

/// The upstream's answer headers as released: without those of the connection and the
/// length (hyper sets it for the body released).
fn answer_headers(headers: &HeaderMap) -> HeaderMap {
    let mut released = headers.clone();
    for name in HOP_BY_HOP {
        released.remove(name);
    }
    released.remove(header::CONTENT_LENGTH);
    released.remove(header::TRANSFER_ENCODING);
    released
}

/// Reads a whole answer, up to `limit` bytes.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Bytes, Failure> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(Box::new(GuardError::Body {
                        problem: format!("the answer is larger than {limit} bytes"),
                    }));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Bytes::from(body)),
            Err(error) => {
                return Err(Box::new(GuardError::Body {
                    problem: portcullis_engine::error::error_chain(&error),
                }));
            }
        }
    }
}

/// The upstream's body, failing when a chunk takes longer than `idle` to come.
fn idle_limited(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, String>> + Send + 'static {
    futures_util::stream::unfold(
        (Box::pin(body), false),
        move |(mut body, failed)| async move {
            if failed {
                return None;
            }
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), (body, false))),
                Ok(Some(Err(error))) => Some((
                    Err(format!(
                        "the upstream connection failed: {}",
                        portcullis_engine::error::error_chain(&error)
                    )),
                    (body, true),
                )),
                Ok(None) => None,
                Err(_) => Some((
                    Err(format!("the upstream sent nothing for {idle:?}")),
                    (body, true),
                )),
            }
        },
    )
}

fn stream_body<E>(stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static) -> ProxyBody
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let frames = stream.map(|chunk| chunk.map(Frame::data).map_err(io::Error::other));
    BodyExt::boxed_unsync(StreamBody::new(frames))
}

fn full(bytes: Bytes) -> ProxyBody {
    BodyExt::boxed_unsync(Full::new(bytes).map_err(|never: Infallible| match never {}))
}

fn build(status: StatusCode, headers: HeaderMap, body: ProxyBody) -> Response<ProxyBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// An OpenAI-shaped error answer.
fn error_response(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    message: &str,
) -> Response<ProxyBody> {
    let body = json!({ "error": {
        "message": message,
        "type": kind,
        "code": code,
        "param": null,
    }});
    json_response(status, &body)
}

fn json_response(status: StatusCode, body: &Value) -> Response<ProxyBody> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    build(status, headers, full(Bytes::from(body.to_string())))
}

/// The answer to a failed exchange: a denial, an approval to ask for, a policy that could not
/// be evaluated, a request or answer the guard cannot map.
fn failure_response(failure: &Failure) -> Response<ProxyBody> {
    let mut body = error::error_event(failure.as_ref());
    let approval = failure
        .downcast_ref::<EngineError>()
        .is_some_and(|error| error.as_approval_request().is_some());
    let status = if failure.is::<PolicyDenialError>() || approval {
        StatusCode::FORBIDDEN
    } else if failure.is::<PolicyEvaluationError>() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        match failure.downcast_ref::<GuardError>() {
            Some(GuardError::InvalidRequest { .. }) => {
                body["error"]["type"] = Value::from("invalid_request_error");
                StatusCode::BAD_REQUEST
            }
            Some(GuardError::InvalidToolArguments { .. } | GuardError::Body { .. }) => {
                body["error"]["type"] = Value::from("upstream_error");
                StatusCode::BAD_GATEWAY
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    };
    json_response(status, &body)
}

/// The answer when the upstream could not be asked.
fn upstream_failure(error: &reqwest::Error) -> Response<ProxyBody> {
    let (status, code) = if error.is_timeout() {
        (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
    } else {
        (StatusCode::BAD_GATEWAY, "upstream_unreachable")
    };
    error_response(
        status,
        "upstream_error",
        Some(code),
        &format!(
            "portcullis: cannot reach the upstream: {}",
            portcullis_engine::error::error_chain(error)
        ),
    )
}
