//! Serving the service on a listener: HTTP/1.1 with keep-alive, a cap on open connections, a
//! limit on how long a request's head may take, optional TLS, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::DecisionService;
use crate::metrics::Metrics;

/// The default cap on open connections: 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How [`serve`] runs connections.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ServeOptions {
    /// How long a client may take to send a request's head; a connection that takes longer
    /// is closed. Default: 10 s.
    pub header_read_timeout: Option<Duration>,
    /// How long a graceful stop waits for requests in flight before it closes their
    /// connections. Default: 30 s.
    pub drain_timeout: Option<Duration>,
    /// How many connections may be open at once; the server accepts no other until one
    /// closes (the kernel's backlog holds the ones waiting). Default:
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: Option<usize>,
    /// Where open connections are counted (`/metrics`).
    metrics: Option<Arc<Metrics>>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::Tls>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("ServeOptions");
        debug
            .field("header_read_timeout", &self.header_read_timeout)
            .field("drain_timeout", &self.drain_timeout)
            .field("max_connections", &self.max_connections);
        #[cfg(feature = "tls")]
        debug.field("tls", &self.tls.is_some());
        debug.finish()
    }
}

impl ServeOptions {
    /// The defaults.
    pub fn new() -> Self {
        ServeOptions::default()
    }

    /// Sets [`header_read_timeout`](ServeOptions::header_read_timeout).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = Some(timeout);
        self
    }

    /// Sets [`drain_timeout`](ServeOptions::drain_timeout).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// Sets [`max_connections`](ServeOptions::max_connections) (at least 1).
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = Some(connections.max(1));
        self
    }

    /// Counts open connections (now, and the most at once) in `service`'s `/metrics`.
    pub fn metrics_of(mut self, service: &DecisionService) -> Self {
        self.metrics = Some(service.metrics());
        self
    }

    /// Serves HTTPS with this certificate and key.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, tls: crate::tls::Tls) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// Serves `service` on `listener` until `shutdown` completes; then stops accepting, lets the
/// requests in flight finish (up to the drain time-out) and returns.
///
/// `service` is usually a [`DecisionService`] (which answers its routes without a router's
/// cost), or an axum [`Router`](axum::Router) that nests one in an application's routes.
///
/// A connection whose request head does not arrive within the header time-out is closed (an
/// idle keep-alive connection too), so clients that never finish a request cannot pile up;
/// no more than [`max_connections`](ServeOptions::max_connections) are open at once. An error
/// accepting one connection is logged and the server goes on.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()>
where
    S: HttpService<B>,
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let header_timeout = options
        .header_read_timeout
        .unwrap_or(Duration::from_secs(10));
    let drain = options.drain_timeout.unwrap_or(Duration::from_secs(30));
    let open = Arc::new(Semaphore::new(
        options.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
    ));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A free place first: at the cap, nothing more is accepted until a connection closes.
        let place = tokio::select! {
            place = Arc::clone(&open).acquire_owned() => place,
            () = &mut shutdown => break,
        };
        let Ok(place) = place else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, a connection reset before it was accepted: go on.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let watcher = graceful.watcher();
        let counted = Counted::new(place, options.metrics.clone());
        #[cfg(feature = "tls")]
        let tls = options.tls.clone();
        tokio::spawn(async move {
            let _counted = counted;
            #[cfg(feature = "tls")]
            if let Some(tls) = tls {
                let handshake =
                    tokio::time::timeout(header_timeout, tls.acceptor().accept(stream)).await;
                match handshake {
                    Ok(Ok(stream)) => {
                        connection(stream, service, header_timeout, watcher).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
                return;
            }
            let _ = peer;
            connection(stream, service, header_timeout, watcher).await;
        });
    }
    drop(listener);
    tracing::info!("stopped accepting; finishing the requests in flight");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain time-out were cut off");
    }
    Ok(())
}

/// An open connection: its place under the cap, and its count in the metrics, both given
/// back when it is dropped.
struct Counted {
    _place: tokio::sync::OwnedSemaphorePermit,
    metrics: Option<Arc<Metrics>>,
}

impl Counted {
    fn new(place: tokio::sync::OwnedSemaphorePermit, metrics: Option<Arc<Metrics>>) -> Counted {
        if let Some(metrics) = &metrics {
            metrics.connection_opened();
        }
        Counted {
            _place: place,
            metrics,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(metrics) = &self.metrics {
            metrics.connection_closed();
        }
    }
}

/// What [`serve`] serves: a [`tower_service::Service`] of HTTP requests that never fails
/// (its errors are answers), such as a [`DecisionService`] or an axum
/// [`Router`](axum::Router). `B` is the body of its answers.
pub trait HttpService<B>:
    tower_service::Service<
        http::Request<Incoming>,
        Response = http::Response<B>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: tower_service::Service<
            http::Request<Incoming>,
            Response = http::Response<B>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

async fn connection<I, S, B>(
    io: I,
    service: S,
    header_timeout: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<B>,
    B: Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%error, "connection ended with an error");
    }
}
