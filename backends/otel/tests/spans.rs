//! The handler with a given tracer: one root span per record, with its attributes, status and
//! timestamps, exported through the SDK's in-memory exporter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use opentelemetry::trace::{
    SpanId, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use portcullis_engine::AuditRecord;
use portcullis_otel::{OtelAuditHandler, SPAN_NAME, attributes};

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn string(span: &SpanData, key: &str) -> Option<String> {
    attribute(span, key).map(|value| match value {
        Value::String(text) => text.as_str().to_owned(),
        other => panic!("{key} is not a string: {other:?}"),
    })
}

#[tokio::test]
async fn every_record_becomes_a_root_span_with_attributes_status_and_timestamps() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("test");

    // Every record is handled while an application span is current: the decision spans must
    // not become its children.
    let current_was_active = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let current_was_active = Arc::clone(&current_was_active);
        let inner = support::noting(
            OtelAuditHandler::new(provider.tracer("portcullis")),
            Arc::clone(&seen),
        );
        move |record: &AuditRecord<'_>| {
            current_was_active
                .lock()
                .unwrap()
                .push(Context::current().span().span_context().is_valid());
            portcullis_engine::AuditHandler::handle(&inner, record);
        }
    };
    let engine = support::every_decision(handler);

    let application = tracer.start("application request");
    let application_context = Context::current_with_span(application);
    let application_span = application_context.span().span_context().clone();
    {
        let _guard = application_context.clone().attach();
        let records = support::run_every_decision(&engine).await;
        assert_eq!(seen.lock().unwrap().len(), records);
    }
    application_context.span().end();
    assert!(
        current_was_active
            .lock()
            .unwrap()
            .iter()
            .all(|active| *active)
    );

    let spans = exporter.get_finished_spans().unwrap();
    let decision_spans: Vec<&SpanData> =
        spans.iter().filter(|span| span.name == SPAN_NAME).collect();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(decision_spans.len(), seen.len());
    assert_eq!(
        spans.len(),
        seen.len() + 1,
        "only the application span besides"
    );

    for (span, record) in decision_spans.iter().zip(&seen) {
        let policy = record.policy_id.as_str();
        assert_eq!(span.span_kind, SpanKind::Internal, "{policy}");
        assert_eq!(
            span.parent_span_id,
            SpanId::INVALID,
            "{policy}: a root span"
        );
        assert_ne!(
            span.span_context.trace_id(),
            application_span.trace_id(),
            "{policy}: a trace of its own"
        );
        assert_eq!(span.start_time, record.timestamp, "{policy}");
        assert_eq!(span.end_time, record.timestamp, "{policy}");
        assert_eq!(span.instrumentation_scope.name(), "portcullis");

        assert_eq!(string(span, attributes::POLICY_ID).as_deref(), Some(policy));
        assert_eq!(
            string(span, attributes::DECISION).as_deref(),
            Some(record.decision)
        );
        assert_eq!(
            attribute(span, attributes::ENFORCED),
            Some(&Value::Bool(record.enforced)),
            "{policy}"
        );
        assert_eq!(string(span, attributes::REASON), record.reason, "{policy}");
    }

    let by_policy = |id: &str| {
        *decision_spans
            .iter()
            .find(|span| string(span, attributes::POLICY_ID).as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no span for {id}"))
    };
    let expect = [
        ("allow_all", "allow", "input", None, true, Status::Ok),
        (
            "note_it",
            "audit",
            "input",
            Some("worth a look"),
            true,
            Status::Ok,
        ),
        ("mask_digits", "redact", "input", None, true, Status::Ok),
        ("shout", "transform", "input", None, true, Status::Ok),
        (
            "would_block",
            "deny",
            "input",
            Some("trial rule"),
            false,
            Status::error("trial rule"),
        ),
        (
            "no_secrets",
            "deny",
            "input",
            Some("secrets stay home"),
            true,
            Status::error("secrets stay home"),
        ),
    ];
    for (id, decision, point, reason, enforced, status) in expect {
        let span = by_policy(id);
        assert_eq!(
            string(span, attributes::DECISION).as_deref(),
            Some(decision),
            "{id}"
        );
        assert_eq!(
            string(span, attributes::INTERCEPTION_POINT).as_deref(),
            Some(point),
            "{id}"
        );
        assert_eq!(string(span, attributes::REASON).as_deref(), reason, "{id}");
        assert_eq!(
            attribute(span, attributes::ENFORCED),
            Some(&Value::Bool(enforced)),
            "{id}"
        );
        assert_eq!(span.status, status, "{id}");
    }

    let broken = by_policy("broken");
    assert_eq!(
        string(broken, attributes::DECISION).as_deref(),
        Some("evaluation_error")
    );
    assert_eq!(
        string(broken, attributes::INTERCEPTION_POINT).as_deref(),
        Some("tool_call")
    );
    let reason = string(broken, attributes::REASON).expect("an evaluation error has a reason");
    assert!(reason.contains("backend unavailable"), "{reason}");
    assert!(
        matches!(&broken.status, Status::Error { description } if description.contains("backend unavailable"))
    );
}

#[tokio::test]
async fn a_denial_without_reason_is_described_by_its_decision() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let set = portcullis_engine::PolicySet::builder()
        .input(support::Fixed::decides(
            "quiet",
            portcullis_engine::PolicyDecision::deny_silently(),
        ))
        .build();
    let engine = portcullis_engine::PolicyEngine::builder()
        .policy_set(set)
        .on_audit(OtelAuditHandler::new(provider.tracer("portcullis")))
        .build();
    engine.evaluate_input(&support::input()).await.unwrap_err();

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(attribute(&spans[0], attributes::REASON), None);
    assert_eq!(spans[0].status, Status::error("deny"));
}

#[tokio::test]
async fn the_records_of_a_stream_carry_its_figures() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let engine = portcullis_engine::PolicyEngine::builder()
        .policy_set(portcullis_engine::PolicySet::builder().build())
        .on_audit(OtelAuditHandler::new(provider.tracer("portcullis")))
        .build();
    let mut stream =
        engine.output_stream(portcullis_engine::Metadata::new("agent-7", "session-42"));
    stream.push("hello ").await;
    stream.push("world").await;
    stream.finish().await;

    let spans = exporter.get_finished_spans().unwrap();
    let events: Vec<Option<String>> = spans
        .iter()
        .map(|span| string(span, attributes::STREAM_EVENT))
        .collect();
    assert_eq!(events, [Some("start".to_owned()), Some("end".to_owned())]);
    let end = &spans[1];
    assert_eq!(
        string(end, attributes::STREAM_OUTCOME).as_deref(),
        Some("allowed")
    );
    assert_eq!(
        attribute(end, attributes::STREAM_RAW_CHARS),
        Some(&Value::I64(11))
    );
    assert_eq!(
        attribute(end, attributes::STREAM_RELEASED_CHARS),
        Some(&Value::I64(11))
    );
    assert_eq!(string(end, attributes::DECISION).as_deref(), Some("audit"));
    assert_eq!(end.status, Status::Ok);
}
