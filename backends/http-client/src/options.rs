//! Where a service is and how to talk to it: [`ClientOptions`], which own the connection pool.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::client::{ClientInner, RemoteClient};
use crate::error::ClientError;

/// How long one request may take, from connecting to the last byte of the body, unless
/// [`ClientOptions::timeout`] says otherwise: 5 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest response body read, unless [`ClientOptions::max_body_bytes`] says otherwise:
/// 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How many requests one connection pool has in flight at most, unless
/// [`ClientOptions::max_connections`] says otherwise: 64. Further requests wait for a free slot
/// (within their time-out), so a burst of evaluations keeps at most this many requests open at
/// the service (a connection on its way back to the pool can make a new one open meanwhile).
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

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
/// use portcullis_http_client::ClientOptions;
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
/// # Ok::<(), portcullis_http_client::ClientError>(())
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
    /// request still running then fails with [`RemoteErrorKind::TimedOut`](crate::RemoteErrorKind::TimedOut).
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

    /// The largest response body read; a longer one fails with [`RemoteErrorKind::TooLarge`](crate::RemoteErrorKind::TooLarge)
    /// as soon as the limit is passed, without reading the rest.
    pub fn max_body_bytes(mut self, max_body_bytes: usize) -> ClientOptions {
        self.max_body_bytes = max_body_bytes;
        self.pool = Arc::default();
        self
    }

    /// How many requests the options' pool has in flight at most (at least 1); further
    /// requests wait for one to finish, and the wait counts against their time-out. A burst of
    /// concurrent evaluations thus has at most this many requests open at the service. Finished
    /// connections are reused, though one still on its way back to the pool when the next
    /// request starts can make that request open a new one.
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
