//! Stopping a server without cutting the requests it is answering.
//!
//! [`Draining`] wraps a server's [`Service`]: it counts the requests in flight, and once its
//! [`Drain`] is asked to [`finish`](Drain::finish) it refuses new requests and waits for those
//! in flight to be answered. `portcullis proxy mcp` on stdio stops this way on SIGTERM.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{ClientNotification, ClientRequest, ProtocolVersion, ServerConfig, ServerResult};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service};
use tokio::sync::Notify;

/// A server whose requests in flight can be waited for before it stops.
///
/// ```no_run
/// # async fn run(guarded: portcullis_mcp::GuardedServer) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use portcullis_mcp::Draining;
/// use portcullis_mcp::rmcp::ServiceExt;
///
/// let server = Draining::new(guarded);
/// let drain = server.drain();
/// let running = server.serve(portcullis_mcp::rmcp::transport::stdio()).await?;
/// // ... on SIGTERM:
/// drain.finish(Duration::from_secs(10)).await;
/// running.cancel().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Draining<S> {
    inner: S,
    state: Arc<State>,
}

/// The handle that stops a [`Draining`] server taking requests and waits for those in flight.
#[derive(Debug, Clone)]
pub struct Drain {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    stopping: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// One request in flight: counted while it lives.
struct InFlight(Arc<State>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl<S> Draining<S> {
    /// `inner`, with its requests in flight counted.
    pub fn new(inner: S) -> Self {
        Draining {
            inner,
            state: Arc::default(),
        }
    }

    /// The handle that drains this server; it may be taken before the server is served.
    pub fn drain(&self) -> Drain {
        Drain {
            state: Arc::clone(&self.state),
        }
    }

    /// Counts a new request in, or `None` once the server is stopping.
    fn enter(&self) -> Option<InFlight> {
        // Counted before the check, so that `finish` never misses a request that got in.
        self.state.in_flight.fetch_add(1, Ordering::AcqRel);
        let entered = InFlight(Arc::clone(&self.state));
        (!self.state.stopping.load(Ordering::Acquire)).then_some(entered)
    }
}

impl Drain {
    /// Refuses every request from now on, and waits up to `timeout` for the requests in flight
    /// to be answered. Returns how many were still in flight when the time ran out (0 when all
    /// were answered).
    pub async fn finish(&self, timeout: Duration) -> usize {
        self.state.stopping.store(true, Ordering::Release);
        let answered = tokio::time::timeout(timeout, async {
            loop {
                let idle = self.state.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.state.in_flight.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await;
        match answered {
            Ok(()) => 0,
            Err(_) => self.in_flight(),
        }
    }

    /// How many requests are in flight now.
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::Acquire)
    }
}

impl<S: Service<RoleServer>> Service<RoleServer> for Draining<S> {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let Some(_in_flight) = self.enter() else {
            return Err(ErrorData::internal_error(
                "the guard is stopping and takes no new requests",
                None,
            ));
        };
        self.inner.handle_request(request, context).await
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}
