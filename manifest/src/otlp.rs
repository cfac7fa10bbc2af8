//! `audit: { otlp: <collector> }`: audit records as spans, posted over OTLP/HTTP with
//! protobuf bodies by a batching processor on its own thread, with the client and the export
//! of `portcullis-observability` ([`portcullis_observability::otlp`]).

use std::time::Duration;

use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use portcullis_observability::ObservabilityError;
use portcullis_observability::otlp::{OtlpClient, SpanExport, start_export};

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The traces URL of a collector: `<base>/v1/traces`, unless the URL names that path itself.
pub(crate) fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Starts exporting to the collector at `endpoint`: the provider (what flushes and shuts
/// down), the tracer the audit handler creates spans with, and the traces URL.
pub(crate) fn start(
    endpoint: &str,
) -> Result<(SdkTracerProvider, SdkTracer, String), (String, String)> {
    let traces = traces_url(endpoint);
    let problem = |error: ObservabilityError| {
        let what = match error {
            ObservabilityError::Setup { reason } => reason,
            other => other.to_string(),
        };
        (
            format!("`audit.otlp`: cannot export spans to {traces}: {what}"),
            "the collector's OTLP/HTTP endpoint, for example http://localhost:4318".to_owned(),
        )
    };
    let client = OtlpClient::new(EXPORT_TIMEOUT).map_err(problem)?;
    let SpanExport {
        provider, tracer, ..
    } = start_export(client, &traces, EXPORT_TIMEOUT, "portcullis").map_err(problem)?;
    Ok((provider, tracer, traces))
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(
            traces_url("http://localhost:4318"),
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://localhost:4318/"),
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/otel/v1/traces"),
            "https://c.example/otel/v1/traces"
        );
    }
}
