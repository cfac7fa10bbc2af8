//! The decision service: its state, its routes and what guards them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use portcullis_engine::edge::BrowserRefusal;
use portcullis_engine::{
    AuditHandler, AuditRecord, BearerToken, EngineError, InterceptionPoint, PolicyContext,
    PolicyDecision, PolicyEngine, PolicyEngineBuilder, PolicySet, edge,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::access::{AccessLine, AccessLog, TracingAccessLog};
use crate::console::DecisionFeed;
use crate::metrics::{ExternalCounter, Metrics};
use crate::outcome::{self, Context, ContextError, ContextTask, DecisionTap};
use crate::routes::{self, Resolved, Route};
use crate::{approvals, console};

/// The default cap on a request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Limits that protect the service: body size, concurrency, waiting and time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The largest request body accepted (413 beyond it). Default: 1 MiB.
    pub max_body_bytes: usize,
    /// How many evaluations run at once. Default: 256.
    pub max_concurrent: usize,
    /// How many evaluation requests may wait for a slot; one more is refused at once with
    /// 503 and `Retry-After`. Default: 1024.
    pub max_queued: usize,
    /// How long a request waits for a slot before it is refused (503, `Retry-After`).
    /// Default: 1 s.
    pub queue_timeout: Duration,
    /// How long one request may take, body reading included: a body not received in time
    /// is answered 408, an evaluation not finished in time 503. Default: 10 s.
    pub request_deadline: Duration,
    /// How long a client may take to send a request's head (the server closes a connection
    /// that takes longer: a client that never finishes its request cannot hold it).
    /// Default: 10 s.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body once its request holds an
    /// evaluation slot (408 beyond it, and the slot is free again): a slow body holds a slot
    /// for this long at most. Bodies are read only under a slot, so at most
    /// [`max_concurrent`](Limits::max_concurrent) bodies are read (and held) at once.
    /// Default: 5 s (never more than the request deadline).
    pub body_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_concurrent: 256,
            max_queued: 1024,
            queue_timeout: Duration::from_secs(1),
            request_deadline: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(5),
        }
    }
}

impl Limits {
    /// The default limits.
    pub fn new() -> Self {
        Limits::default()
    }

    /// Sets [`max_body_bytes`](Limits::max_body_bytes).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`max_concurrent`](Limits::max_concurrent) (at least 1).
    pub fn max_concurrent(mut self, requests: usize) -> Self {
        self.max_concurrent = requests.max(1);
        self
    }

    /// Sets [`max_queued`](Limits::max_queued).
    pub fn max_queued(mut self, requests: usize) -> Self {
        self.max_queued = requests;
        self
    }

    /// Sets [`queue_timeout`](Limits::queue_timeout).
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = timeout;
        self
    }

    /// Sets [`request_deadline`](Limits::request_deadline).
    pub fn request_deadline(mut self, deadline: Duration) -> Self {
        self.request_deadline = deadline;
        self
    }

    /// Sets [`header_read_timeout`](Limits::header_read_timeout).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`body_read_timeout`](Limits::body_read_timeout).
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }
}

/// How the last reload went, as `/readyz` and `/metrics` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadStatus {
    /// The new set is in use.
    Reloaded,
    /// The reload failed and the set in use (if any) stays; why.
    Failed(String),
}

#[derive(Debug, Clone)]
struct LastReload {
    status: ReloadStatus,
    at: SystemTime,
}

/// Builds a [`DecisionService`].
#[must_use]
#[derive(Default)]
pub struct DecisionServiceBuilder {
    metrics: Arc<Metrics>,
    audit: Option<Arc<dyn AuditHandler>>,
    token: Option<String>,
    allowed_hosts: Vec<String>,
    limits: Limits,
    unloaded: bool,
    feed: Option<Arc<DecisionFeed>>,
    access_log: Option<Arc<dyn AccessLog>>,
}

impl std::fmt::Debug for DecisionServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionServiceBuilder")
            .field("audit", &self.audit.is_some())
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("limits", &self.limits)
            .field("unloaded", &self.unloaded)
            .field("console", &self.feed.is_some())
            .field("access_log", &self.access_log.is_some())
            .finish()
    }
}

impl DecisionServiceBuilder {
    /// Where audit records go besides the service's own counting (an audit log, an exporter).
    pub fn audit(mut self, handler: impl AuditHandler) -> Self {
        self.audit = Some(Arc::new(handler));
        self
    }

    /// Where audit records go, shared with other owners.
    pub fn shared_audit(mut self, handler: Arc<dyn AuditHandler>) -> Self {
        self.audit = Some(handler);
        self
    }

    /// Where the access lines go: one per answered request. Default: a `tracing` event
    /// ([`TracingAccessLog`]).
    pub fn access_log(mut self, log: impl AccessLog) -> Self {
        self.access_log = Some(Arc::new(log));
        self
    }

    /// Requires `Authorization: Bearer <token>` on the evaluation routes and `/metrics` (401
    /// otherwise: a scraper sends the token too). `/healthz` and `/readyz` stay open, for
    /// probes; `/readyz` gives the last reload's details (its time and error) only to a
    /// caller with the token.
    /// The token is kept as its SHA-256 digest, and a given token is compared digest to digest
    /// in constant time: the time taken says neither how much of it was right nor how long
    /// the token is.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A host name callers of a service without a [bearer token](Self::bearer_token) may name
    /// in `Host`, besides the loopback ones (`localhost`, `127.0.0.1`, `[::1]`, with any port);
    /// repeatable. Without a token the evaluation routes and `/metrics` refuse (403) a request
    /// carrying `Origin` (a web page's) and one naming another host: a page whose name was
    /// re-pointed at the service's address (DNS rebinding) could otherwise use it as its
    /// own origin. `/healthz` and `/readyz` answer any host, for probes.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// Also shows at `/metrics` a counter kept elsewhere in the process, read at each scrape
    /// (`portcullis serve` shows the audit log's write failures this way). `name` must be a
    /// Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`, by convention ending `_total`); a
    /// counter with another name is left out.
    pub fn counter(
        self,
        name: impl Into<String>,
        help: impl Into<String>,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.metrics.add_external(ExternalCounter {
            name: name.into(),
            help: help.into(),
            read: Box::new(read),
        });
        self
    }

    /// Serves the approval console: the page at `/console` (built into the binary) and the
    /// live feed of decisions it shows at `GET /v1/decisions/feed` (Server-Sent Events, with
    /// per-policy counts of the last hour). Give the service a
    /// [bearer token](Self::bearer_token): the page signs in with it, and without one the
    /// service refuses the page's calls as it refuses every call a web page makes.
    pub fn console(mut self) -> Self {
        self.feed = Some(Arc::new(DecisionFeed::new()));
        self
    }

    /// The service's limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Starts with no policy set loaded: evaluations are answered 503 and `/readyz` says not
    /// ready until [`DecisionService::replace_policy_set`] installs one.
    pub fn unloaded(mut self) -> Self {
        self.unloaded = true;
        self
    }

    /// The audit handler the service's engine must have: it notes the decisions of each
    /// evaluation (for its outcome) and counts them (for `/metrics`). [`build`](Self::build)
    /// installs it; an engine assembled elsewhere (whose audit handler is set by its own
    /// builder) takes it there, and the service is then made with
    /// [`build_on`](Self::build_on).
    pub fn tap(&self) -> DecisionTap {
        let counted = Arc::clone(&self.metrics);
        let feed = self.feed.clone();
        let tap = match &self.audit {
            Some(handler) => DecisionTap::wrapping_shared(Arc::clone(handler)),
            None => DecisionTap::new(),
        };
        tap.observed(move |record: &AuditRecord<'_>| {
            counted.decision(record.policy_id, record.decision.as_str());
            if let Some(feed) = &feed {
                feed.note(record);
            }
        })
    }

    /// The service, on the engine `engine` builds: the service sets the engine's audit
    /// handler ([`tap`](Self::tap), which hands every record on to
    /// [`audit`](Self::audit)'s).
    pub fn build(self, engine: PolicyEngineBuilder) -> DecisionService {
        let engine = Arc::new(engine.on_audit(self.tap()).build());
        self.build_on(engine)
    }

    /// The service, on an engine built elsewhere whose audit handler includes
    /// [`tap`](Self::tap) (without it, outcomes list no decisions and `/metrics` counts none).
    pub fn build_on(self, engine: Arc<PolicyEngine>) -> DecisionService {
        let limits = self.limits;
        DecisionService {
            shared: Arc::new(Shared {
                engine,
                loaded: AtomicBool::new(!self.unloaded),
                last_reload: Mutex::new(None),
                metrics: self.metrics,
                token: self.token.as_deref().map(BearerToken::new),
                allowed_hosts: self.allowed_hosts,
                slots: Semaphore::new(limits.max_concurrent),
                waiting: AtomicUsize::new(0),
                limits,
                next_request: AtomicU64::new(1),
                instance: instance_tag(),
                feed: self.feed,
                access_log: self
                    .access_log
                    .unwrap_or_else(|| Arc::new(TracingAccessLog)),
            }),
        }
    }
}

/// A short tag that keeps request ids of processes started apart.
fn instance_tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.subsec_nanos() ^ (since.as_secs() as u32))
        .unwrap_or(0);
    format!("{:08x}", nanos ^ std::process::id().rotate_left(16))
}

pub(crate) struct Shared {
    pub(crate) engine: Arc<PolicyEngine>,
    loaded: AtomicBool,
    last_reload: Mutex<Option<LastReload>>,
    metrics: Arc<Metrics>,
    /// The bearer token, when one is required.
    token: Option<BearerToken>,
    /// The host names a token-less service answers besides the loopback ones.
    allowed_hosts: Vec<String>,
    pub(crate) limits: Limits,
    slots: Semaphore,
    waiting: AtomicUsize,
    next_request: AtomicU64,
    instance: String,
    /// The console's decision feed, when the console is served.
    pub(crate) feed: Option<Arc<DecisionFeed>>,
    access_log: Arc<dyn AccessLog>,
}

/// Portcullis as a network service: an engine, the routes that evaluate on it, and what
/// guards them. Cheap to clone (clones share everything).
///
/// Routes ([`router`](DecisionService::router)):
///
/// | route | answers |
/// |---|---|
/// | `POST /engine/evaluate` | the remote policy protocol, server side: `{"policy_id", "interception_point", "context"}` → the decision that one policy of the loaded set took, run through the engine (audited, monitored, under deadlines, `on_error` and the session store) |
/// | `POST /v1/evaluate/{input\|tool_call\|tool_result\|output}` | the context through the whole point: 200 with the [`Outcome`](crate::Outcome) JSON, for every outcome |
/// | `GET /v1/approvals?status=pending\|granted\|refused\|all` | the approval requests the grant store keeps (`{"approvals": [..]}`, newest first) |
/// | `GET /v1/approvals/{id}` | one of them |
/// | `POST /v1/approvals/{id}/grant` | `{"by", "ttl"}`: lets the action through once within `ttl` (a duration such as `"15m"`, or seconds; default 15 minutes, at most 30 days); the record as decided |
/// | `POST /v1/approvals/{id}/refuse` | `{"by", "reason"}`: the action's retry is a denial by the escalating policy; the record as decided |
/// | `GET /console`, `GET /v1/decisions/feed` | with [`console`](DecisionServiceBuilder::console): the approval console's page and the decisions it shows (Server-Sent Events) |
/// | `GET /healthz` | 200 while the process runs |
/// | `GET /readyz` | 200 when a policy set is loaded (503 otherwise); the last reload's status and error only to a caller with the bearer token |
/// | `GET /metrics` | Prometheus text: requests by route and status, decisions by policy and decision, evaluation latency, reloads by outcome, open connections; with a bearer token configured, only to a caller with it |
///
/// Errors are `{"error": {"code": "..", "message": ".."}}` with 400 (malformed JSON, an
/// invalid context), 401 (bearer token missing or wrong), 404 (unknown policy id, point or
/// route; an unknown approval request), 405, 408 (body not received within the body read
/// time), 409 (an approval request decided already), 413 (body over the limit), 415 (a POST whose `Content-Type` is not
/// JSON), 500 (`/engine/evaluate`: the policy failed and `on_error` is `deny`), 503 (no set
/// loaded, overloaded: with `Retry-After`, the deadline passed, or the grant store failed).
#[derive(Clone)]
pub struct DecisionService {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for DecisionService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionService")
            .field("engine", &self.shared.engine)
            .field("loaded", &self.is_loaded())
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl DecisionService {
    /// A builder.
    pub fn builder() -> DecisionServiceBuilder {
        DecisionServiceBuilder::default()
    }

    /// The engine evaluations run on (to hand to a watcher that swaps reloaded sets in).
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.shared.engine
    }

    /// The service's limits.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Options to [`serve`](crate::serve) this service with: its header read time-out, and
    /// its open connections counted in its `/metrics`.
    pub fn serve_options(&self) -> crate::ServeOptions {
        crate::ServeOptions::new()
            .header_read_timeout(self.shared.limits.header_read_timeout)
            .metrics_of(self)
    }

    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.shared.metrics)
    }

    /// Whether a policy set is loaded.
    pub fn is_loaded(&self) -> bool {
        self.shared.loaded.load(Ordering::Acquire)
    }

    /// Installs a new policy set (evaluations under way finish on theirs) and records a
    /// successful reload.
    pub fn replace_policy_set(&self, set: PolicySet) {
        self.shared.engine.replace_policy_set(set);
        self.record_reload(ReloadStatus::Reloaded);
    }

    /// Ends the console's open decision feeds (call it when the service begins to shut down:
    /// an open feed would otherwise hold its connection until the drain time-out).
    pub fn close_feeds(&self) {
        if let Some(feed) = &self.shared.feed {
            feed.close();
        }
    }

    /// Records how a reload went (for `/readyz` and `/metrics`); a successful one also marks
    /// the set loaded (for reloads that swapped the set into [`engine`](Self::engine)
    /// themselves). A failure's message is kept with the URLs in it cut down to scheme, host
    /// and path ([`redact_urls`](crate::redact_urls)), and only authenticated callers of
    /// `/readyz` see it.
    pub fn record_reload(&self, status: ReloadStatus) {
        let (outcome, status) = match status {
            ReloadStatus::Reloaded => {
                self.shared.loaded.store(true, Ordering::Release);
                ("reloaded", ReloadStatus::Reloaded)
            }
            ReloadStatus::Failed(message) => (
                "failed",
                ReloadStatus::Failed(crate::redact_urls(&message).into_owned()),
            ),
        };
        self.shared.metrics.reload(outcome);
        *self
            .shared
            .last_reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(LastReload {
            status,
            at: SystemTime::now(),
        });
    }

    /// The service's routes as an axum [`Router`], to nest in an application's own router.
    /// To serve the service alone, hand the service itself to [`serve`](crate::serve): it
    /// answers the same routes without a router's cost.
    pub fn router(&self) -> Router {
        Router::new().fallback_service(self.clone())
    }

    /// Answers one request: gives it an id (the caller's `x-request-id` when it is a sensible
    /// one, else a new one, answered in `x-request-id`), runs its route, counts it and writes
    /// its access line ([`AccessLine`], to the service's [`AccessLog`]). A `request` span
    /// carrying the id wraps the route at DEBUG.
    async fn answer<B>(self, request: http::Request<B>) -> Response
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let shared = self.shared;
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let id = request_id(&shared, &parts.headers);
        let resolved = routes::resolve(&parts.method, parts.uri.path(), shared.feed.is_some());
        let route = resolved.pattern();
        let span = tracing::debug_span!("request", request_id = %id);
        let mut response = run(&shared, resolved, &parts, Body::new(body))
            .instrument(span)
            .await;
        let status = response.status().as_u16();
        shared.metrics.request(route, status);
        shared.access_log.answered(&AccessLine {
            request_id: &id,
            method: parts.method.as_str(),
            route,
            status,
            micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        });
        if let Ok(value) = HeaderValue::try_from(id) {
            response.headers_mut().insert(REQUEST_ID, value);
        }
        response
    }
}

impl<B> tower_service::Service<http::Request<B>> for DecisionService
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.answer(request).await) })
    }
}

/// Runs the route `resolved` names.
async fn run(
    shared: &Arc<Shared>,
    resolved: Resolved<'_>,
    parts: &http::request::Parts,
    body: Body,
) -> Response {
    let headers = &parts.headers;
    let route = match resolved {
        Resolved::Route(route, _) => route,
        Resolved::WrongMethod(_) => return method_not_allowed(parts),
        Resolved::BadPath(_) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!(
                    "the path {} is not UTF-8 once percent-decoded",
                    parts.uri.path()
                ),
            )
            .into_response();
        }
        Resolved::NotFound => return not_found(parts),
    };
    // The routes that wait keep their state (a few KiB for an evaluation) in a box of their
    // own, so that this future stays small for every route: hyper moves it more than once
    // before it first runs, and a route that answers at once never pays for an evaluation's
    // room.
    match route {
        Route::EngineEvaluate => Box::pin(engine_evaluate(shared, headers, body)).await,
        Route::Evaluate(point) => Box::pin(evaluate_point(shared, &point, headers, body)).await,
        Route::Approvals => Box::pin(approvals::list(shared, headers, parts.uri.query())).await,
        Route::Approval(id) => Box::pin(approvals::one(shared, headers, &id)).await,
        Route::ApprovalDecision(id, decision) => {
            Box::pin(approvals::decide(shared, headers, &id, &decision, body)).await
        }
        Route::Healthz => healthz(),
        Route::Readyz => readyz(shared, headers),
        Route::Metrics => metrics(shared, headers),
        Route::ConsolePage => console::page(),
        Route::ConsoleScript => console::script(),
        Route::ConsoleStyles => console::styles(),
        Route::DecisionFeed => console::feed(shared, headers),
    }
}

/// An error answer: `{"error": {"code", "message"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, json_body(&body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub(crate) fn json_body(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

pub(crate) fn json_response(status: StatusCode, text: impl Into<Body>) -> Response {
    let mut response = Response::new(text.into());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The header that carries a request's id, both ways.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id: the caller's `x-request-id` when it is a sensible one, else a new one.
fn request_id(shared: &Shared, headers: &HeaderMap) -> String {
    if let Some(given) = headers.get(REQUEST_ID).and_then(|v| v.to_str().ok())
        && !given.is_empty()
        && given.len() <= 128
        && given.bytes().all(|b| b.is_ascii_graphic())
    {
        return given.to_owned();
    }
    let number = shared.next_request.fetch_add(1, Ordering::Relaxed);
    let mut digits = itoa::Buffer::new();
    let number = digits.format(number);
    let mut id = String::with_capacity(shared.instance.len() + 1 + number.len());
    id.push_str(&shared.instance);
    id.push('-');
    id.push_str(number);
    id
}

/// The bearer token the request gives, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    BearerToken::from_authorization(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

/// Whether the request gives the configured bearer token (never when none is configured:
/// then every caller is anonymous).
fn authenticated(shared: &Shared, headers: &HeaderMap) -> bool {
    match (&shared.token, bearer(headers)) {
        (Some(token), Some(given)) => token.matches(given),
        _ => false,
    }
}

/// Checks the bearer token, when one is configured; without one, refuses what a web page
/// could have sent (see [`DecisionServiceBuilder::allow_host`]).
pub(crate) fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    if shared.token.is_none() {
        return browser_safe(shared, headers);
    }
    if authenticated(shared, headers) {
        return Ok(());
    }
    let message = if bearer(headers).is_some() {
        "the bearer token is wrong"
    } else {
        "this service requires `Authorization: Bearer <token>`"
    };
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        message,
    ))
}

/// Refuses, for a service without a token, a request carrying `Origin` and one naming a
/// host that is neither a loopback name nor allowed (403).
fn browser_safe(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    edge::check_browser(
        headers.contains_key(header::ORIGIN),
        host,
        &shared.allowed_hosts,
    )
    .map_err(|refusal| match refusal {
        BrowserRefusal::Origin => ApiError::new(
            StatusCode::FORBIDDEN,
            "browser_request",
            "a request sent by a web page (it carries Origin) is refused by a service without a token; set --token-env",
        ),
        BrowserRefusal::Host(host) => ApiError::new(
            StatusCode::FORBIDDEN,
            "unknown_host",
            format!(
                "the request names the host {host:?}; a service without a token answers only requests naming a loopback host or one given with --allow-host"
            ),
        ),
    })
}

/// Refuses a body that is not declared JSON (415): a browser page can POST a "simple"
/// request (`text/plain`, a form, no type at all) to the service without asking first, but
/// not one with a JSON type.
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(edge::is_json_media_type);
    if json {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "the request body must be sent as `Content-Type: application/json`",
    ))
}

/// Runs an evaluation request under the service's guards: the token (401), a JSON content
/// type (415), a loaded set (503), a declared length within the limit (413), a slot (waiting
/// in the queue for one: 503 with `Retry-After`), then the body, read under the slot within
/// the body read time and the size limit (408, 413), then `work` on the body within what is
/// left of the deadline (503). The slot is taken before the body is read: at most
/// `max_concurrent` bodies are read and held at once, and a slow one holds its slot for the
/// body read time at most.
async fn guarded<F, W>(shared: &Arc<Shared>, headers: &HeaderMap, body: Body, work: W) -> Response
where
    W: FnOnce(Bytes) -> F,
    F: Future<Output = Result<Response, ApiError>>,
{
    if let Err(error) = authorize(shared, headers).and_then(|()| require_json(headers)) {
        return error.into_response();
    }
    if !shared.loaded.load(Ordering::Acquire) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "no policy set is loaded yet",
        )
        .retry_after(1)
        .into_response();
    }
    let mut now = Instant::now();
    let deadline = now + shared.limits.request_deadline;
    if let Err(error) = declared_length(shared, headers) {
        return error.into_response();
    }
    // A slot at once, or a place in the queue, or a refusal.
    let permit = match shared.slots.try_acquire() {
        Ok(permit) => permit,
        Err(_) => {
            if shared.waiting.fetch_add(1, Ordering::AcqRel) >= shared.limits.max_queued {
                shared.waiting.fetch_sub(1, Ordering::AcqRel);
                return overloaded("the queue of waiting requests is full");
            }
            let waited =
                tokio::time::timeout(shared.limits.queue_timeout, shared.slots.acquire()).await;
            shared.waiting.fetch_sub(1, Ordering::AcqRel);
            now = Instant::now();
            match waited {
                Ok(Ok(permit)) => permit,
                _ => return overloaded("no evaluation slot freed up in time"),
            }
        }
    };
    let read_by = deadline.min(now + shared.limits.body_read_timeout);
    let bytes = match read_body(shared, body, read_by).await {
        Ok(bytes) => bytes,
        Err(error) => return error.into_response(),
    };
    let answer = tokio::time::timeout_at(deadline.into(), work(bytes)).await;
    drop(permit);
    match answer {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.into_response(),
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded",
            format!(
                "the request took longer than its deadline ({} ms)",
                shared.limits.request_deadline.as_millis()
            ),
        )
        .into_response(),
    }
}

fn overloaded(message: &str) -> Response {
    tracing::warn!("refused: {message}");
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
        .retry_after(1)
        .into_response()
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is larger than {limit} bytes"),
    )
}

/// Refuses a declared length over the limit before the request waits for a slot.
fn declared_length(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let limit = shared.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large(limit));
    }
    Ok(())
}

/// Reads the whole body under the size limit by `read_by` (408 after it).
pub(crate) async fn read_body(
    shared: &Shared,
    body: Body,
    read_by: Instant,
) -> Result<Bytes, ApiError> {
    let limit = shared.limits.max_body_bytes;
    let read = async {
        let mut body = body;
        // A body in one frame is kept as it came; one in several is copied together.
        let mut first: Option<Bytes> = None;
        let mut joined = BytesMut::new();
        let mut length = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_body",
                    format!("the request body cannot be read: {error}"),
                )
            })?;
            if let Ok(data) = frame.into_data() {
                length += data.len();
                if length > limit {
                    return Err(too_large(limit));
                }
                match &first {
                    None => first = Some(data),
                    Some(first) => {
                        if joined.is_empty() {
                            joined.extend_from_slice(first);
                        }
                        joined.extend_from_slice(&data);
                    }
                }
            }
        }
        Ok(if joined.is_empty() {
            first.unwrap_or_default()
        } else {
            joined.freeze()
        })
    };
    match tokio::time::timeout_at(read_by.into(), read).await {
        Ok(read) => read,
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time",
        )),
    }
}

fn unknown_point(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_point",
        format!("`{name}` is not an interception point (input, tool_call, tool_result, output)"),
    )
}

/// `POST /v1/evaluate/{point}`.
async fn evaluate_point(
    shared: &Arc<Shared>,
    point: &str,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let Some(point) = InterceptionPoint::from_name(point) else {
        return unknown_point(point).into_response();
    };
    let engine = Arc::clone(&shared.engine);
    let metrics = Arc::clone(&shared.metrics);
    guarded(shared, headers, body, |bytes| async move {
        let context = outcome::read_context(point, &bytes).map_err(|error| match error {
            ContextError::Malformed(message) => {
                ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", message)
            }
            ContextError::Invalid(message) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_context", message)
            }
        })?;
        let started = Instant::now();
        // The answer is about the size of the context, with the decisions.
        let text = outcome::evaluate_to_text(&engine, &context, bytes.len() + 256).await;
        metrics.evaluation(started.elapsed());
        Ok(json_response(StatusCode::OK, text))
    })
    .await
}

/// The body of `POST /engine/evaluate`, its members kept as the JSON text they are (other
/// members are ignored): the context is then read straight into its point's type.
#[derive(serde::Deserialize)]
struct EngineRequest<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    policy_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    interception_point: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    context: Option<&'a RawValue>,
}

/// A member that is there, even as `null` (which `Option` would read as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    serde::Deserialize::deserialize(deserializer).map(Some)
}

/// `POST /engine/evaluate`: one policy of the loaded set.
async fn engine_evaluate(shared: &Arc<Shared>, headers: &HeaderMap, body: Body) -> Response {
    let engine = Arc::clone(&shared.engine);
    let metrics = Arc::clone(&shared.metrics);
    guarded(shared, headers, body, |bytes| async move {
        let invalid =
            |message: &str| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message);
        let request: EngineRequest<'_> = serde_json::from_slice(&bytes).map_err(|error| {
            match error.classify() {
                serde_json::error::Category::Data => invalid(&format!(
                    "the body must be an object with `policy_id`, `interception_point` and `context` ({error})"
                )),
                _ => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    format!("the request body is not JSON: {error}"),
                ),
            }
        })?;
        let text = |member: Option<&RawValue>| {
            member.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        };
        let Some(policy_id) = text(request.policy_id) else {
            return Err(invalid("`policy_id` must be a string"));
        };
        let point = match text(request.interception_point) {
            Some(name) => InterceptionPoint::from_name(&name).ok_or_else(|| unknown_point(&name))?,
            None => {
                return Err(invalid(
                    "`interception_point` must be `input`, `tool_call`, `tool_result` or `output`",
                ));
            }
        };
        let Some(context) = request.context else {
            return Err(invalid("`context` is missing"));
        };
        // Read straight into the point's context type, as `/v1/evaluate` reads its body.
        let context = outcome::read_context(point, context.get().as_bytes()).map_err(|error| {
            let (ContextError::Malformed(message) | ContextError::Invalid(message)) = error;
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_context", message)
        })?;
        let started = Instant::now();
        let decided = decide(&engine, &policy_id, &context).await;
        metrics.evaluation(started.elapsed());
        let text = portcullis_engine::json::to_string(&decided?).map_err(|error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "evaluation_error",
                format!("the decision cannot be written: {error}"),
            )
        })?;
        Ok(json_response(StatusCode::OK, text))
    })
    .await
}

/// Evaluates the first policy of the point with id `policy_id` through the engine (audited,
/// monitored, under its deadlines, `on_error` and the session store) and answers the decision
/// that took effect: the policy's own when enforced, `allow` when it was only monitored, or
/// skipped by `on_error: allow`, or escalated and granted; `deny` when it denied or its
/// escalation was refused; `escalate` while an approval is pending. A failure that fails the
/// call is a 500 whose message says why.
async fn decide(
    engine: &PolicyEngine,
    policy_id: &str,
    context: &Context,
) -> Result<PolicyDecision, ApiError> {
    let point = context.point();
    let evaluated = context.run(Only { engine, policy_id }).await;
    match evaluated {
        Some(Ok(decision)) => Ok(decision.unwrap_or_else(PolicyDecision::allow)),
        Some(Err(EngineError::Denied(denial))) => Ok(PolicyDecision::Deny {
            reason: denial.reason().map(str::to_owned),
            policy_id: (denial.policy_id() != policy_id).then(|| denial.policy_id().to_owned()),
        }),
        Some(Err(EngineError::ApprovalRequired(request))) => Ok(PolicyDecision::Escalate {
            reason: (!request.reasons.is_empty()).then(|| request.reasons.join("; ")),
            labels: Vec::new(),
        }),
        Some(Err(EngineError::Evaluation(failure))) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "evaluation_error",
            portcullis_engine::error::error_chain(&failure),
        )),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_policy",
            format!("the loaded set has no {point} policy `{policy_id}`"),
        )),
    }
}

/// Evaluates one policy of a context's point: the enforced decision of an evaluation that
/// proceeded (`None`: it took none that counts, so the call is allowed), or why it did not
/// proceed; `None` when the point has no policy `policy_id`.
struct Only<'a> {
    engine: &'a PolicyEngine,
    policy_id: &'a str,
}

impl ContextTask for Only<'_> {
    type Output = Option<Result<Option<PolicyDecision>, EngineError>>;

    async fn run<C: PolicyContext>(self, context: &C) -> Self::Output {
        let evaluated = self.engine.evaluate_only(self.policy_id, context).await?;
        Some(evaluated.map(|evaluation| {
            evaluation
                .decisions()
                .iter()
                .find(|entry| entry.enforced && !entry.decision.is_escalate())
                .map(|entry| entry.decision.clone())
        }))
    }
}

/// `GET /healthz`.
fn healthz() -> Response {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#)
}

/// `GET /readyz`: whether a set is loaded, to anyone; the last reload's outcome, time and
/// error only to a caller with the bearer token (a reload error names files and bundle URLs).
fn readyz(shared: &Shared, headers: &HeaderMap) -> Response {
    let loaded = shared.loaded.load(Ordering::Acquire);
    let status = if loaded {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if !authenticated(shared, headers) {
        return json_response(status, json_body(&json!({"ready": loaded})));
    }
    let last = shared
        .last_reload
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let last_reload = last.map(|last| {
        let at = last
            .at
            .duration_since(UNIX_EPOCH)
            .map(|since| since.as_secs())
            .unwrap_or(0);
        match last.status {
            ReloadStatus::Reloaded => json!({"outcome": "reloaded", "at_unix": at}),
            ReloadStatus::Failed(message) => {
                json!({"outcome": "failed", "at_unix": at, "message": message})
            }
        }
    });
    let body = json!({
        "ready": loaded,
        "policy_set_loaded": loaded,
        "last_reload": last_reload,
    });
    json_response(status, json_body(&body))
}

/// `GET /metrics`: with a bearer token configured, only to a caller with it (401 otherwise,
/// as the evaluations: the counters name every policy and how often it decided what, and
/// every reload's outcome); without one, to anyone (the service then listens on loopback,
/// unless told otherwise).
fn metrics(shared: &Shared, headers: &HeaderMap) -> Response {
    if let Err(error) = authorize(shared, headers) {
        return error.into_response();
    }
    let text = shared.metrics.render(shared.loaded.load(Ordering::Acquire));
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

fn not_found(request: &http::request::Parts) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route {}", request.uri.path()),
    )
    .into_response()
}

fn method_not_allowed(request: &http::request::Parts) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} is not allowed on {}",
            request.method,
            request.uri.path()
        ),
    )
    .into_response()
}
