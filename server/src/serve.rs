//! Serving the service on a listener: HTTP/1.1 with keep-alive, a cap on open connections, a
//! limit on how long a request's head may take, optional TLS, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// How many threads serve the connections, each running a single-threaded runtime of
    /// its own. The listener's task accepts each connection and hands it to the thread with
    /// the fewest open, where it stays from its first request to its last. Default: none,
    /// every connection is a task of the runtime [`serve`] runs on.
    ///
    /// On tokio's multi-threaded runtime, threads hand tasks to one another and wake one
    /// another up, which costs more than the work of a short request; a connection that
    /// stays on one thread costs none of that, as with the worker processes of nginx.
    /// Everything requests share (the engine, the session store, the cap on connections,
    /// the metrics) is shared across the threads. The price: no thread takes over another's
    /// connections, so a policy that blocks its thread (a synchronous policy doing real
    /// work; wrap it in `blocking()`) holds up the other connections of that thread.
    pub workers: Option<usize>,
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
            .field("max_connections", &self.max_connections)
            .field("workers", &self.workers);
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

    /// Sets [`workers`](ServeOptions::workers) (at least 1).
    pub fn workers(mut self, threads: usize) -> Self {
        self.workers = Some(threads.max(1));
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
    let workers = match options.workers {
        Some(threads) => Some(Workers::start(threads).await?),
        None => None,
    };
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
        let accepted = Accepted {
            peer,
            counted: Counted::new(place, options.metrics.clone()),
            watcher: graceful.watcher(),
            service: service.clone(),
            header_timeout,
            #[cfg(feature = "tls")]
            tls: options.tls.clone(),
        };
        let left = match &workers {
            Some(workers) => workers.hand(stream, accepted),
            None => Some((stream, accepted)),
        };
        if let Some((stream, accepted)) = left {
            tokio::spawn(accepted.run(stream));
        }
    }
    drop(listener);
    tracing::info!("stopped accepting; finishing the requests in flight");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain time-out were cut off");
    }
    if let Some(workers) = workers {
        workers.stop().await;
    }
    Ok(())
}

/// An accepted connection, with what serving it takes.
struct Accepted<S> {
    peer: std::net::SocketAddr,
    /// Its place under the cap, given back when it closes.
    counted: Counted,
    watcher: hyper_util::server::graceful::Watcher,
    service: S,
    header_timeout: Duration,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::Tls>,
}

impl<S> Accepted<S> {
    /// Serves the connection (after its TLS handshake) until it closes.
    async fn run<B>(self, stream: tokio::net::TcpStream)
    where
        S: HttpService<B>,
        B: Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Accepted {
            peer,
            counted: _counted,
            watcher,
            service,
            header_timeout,
            #[cfg(feature = "tls")]
            tls,
        } = self;
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
    }
}

/// The threads of [`ServeOptions::workers`], and how many connections each has open.
struct Workers<S> {
    threads: Vec<WorkerThread<S>>,
}

/// One worker thread: where its connections are sent, its count of them, and the signal
/// that it has ended.
struct WorkerThread<S> {
    connections: tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, Accepted<S>)>,
    open: Arc<AtomicUsize>,
    ended: tokio::sync::oneshot::Receiver<()>,
}

impl<S> Workers<S> {
    /// Starts `threads` threads, each with a runtime of its own; an error when one cannot
    /// start (the ones started then end).
    async fn start<B>(threads: usize) -> io::Result<Workers<S>>
    where
        S: HttpService<B>,
        B: Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut workers = Workers {
            threads: Vec::with_capacity(threads),
        };
        for index in 0..threads.max(1) {
            let (connections, mut received) =
                tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, Accepted<S>)>();
            let (ready, started) = tokio::sync::oneshot::channel::<io::Result<()>>();
            let (end, ended) = tokio::sync::oneshot::channel::<()>();
            let open = Arc::new(AtomicUsize::new(0));
            let count = Arc::clone(&open);
            let spawned = std::thread::Builder::new()
                .name(format!("portcullis-worker-{index}"))
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(error) => {
                            let _ = ready.send(Err(error));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    // Until the sender is dropped: after the drain, or when `serve` ends.
                    runtime.block_on(async move {
                        while let Some((stream, accepted)) = received.recv().await {
                            let open = OpenOn(Arc::clone(&count));
                            match tokio::net::TcpStream::from_std(stream) {
                                Ok(stream) => {
                                    tokio::spawn(async move {
                                        let _open = open;
                                        accepted.run(stream).await;
                                    });
                                }
                                Err(error) => {
                                    tracing::warn!(%error, "cannot serve a connection");
                                }
                            }
                        }
                    });
                    // The connections cut off by the drain time-out end with the runtime.
                    drop(runtime);
                    let _ = end.send(());
                });
            let started = match spawned {
                Ok(_) => started
                    .await
                    .unwrap_or_else(|_| Err(io::Error::other("a worker thread did not start"))),
                Err(error) => Err(error),
            };
            if let Err(error) = started {
                workers.stop().await;
                return Err(io::Error::new(
                    error.kind(),
                    format!("cannot start a worker thread: {error}"),
                ));
            }
            workers.threads.push(WorkerThread {
                connections,
                open,
                ended,
            });
        }
        Ok(workers)
    }

    /// Hands `stream` to the thread with the fewest connections open. A thread that has
    /// ended is passed over from then on; when none is left, the connection is given back,
    /// to be served where it was accepted.
    fn hand(
        &self,
        stream: tokio::net::TcpStream,
        accepted: Accepted<S>,
    ) -> Option<(tokio::net::TcpStream, Accepted<S>)> {
        // Off this runtime's reactor, onto the thread's.
        let mut connection = match stream.into_std() {
            Ok(stream) => (stream, accepted),
            Err(error) => {
                tracing::warn!(%error, "cannot hand a connection to a worker thread");
                return None;
            }
        };
        for _ in 0..self.threads.len() {
            let thread = self
                .threads
                .iter()
                .min_by_key(|thread| thread.open.load(Ordering::Relaxed))?;
            thread.open.fetch_add(1, Ordering::Relaxed);
            match thread.connections.send(connection) {
                Ok(()) => return None,
                Err(returned) => {
                    tracing::error!("a worker thread has ended; the others serve its share");
                    thread.open.store(ENDED, Ordering::Relaxed);
                    connection = returned.0;
                }
            }
        }
        let (stream, accepted) = connection;
        match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => Some((stream, accepted)),
            Err(error) => {
                tracing::warn!(%error, "cannot serve a connection");
                None
            }
        }
    }

    /// Ends the threads, once their connections are served or cut off.
    async fn stop(self) {
        let mut ended = Vec::with_capacity(self.threads.len());
        for thread in self.threads {
            drop(thread.connections);
            ended.push(thread.ended);
        }
        for thread in ended {
            let _ = thread.await;
        }
    }
}

/// The count of a worker thread that has ended: more connections than any live thread has.
const ENDED: usize = usize::MAX / 2;

/// A connection open on a worker thread, counted in that thread's share until it closes.
struct OpenOn(Arc<AtomicUsize>);

impl Drop for OpenOn {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use portcullis_engine::{PolicyEngine, PolicySet};

    type Connection = (std::net::TcpStream, Accepted<DecisionService>);

    /// A worker thread as `serve` sees it, without the thread: its channel's receiving end
    /// (`None`: the thread has ended).
    fn thread(
        alive: bool,
    ) -> (
        WorkerThread<DecisionService>,
        Option<tokio::sync::mpsc::UnboundedReceiver<Connection>>,
    ) {
        let (connections, received) = tokio::sync::mpsc::unbounded_channel();
        let (_end, ended) = tokio::sync::oneshot::channel();
        let thread = WorkerThread {
            connections,
            open: Arc::new(AtomicUsize::new(0)),
            ended,
        };
        (thread, alive.then_some(received))
    }

    /// An accepted connection to hand.
    async fn accept_one(
        listener: &TcpListener,
        graceful: &GracefulShutdown,
    ) -> (tokio::net::TcpStream, Accepted<DecisionService>) {
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let place = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
        let service = DecisionService::builder()
            .build(PolicyEngine::builder().policy_set(PolicySet::builder().build()));
        let accepted = Accepted {
            peer,
            counted: Counted::new(place, None),
            watcher: graceful.watcher(),
            service,
            header_timeout: Duration::from_secs(1),
            #[cfg(feature = "tls")]
            tls: None,
        };
        (stream, accepted)
    }

    /// A thread that has ended is passed over, for good; with none left, the connection
    /// comes back to be served where it was accepted.
    #[tokio::test]
    async fn an_ended_thread_is_passed_over_and_with_none_left_the_connection_comes_back() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let graceful = GracefulShutdown::new();
        let (ended, _) = thread(false);
        let (alive, received) = thread(true);
        let mut received = received.unwrap();
        let workers = Workers {
            threads: vec![ended, alive],
        };

        let (stream, accepted) = accept_one(&listener, &graceful).await;
        assert!(workers.hand(stream, accepted).is_none(), "not handed");
        assert!(
            received.try_recv().is_ok(),
            "the live thread did not get it"
        );
        assert_eq!(workers.threads[0].open.load(Ordering::Relaxed), ENDED);
        assert_eq!(workers.threads[1].open.load(Ordering::Relaxed), 1);

        drop(received);
        let (stream, accepted) = accept_one(&listener, &graceful).await;
        let back = workers.hand(stream, accepted);
        assert!(back.is_some(), "a connection no thread took was dropped");
    }
}
