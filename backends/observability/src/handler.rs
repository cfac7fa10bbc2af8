//! The audit handler: spans in, OTLP out, on a background thread.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;

use base64::Engine as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracerProvider;
use portcullis_engine::{AuditHandler, AuditRecord};
use portcullis_otel::DecisionSpan;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};

use crate::export::{ExportFailures, INGESTION_VERSION, INGESTION_VERSION_HEADER};
use crate::otlp::{OtlpClient, SpanExport, start_export};
use crate::queue::{self, SpanQueue};
use crate::{ObservabilityError, ObservabilityOptions};

/// The span attribute carrying `metadata.session_id`.
pub const SESSION_ID: &str = "session.id";
/// The span attribute carrying `metadata.agent_id`.
pub const USER_ID: &str = "user.id";

/// An audit handler that exports every decision as a trace to an LLM observability
/// platform (Langfuse-compatible) over OTLP/HTTP with protobuf bodies.
///
/// Each record becomes the span of the `otel` handler (`engine.policy.evaluate` with the
/// `engine.*` attributes and status) plus `session.id` (from `metadata.session_id`) and
/// `user.id` (from `metadata.agent_id`); empty ids are left out.
///
/// Records are queued to a worker thread that turns them into spans for a batching processor,
/// whose own thread posts them to
/// `{base_url}/api/public/otel/v1/traces` (HTTP Basic with the public key as user and the secret
/// key as password, and `x-langfuse-ingestion-version: 4`). The evaluation path only queues: it
/// never waits on the network, and an export failure never fails an evaluation. When the queue
/// is full new records are dropped (and the next flush reports how many).
///
/// Clones share one exporter. Call [`flush`](Self::flush) to export what is buffered and learn
/// whether exports failed; when the last clone is dropped the exporter is shut down, which
/// exports what is left (blocking the dropping thread up to the timeout).
#[derive(Clone)]
pub struct ObservabilityAuditHandler {
    inner: Arc<Inner>,
}

struct Inner {
    /// The evaluation path only copies the record into the queue: creating the span (ids,
    /// sampling, the SDK's span data) happens on the worker.
    queue: Arc<SpanQueue>,
    worker: Option<JoinHandle<()>>,
    provider: SdkTracerProvider,
    failures: Arc<ExportFailures>,
    endpoint: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The worker creates the spans still queued and stops.
        self.queue.close();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        // Exports what the batch processor still holds; the provider logs any failure.
        let _ = self.provider.shutdown();
    }
}

impl fmt::Debug for ObservabilityAuditHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObservabilityAuditHandler")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

impl ObservabilityAuditHandler {
    /// A handler exporting with `options`.
    ///
    /// Checks the keys and the base URL and builds the HTTP client and exporter; nothing is
    /// sent until spans are exported.
    ///
    /// ```
    /// use portcullis_observability::{ObservabilityAuditHandler, ObservabilityOptions};
    ///
    /// let handler = ObservabilityAuditHandler::new(
    ///     ObservabilityOptions::builder()
    ///         .public_key("pk-lf-1234")
    ///         .secret_key("sk-lf-5678")
    ///         .build(),
    /// )?;
    /// assert_eq!(handler.endpoint(), "https://cloud.langfuse.com/api/public/otel/v1/traces");
    ///
    /// let error = ObservabilityAuditHandler::new(ObservabilityOptions::builder().build()).unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "observability platform keys are missing: set public_key and secret_key"
    /// );
    /// # Ok::<(), portcullis_observability::ObservabilityError>(())
    /// ```
    pub fn new(options: ObservabilityOptions) -> Result<Self, ObservabilityError> {
        let (public_key, secret_key) = options.check_keys()?;
        check_base_url(options.base_url())?;
        let endpoint = options.endpoint();

        let client = OtlpClient::new(options.timeout())?
            .with_header(AUTHORIZATION, basic_authorization(public_key, secret_key)?)
            .with_header(
                HeaderName::from_static(INGESTION_VERSION_HEADER),
                HeaderValue::from_static(INGESTION_VERSION),
            );
        let SpanExport {
            provider,
            tracer,
            failures,
        } = start_export(client, &endpoint, options.timeout(), options.service_name())?;

        let queue = Arc::new(SpanQueue::new());
        let worker = queue::spawn_worker(Arc::clone(&queue), tracer).map_err(|error| {
            ObservabilityError::Setup {
                reason: format!("cannot start the span worker thread: {error}"),
            }
        })?;

        Ok(ObservabilityAuditHandler {
            inner: Arc::new(Inner {
                queue,
                worker: Some(worker),
                provider,
                failures,
                endpoint,
            }),
        })
    }

    /// A handler configured from the environment (see [`ObservabilityOptions::from_env`]):
    /// `OBS_PUBLIC_KEY` and `OBS_SECRET_KEY` (required), `OBS_BASE_URL` (default
    /// `https://cloud.langfuse.com`).
    pub fn from_env() -> Result<Self, ObservabilityError> {
        ObservabilityAuditHandler::new(ObservabilityOptions::from_env()?)
    }

    /// The URL spans are posted to.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Exports every span buffered so far and reports whether exports since the previous
    /// flush failed (including those the background thread made on its own schedule).
    ///
    /// The blocking work runs on a thread of its own, so this never blocks the runtime it is
    /// awaited on (a receiver served by that same runtime keeps running). It waits at most
    /// about five seconds for the export to finish.
    pub async fn flush(&self) -> Result<(), ObservabilityError> {
        let inner = Arc::clone(&self.inner);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("portcullis-observability-flush".into())
            .spawn(move || {
                let _ = sender.send(inner.flush_blocking());
            })
            .map_err(|error| ObservabilityError::Setup {
                reason: format!("cannot start a thread to flush: {error}"),
            })?;
        receiver.await.unwrap_or_else(|_| {
            Err(ObservabilityError::Export {
                endpoint: self.inner.endpoint.clone(),
                lost_spans: 0,
                reason: "the flush thread stopped before it finished".into(),
            })
        })
    }
}

impl Inner {
    fn flush_blocking(&self) -> Result<(), ObservabilityError> {
        // First every queued record becomes a span, then the batch processor exports.
        let worker_alive = self.queue.sync().recv().is_ok();
        let flushed = self.provider.force_flush();
        let dropped = self.queue.take_dropped();
        let failure = self.failures.take();
        if !worker_alive {
            return Err(ObservabilityError::Export {
                endpoint: self.endpoint.clone(),
                lost_spans: dropped,
                reason: "the span worker thread has stopped".into(),
            });
        }
        match (flushed, failure) {
            (_, Some((lost_spans, reason))) => Err(ObservabilityError::Export {
                endpoint: self.endpoint.clone(),
                lost_spans: lost_spans + dropped,
                reason,
            }),
            (Ok(()), None) if dropped > 0 => Err(ObservabilityError::Export {
                endpoint: self.endpoint.clone(),
                lost_spans: dropped,
                reason: format!(
                    "the queue was full ({} records): records came faster than they could be exported",
                    queue::CAPACITY
                ),
            }),
            (Err(error), None) => Err(ObservabilityError::Export {
                endpoint: self.endpoint.clone(),
                lost_spans: 0,
                reason: error.to_string(),
            }),
            (Ok(()), None) => Ok(()),
        }
    }
}

impl AuditHandler for ObservabilityAuditHandler {
    fn handle(&self, record: &AuditRecord<'_>) {
        let metadata = record.context.metadata();
        let mut span = DecisionSpan::from_record(record);
        if !metadata.session_id.is_empty() {
            span = span.with_attribute(KeyValue::new(SESSION_ID, metadata.session_id.clone()));
        }
        if !metadata.agent_id.is_empty() {
            span = span.with_attribute(KeyValue::new(USER_ID, metadata.agent_id.clone()));
        }
        // Never waits: a full queue drops the record, and the next flush reports it.
        self.inner.queue.push(span);
    }
}

/// The `Authorization` header of the platform's keys (HTTP Basic), marked sensitive.
fn basic_authorization(
    public_key: &str,
    secret_key: &str,
) -> Result<HeaderValue, ObservabilityError> {
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{public_key}:{secret_key}"));
    let mut authorization =
        HeaderValue::from_str(&format!("Basic {credentials}")).map_err(|error| {
            ObservabilityError::Setup {
                reason: format!("the keys do not make a valid Authorization header: {error}"),
            }
        })?;
    authorization.set_sensitive(true);
    Ok(authorization)
}

fn check_base_url(base_url: &str) -> Result<(), ObservabilityError> {
    let invalid = |reason: String| ObservabilityError::InvalidBaseUrl {
        url: base_url.to_owned(),
        reason,
    };
    let url = reqwest::Url::parse(base_url).map_err(|error| invalid(error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "the scheme is `{}`; use http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it has no host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "it has a query or fragment; give the base URL only".into(),
        ));
    }
    Ok(())
}
