//! The handler built from the global tracer provider.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use opentelemetry::global;
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use portcullis_otel::{OtelAuditHandler, SPAN_NAME, attributes};

// The only test of this binary: it owns the global provider.
#[tokio::test]
async fn global_handler_exports_through_the_global_provider() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());

    let seen = Arc::new(Mutex::new(Vec::new()));
    let engine = support::every_decision(support::noting(
        OtelAuditHandler::global(),
        Arc::clone(&seen),
    ));
    let records = support::run_every_decision(&engine).await;

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), records);
    let seen = seen.lock().unwrap();
    for (span, record) in spans.iter().zip(seen.iter()) {
        assert_eq!(span.name, SPAN_NAME);
        assert_eq!(span.parent_span_id, SpanId::INVALID);
        assert_eq!(span.start_time, record.timestamp);
        assert_eq!(span.end_time, record.timestamp);
        assert_eq!(span.instrumentation_scope.name(), "portcullis");
        assert_eq!(
            span.instrumentation_scope.version(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        let decision = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == attributes::DECISION)
            .map(|kv| kv.value.as_str().into_owned());
        assert_eq!(decision.as_deref(), Some(record.decision));
        let failed = matches!(record.decision, "deny" | "evaluation_error");
        assert_eq!(
            matches!(span.status, Status::Error { .. }),
            failed,
            "{}",
            record.policy_id
        );
        assert_eq!(span.status == Status::Ok, !failed, "{}", record.policy_id);
    }
    provider.shutdown().unwrap();
}
