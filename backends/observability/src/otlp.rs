//! The OTLP/HTTP span export, for this crate's handler and for any sink that posts spans to a
//! collector (the manifest's `audit.otlp`): [`OtlpClient`], a blocking HTTP client the batch
//! processor calls on its own thread, and [`start_export`], the exporter, processor and
//! tracer around it.

use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider};
use reqwest::header::{HeaderName, HeaderValue};

use crate::ObservabilityError;
use crate::export::{ExportFailures, RecordingExporter};

/// The largest response body read (an OTLP answer is a few bytes).
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// A blocking reqwest client (rustls for `https`) for an OTLP exporter: the batch processor
/// calls it on its own thread. It reads at most 4 MiB of an answer, sets its own headers on
/// every request after the exporter has added any from `OTEL_EXPORTER_OTLP_HEADERS` (so the
/// environment cannot replace them), and notes transport errors, which the exporter reduces to
/// "network error", for the failures [`start_export`] reports.
#[derive(Debug)]
pub struct OtlpClient {
    client: reqwest::blocking::Client,
    headers: Vec<(HeaderName, HeaderValue)>,
    failures: Arc<ExportFailures>,
}

impl OtlpClient {
    /// A client whose requests time out after `timeout`.
    ///
    /// # Errors
    /// [`ObservabilityError::Setup`] when the client cannot be built.
    pub fn new(timeout: Duration) -> Result<Self, ObservabilityError> {
        let setup = |reason: String| ObservabilityError::Setup { reason };
        // The blocking client runs a small runtime of its own; building it on a thread of its
        // own keeps it clear of any runtime the caller is in.
        let client = std::thread::Builder::new()
            .name("portcullis-otlp-client".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
            })
            .map_err(|error| {
                setup(format!(
                    "cannot start a thread to build the HTTP client: {error}"
                ))
            })?
            .join()
            .map_err(|_| setup("building the HTTP client panicked".into()))?
            .map_err(|error| setup(format!("cannot build the HTTP client: {error}")))?;
        Ok(OtlpClient {
            client,
            headers: Vec::new(),
            failures: Arc::new(ExportFailures::default()),
        })
    }

    /// The client, setting `name: value` on every request.
    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    fn send_blocking(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        for (name, value) in &self.headers {
            parts.headers.insert(name.clone(), value.clone());
        }
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

#[async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // Blocking is right here: the batch processor calls this on its own thread.
        let result = self.send_blocking(request);
        if let Err(error) = &result {
            self.failures.note_transport_error(error.as_ref());
        }
        result
    }
}

/// A running span export: the provider (what flushes and shuts the export down) and the
/// tracer spans are made with.
#[derive(Debug)]
pub struct SpanExport {
    /// Flushes and shuts down the export.
    pub provider: SdkTracerProvider,
    /// Makes the spans the export posts, under the `portcullis` instrumentation scope.
    pub tracer: SdkTracer,
    /// The batches that failed since the last look.
    pub(crate) failures: Arc<ExportFailures>,
}

/// Starts posting spans with `client` to `traces_url` (the full URL, used as given) over
/// OTLP/HTTP with protobuf bodies: a batching processor on a thread of its own, every span
/// sampled, each export bounded by `timeout`, the resource named `service_name`.
///
/// # Errors
/// [`ObservabilityError::Setup`] when the exporter cannot be built.
pub fn start_export(
    client: OtlpClient,
    traces_url: &str,
    timeout: Duration,
    service_name: &str,
) -> Result<SpanExport, ObservabilityError> {
    let failures = Arc::clone(&client.failures);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url)
        .with_timeout(timeout)
        .build()
        .map_err(|error| ObservabilityError::Setup {
            reason: error.to_string(),
        })?;
    let exporter = RecordingExporter {
        inner: exporter,
        failures: Arc::clone(&failures),
    };
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build();
    let tracer = provider.tracer_with_scope(
        InstrumentationScope::builder(portcullis_otel::INSTRUMENTATION_SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    );
    Ok(SpanExport {
        provider,
        tracer,
        failures,
    })
}
