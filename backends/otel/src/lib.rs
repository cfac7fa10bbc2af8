//! OpenTelemetry audit handler for Portcullis: every audit record becomes one span.
//!
//! [`OtelAuditHandler`] turns each [`AuditRecord`] into a span named
//! [`SPAN_NAME`] (`engine.policy.evaluate`) that starts and ends at the record's timestamp,
//! carries the [`attributes`] `engine.policy_id`, `engine.decision`,
//! `engine.interception_point`, `engine.enforced` and, when the decision has one,
//! `engine.reason` (and, on the start and end records of a streaming guard, the
//! `engine.stream.*` figures), and has status error for `deny` and `evaluation_error` (ok
//! otherwise).
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
//! # impl portcullis_engine::Policy<portcullis_engine::InputContext> for NoSecrets {
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
use std::time::SystemTime;

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Status, Tracer};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use portcullis_engine::{AuditDecision, AuditHandler, AuditRecord};

/// The OpenTelemetry API this crate is built against (name `Tracer`, `TracerProvider` and
/// `global` from here to be sure the versions match).
pub use opentelemetry;

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
    /// On the records of a streaming guard: `start` or `end` (string).
    pub const STREAM_EVENT: &str = "engine.stream.event";
    /// On a stream's end record: `allowed`, `denied`, `error` or `abandoned` (string).
    pub const STREAM_OUTCOME: &str = "engine.stream.outcome";
    /// On a stream's records: characters received so far (int).
    pub const STREAM_RAW_CHARS: &str = "engine.stream.raw_chars";
    /// On a stream's records: characters released so far (int).
    pub const STREAM_RELEASED_CHARS: &str = "engine.stream.released_chars";
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
    DecisionSpan::from_record(record).into_attributes()
}

/// The status of a record's span: error for `deny` and `evaluation_error` (described by the
/// reason when there is one, by the decision name otherwise), ok for every other decision.
pub fn span_status(record: &AuditRecord<'_>) -> Status {
    status(record.decision, record.reason.as_deref())
}

fn status(decision: AuditDecision, reason: Option<&str>) -> Status {
    if decision.is_failure() {
        let description: Cow<'static, str> = match reason {
            Some(reason) => Cow::Owned(reason.to_owned()),
            None => Cow::Borrowed(decision.as_str()),
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
/// This is what [`OtelAuditHandler`] does for each record.
pub fn record_span<T: Tracer>(tracer: &T, record: &AuditRecord<'_>, extra: Vec<KeyValue>) {
    let mut span = DecisionSpan::from_record(record);
    span.attributes.extend(extra);
    span.emit(tracer);
}

/// Everything a record's span is made of, owned: what a handler that creates spans later,
/// on another thread, keeps of a record (records borrow from the evaluation).
///
/// ```
/// # use opentelemetry::KeyValue;
/// # fn keep(record: &portcullis_engine::AuditRecord<'_>, queue: &std::sync::mpsc::Sender<portcullis_otel::DecisionSpan>) {
/// let span = portcullis_otel::DecisionSpan::from_record(record)
///     .with_attribute(KeyValue::new("session.id", record.context.metadata().session_id.clone()));
/// let _ = queue.send(span); // and on the other thread: `span.emit(&tracer)`
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionSpan {
    /// The decision, for the span's status.
    pub decision: AuditDecision,
    /// The reason, for the span's status.
    pub reason: Option<String>,
    /// When the decision was taken: the span's start and end.
    pub timestamp: SystemTime,
    /// The span's attributes: the `engine.*` ones, then any added.
    pub attributes: Vec<KeyValue>,
}

impl DecisionSpan {
    /// The span of `record`, with its `engine.*` attributes.
    pub fn from_record(record: &AuditRecord<'_>) -> Self {
        let reason = record.reason.as_deref().map(str::to_owned);
        let mut attributes = Vec::with_capacity(7);
        attributes.push(KeyValue::new(
            attributes::POLICY_ID,
            record.policy_id.to_owned(),
        ));
        attributes.push(KeyValue::new(
            attributes::DECISION,
            record.decision.as_str(),
        ));
        attributes.push(KeyValue::new(
            attributes::INTERCEPTION_POINT,
            record.interception_point.as_str(),
        ));
        attributes.push(KeyValue::new(attributes::ENFORCED, record.enforced));
        if let Some(reason) = &reason {
            attributes.push(KeyValue::new(attributes::REASON, reason.clone()));
        }
        if let Some(stream) = record.stream {
            attributes.push(KeyValue::new(
                attributes::STREAM_EVENT,
                stream.event.as_str(),
            ));
            if let Some(outcome) = stream.outcome {
                attributes.push(KeyValue::new(attributes::STREAM_OUTCOME, outcome.as_str()));
            }
            attributes.push(KeyValue::new(
                attributes::STREAM_RAW_CHARS,
                i64::try_from(stream.raw_chars).unwrap_or(i64::MAX),
            ));
            attributes.push(KeyValue::new(
                attributes::STREAM_RELEASED_CHARS,
                i64::try_from(stream.released_chars).unwrap_or(i64::MAX),
            ));
        }
        DecisionSpan {
            decision: record.decision,
            reason,
            timestamp: record.timestamp,
            attributes,
        }
    }

    /// Adds an attribute.
    pub fn with_attribute(mut self, attribute: KeyValue) -> Self {
        self.attributes.push(attribute);
        self
    }

    /// The span's status (see [`span_status`]).
    pub fn status(&self) -> Status {
        status(self.decision, self.reason.as_deref())
    }

    /// The attributes.
    pub fn into_attributes(self) -> Vec<KeyValue> {
        self.attributes
    }

    /// Creates and ends the span with `tracer`: a root span named [`SPAN_NAME`], started and
    /// ended at the timestamp.
    pub fn emit<T: Tracer>(self, tracer: &T) {
        let status = self.status();
        let builder = SpanBuilder::from_name(SPAN_NAME)
            .with_kind(SpanKind::Internal)
            .with_start_time(self.timestamp)
            .with_attributes(self.attributes);
        // An empty parent context: the span is a root whatever span is current.
        let mut span = tracer.build_with_context(builder, &Context::new());
        span.set_status(status);
        span.end_with_timestamp(self.timestamp);
    }
}
