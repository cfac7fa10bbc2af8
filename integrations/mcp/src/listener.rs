//! The guard's own streamable HTTP listener: client authentication, bounded connections,
//! bounded header and body read times and body size, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use portcullis_engine::BearerToken;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::GuardedServer;

/// The path clients send MCP requests to.
pub const MCP_PATH: &str = "/mcp";

/// How a [`GuardedListener`] treats its clients.
#[derive(Clone)]
pub struct ListenerOptions {
    token: Option<BearerToken>,
    max_connections: usize,
    header_read_timeout: Duration,
    body_read_timeout: Duration,
    max_body_bytes: usize,
    drain_timeout: Duration,
}

impl std::fmt::Debug for ListenerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerOptions")
            .field("token", &self.token.is_some())
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("drain_timeout", &self.drain_timeout)
            .finish()
    }
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            token: None,
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_body_bytes: 4 * 1024 * 1024,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

impl ListenerOptions {
    /// No token; 256 connections; 10 s for a request's head, 30 s for its body; 4 MiB
    /// bodies; 30 s to drain.
    pub fn new() -> Self {
        ListenerOptions::default()
    }

    /// Clients must send `Authorization: Bearer <token>`; others get 401. The token is
    /// kept and compared as a SHA-256 digest, in constant time, so neither its text nor
    /// its length shows in how long a refusal takes.
    pub fn bearer_token(mut self, token: impl AsRef<[u8]>) -> Self {
        self.token = Some(BearerToken::new(token));
        self
    }

    /// Whether clients must authenticate.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The most connections open at once (at least 1); one more is closed as soon as it
    /// is accepted.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// How long a client may take to send a request's head; a connection that takes
    /// longer is closed.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a client may take to send a request's body; past it the request is
    /// answered 408.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// The largest request body, in bytes; a larger one is answered 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long a graceful stop waits for the requests in flight.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Whether `token` (what followed `Bearer `) is the configured one: SHA-256 digests of
    /// both, compared in constant time. `true` when no token is configured.
    fn admits(&self, token: Option<&str>) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let Some(token) = token else {
            return false;
        };
        expected.matches(token)
    }
}

/// Refuses to serve clients beyond loopback without authentication: `Err` with the reason
/// when `address` is not a loopback address, no token is configured and
/// `allow_unauthenticated` is not set.
pub fn check_exposure(
    address: SocketAddr,
    options: &ListenerOptions,
    allow_unauthenticated: bool,
) -> Result<(), String> {
    if address.ip().is_loopback() || options.has_token() || allow_unauthenticated {
        return Ok(());
    }
    Err(format!(
        "{address} is reachable beyond this machine and no client token is configured: set one (--token-env), listen on 127.0.0.1, or accept unauthenticated clients with --allow-unauthenticated"
    ))
}

/// What a [`GuardedListener`] has seen, for metrics and tests.
#[derive(Debug, Clone, Default)]
pub struct ListenerStats(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    open: AtomicUsize,
    peak: AtomicUsize,
    refused_connections: AtomicUsize,
    unauthorized: AtomicUsize,
}

impl ListenerStats {
    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.0.open.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once.
    pub fn peak_connections(&self) -> usize {
        self.0.peak.load(Ordering::SeqCst)
    }

    /// Connections closed at once because the limit was reached.
    pub fn refused_connections(&self) -> usize {
        self.0.refused_connections.load(Ordering::SeqCst)
    }

    /// Requests refused because their token was missing or wrong.
    pub fn unauthorized_requests(&self) -> usize {
        self.0.unauthorized.load(Ordering::SeqCst)
    }
}

/// A [`GuardedServer`] served on streamable HTTP at [`MCP_PATH`], with the limits of its
/// [`ListenerOptions`]: what `portcullis proxy mcp --listen` runs.
///
/// Every request is authenticated first (when a token is configured), then its body is
/// read within the body time-out and size; only then does the MCP service see it. A request
/// whose JSON fits no MCP message (its `params` not an object) is answered with a JSON-RPC
/// error carrying its id, and goes no further. Other paths answer 404.
pub struct GuardedListener {
    service: StreamableHttpService<GuardedServer, LocalSessionManager>,
    options: ListenerOptions,
    /// Ends every session (cancels the MCP service's token).
    end_sessions: Box<dyn FnOnce() + Send>,
    stats: ListenerStats,
}

impl std::fmt::Debug for GuardedListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedListener")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GuardedListener {
    /// Serves `guarded` with `config` (allowed hosts, origins, sessions) and `options`.
    /// The body size of `options` replaces the one of `config`.
    pub fn new(
        guarded: GuardedServer,
        mut config: StreamableHttpServerConfig,
        options: ListenerOptions,
    ) -> Self {
        let sessions = config.cancellation_token.child_token();
        config.cancellation_token = sessions.clone();
        config.max_request_body_bytes = options.max_body_bytes;
        GuardedListener {
            service: guarded.streamable_http_service(config),
            options,
            end_sessions: Box::new(move || sessions.cancel()),
            stats: ListenerStats::default(),
        }
    }

    /// What the listener has seen so far.
    pub fn stats(&self) -> ListenerStats {
        self.stats.clone()
    }

    /// Serves clients on `listener` until `shutdown` completes; then stops accepting, lets
    /// the requests in flight finish (up to the drain time-out), ends the sessions and
    /// returns.
    pub async fn serve_until(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> io::Result<()> {
        let front = Arc::new(Front {
            service: self.service,
            options: self.options.clone(),
            stats: self.stats.clone(),
            in_flight: Arc::new(()),
        });
        let slots = Arc::new(Semaphore::new(self.options.max_connections));
        let graceful = GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let Ok((stream, _)) = accepted else {
                // Out of descriptors, a connection reset before it was accepted: go on.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                self.stats
                    .0
                    .refused_connections
                    .fetch_add(1, Ordering::SeqCst);
                drop(stream);
                continue;
            };
            let open = self.stats.0.open.fetch_add(1, Ordering::SeqCst) + 1;
            self.stats.0.peak.fetch_max(open, Ordering::SeqCst);
            let _ = stream.set_nodelay(true);
            let front = Arc::clone(&front);
            let watcher = graceful.watcher();
            let stats = self.stats.clone();
            let header_read_timeout = self.options.header_read_timeout;
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let front = Arc::clone(&front);
                    async move { Ok::<_, Infallible>(front.handle(request).await) }
                });
                let mut builder = http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_read_timeout)
                    .keep_alive(true);
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                // A connection that fails (the client went away, too slow) ends on its own.
                let _ = watcher.watch(connection).await;
                stats.0.open.fetch_sub(1, Ordering::SeqCst);
                drop(slot);
            });
        }
        drop(listener);
        // The requests in flight finish; then the sessions (and their event streams) end.
        let deadline = tokio::time::Instant::now() + self.options.drain_timeout;
        while Arc::strong_count(&front.in_flight) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (self.end_sessions)();
        let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
        Ok(())
    }
}

/// What every connection shares.
struct Front {
    service: StreamableHttpService<GuardedServer, LocalSessionManager>,
    options: ListenerOptions,
    stats: ListenerStats,
    /// One clone per response not yet sent whole: the drain waits for them.
    in_flight: Arc<()>,
}

type ResponseBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

impl Front {
    async fn handle(&self, request: Request<Incoming>) -> Response<ResponseBody> {
        if request.uri().path() != MCP_PATH {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: the MCP endpoint is /mcp\n",
            );
        }
        let token = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(BearerToken::from_authorization);
        if !self.options.admits(token) {
            self.stats.0.unauthorized.fetch_add(1, Ordering::SeqCst);
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "unauthorized: send Authorization: Bearer <token>\n",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        // A POST's answer (a result, or the event stream that carries it) is in flight
        // until sent; a GET's event stream lasts as long as its session.
        let in_flight =
            (request.method() == http::Method::POST).then(|| Arc::clone(&self.in_flight));
        let (parts, body) = request.into_parts();
        let limited = Limited::new(body, self.options.max_body_bytes);
        let body = match tokio::time::timeout(self.options.body_read_timeout, limited.collect())
            .await
        {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
                return plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload too large: the request body is over the limit\n",
                );
            }
            Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "the request body broke off\n"),
            Err(_) => {
                return plain(
                    StatusCode::REQUEST_TIMEOUT,
                    "request timeout: the request body did not arrive in time\n",
                );
            }
        };
        let post = parts.method == http::Method::POST;
        let response = self
            .service
            .handle(Request::from_parts(parts, Full::new(body.clone())))
            .await;
        // rmcp refuses a body it cannot read as a JSON-RPC message with 415 and no JSON-RPC
        // answer: a request among them (its `params` not an object) is answered instead with
        // an error carrying its id, as on stdio. Only that refusal is looked at again.
        let response = match response.status() {
            StatusCode::UNSUPPORTED_MEDIA_TYPE if post => {
                match crate::lines::answer_unreadable_request(&body) {
                    Some(answer) => json_rpc(&answer),
                    None => response,
                }
            }
            _ => response,
        };
        match in_flight {
            Some(in_flight) => response.map(|body| {
                InFlight {
                    body,
                    _in_flight: in_flight,
                }
                .boxed()
            }),
            None => response,
        }
    }
}

/// A response body that counts as in flight until it is sent whole (or dropped).
struct InFlight {
    body: ResponseBody,
    _in_flight: Arc<()>,
}

impl Body for InFlight {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// `message` as the JSON answer to a POST (200, `application/json`).
fn json_rpc(message: &rmcp::service::TxJsonRpcMessage<rmcp::RoleServer>) -> Response<ResponseBody> {
    let body = serde_json::to_vec(message).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
