//! What can go wrong: [`ClientError`] when options cannot make a client, [`RemoteError`] (of a
//! [`RemoteErrorKind`], with the service's own [`ServiceError`] when it sent one) when a
//! request fails.

use std::error::Error as StdError;
use std::fmt;

use portcullis_engine::BoxError;
use reqwest::{Method, StatusCode};
use url::Url;

/// How many bytes of a body an error quotes.
const EXCERPT_BYTES: usize = 200;

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
    pub(crate) fn parse(body: &[u8]) -> Option<ServiceError> {
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
    pub(crate) inner: Box<RemoteErrorInner>,
}

/// The parts of a [`RemoteError`].
#[derive(Debug)]
pub(crate) struct RemoteErrorInner {
    pub(crate) kind: RemoteErrorKind,
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) status: Option<StatusCode>,
    pub(crate) excerpt: Option<String>,
    pub(crate) service: Option<ServiceError>,
    pub(crate) detail: Option<String>,
    pub(crate) source: Option<BoxError>,
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

    pub(crate) fn with_status(mut self, status: StatusCode) -> RemoteError {
        self.inner.status = Some(status);
        self
    }

    pub(crate) fn with_excerpt(mut self, body: &[u8]) -> RemoteError {
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
        if let Some(excerpt) = &self.inner.excerpt
            && self.inner.service.is_none()
        {
            write!(f, " (body: {excerpt:?})")?;
        }
        Ok(())
    }
}

/// The transport's own error (the connection refused, the TLS failure, ...), when there is one.
impl StdError for RemoteError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

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
            ClientError::Backend(_) => f.write_str("cannot start the HTTP client"),
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
