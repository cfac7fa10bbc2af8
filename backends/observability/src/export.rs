//! The platform's ingestion header, and an exporter that remembers its failures until the next
//! flush.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// The header telling the platform which ingestion version the spans follow.
pub(crate) const INGESTION_VERSION_HEADER: &str = "x-langfuse-ingestion-version";
/// Its value.
pub(crate) const INGESTION_VERSION: &str = "4";

/// Failures seen since the last flush.
#[derive(Debug, Default)]
pub(crate) struct ExportFailures {
    lost_spans: AtomicU64,
    first: Mutex<Option<String>>,
    transport: Mutex<Option<String>>,
}

impl ExportFailures {
    pub(crate) fn note_transport_error(&self, error: &(dyn std::error::Error + 'static)) {
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
