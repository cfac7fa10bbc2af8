//! The transport: a blocking HTTP client that authenticates every request, and an exporter
//! that remembers its failures until the next flush.

use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};

use crate::ObservabilityError;

/// The header telling the platform which ingestion version the spans follow.
pub(crate) const INGESTION_VERSION_HEADER: &str = "x-langfuse-ingestion-version";
/// Its value.
pub(crate) const INGESTION_VERSION: &str = "4";

/// A blocking reqwest client (rustls for `https`) that sets the platform's headers on every
/// request, after the OTLP exporter has added any from `OTEL_EXPORTER_OTLP_HEADERS`, so the
/// environment cannot replace the credentials.
#[derive(Debug)]
pub(crate) struct PlatformClient {
    client: reqwest::blocking::Client,
    authorization: HeaderValue,
    ingestion_version: HeaderValue,
    /// Where transport errors are noted: the OTLP exporter reduces them to "network error".
    failures: Arc<ExportFailures>,
}

impl PlatformClient {
    pub(crate) fn new(
        public_key: &str,
        secret_key: &str,
        timeout: Duration,
        failures: Arc<ExportFailures>,
    ) -> Result<Self, ObservabilityError> {
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{public_key}:{secret_key}"));
        let mut authorization =
            HeaderValue::from_str(&format!("Basic {credentials}")).map_err(|error| {
                ObservabilityError::Setup {
                    reason: format!("the keys do not make a valid Authorization header: {error}"),
                }
            })?;
        authorization.set_sensitive(true);

        // The blocking client runs a small runtime of its own; building it on a thread of its
        // own keeps it clear of any runtime the caller is in.
        let client = std::thread::Builder::new()
            .name("portcullis-observability-client".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
            })
            .map_err(|error| ObservabilityError::Setup {
                reason: format!("cannot start a thread to build the HTTP client: {error}"),
            })?
            .join()
            .map_err(|_| ObservabilityError::Setup {
                reason: "building the HTTP client panicked".into(),
            })?
            .map_err(|error| ObservabilityError::Setup {
                reason: format!("cannot build the HTTP client: {error}"),
            })?;

        Ok(PlatformClient {
            client,
            authorization,
            ingestion_version: HeaderValue::from_static(INGESTION_VERSION),
            failures,
        })
    }
}

#[async_trait]
impl HttpClient for PlatformClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // Blocking is right here: the batch processor calls this on its own thread.
        let result = self.send_blocking(request);
        if let Err(error) = &result {
            self.failures.note_transport_error(error.as_ref());
        }
        result
    }
}

impl PlatformClient {
    fn send_blocking(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        parts
            .headers
            .insert(AUTHORIZATION, self.authorization.clone());
        parts.headers.insert(
            HeaderName::from_static(INGESTION_VERSION_HEADER),
            self.ingestion_version.clone(),
        );
        let request =
            reqwest::blocking::Request::try_from(Request::from_parts(parts, body.to_vec()))?;
        let mut response = self.client.execute(request)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        response
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_end(&mut body)?;
        if body.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(
                format!("the response body is larger than {MAX_RESPONSE_BYTES} bytes").into(),
            );
        }
        let mut response = Response::builder().status(status).body(Bytes::from(body))?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// The largest response body read (an OTLP answer is a few bytes).
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// Failures seen since the last flush.
#[derive(Debug, Default)]
pub(crate) struct ExportFailures {
    lost_spans: AtomicU64,
    first: Mutex<Option<String>>,
    transport: Mutex<Option<String>>,
}

impl ExportFailures {
    fn note_transport_error(&self, error: &(dyn std::error::Error + 'static)) {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        *self
            .transport
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(text);
    }

    fn record(&self, spans: usize, mut reason: String) {
        let transport = self
            .transport
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(transport) = transport {
            reason.push_str(" (");
            reason.push_str(&transport);
            reason.push(')');
        }
        self.lost_spans
            .fetch_add(u64::try_from(spans).unwrap_or(u64::MAX), Ordering::Relaxed);
        let mut first = self
            .first
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        first.get_or_insert(reason);
    }

    /// Takes the failures recorded so far: `(lost spans, first reason)`.
    pub(crate) fn take(&self) -> Option<(u64, String)> {
        let mut first = self
            .first
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let reason = first.take()?;
        Some((self.lost_spans.swap(0, Ordering::Relaxed), reason))
    }
}

/// The OTLP exporter, recording each failed batch for [`flush`](crate::ObservabilityAuditHandler::flush).
#[derive(Debug)]
pub(crate) struct RecordingExporter {
    pub(crate) inner: opentelemetry_otlp::SpanExporter,
    pub(crate) failures: Arc<ExportFailures>,
}

impl SpanExporter for RecordingExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            self.failures.record(spans, error.to_string());
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
