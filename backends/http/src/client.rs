//! The HTTP client both remote backends use: options, one pooled connection pool per options
//! value, a time-out on every request, a cap on response bodies enforced while reading them, and
//! one error type that says what went wrong with which request.
//!
//! The policies of this crate and of `portcullis-rego-rest` build on it; an application only
//! meets it as [`ClientOptions`] (re-exported as `HttpClientOptions` and
//! `RegoServerClientOptions`) and, when something fails, as [`RemoteError`] in the cause of a
//! `PolicyEvaluationError`.

use std::error::Error as StdError;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use portcullis_engine::BoxError;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};

/// HTTP request methods (from the `http` crate), as [`RemoteError::new`] takes them.
pub use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

/// How long one request may take, from connecting to the last byte of the body, unless
/// [`ClientOptions::timeout`] says otherwise: 5 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest response body read, unless [`ClientOptions::max_body_bytes`] says otherwise:
/// 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How many requests one connection pool has in flight at most, unless
/// [`ClientOptions::max_connections`] says otherwise: 64. Further requests wait for a free slot
/// (within their time-out), so a burst of evaluations never opens more connections than this.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// How many bytes of a body an error quotes.
const EXCERPT_BYTES: usize = 200;

/// Where a remote policy service is and how to talk to it.
///
/// Setters consume and return the options, so they chain. The options own one connection pool
/// (a `reqwest::Client`), made when the first client or policy is built from them: every policy
/// built from the same options value, or from a clone of it, shares that pool, so keep one
/// options value per service and clone it. A setter called afterwards gives the options a pool
/// of their own.
///
/// Requests use HTTP/1.1 with keep-alive, TLS by rustls (no system OpenSSL; certificates are
/// checked against the operating system's roots and the Mozilla roots), honour the
/// `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` environment variables, and do not follow redirects (a
/// `3xx` is an error that names the `Location`, so credentials never travel to another URL).
///
/// ```
/// use std::time::Duration;
/// use portcullis_http::client::ClientOptions;
///
/// let options = ClientOptions::new("https://policies.internal:8181")
///     .timeout(Duration::from_millis(250))
///     .bearer_token("s3cr3t")
///     .header("x-tenant", "acme")
///     .max_body_bytes(64 * 1024);
/// assert_eq!(options.base_url(), "https://policies.internal:8181");
/// let client = options.connect()?;
/// assert_eq!(client.base_url().as_str(), "https://policies.internal:8181/");
///
/// // A base URL that cannot work fails when the client is built, not at the first request.
/// let error = ClientOptions::new("policies.internal:8181").connect().unwrap_err();
/// assert!(error.to_string().contains("policies.internal:8181"));
/// # Ok::<(), portcullis_http::client::ClientError>(())
/// ```
#[derive(Clone)]
pub struct ClientOptions {
    base_url: String,
    timeout: Duration,
    headers: Vec<(String, String)>,
    max_body_bytes: usize,
    max_connections: usize,
    pool: Arc<OnceLock<SharedPool>>,
}

/// The connection pool of one options value, and the slots that bound its requests in flight.
#[derive(Clone)]
struct SharedPool {
    http: reqwest::Client,
    slots: Arc<tokio::sync::Semaphore>,
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may be credentials: show the names only.
        f.debug_struct("ClientOptions")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl ClientOptions {
    /// Options for the service at `base_url` (`http://` or `https://`, with an optional path
    /// prefix), with a time-out of [`DEFAULT_TIMEOUT`], no extra headers and bodies capped at
    /// [`DEFAULT_MAX_BODY_BYTES`]. The URL is checked by [`connect`](Self::connect), which every
    /// policy constructor calls.
    pub fn new(base_url: impl Into<String>) -> ClientOptions {
        ClientOptions {
            base_url: base_url.into(),
            timeout: DEFAULT_TIMEOUT,
            headers: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            pool: Arc::default(),
        }
    }

    /// How long one request may take, from connecting until the last byte of the answer. A
    /// request still running then fails with [`RemoteErrorKind::TimedOut`].
    pub fn timeout(mut self, timeout: Duration) -> ClientOptions {
        self.timeout = timeout;
        self.pool = Arc::default();
        self
    }

    /// Sends header `name: value` with every request (checked by [`connect`](Self::connect)).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ClientOptions {
        self.headers.push((name.into(), value.into()));
        self.pool = Arc::default();
        self
    }

    /// Sends `Authorization: Bearer {token}` with every request, as OPA's token authentication
    /// expects. The value is marked sensitive: it is never shown in debug output.
    pub fn bearer_token(self, token: impl AsRef<str>) -> ClientOptions {
        let value = format!("Bearer {}", token.as_ref());
        self.header(header::AUTHORIZATION.as_str(), value)
    }

    /// The largest response body read; a longer one fails with [`RemoteErrorKind::TooLarge`]
    /// as soon as the limit is passed, without reading the rest.
    pub fn max_body_bytes(mut self, max_body_bytes: usize) -> ClientOptions {
        self.max_body_bytes = max_body_bytes;
        self.pool = Arc::default();
        self
    }

    /// How many requests the options' pool has in flight at most (at least 1); further
    /// requests wait for one to finish, and the wait counts against their time-out. A burst of
    /// concurrent evaluations thus opens at most this many connections to the service.
    pub fn max_connections(mut self, max_connections: usize) -> ClientOptions {
        self.max_connections = max_connections.max(1);
        self.pool = Arc::default();
        self
    }

    /// The most requests in flight at once.
    pub fn connection_limit(&self) -> usize {
        self.max_connections
    }

    /// The base URL, as given.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The request time-out.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// The response body cap, in bytes.
    pub fn body_limit(&self) -> usize {
        self.max_body_bytes
    }

    /// Checks the options and returns a client on the options' connection pool (made now if
    /// this is the first client). Fails when the base URL is not an absolute `http`/`https` URL
    /// without query or fragment, when a header name or value is invalid, or when the TLS
    /// backend cannot start.
    pub fn connect(&self) -> Result<RemoteClient, ClientError> {
        let base_url = parse_base_url(&self.base_url)?;
        let pool = match self.pool.get() {
            Some(pool) => pool.clone(),
            None => {
                let built = SharedPool {
                    http: self.build_pool()?,
                    slots: Arc::new(tokio::sync::Semaphore::new(self.max_connections)),
                };
                // Two threads may race here; both pools work and the first one set is kept.
                self.pool.get_or_init(|| built).clone()
            }
        };
        Ok(RemoteClient {
            inner: Arc::new(ClientInner {
                http: pool.http,
                slots: pool.slots,
                base_url,
                timeout: self.timeout,
                max_body_bytes: self.max_body_bytes,
            }),
        })
    }

    fn build_pool(&self) -> Result<reqwest::Client, ClientError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ClientError::InvalidHeader {
                    name: name.clone(),
                    problem: "not a valid header name".into(),
                }
            })?;
            let mut header_value =
                HeaderValue::from_str(value).map_err(|_| ClientError::InvalidHeader {
                    name: name.clone(),
                    problem: "the value holds characters a header cannot carry (control characters or non-ASCII)".into(),
                })?;
            if header_name == header::AUTHORIZATION
                || header_name == header::PROXY_AUTHORIZATION
                || header_name == header::COOKIE
            {
                header_value.set_sensitive(true);
            }
            headers.append(header_name, header_value);
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("portcullis/", env!("CARGO_PKG_VERSION")))
            .timeout(self.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .map_err(|error| ClientError::Backend(Box::new(error)))
    }
}

fn parse_base_url(text: &str) -> Result<Url, ClientError> {
    let invalid = |problem: String| ClientError::InvalidBaseUrl {
        url: text.to_owned(),
        problem,
    };
    let mut url = Url::parse(text.trim()).map_err(|error| {
        invalid(format!(
            "{error} (expected an absolute URL such as http://localhost:8181)"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "the scheme is {:?}; only http and https are supported",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it has no host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "it has a query or a fragment; give the service's base URL only".into(),
        ));
    }
    // Paths are joined under the base: make sure it ends with exactly one slash.
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// A client for one remote policy service, on a shared connection pool; cheap to clone.
///
/// Built by [`ClientOptions::connect`].
#[derive(Clone)]
pub struct RemoteClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    http: reqwest::Client,
    slots: Arc<tokio::sync::Semaphore>,
    base_url: Url,
    timeout: Duration,
    max_body_bytes: usize,
}

impl fmt::Debug for RemoteClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteClient")
            .field("base_url", &self.inner.base_url.as_str())
            .field("timeout", &self.inner.timeout)
            .field("max_body_bytes", &self.inner.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl RemoteClient {
    /// The base URL, normalised to end with `/`.
    pub fn base_url(&self) -> &Url {
        &self.inner.base_url
    }

    /// The URL of `segments` under the base URL, each segment percent-encoded
    /// (`["v1", "data", "a b"]` → `{base}/v1/data/a%20b`).
    pub fn url<'a>(&self, segments: impl IntoIterator<Item = &'a str>) -> Url {
        let mut url = self.inner.base_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// `POST url` with `body` as JSON. Returns the answer when its status is 2xx and its body
    /// was read within the limits; every other outcome is a [`RemoteError`].
    pub async fn post_json(
        &self,
        url: &Url,
        body: &impl Serialize,
    ) -> Result<RemoteResponse, RemoteError> {
        let body = serde_json::to_vec(body).map_err(|error| {
            RemoteError::new(RemoteErrorKind::InvalidRequest, &Method::POST, url)
                .with_detail(format!("the request body cannot be serialized: {error}"))
        })?;
        self.send(Method::POST, url, "application/json", body).await
    }

    /// `PUT url` with `body` as `content_type`. Returns the answer when its status is 2xx and
    /// its body was read within the limits; every other outcome is a [`RemoteError`].
    pub async fn put(
        &self,
        url: &Url,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<RemoteResponse, RemoteError> {
        self.send(Method::PUT, url, content_type, body.into()).await
    }

    /// `DELETE url`. Returns the answer when its status is 2xx and its body was read within the
    /// limits; every other outcome is a [`RemoteError`].
    pub async fn delete(&self, url: &Url) -> Result<RemoteResponse, RemoteError> {
        self.send(Method::DELETE, url, "application/json", Vec::new())
            .await
    }

    async fn send(
        &self,
        method: Method,
        url: &Url,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<RemoteResponse, RemoteError> {
        let fail = |kind| RemoteError::new(kind, &method, url);
        // Wait for a free slot of the pool; the wait counts against the time-out.
        let started = Instant::now();
        let timeout = self.inner.timeout;
        let _slot = match tokio::time::timeout(timeout, self.inner.slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            // The semaphore is never closed; report it as a failed transport all the same.
            Ok(Err(_)) => {
                return Err(
                    fail(RemoteErrorKind::Transport).with_detail("the connection pool is closed")
                );
            }
            Err(_) => {
                return Err(fail(RemoteErrorKind::TimedOut).with_detail(format!(
                    "no connection of the pool was free within the time-out of {timeout:?}"
                )));
            }
        };
        let mut request = self
            .inner
            .http
            .request(method.clone(), url.clone())
            .timeout(timeout.saturating_sub(started.elapsed()));
        if !body.is_empty() {
            request = request
                .header(header::CONTENT_TYPE, content_type)
                .body(body);
        }
        request = request.header(header::ACCEPT, "application/json");
        let mut response = request
            .send()
            .await
            .map_err(|error| self.transport_error(fail, error, None))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);

        // Read the body, never holding more than the limit.
        let limit = self.inner.max_body_bytes;
        let mut body = Vec::new();
        if let Some(announced) = response.content_length()
            && announced > limit as u64
            && status.is_success()
        {
            let first = response.chunk().await.ok().flatten().unwrap_or_default();
            return Err(fail(RemoteErrorKind::TooLarge)
                .with_status(status)
                .with_excerpt(&first)
                .with_detail(format!(
                    "the answer announces {announced} bytes, more than the limit of {limit} bytes"
                )));
        }
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        let room = limit - body.len();
                        body.extend_from_slice(&chunk[..room]);
                        if !status.is_success() {
                            // The status says what matters; the prefix is enough to quote.
                            break;
                        }
                        return Err(fail(RemoteErrorKind::TooLarge)
                            .with_status(status)
                            .with_excerpt(&body)
                            .with_detail(format!(
                                "the body is longer than the limit of {limit} bytes"
                            )));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(error) => {
                    return Err(self.transport_error(fail, error, Some((status, &body))));
                }
            }
        }

        if !status.is_success() {
            let mut error = fail(RemoteErrorKind::Status)
                .with_status(status)
                .with_excerpt(&body);
            error.inner.service = ServiceError::parse(&body);
            if status.is_redirection() {
                error.inner.detail = Some(match location {
                    Some(location) => {
                        format!("redirected to {location:?}; redirects are not followed")
                    }
                    None => "redirected; redirects are not followed".to_owned(),
                });
            }
            return Err(error);
        }
        Ok(RemoteResponse {
            method,
            url: url.clone(),
            status,
            content_type,
            body: Bytes::from(body),
        })
    }

    fn transport_error(
        &self,
        fail: impl Fn(RemoteErrorKind) -> RemoteError,
        error: reqwest::Error,
        answer: Option<(StatusCode, &[u8])>,
    ) -> RemoteError {
        let kind = if error.is_timeout() {
            RemoteErrorKind::TimedOut
        } else if error.is_connect() {
            RemoteErrorKind::Connect
        } else if answer.is_some() {
            RemoteErrorKind::Body
        } else {
            RemoteErrorKind::Transport
        };
        let mut remote = fail(kind);
        if kind == RemoteErrorKind::TimedOut {
            remote.inner.detail = Some(format!(
                "no complete answer within the time-out of {:?}",
                self.inner.timeout
            ));
        }
        if let Some((status, body)) = answer {
            remote = remote.with_status(status).with_excerpt(body);
        }
        remote.inner.source = Some(Box::new(error.without_url()));
        remote
    }
}

/// A 2xx answer whose body was read whole, within the limit.
#[derive(Debug, Clone)]
pub struct RemoteResponse {
    method: Method,
    url: Url,
    status: StatusCode,
    content_type: Option<String>,
    body: Bytes,
}

impl RemoteResponse {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status.as_u16()
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body parsed as JSON into `T`. Fails with [`RemoteErrorKind::ContentType`] when the
    /// answer declares a content type that is not JSON (`application/json` or `*/*+json`), and
    /// with [`RemoteErrorKind::Shape`] when the body is not JSON of that shape.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, RemoteError> {
        if let Some(content_type) = &self.content_type
            && !is_json(content_type)
        {
            return Err(self
                .error(RemoteErrorKind::ContentType)
                .with_detail(format!(
                    "the answer's Content-Type is {content_type:?}, expected application/json"
                )));
        }
        self.json_ignoring_content_type()
    }

    /// The body parsed as JSON into `T`, whatever content type the answer declares (or none),
    /// as a client that reads the body as JSON whatever the header says. Fails with
    /// [`RemoteErrorKind::Shape`] when the body is not JSON of that shape; the message then
    /// names a declared content type that is not JSON.
    pub fn json_ignoring_content_type<T: DeserializeOwned>(&self) -> Result<T, RemoteError> {
        serde_json::from_slice(&self.body).map_err(|error| {
            let mut detail = if self.body.is_empty() {
                "the body is empty, expected JSON".to_owned()
            } else {
                format!("the body is not the JSON expected: {error}")
            };
            if let Some(content_type) = &self.content_type
                && !is_json(content_type)
            {
                detail.push_str(&format!(" (declared Content-Type {content_type:?})"));
            }
            self.error(RemoteErrorKind::Shape).with_detail(detail)
        })
    }

    /// The content type the answer declares, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// An error about this answer (its request, status and an excerpt of its body), for a
    /// caller that finds the body unusable: `detail` says why.
    pub fn shape_error(&self, detail: impl Into<String>) -> RemoteError {
        self.error(RemoteErrorKind::Shape)
            .with_detail(detail.into())
    }

    fn error(&self, kind: RemoteErrorKind) -> RemoteError {
        RemoteError::new(kind, &self.method, &self.url)
            .with_status(self.status)
            .with_excerpt(&self.body)
    }
}

/// Whether a `Content-Type` value names JSON (`application/json` or `*/*+json`).
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// What kind of failure a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteErrorKind {
    /// The connection could not be made (refused, unreachable, name not resolved, TLS failed).
    Connect,
    /// The request, with the whole answer, took longer than the time-out.
    TimedOut,
    /// The connection failed after the request was sent and before an answer began.
    Transport,
    /// The answer's status is not 2xx (a redirect included).
    Status,
    /// The body could not be read to its end (connection cut, malformed framing).
    Body,
    /// The body is longer than the cap.
    TooLarge,
    /// The answer declares a content type that is not JSON.
    ContentType,
    /// The body is not of the expected shape (not JSON, not a decision, no result).
    Shape,
    /// The request could not be made from what was given (an empty policy id, for instance).
    InvalidRequest,
}

/// The error body a policy service sent with a non-2xx status, when it is OPA's shape:
/// `{"code": .., "message": .., "errors": [{"code": .., "message": .., "location": ..}]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    /// The error code, such as `invalid_parameter`.
    pub code: String,
    /// The message.
    pub message: String,
    /// The detailed errors, one line each (`code: message (file:row:col)`), as OPA lists
    /// compilation errors.
    pub details: Vec<String>,
}

impl ServiceError {
    fn parse(body: &[u8]) -> Option<ServiceError> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let text = |value: &serde_json::Value, key: &str| {
            value
                .get(key)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let code = text(&value, "code");
        let message = text(&value, "message");
        if code.is_none() && message.is_none() {
            return None;
        }
        let details = value
            .get("errors")
            .and_then(serde_json::Value::as_array)
            .map(|errors| {
                errors
                    .iter()
                    .map(|error| {
                        let mut line = match (text(error, "code"), text(error, "message")) {
                            (Some(code), Some(message)) => format!("{code}: {message}"),
                            (code, message) => code.or(message).unwrap_or_default(),
                        };
                        if let Some(location) = error.get("location") {
                            let file = text(location, "file").unwrap_or_default();
                            let row = location.get("row").and_then(serde_json::Value::as_u64);
                            let col = location.get("col").and_then(serde_json::Value::as_u64);
                            match (row, col) {
                                (Some(row), Some(col)) => {
                                    line.push_str(&format!(" ({file}:{row}:{col})"));
                                }
                                _ if !file.is_empty() => line.push_str(&format!(" ({file})")),
                                _ => {}
                            }
                        }
                        line
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(ServiceError {
            code: code.unwrap_or_default(),
            message: message.unwrap_or_default(),
            details,
        })
    }
}

/// A request to a remote policy service that failed: which request, what kind of failure, the
/// status and a short excerpt of the body when there was an answer, and the service's own error
/// (`code`, `message`) when it sent one.
///
/// A policy returns it as its evaluation error; the engine wraps it in a
/// `PolicyEvaluationError` (reach it with `source()` and `downcast_ref::<RemoteError>()`).
#[derive(Debug)]
pub struct RemoteError {
    // Boxed: errors travel through `Result`s on the hot path, which stay small this way.
    inner: Box<RemoteErrorInner>,
}

#[derive(Debug)]
struct RemoteErrorInner {
    kind: RemoteErrorKind,
    method: Method,
    url: String,
    status: Option<StatusCode>,
    excerpt: Option<String>,
    service: Option<ServiceError>,
    detail: Option<String>,
    source: Option<BoxError>,
}

impl RemoteError {
    /// An error of `kind` about `method url`, without an answer. Backends use this, and the
    /// `with_*` methods, to describe failures of their own.
    pub fn new(kind: RemoteErrorKind, method: &Method, url: &Url) -> RemoteError {
        let mut shown = url.clone();
        // Never print credentials embedded in the URL.
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        RemoteError {
            inner: Box::new(RemoteErrorInner {
                kind,
                method: method.clone(),
                url: shown.into(),
                status: None,
                excerpt: None,
                service: None,
                detail: None,
                source: None,
            }),
        }
    }

    /// Adds a sentence saying what went wrong.
    pub fn with_detail(mut self, detail: impl Into<String>) -> RemoteError {
        self.inner.detail = Some(detail.into());
        self
    }

    fn with_status(mut self, status: StatusCode) -> RemoteError {
        self.inner.status = Some(status);
        self
    }

    fn with_excerpt(mut self, body: &[u8]) -> RemoteError {
        self.inner.excerpt = (!body.is_empty()).then(|| excerpt(body));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> RemoteErrorKind {
        self.inner.kind
    }

    /// The HTTP status of the answer, when one came.
    pub fn status(&self) -> Option<u16> {
        self.inner.status.map(|status| status.as_u16())
    }

    /// The start of the answer's body (at most 200 bytes, as text), when there was one.
    pub fn body_excerpt(&self) -> Option<&str> {
        self.inner.excerpt.as_deref()
    }

    /// The service's own error, when the body of a non-2xx answer was shaped
    /// `{"code": .., "message": ..}` (as OPA sends).
    pub fn service_error(&self) -> Option<&ServiceError> {
        self.inner.service.as_ref()
    }

    /// The URL requested (without credentials).
    pub fn url(&self) -> &str {
        &self.inner.url
    }
}

fn excerpt(body: &[u8]) -> String {
    let cut = body.len().min(EXCERPT_BYTES);
    let mut text = String::from_utf8_lossy(&body[..cut]).into_owned();
    if cut < body.len() {
        // A multi-byte character cut in two shows as one replacement character; fine here.
        text.push('…');
    }
    text
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.inner.method, self.inner.url)?;
        let what = match self.inner.kind {
            RemoteErrorKind::Connect => "cannot connect",
            RemoteErrorKind::TimedOut => "timed out",
            RemoteErrorKind::Transport => "the connection failed before an answer",
            RemoteErrorKind::Status => "",
            RemoteErrorKind::Body => "the body could not be read",
            RemoteErrorKind::TooLarge => "the body is too large",
            RemoteErrorKind::ContentType => "the answer is not JSON",
            RemoteErrorKind::Shape => "unexpected answer",
            RemoteErrorKind::InvalidRequest => "invalid request",
        };
        if let Some(status) = self.inner.status {
            write!(f, ": HTTP {status}")?;
        }
        if !what.is_empty() {
            write!(f, ": {what}")?;
        }
        if let Some(service) = &self.inner.service {
            match (service.code.is_empty(), service.message.is_empty()) {
                (false, false) => write!(f, ": {}: {}", service.code, service.message)?,
                (false, true) => write!(f, ": {}", service.code)?,
                _ => write!(f, ": {}", service.message)?,
            }
            for detail in service.details.iter().take(5) {
                write!(f, "; {detail}")?;
            }
        }
        if let Some(detail) = &self.inner.detail {
            write!(f, ": {detail}")?;
        }
        if let Some(source) = &self.inner.source {
            write!(f, ": {source}")?;
            let mut cause = source.source();
            while let Some(inner) = cause {
                write!(f, ": {inner}")?;
                cause = inner.source();
            }
        }
        if let Some(excerpt) = &self.inner.excerpt
            && self.inner.service.is_none()
        {
            write!(f, " (body: {excerpt:?})")?;
        }
        Ok(())
    }
}

impl StdError for RemoteError {}

/// Why a client or policy could not be built from its options.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL is not usable.
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// An extra header cannot be sent.
    InvalidHeader {
        /// The header's name as given.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A path given to a backend (a package path, a policy id) is not usable.
    InvalidPath {
        /// What the path names (`package path`, `policy id`).
        what: &'static str,
        /// The path as given.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The HTTP client (its TLS backend) could not be started.
    Backend(BoxError),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::InvalidBaseUrl { url, problem } => {
                write!(f, "invalid base URL {url:?}: {problem}")
            }
            ClientError::InvalidHeader { name, problem } => {
                write!(f, "invalid header {name:?}: {problem}")
            }
            ClientError::InvalidPath {
                what,
                path,
                problem,
            } => write!(f, "invalid {what} {path:?}: {problem}"),
            ClientError::Backend(error) => write!(f, "cannot start the HTTP client: {error}"),
        }
    }
}

impl StdError for ClientError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            ClientError::Backend(error) => Some(&**error),
            _ => None,
        }
    }
}
