//! `audit: { otlp: <collector> }`: audit records as spans, posted over OTLP/HTTP with
//! protobuf bodies by a batching processor on its own thread.

use std::io::Read as _;
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a collector (an OTLP answer is a few bytes).
const MAX_RESPONSE_BYTES: u64 = 1024 * 1024;

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
    let problem = |what: String| {
        (
            format!("`audit.otlp`: cannot export spans to {traces}: {what}"),
            "the collector's OTLP/HTTP endpoint, for example http://localhost:4318".to_owned(),
        )
    };
    let client = BlockingClient::new(EXPORT_TIMEOUT).map_err(problem)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| problem(error.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_resource(Resource::builder().with_service_name("portcullis").build())
        .build();
    let tracer = provider.tracer_with_scope(
        InstrumentationScope::builder(portcullis_otel::INSTRUMENTATION_SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    );
    Ok((provider, tracer, traces))
}

/// A blocking HTTP client (rustls for `https`): the batch processor calls it on its own
/// thread.
#[derive(Debug)]
struct BlockingClient {
    client: reqwest::blocking::Client,
}

impl BlockingClient {
    fn new(timeout: Duration) -> Result<Self, String> {
        // The blocking client runs a small runtime of its own; building it on a thread of its
        // own keeps it clear of any runtime the caller is in.
        let client = std::thread::Builder::new()
            .name("portcullis-otlp-client".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
            })
            .map_err(|error| format!("cannot start a thread: {error}"))?
            .join()
            .map_err(|_| "building the HTTP client failed".to_owned())?
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(BlockingClient { client })
    }
}

#[async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
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
            return Err(format!(
                "the collector's answer is larger than {MAX_RESPONSE_BYTES} bytes"
            )
            .into());
        }
        let mut response = Response::builder().status(status).body(Bytes::from(body))?;
        *response.headers_mut() = headers;
        Ok(response)
    }
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
