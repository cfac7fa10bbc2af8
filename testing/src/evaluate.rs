//! A scriptable `/engine/evaluate` endpoint, the one the `http` backend calls.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use portcullis_engine::PolicyDecision;
use tokio::sync::mpsc;

use crate::server::{Handler, HandlerFuture, RecordedRequest, Running, ServerBody};

type Script = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

/// A decision endpoint on 127.0.0.1 whose answers a test scripts.
///
/// It answers every request with the [`Reply`] its script returns for it, whatever the method
/// and path (tests assert those from [`requests`](Self::requests)), so it also stands in for a
/// misbehaving OPA server or any other JSON service. Every request is recorded ([`requests`](Self::requests)) before it is answered, and
/// every accepted TCP connection is counted ([`connections_accepted`](Self::connections_accepted)).
/// The server stops when [`shutdown`](Self::shutdown) is awaited or when it is dropped; either
/// way the connections still open are closed.
///
/// ```
/// use portcullis_engine::PolicyDecision;
/// use portcullis_testing::{EvaluateServer, Reply};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// // Deny whatever mentions "secret", allow the rest, and answer slowly.
/// let server = EvaluateServer::scripted(|request| {
///     let reply = if String::from_utf8_lossy(&request.body).contains("secret") {
///         Reply::decision(&PolicyDecision::deny("no secrets"))
///     } else {
///         Reply::decision(&PolicyDecision::allow())
///     };
///     reply.after(std::time::Duration::from_millis(5))
/// })
/// .await?;
/// assert!(server.url().starts_with("http://127.0.0.1:"));
/// assert_eq!(server.connections_accepted(), 0);
/// server.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub struct EvaluateServer {
    running: Running,
    script: Arc<RwLock<Script>>,
}

impl EvaluateServer {
    /// Starts a server that answers every evaluation with `allow`.
    pub async fn start() -> io::Result<EvaluateServer> {
        EvaluateServer::replying(Reply::decision(&PolicyDecision::allow())).await
    }

    /// Starts a server that answers every evaluation with `reply`.
    pub async fn replying(reply: Reply) -> io::Result<EvaluateServer> {
        EvaluateServer::scripted(move |_| reply.clone()).await
    }

    /// Starts a server that answers each evaluation with what `script` returns for it.
    pub async fn scripted(
        script: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> io::Result<EvaluateServer> {
        let script: Arc<RwLock<Script>> = Arc::new(RwLock::new(Arc::new(script)));
        let shared = Arc::clone(&script);
        let handler: Handler = Arc::new(move |request: RecordedRequest| -> HandlerFuture {
            let script = Arc::clone(&shared.read().unwrap_or_else(PoisonError::into_inner));
            Box::pin(async move {
                let reply = script(&request);
                reply.into_response(&request).await
            })
        });
        Ok(EvaluateServer {
            running: Running::start(handler).await?,
            script,
        })
    }

    /// Replaces the script: later requests are answered by `script`.
    pub fn set_script(&self, script: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static) {
        *self.script.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(script);
    }

    /// Replaces the script: later requests are all answered with `reply`.
    pub fn set_reply(&self, reply: Reply) {
        self.set_script(move |_| reply.clone());
    }

    /// The base URL to give a client, `http://127.0.0.1:{port}` (no trailing slash).
    pub fn url(&self) -> String {
        self.running.url()
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.running.address()
    }

    /// The requests received so far, in the order they arrived.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.running.requests()
    }

    /// The requests received since the last call (or since the start), in the order they
    /// arrived, forgetting them: a long-running test calls this to keep the record small.
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        self.running.take_requests()
    }

    /// How many TCP connections the server has accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.running.connections_accepted()
    }

    /// The most requests the server had in flight at once so far.
    pub fn peak_in_flight(&self) -> usize {
        self.running.peak_in_flight()
    }

    /// Stops the server and closes the connections still open.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

/// What the server does with one request: an answer (status, headers, body) after an optional
/// delay, or a fault.
///
/// ```
/// use std::time::Duration;
/// use portcullis_testing::Reply;
///
/// let slow_failure = Reply::status(503)
///     .with_body(r#"{"error": "overloaded"}"#)
///     .after(Duration::from_millis(50));
/// let wrong_type = Reply::json(serde_json::json!({"decision": "allow"}))
///     .with_content_type("text/html");
/// # drop((slow_failure, wrong_type));
/// ```
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: BodyPlan,
    delay: Duration,
}

#[derive(Debug, Clone)]
enum BodyPlan {
    /// The whole body at once, with a `Content-Length`.
    Whole(Bytes),
    /// Never answer: no status line, no headers.
    Stall,
    /// The body one chunk every `every`, without end.
    Trickle { chunk: Bytes, every: Duration },
    /// Announce `declared` bytes, send `sent` of them, then drop the connection.
    ResetMidBody { declared: usize, sent: usize },
    /// A chunked body that never ends, as fast as the client reads it.
    Endless,
    /// `307` to the same URL, forever.
    RedirectLoop,
}

impl Reply {
    /// `200`, `Content-Type: application/json`, the decision as its wire JSON.
    pub fn decision(decision: &PolicyDecision) -> Reply {
        Reply::json(serde_json::to_value(decision).unwrap_or(serde_json::Value::Null))
    }

    /// `200`, `Content-Type: application/json`, `body` as JSON text.
    pub fn json(body: serde_json::Value) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: BodyPlan::Whole(Bytes::from(body.to_string())),
            delay: Duration::ZERO,
        }
    }

    /// `status` with an empty body and no content type (add them with
    /// [`with_body`](Self::with_body) and [`with_content_type`](Self::with_content_type)).
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: BodyPlan::Whole(Bytes::new()),
            delay: Duration::ZERO,
        }
    }

    /// A `200` JSON response whose body is `bytes` bytes long: a JSON string of `x`s, sent at
    /// once with its `Content-Length`.
    pub fn oversized(bytes: usize) -> Reply {
        let mut body = Vec::with_capacity(bytes.max(2));
        body.push(b'"');
        body.resize(bytes.max(2) - 1, b'x');
        body.push(b'"');
        Reply::status(200)
            .with_content_type("application/json")
            .with_body(body)
    }

    /// Accepts the request and never answers: no status line, no headers, the connection held
    /// open until the client gives up or the server stops.
    pub fn stall() -> Reply {
        Reply {
            body: BodyPlan::Stall,
            ..Reply::status(200)
        }
    }

    /// `200` with JSON headers, then one byte of a JSON document every `every`, never finishing.
    pub fn trickle(every: Duration) -> Reply {
        Reply {
            body: BodyPlan::Trickle {
                chunk: Bytes::from_static(b" "),
                every,
            },
            ..Reply::status(200).with_content_type("application/json")
        }
    }

    /// `200` announcing a 1000-byte JSON body, of which 100 bytes are sent before the server
    /// drops the connection.
    pub fn reset_mid_body() -> Reply {
        Reply {
            body: BodyPlan::ResetMidBody {
                declared: 1000,
                sent: 100,
            },
            ..Reply::status(200).with_content_type("application/json")
        }
    }

    /// `200` with a chunked JSON body that never ends (64 KiB chunks, as fast as the client
    /// reads): only a client that caps the body while reading it gets out quickly.
    pub fn endless_body() -> Reply {
        Reply {
            body: BodyPlan::Endless,
            ..Reply::status(200).with_content_type("application/json")
        }
    }

    /// `307 Temporary Redirect` to the URL just requested, so a client that follows redirects
    /// loops.
    pub fn redirect_loop() -> Reply {
        Reply {
            body: BodyPlan::RedirectLoop,
            ..Reply::status(307)
        }
    }

    /// Replaces the body with `body`, sent whole with its `Content-Length`.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Reply {
        self.body = BodyPlan::Whole(body.into());
        self
    }

    /// Sets `Content-Type`, replacing the one already set.
    pub fn with_content_type(self, content_type: &str) -> Reply {
        let mut reply = self;
        reply
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
        reply.with_header("content-type", content_type)
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Waits `delay` before answering (before the status line).
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    async fn into_response(self, request: &RecordedRequest) -> Response<ServerBody> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let extra_header = match &self.body {
            BodyPlan::ResetMidBody { declared, .. } => {
                Some((http::header::CONTENT_LENGTH, HeaderValue::from(*declared)))
            }
            BodyPlan::RedirectLoop => HeaderValue::from_str(&request.path)
                .ok()
                .map(|location| (http::header::LOCATION, location)),
            _ => None,
        };
        let body = match self.body {
            BodyPlan::Stall => std::future::pending().await,
            BodyPlan::Whole(bytes) => ServerBody::full(bytes),
            BodyPlan::Trickle { chunk, every } => stream(move |sender| async move {
                loop {
                    tokio::time::sleep(every).await;
                    if sender.send(Ok(chunk.clone())).await.is_err() {
                        return;
                    }
                }
            }),
            BodyPlan::ResetMidBody { sent, .. } => stream(move |sender| async move {
                let _ = sender.send(Ok(Bytes::from(vec![b' '; sent]))).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = sender
                    .send(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "reset on purpose",
                    )))
                    .await;
            }),
            BodyPlan::Endless => stream(|sender| async move {
                let chunk = Bytes::from(vec![b' '; 64 * 1024]);
                while sender.send(Ok(chunk.clone())).await.is_ok() {}
            }),
            BodyPlan::RedirectLoop => ServerBody::full(Bytes::new()),
        };
        let mut response = Response::new(body);
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        if let Some((name, value)) = extra_header {
            headers.insert(name, value);
        }
        response
    }
}

/// A streamed body fed by `feed`, which runs as its own task until the client goes away.
fn stream<F, Fut>(feed: F) -> ServerBody
where
    F: FnOnce(mpsc::Sender<Result<Bytes, io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(1);
    tokio::spawn(feed(sender));
    ServerBody::Channel(receiver)
}
