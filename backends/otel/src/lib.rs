//! OpenTelemetry audit handler for Portcullis: every audit record becomes one span.
//!
//! [`OtelAuditHandler`] turns each [`AuditRecord`] into a span named
//! [`SPAN_NAME`] (`engine.policy.evaluate`) that starts and ends at the record's timestamp,
//! carries the [`attributes`] `engine.policy_id`, `engine.decision`,
//! `engine.interception_point`, `engine.enforced` and, when the decision has one,
//! `engine.reason`, and has status error for `deny` and `evaluation_error` (ok otherwise).
//!
//! Each span is a root span: a decision is evidence of its own, not a child of whatever span
//! the application happens to have open when it calls the engine. Correlate decisions through
//! their attributes (or, with the `observability` handler, `session.id` and `user.id`).
//!
//! The handler only creates spans; where they go is the tracer provider's business. Use a
//! batching span processor in production so that exporting never runs on the evaluation
//! path.
//!
//! ```
//! use opentelemetry::trace::TracerProvider as _;
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine, PolicySet};
//! use portcullis_otel::OtelAuditHandler;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! # struct NoSecrets;
//! # #[portcullis_engine::async_trait]
//! # impl portcullis_engine::InputPolicy for NoSecrets {
//! #     fn id(&self) -> &str { "no_secrets" }
//! #     async fn evaluate(&self, ctx: &InputContext)
//! #         -> Result<portcullis_engine::PolicyDecision, portcullis_engine::BoxError> {
//! #         Ok(portcullis_engine::PolicyDecision::deny("secrets stay home"))
//! #     }
//! # }
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(exporter.clone())
//!     .build();
//!
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().input(NoSecrets).build())
//!     .on_audit(OtelAuditHandler::new(provider.tracer("portcullis")))
//!     .build();
//!
//! let context = InputContext::new(vec![Message::user("my key is sk-1")], Metadata::new("agent", "s1"));
//! assert!(engine.evaluate_input(&context).await.is_err());
//!
//! let spans = exporter.get_finished_spans().unwrap();
//! assert_eq!(spans[0].name, "engine.policy.evaluate");
//! assert!(spans[0].attributes.iter().any(|kv| kv.key.as_str() == "engine.decision"
//!     && kv.value.as_str() == "deny"));
//! # });
//! ```

use std::borrow::Cow;
use std::fmt;

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Status, Tracer};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use portcullis_engine::{AuditHandler, AuditRecord};

/// The name of every span the handlers create.
pub const SPAN_NAME: &str = "engine.policy.evaluate";

/// The instrumentation scope (tracer name) the handlers use when they pick their own tracer.
pub const INSTRUMENTATION_SCOPE: &str = "portcullis";

/// The attribute keys a decision span carries.
pub mod attributes {
    /// The id of the policy that decided (string).
    pub const POLICY_ID: &str = "engine.policy_id";
    /// The decision: `allow`, `deny`, `audit`, `redact`, `transform` or `evaluation_error`
    /// (string).
    pub const DECISION: &str = "engine.decision";
    /// Where the decision was taken: `input`, `tool_call` or `output` (string).
    pub const INTERCEPTION_POINT: &str = "engine.interception_point";
    /// The decision's reason, or the error text of an evaluation error; absent when there is
    /// none (string).
    pub const REASON: &str = "engine.reason";
    /// Whether the decision took effect; `false` for a policy in monitor mode (bool).
    pub const ENFORCED: &str = "engine.enforced";
}

/// An audit handler that records every decision as an OpenTelemetry span.
///
/// Build it from a tracer with [`new`](OtelAuditHandler::new) or from the global tracer
/// provider with [`global`](OtelAuditHandler::global), and give it to
/// `PolicyEngine::builder().on_audit(..)`. See the [crate documentation](crate) for the
/// shape of the spans.
pub struct OtelAuditHandler<T = BoxedTracer> {
    tracer: T,
}

impl<T> OtelAuditHandler<T>
where
    T: Tracer + Send + Sync + 'static,
{
    /// A handler that creates its spans with `tracer`.
    pub fn new(tracer: T) -> Self {
        OtelAuditHandler { tracer }
    }

    /// The tracer the spans are created with.
    pub fn tracer(&self) -> &T {
        &self.tracer
    }
}

impl OtelAuditHandler<BoxedTracer> {
    /// A handler using the global tracer provider (scope [`INSTRUMENTATION_SCOPE`], with this
    /// crate's version).
    ///
    /// The tracer is taken from the provider installed at the time of the call: install
    /// yours with `opentelemetry::global::set_tracer_provider` first. Before that, the global
    /// provider is a no-op and so are the spans.
    pub fn global() -> Self {
        let scope = InstrumentationScope::builder(INSTRUMENTATION_SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        OtelAuditHandler::new(global::tracer_with_scope(scope))
    }
}

impl<T> fmt::Debug for OtelAuditHandler<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelAuditHandler").finish_non_exhaustive()
    }
}

impl<T> AuditHandler for OtelAuditHandler<T>
where
    T: Tracer + Send + Sync + 'static,
{
    fn handle(&self, record: &AuditRecord<'_>) {
        record_span(&self.tracer, record, Vec::new());
    }
}

/// The `engine.*` attributes of a record's span (see [`attributes`]).
pub fn span_attributes(record: &AuditRecord<'_>) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(7);
    push_span_attributes(record, &mut attributes);
    attributes
}

fn push_span_attributes(record: &AuditRecord<'_>, into: &mut Vec<KeyValue>) {
    into.push(KeyValue::new(
        attributes::POLICY_ID,
        record.policy_id.to_owned(),
    ));
    into.push(KeyValue::new(
        attributes::DECISION,
        record.decision.as_str(),
    ));
    into.push(KeyValue::new(
        attributes::INTERCEPTION_POINT,
        record.interception_point.as_str(),
    ));
    into.push(KeyValue::new(attributes::ENFORCED, record.enforced));
    if let Some(reason) = &record.reason {
        into.push(KeyValue::new(attributes::REASON, reason.to_string()));
    }
}

/// The status of a record's span: error for `deny` and `evaluation_error` (described by the
/// reason when there is one, by the decision name otherwise), ok for every other decision.
pub fn span_status(record: &AuditRecord<'_>) -> Status {
    if record.decision.is_failure() {
        let description: Cow<'static, str> = match &record.reason {
            Some(reason) => Cow::Owned(reason.to_string()),
            None => Cow::Borrowed(record.decision.as_str()),
        };
        Status::error(description)
    } else {
        Status::Ok
    }
}

/// Creates and ends the span of one record with `tracer`: a root span named [`SPAN_NAME`],
/// started and ended at the record's timestamp, with the [`span_attributes`] followed by
/// `extra` attributes, and the [`span_status`].
///
/// This is what [`OtelAuditHandler`] does for each record; handlers that add attributes of
/// their own (such as the observability platform's `session.id`) call it too.
pub fn record_span<T: Tracer>(tracer: &T, record: &AuditRecord<'_>, extra: Vec<KeyValue>) {
    let mut all = Vec::with_capacity(5 + extra.len());
    push_span_attributes(record, &mut all);
    all.extend(extra);
    let builder = SpanBuilder::from_name(SPAN_NAME)
        .with_kind(SpanKind::Internal)
        .with_start_time(record.timestamp)
        .with_attributes(all);
    // An empty parent context: the span is a root whatever span is current.
    let mut span = tracer.build_with_context(builder, &Context::new());
    span.set_status(span_status(record));
    span.end_with_timestamp(record.timestamp);
}
