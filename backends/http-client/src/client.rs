//! The client of one service: requests with a time-out, bodies read under a cap.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use url::Url;

use crate::error::{RemoteError, RemoteErrorKind, ServiceError};
use crate::response::RemoteResponse;

/// A client for one remote policy service, on a shared connection pool; cheap to clone.
///
/// Built by [`ClientOptions::connect`](crate::ClientOptions::connect).
#[derive(Clone)]
pub struct RemoteClient {
    pub(crate) inner: Arc<ClientInner>,
}

/// What the clones of one client share.
pub(crate) struct ClientInner {
    pub(crate) http: reqwest::Client,
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    pub(crate) base_url: Url,
    pub(crate) timeout: Duration,
    pub(crate) max_body_bytes: usize,
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
        let mut written = Vec::with_capacity(256);
        let body = portcullis_engine::json::to_writer(&mut written, body).map(|()| written);
        let body = body.map_err(|error| {
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
