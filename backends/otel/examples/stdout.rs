//! Prints one OpenTelemetry span per policy decision on stdout.
//!
//! `cargo run -p portcullis-otel --example stdout`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use portcullis_engine::{
    BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet,
    async_trait,
};
use portcullis_otel::OtelAuditHandler;

struct NoPasswords;

#[async_trait]
impl Policy<InputContext> for NoPasswords {
    fn id(&self) -> &str {
        "no_passwords"
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        let mentions_password = context
            .messages
            .iter()
            .any(|message| message.content.contains("password"));
        Ok(if mentions_password {
            PolicyDecision::deny("no passwords")
        } else {
            PolicyDecision::allow()
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Spans go to stdout as soon as they end; use a batch processor and an OTLP exporter in
    // production.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();

    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().input(NoPasswords).build())
        .on_audit(OtelAuditHandler::new(provider.tracer("portcullis")))
        .build();

    let metadata = Metadata::new("agent-7", "session-42");
    let hello = InputContext::new(vec![Message::user("hello")], metadata.clone());
    engine.evaluate_input(&hello).await?;

    let leak = InputContext::new(vec![Message::user("my password is hunter2")], metadata);
    if let Err(denied) = engine.evaluate_input(&leak).await {
        println!("denied: {denied}");
    }

    provider.shutdown()?;
    Ok(())
}
