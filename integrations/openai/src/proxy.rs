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
//!   request's canonical path and its query, with the request's headers (the upstream's
//!   `Authorization` or `api-key` among them, unless the proxy has a
//!   [client token](OpenAIProxy::client_token) or an
//!   [upstream key](OpenAIProxy::upstream_key)) but for the hop-by-hop ones and
//!   `Accept-Encoding` (the proxy reads the answer, so it asks for it uncompressed).
//!   Redirects of the upstream are never followed.
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
//! # Fail closed at the edge
//!
//! The proxy is a security boundary (SPEC §16):
//!
//! - A request's path is decoded and normalised once (percent-escapes, `.` and `..`
//!   segments, duplicate slashes); an encoded `/`, `\` or `%`, a `..` leaving the root, a
//!   segment ending with a dot, `;`, spaces, control and non-ASCII bytes are refused (`400`),
//!   and so are method-override headers. Routes are classified without case (an upstream may
//!   fold it); classification, [`pass_through`](OpenAIProxy::pass_through) matching and the
//!   upstream URL use that one canonical path.
//! - A guarded request's body with a key given twice in one object is refused (`400`): the
//!   policies and the upstream would read different values. So is one that refers to state
//!   the upstream keeps, unless [allowed](OpenAIProxy::allow_server_state).
//! - Besides the messages, tool definitions' descriptions and parameter schemas, structured
//!   output schemas, instructions, prompt variables and the arguments of earlier calls go
//!   through the input policies.
//! - With a [client token](OpenAIProxy::client_token), a request without it is `401`.
//!   Sessions can be [bound to the client](OpenAIProxy::session_from). Without one, what a
//!   web page could send is refused (`403`): a request carrying `Origin`, and one naming a
//!   host that is not a loopback name or [allowed](OpenAIProxy::allow_host) (DNS
//!   rebinding).
//! - A guarded request's body must be declared JSON (`415` otherwise).
//! - Connections, guarded streams, the bytes streams hold, header and body read times are
//!   bounded (see the builder); [`figures`](OpenAIProxy::figures) shows what is held.
//!
//! # Faults
//!
//! The proxy fails closed and stays up. A request body over the limit is `413`; a body that
//! is not a request of the endpoint is `400`; an upstream that cannot be reached, or answers
//! with something that is not an answer of the endpoint, is `502`; one that sends nothing for
//! the [`timeout`](OpenAIProxy::timeout) is `504`. In a stream, the same faults end the
//! stream with an error event after the text released so far: text the guards still held is
//! never released. An answer the upstream marks as an error (a status other than 2xx) is
//! replaced by an OpenAI-shaped error carrying its status (`"type": "upstream_error"`, `"code":
//! "upstream_status"`), a redirect by a `502`. A client that goes away mid-stream stops the
//! guard, which drops the upstream connection. A guarded request body that takes longer than
//! the [body read time-out](OpenAIProxy::body_read_timeout) is `408`; a stream beyond
//! [`max_streams`](OpenAIProxy::max_streams) is `429`.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Body, Frame};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use portcullis_engine::edge::{self, BrowserRefusal};
use portcullis_engine::{BearerToken, PolicyEngine};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ToolDenial;
use crate::error::Failure;
use crate::error::{self, GuardError};
use crate::exchange;
use crate::mapping::Api;
use crate::request_path::{self, CanonicalPath};
use crate::settings::Settings;

/// The body of the proxy's answers.
pub type ProxyBody = UnsyncBoxBody<Bytes, io::Error>;

/// The largest request body the proxy reads unless told otherwise: 8 MiB (a long
/// conversation with a few images inlined; larger uploads go to the files API).
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How long the proxy waits for the upstream unless told otherwise: ten minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a client may take to send a request's head unless told otherwise: 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a guarded request's body unless told otherwise: 30 s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How many client connections the proxy serves at once unless told otherwise; more wait to
/// be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How many guarded streams the proxy runs at once unless told otherwise; a request for one
/// more is refused (`429`).
pub const DEFAULT_MAX_STREAMS: usize = 256;

/// How many bytes all guarded streams together may read from the upstream unless told
/// otherwise: 256 MiB.
pub const DEFAULT_MAX_STREAM_BYTES: usize = 256 * 1024 * 1024;

/// How long a graceful stop waits for the requests and streams in flight unless told
/// otherwise: 30 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

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

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if the
/// request has one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    BearerToken::from_authorization(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

/// Where the session id of a guarded request comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionSource {
    /// The request body's `metadata.session_id`, or the proxy's
    /// [`session_id`](OpenAIProxy::session_id) (the default): any client may name any
    /// session.
    #[default]
    Request,
    /// The value of this request header, set by a front the operator trusts (a gateway that
    /// authenticated the client); a request without it is refused (`401`). The body's
    /// `metadata.session_id` is ignored.
    Header(HeaderName),
    /// The client's token ([`client_token`](OpenAIProxy::client_token)): the session is
    /// `client-` and the first 16 hexadecimal digits of the token's SHA-256, so every client
    /// of one token shares one session, and no client reaches another token's. Without a
    /// client token, every request is in the proxy's
    /// [`session_id`](OpenAIProxy::session_id). The body's `metadata.session_id` is ignored.
    Token,
}

/// What the proxy holds now, and the most it held since it started: for a dashboard, and
/// for tests that check the limits hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyFigures {
    /// Client connections open now.
    pub open_connections: usize,
    /// The most client connections open at once.
    pub peak_connections: usize,
    /// Guarded streams running now.
    pub open_streams: usize,
    /// The most guarded streams running at once.
    pub peak_streams: usize,
    /// Bytes all guarded streams running now have read from the upstream (a stream's bytes
    /// count until it ends: its guard keeps what it read, and its client may not have taken
    /// all of it).
    pub held_stream_bytes: usize,
    /// The most bytes all guarded streams held at once.
    pub peak_held_stream_bytes: usize,
}

/// A count of something the proxy holds, with its peak.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    /// Adds `amount` unless the count would pass `limit`.
    fn try_add(&self, amount: usize, limit: usize) -> bool {
        let added = self
            .now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                now.checked_add(amount).filter(|total| *total <= limit)
            });
        match added {
            Ok(before) => {
                self.peak.fetch_max(before + amount, Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }

    fn sub(&self, amount: usize) {
        self.now.fetch_sub(amount, Ordering::AcqRel);
    }

    fn now(&self) -> usize {
        self.now.load(Ordering::Acquire)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }
}

/// What all clones of one proxy hold together.
#[derive(Debug, Default)]
struct Gauges {
    connections: Gauge,
    streams: Gauge,
    stream_bytes: Gauge,
}

/// One slot of a [`Gauge`], given back when dropped.
struct Slot {
    gauges: Arc<Gauges>,
    gauge: fn(&Gauges) -> &Gauge,
}

impl Slot {
    fn take(gauges: &Arc<Gauges>, gauge: fn(&Gauges) -> &Gauge, limit: usize) -> Option<Slot> {
        gauge(gauges).try_add(1, limit).then(|| Slot {
            gauges: Arc::clone(gauges),
            gauge,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        (self.gauge)(&self.gauges).sub(1);
    }
}

/// The bytes one stream has read from the upstream, counted in the proxy's total until the
/// stream ends: what its guard keeps to judge the answer (the text so far, held tool calls
/// and items) and what its client has not taken yet both come from them, so the total
/// bounds the memory all streams hold.
struct StreamBytes {
    gauges: Arc<Gauges>,
    held: usize,
    limit: usize,
}

impl StreamBytes {
    /// Counts `amount` more bytes; `false` when the proxy's total would pass its limit.
    fn hold(&mut self, amount: usize) -> bool {
        if !self.gauges.stream_bytes.try_add(amount, self.limit) {
            return false;
        }
        self.held += amount;
        true
    }
}

impl Drop for StreamBytes {
    /// Gives back all the stream counted.
    fn drop(&mut self) {
        self.gauges.stream_bytes.sub(self.held);
    }
}

/// The OpenAI-compatible guard proxy; see the [module docs](self).
///
/// Cheap to clone: clones share the engine, the upstream's connection pool and the limits'
/// counts.
#[derive(Clone)]
pub struct OpenAIProxy {
    settings: Arc<Settings>,
    /// The upstream's origin and path prefix, without a trailing `/`.
    upstream: String,
    client: reqwest::Client,
    max_body_bytes: usize,
    timeout: Duration,
    header_read_timeout: Duration,
    body_read_timeout: Duration,
    max_connections: usize,
    max_streams: usize,
    max_stream_bytes: usize,
    drain_timeout: Duration,
    /// The token clients must present, if any.
    client_token: Option<BearerToken>,
    /// Host names a token-less proxy answers besides the loopback ones (lower case).
    allowed_hosts: Vec<String>,
    /// The `Authorization` header the proxy sends upstream in place of the client's.
    upstream_authorization: Option<HeaderValue>,
    session_source: SessionSource,
    gauges: Arc<Gauges>,
}

impl fmt::Debug for OpenAIProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAIProxy")
            .field("upstream", &self.upstream)
            .field("settings", &self.settings)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("timeout", &self.timeout)
            .field("client_token", &self.client_token.is_some())
            .field("upstream_key", &self.upstream_authorization.is_some())
            .field("session_source", &self.session_source)
            .finish_non_exhaustive()
    }
}

impl OpenAIProxy {
    /// A proxy that evaluates with `engine` and forwards to `upstream`: an `http` or `https`
    /// origin, optionally with a path prefix (`https://api.openai.com`,
    /// `https://example.com/openai`); the request's canonical path is appended to it.
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
            // A redirect would take the client's headers to another host: never followed.
            .redirect(reqwest::redirect::Policy::none())
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
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_streams: DEFAULT_MAX_STREAMS,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            client_token: None,
            allowed_hosts: Vec::new(),
            upstream_authorization: None,
            session_source: SessionSource::Request,
            gauges: Arc::default(),
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

    /// Where the session of a guarded request comes from (default
    /// [`SessionSource::Request`]); bind it to the client with [`SessionSource::Header`] or
    /// [`SessionSource::Token`], so that no client can choose another's session.
    pub fn session_from(mut self, source: SessionSource) -> Self {
        self.session_source = source;
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

    /// Whether guarded requests may refer to state the upstream keeps, whose text the
    /// policies cannot read: `previous_response_id`, `conversation`, a stored prompt
    /// (`prompt.id`), `item_reference` input items (default `false`: such a request is
    /// refused with `400`).
    pub fn allow_server_state(mut self, allow: bool) -> Self {
        self.settings_mut().allow_server_state = allow;
        self
    }

    /// Forwards requests under `path` unguarded (all methods): requests whose canonical path
    /// is `path` or continues it after a `/` (`/v1/models`, `/v1/embeddings`). Call it once
    /// per path.
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

    /// How long a client may take to send a request's head (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`]); its connection is closed after that.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a client may take to send a guarded request's body (default
    /// [`DEFAULT_BODY_READ_TIMEOUT`]); it is answered `408` after that.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// How many client connections are served at once (default
    /// [`DEFAULT_MAX_CONNECTIONS`]); further ones wait to be accepted.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// How many guarded streams run at once (default [`DEFAULT_MAX_STREAMS`]); a request for
    /// one more is refused with `429`.
    pub fn max_streams(mut self, streams: usize) -> Self {
        self.max_streams = streams;
        self
    }

    /// How many bytes all guarded streams running at once may read from the upstream (default
    /// [`DEFAULT_MAX_STREAM_BYTES`]): a stream's bytes count until it ends, since its guard
    /// keeps what it read to judge the whole answer. A stream whose next chunk would pass the
    /// bound ends with an error event, however fast its client reads.
    pub fn max_stream_bytes(mut self, bytes: usize) -> Self {
        self.max_stream_bytes = bytes;
        self
    }

    /// How long a graceful stop ([`serve_until`](OpenAIProxy::serve_until)) waits for the
    /// requests and streams in flight before it cuts them (default
    /// [`DEFAULT_DRAIN_TIMEOUT`]).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The token clients must present (`Authorization: Bearer <token>`); a request without
    /// it is refused with `401`. The client's `Authorization` header is then never sent
    /// upstream. Without a client token (the default), anyone who reaches the listener is a
    /// client: listen on loopback only, or set one.
    pub fn client_token(mut self, token: impl Into<String>) -> Self {
        self.client_token = Some(BearerToken::new(token.into()));
        self
    }

    /// A host name clients of a proxy without a [client token](OpenAIProxy::client_token)
    /// may name in `Host`, besides the loopback ones (`localhost`, `127.0.0.1`, `[::1]`,
    /// with any port); repeatable. A token-less proxy refuses a request naming another host
    /// (`403`), so that a web page whose name was re-pointed at the proxy's address (DNS
    /// rebinding) cannot use it; a proxy with a client token needs no list.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// The key the proxy sends upstream (`Authorization: Bearer <key>`) in place of the
    /// client's `Authorization` and `api-key` headers; fails when the key cannot be a header
    /// value.
    pub fn upstream_key(mut self, key: &str) -> Result<Self, ProxyError> {
        let mut value = HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| ProxyError {
            message: "the upstream key holds characters a header cannot carry".to_owned(),
        })?;
        value.set_sensitive(true);
        self.upstream_authorization = Some(value);
        Ok(self)
    }

    /// What the proxy holds now, and the most it held.
    pub fn figures(&self) -> ProxyFigures {
        let gauges = &self.gauges;
        ProxyFigures {
            open_connections: gauges.connections.now(),
            peak_connections: gauges.connections.peak(),
            open_streams: gauges.streams.now(),
            peak_streams: gauges.streams.peak(),
            held_stream_bytes: gauges.stream_bytes.now(),
            peak_held_stream_bytes: gauges.stream_bytes.peak(),
        }
    }

    /// Serves on `listener` until the process ends; a failed connection does not stop it.
    pub async fn serve(self, listener: TcpListener) -> io::Result<()> {
        self.serve_until(listener, std::future::pending()).await
    }

    /// Serves on `listener` until `shutdown` completes; then stops accepting connections,
    /// lets the requests and streams in flight finish, up to the
    /// [`drain_timeout`](OpenAIProxy::drain_timeout), and returns.
    pub async fn serve_until(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut shutdown = pin!(shutdown);
        let graceful = GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(self.max_connections));
        loop {
            let accepted = tokio::select! {
                accepted = accept(&listener, &connections) => accepted,
                () = &mut shutdown => break,
            };
            let Some((stream, permit)) = accepted else {
                // Out of file descriptors, a connection reset before it was accepted: the
                // listener is still good; wait a little and go on.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let counted = Slot::take(&self.gauges, |gauges| &gauges.connections, usize::MAX);
            let proxy = self.clone();
            let service = hyper::service::service_fn(move |request| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(self.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                // A connection that fails (the client went away) ends on its own.
                let _ = connection.await;
                drop((permit, counted));
            });
        }
        drop(listener);
        // The requests in flight finish, streams included; what is left after the drain
        // time-out is cut when the runtime stops.
        let _ = tokio::time::timeout(self.drain_timeout, graceful.shutdown()).await;
        Ok(())
    }

    /// Answers one request: refused, guarded or passed through.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if let Some(expected) = &self.client_token {
            let presented = bearer_token(request.headers()).unwrap_or("");
            if !expected.matches(presented) {
                let mut response = error_response(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    Some("invalid_proxy_token"),
                    "portcullis: the request has no valid proxy token (Authorization: Bearer <token>)",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
        }
        if self.client_token.is_none()
            && let Err(response) = self.browser_safe(request.headers())
        {
            return *response;
        }
        let path = match request_path::canonicalize(request.uri().path()) {
            Ok(path) => path,
            Err(problem) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    Some("ambiguous_path"),
                    &format!("portcullis: the request's path is refused: {problem}"),
                );
            }
        };
        if let Some(name) = METHOD_OVERRIDES
            .iter()
            .find(|name| request.headers().contains_key(**name))
        {
            return error_response(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("method_override"),
                &format!(
                    "portcullis: the header {name} would let the upstream read another method than the proxy did"
                ),
            );
        }
        let method = request.method().as_str();
        match Api::of(method, path.as_str()) {
            Some(api) => {
                if let Err(response) = json_body(request.headers()) {
                    return *response;
                }
                let session = match self.bound_session(request.headers()) {
                    Ok(session) => session,
                    Err(response) => return *response,
                };
                self.guarded(api, &path, session.as_deref(), request).await
            }
            None if self.settings.passes_through(path.as_str()) => {
                self.passed_through(&path, request).await
            }
            None => error_response(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                Some("unguarded_path"),
                &format!(
                    "portcullis: {method} {path} is not guarded: only POST …/chat/completions and POST …/responses are; the proxy forwards other paths only when they are listed with --pass-through"
                ),
            ),
        }
    }

    /// Refuses, for a proxy without a client token, what a web page could have sent: a
    /// request carrying an `Origin` (a browser's cross-site request, or one of a page whose
    /// name was re-pointed at the proxy) and one naming a host that is neither a loopback
    /// name nor [allowed](OpenAIProxy::allow_host).
    fn browser_safe(&self, headers: &HeaderMap) -> Result<(), Box<Response<ProxyBody>>> {
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        let refusal = match edge::check_browser(
            headers.contains_key(header::ORIGIN),
            host,
            &self.allowed_hosts,
        ) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        Err(Box::new(match refusal {
            BrowserRefusal::Origin => error_response(
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                Some("browser_request"),
                "portcullis: a request sent by a web page (it carries Origin) is refused by a proxy without a client token; set --token-env",
            ),
            BrowserRefusal::Host(host) => error_response(
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                Some("unknown_host"),
                &format!(
                    "portcullis: the request names the host {host:?}; a proxy without a client token answers only requests naming a loopback host or one given with --allow-host"
                ),
            ),
        }))
    }

    /// The session a request is bound to, if the proxy binds sessions to clients; an answer
    /// refusing the request when its client is not known.
    fn bound_session(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<String>, Box<Response<ProxyBody>>> {
        match &self.session_source {
            SessionSource::Request => Ok(None),
            SessionSource::Header(name) => match headers.get(name).map(HeaderValue::to_str) {
                Some(Ok(value)) if !value.trim().is_empty() => Ok(Some(value.trim().to_owned())),
                _ => Err(Box::new(error_response(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    Some("unknown_client"),
                    &format!(
                        "portcullis: the request has no {name} header naming its client; the proxy binds sessions to it"
                    ),
                ))),
            },
            SessionSource::Token => Ok(Some(match &self.client_token {
                Some(token) => format!("client-{}", token.fingerprint()),
                None => self.settings.session_id.clone(),
            })),
        }
    }

    /// The upstream URL of a request: the upstream's origin and prefix, then the request's
    /// canonical path and its query.
    fn upstream_url(&self, path: &CanonicalPath, request: &http::request::Parts) -> String {
        match request.uri.query() {
            Some(query) => format!("{}{path}?{query}", self.upstream),
            None => format!("{}{path}", self.upstream),
        }
    }

    /// The request's headers as sent upstream: those of the connection, the host and the
    /// length dropped; the client's credentials replaced by the proxy's when it has any.
    fn forwarded_headers(&self, headers: &HeaderMap) -> HeaderMap {
        let mut forwarded = headers.clone();
        for name in HOP_BY_HOP {
            forwarded.remove(name);
        }
        forwarded.remove(header::HOST);
        forwarded.remove(header::CONTENT_LENGTH);
        forwarded.remove(header::TRANSFER_ENCODING);
        if self.client_token.is_some() || self.upstream_authorization.is_some() {
            // The client's token is the proxy's, never the upstream's.
            forwarded.remove(header::AUTHORIZATION);
        }
        if let Some(authorization) = &self.upstream_authorization {
            forwarded.remove("api-key");
            forwarded.insert(header::AUTHORIZATION, authorization.clone());
        }
        forwarded
    }

    async fn guarded<B>(
        &self,
        api: Api,
        path: &CanonicalPath,
        session: Option<&str>,
        request: Request<B>,
    ) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let read = Limited::new(body, self.max_body_bytes).collect();
        let body = match tokio::time::timeout(self.body_read_timeout, read).await {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(problem)) => {
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
            Err(_) => {
                return error_response(
                    StatusCode::REQUEST_TIMEOUT,
                    "invalid_request_error",
                    Some("request_timeout"),
                    &format!(
                        "portcullis: the request body did not arrive within {:?}",
                        self.body_read_timeout
                    ),
                );
            }
        };
        let cleared = match exchange::guard_request(&self.settings, api, &body, session).await {
            Ok(cleared) => cleared,
            Err(failure) => return failure_response(&failure),
        };
        // A stream takes its slot before anything is sent upstream.
        let mut stream_slot = None;
        if cleared.streaming {
            match self.stream_slot() {
                Ok(slot) => stream_slot = Some(slot),
                Err(response) => return *response,
            }
        }
        let mut headers = self.forwarded_headers(&parts.headers);
        headers.remove(header::ACCEPT_ENCODING);
        let upstream = self
            .client
            .request(parts.method.clone(), self.upstream_url(path, &parts))
            .headers(headers)
            .body(cleared.body.unwrap_or(body));
        let response = match tokio::time::timeout(self.timeout, upstream.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return upstream_failure(&error),
            Err(_) => return self.timed_out(),
        };
        let status = response.status();
        if !status.is_success() {
            return upstream_status(status, response.headers());
        }
        let mut headers = answer_headers(response.headers());
        let event_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        headers.remove(header::CONTENT_ENCODING);
        if cleared.streaming || event_stream {
            let slot = match stream_slot {
                Some(slot) => slot,
                None => match self.stream_slot() {
                    Ok(slot) => slot,
                    Err(response) => return *response,
                },
            };
            let held = StreamBytes {
                gauges: Arc::clone(&self.gauges),
                held: 0,
                limit: self.max_stream_bytes,
            };
            let upstream = held_limited(
                idle_limited(upstream_body(response), self.timeout, "the upstream"),
                held,
            );
            let released =
                exchange::guard_stream(Arc::clone(&self.settings), api, cleared.metadata, upstream)
                    .map(move |chunk| {
                        // The slot goes with the stream (its count with the upstream's).
                        let _stream = &slot;
                        chunk
                    });
            return build(status, headers, stream_body(released));
        }
        drop(stream_slot);
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

    /// A slot for one more guarded stream, or the `429` refusing it.
    fn stream_slot(&self) -> Result<Slot, Box<Response<ProxyBody>>> {
        Slot::take(&self.gauges, |gauges| &gauges.streams, self.max_streams).ok_or_else(|| {
            Box::new(error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                Some("too_many_streams"),
                &format!(
                    "portcullis: the proxy already guards {} streams; try again later",
                    self.max_streams
                ),
            ))
        })
    }

    async fn passed_through<B>(
        &self,
        path: &CanonicalPath,
        request: Request<B>,
    ) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        // Streamed as it comes, however long, but never stalled longer than a guarded body.
        let body = body.into_data_stream().map_err(|error| {
            let error: Box<dyn std::error::Error + Send + Sync> = error.into();
            portcullis_engine::error::error_chain(&*error)
        });
        let body = reqwest::Body::wrap_stream(
            idle_limited(body, self.body_read_timeout, "the client").map_err(io::Error::other),
        );
        let upstream = self
            .client
            .request(parts.method.clone(), self.upstream_url(path, &parts))
            .headers(self.forwarded_headers(&parts.headers))
            .body(body);
        let response = match tokio::time::timeout(self.timeout, upstream.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return upstream_failure(&error),
            Err(_) => return self.timed_out(),
        };
        let status = response.status();
        let headers = answer_headers(response.headers());
        let body = idle_limited(upstream_body(response), self.timeout, "the upstream")
            .map_err(io::Error::other);
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

/// Waits for a connection slot, then for a connection; `None` when accepting failed.
async fn accept(
    listener: &TcpListener,
    connections: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, OwnedSemaphorePermit)> {
    let permit = Arc::clone(connections).acquire_owned().await.ok()?;
    let (stream, _) = listener.accept().await.ok()?;
    Some((stream, permit))
}

/// Refuses a guarded request whose body is not declared JSON (`415`): a web page can send
/// a `text/plain` or form body cross-site without the browser asking the proxy first.
fn json_body(headers: &HeaderMap) -> Result<(), Box<Response<ProxyBody>>> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(edge::is_json_media_type);
    if json {
        return Ok(());
    }
    Err(Box::new(error_response(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_request_error",
        Some("unsupported_media_type"),
        "portcullis: the request body must be sent as Content-Type: application/json",
    )))
}

/// Headers asking a server to read the request as another method than its own: refused, so
/// that the upstream reads the method the proxy classified.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

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
                    return Err(Failure::Guard(GuardError::Body {
                        problem: format!("the answer is larger than {limit} bytes"),
                    }));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Bytes::from(body)),
            Err(error) => {
                return Err(Failure::Guard(GuardError::Body {
                    problem: portcullis_engine::error::error_chain(&error),
                }));
            }
        }
    }
}

/// The upstream's body as read: its chunks, or why reading failed.
fn upstream_body(
    response: reqwest::Response,
) -> impl Stream<Item = Result<Bytes, String>> + Send + 'static {
    response
        .bytes_stream()
        .map_err(|error| portcullis_engine::error::error_chain(&error))
}

/// A body from `sender` (`"the upstream"`, `"the client"`), failing when a chunk takes
/// longer than `idle` to come.
fn idle_limited(
    body: impl Stream<Item = Result<Bytes, String>> + Send + 'static,
    idle: Duration,
    sender: &'static str,
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
                    Err(format!("the connection of {sender} failed: {error}")),
                    (body, true),
                )),
                Ok(None) => None,
                Err(_) => Some((
                    Err(format!("{sender} sent nothing for {idle:?}")),
                    (body, true),
                )),
            }
        },
    )
}

/// The upstream's stream, counting each chunk in the bytes `held` until the stream ends;
/// failing when the proxy's streams together would read too much.
fn held_limited(
    body: impl Stream<Item = Result<Bytes, String>> + Send + 'static,
    mut held: StreamBytes,
) -> impl Stream<Item = Result<Bytes, String>> + Send + 'static {
    body.scan(false, move |failed, chunk| {
        let next = if *failed {
            None
        } else if let Ok(bytes) = &chunk
            && !held.hold(bytes.len())
        {
            *failed = true;
            Some(Err(format!(
                "the proxy's streams would hold more than {} bytes together; the rest of the answer is not released",
                held.limit
            )))
        } else {
            Some(chunk)
        };
        std::future::ready(next)
    })
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
    let mut body = error::error_event(failure);
    let status = match failure {
        Failure::Denied(_) | Failure::ApprovalRequired(_) => StatusCode::FORBIDDEN,
        Failure::Evaluation(_) => StatusCode::INTERNAL_SERVER_ERROR,
        Failure::Guard(GuardError::InvalidRequest { .. }) => {
            body["error"]["type"] = Value::from("invalid_request_error");
            StatusCode::BAD_REQUEST
        }
        Failure::Guard(GuardError::InvalidToolArguments { .. } | GuardError::Body { .. }) => {
            body["error"]["type"] = Value::from("upstream_error");
            StatusCode::BAD_GATEWAY
        }
        Failure::Guard(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json_response(status, &body)
}

/// The answer in place of an upstream's error (a status other than 2xx): an OpenAI-shaped
/// error carrying the status (a redirect, never followed, is a `502`), and the upstream's
/// `Retry-After`; the upstream's own body is not released.
fn upstream_status(status: StatusCode, upstream_headers: &HeaderMap) -> Response<ProxyBody> {
    let (released, message) = if status.is_redirection() {
        (
            StatusCode::BAD_GATEWAY,
            format!(
                "portcullis: the upstream answered a redirect ({status}); the proxy does not follow redirects"
            ),
        )
    } else {
        (
            status,
            format!("portcullis: the upstream answered {status}; its answer is not released"),
        )
    };
    let mut response = error_response(
        released,
        "upstream_error",
        Some("upstream_status"),
        &message,
    );
    if let Some(retry_after) = upstream_headers.get(header::RETRY_AFTER) {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, retry_after.clone());
    }
    response
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
