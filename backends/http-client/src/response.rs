//! A 2xx answer, read whole: its body as bytes or as JSON.

use bytes::Bytes;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use url::Url;

use crate::error::{RemoteError, RemoteErrorKind};

/// A 2xx answer whose body was read whole, within the limit.
#[derive(Debug, Clone)]
pub struct RemoteResponse {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) status: StatusCode,
    pub(crate) content_type: Option<String>,
    pub(crate) body: Bytes,
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
