//! The part both servers share: the accept loop on 127.0.0.1, the connection count, the record
//! of requests received and the response body type.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// One request as a test server received it: method, path (with query), headers and the whole
/// body.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The request method.
    pub method: Method,
    /// The request target's path and query, e.g. `/engine/evaluate`.
    pub path: String,
    /// The request headers, as received.
    pub headers: HeaderMap,
    /// The request body, as received.
    pub body: Bytes,
}

impl RecordedRequest {
    /// The body parsed as JSON, or `None` when it is not JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The value of header `name` when it is present and text (the first one if repeated).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// The body of a test server's response: whole, or streamed from a channel (which lets a
/// script trickle it, cut it off or make it endless).
pub(crate) enum ServerBody {
    Full(Option<Bytes>),
    Channel(mpsc::Receiver<Result<Bytes, io::Error>>),
}

impl ServerBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        ServerBody::Full(Some(bytes.into()))
    }
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            ServerBody::Full(bytes) => {
                Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes))))
            }
            ServerBody::Channel(receiver) => receiver
                .poll_recv(cx)
                .map(|next| next.map(|chunk| chunk.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ServerBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServerBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            ServerBody::Full(None) => SizeHint::with_exact(0),
            ServerBody::Channel(_) => SizeHint::default(),
        }
    }
}

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Response<ServerBody>> + Send>>;
pub(crate) type Handler = Arc<dyn Fn(RecordedRequest) -> HandlerFuture + Send + Sync>;

#[derive(Default)]
struct Stats {
    connections: AtomicUsize,
    /// Requests whose handler has started and whose response has not been produced yet.
    in_flight: AtomicUsize,
    /// The most requests ever in flight at once.
    peak_in_flight: AtomicUsize,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A server accepting connections on 127.0.0.1 until it is shut down or dropped.
pub(crate) struct Running {
    address: SocketAddr,
    stats: Arc<Stats>,
    accept_loop: JoinHandle<()>,
}

impl Running {
    /// Binds a free port on 127.0.0.1 and serves HTTP/1.1 there with `handler`, on the current
    /// tokio runtime.
    pub(crate) async fn start(handler: Handler) -> io::Result<Running> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let accept_loop = tokio::spawn(accept_loop(listener, handler, Arc::clone(&stats)));
        Ok(Running {
            address,
            stats,
            accept_loop,
        })
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.stats
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(
            &mut *self
                .stats
                .requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    pub(crate) fn connections_accepted(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// The most requests the server had in flight at once (from the first byte read to the
    /// response produced).
    pub(crate) fn peak_in_flight(&self) -> usize {
        self.stats.peak_in_flight.load(Ordering::SeqCst)
    }

    pub(crate) async fn shutdown(mut self) {
        self.accept_loop.abort();
        // The loop owns the connections: once it is gone, so are they. Its result can only be
        // "cancelled".
        let _ = (&mut self.accept_loop).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

async fn accept_loop(listener: TcpListener, handler: Handler, stats: Arc<Stats>) {
    // Dropping this set (when the loop is aborted) aborts every connection still open.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors or similar: let the client see the failure.
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    continue;
                };
                stats.connections.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                let handler = Arc::clone(&handler);
                let stats = Arc::clone(&stats);
                connections.spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let handler = Arc::clone(&handler);
                        let stats = Arc::clone(&stats);
                        async move {
                            let _in_flight = InFlight::enter(&stats);
                            let recorded = record(request).await;
                            stats
                                .requests
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(recorded.clone());
                            Ok::<_, Infallible>(handler(recorded).await)
                        }
                    });
                    // A connection that fails (a client gone, a body cut off on purpose) only
                    // ends itself.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Counts one request in flight while it lives (a handler dropped half-way, when its
/// connection is cut, leaves too).
struct InFlight<'a>(&'a Stats);

impl<'a> InFlight<'a> {
    fn enter(stats: &'a Stats) -> InFlight<'a> {
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(stats)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn record(request: Request<Incoming>) -> RecordedRequest {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    RecordedRequest {
        method: parts.method,
        path: parts.uri.path_and_query().map_or_else(
            || parts.uri.path().to_owned(),
            |path| path.as_str().to_owned(),
        ),
        headers: parts.headers,
        body,
    }
}

/// A JSON response with `status`.
pub(crate) fn json_response(status: u16, body: &serde_json::Value) -> Response<ServerBody> {
    let mut response = Response::new(ServerBody::full(body.to_string()));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
