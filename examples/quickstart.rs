//! A small, deterministic agent loop guarded by Portcullis.
//!
//! The "model" is scripted: it answers the user's question by asking for a tool, then writes
//! an answer from the tool's result. The engine checks the input before the model sees it,
//! the tool call before the tool runs, and the answer before the user sees it; every decision
//! is printed as an audit record.
//!
//! The policies show the three ways to write one: plain Rust functions (`#[tool_call_policy]`,
//! `#[output_policy]`), a JSON rule compiled into Rust at build time (`dsl_policy!`), and a JSON
//! rule loaded at run time (`DslInputPolicy`). With the `rego` feature, and the OPA fixtures
//! beside the checkout, the same tool calls also go through an OPA-compiled WebAssembly bundle.
//! With the `otel` feature, every decision is also printed as an OpenTelemetry span.
//!
//! Run it with `cargo run --example quickstart`
//! (or `cargo run --example quickstart --features rego,otel`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis::dsl::DslInputPolicy;
use portcullis::{
    AuditRecord, EngineError, InputContext, Message, Metadata, OutputContext, PolicyDecision,
    PolicyEngine, ToolCallContext, TransformOperation, dsl_policy, output_policy, policy_set,
    tool_call_policy,
};
use serde_json::{Map, Value, json};

/// Lets the model call only approved tools, and caps the results of a web search.
#[tool_call_policy]
async fn approved_tools(context: &ToolCallContext) -> PolicyDecision {
    match context.tool_name.as_str() {
        "web_search" => {
            PolicyDecision::transform([TransformOperation::set("arguments.max_results", 3)])
        }
        "read_file" | "summarize" => PolicyDecision::allow(),
        other => PolicyDecision::deny(format!("tool `{other}` is not approved")),
    }
}

/// Keeps links to a known phishing domain out of answers, and audits every answer.
#[output_policy(id = "no_phishing_links")]
fn no_phishing(context: &OutputContext) -> PolicyDecision {
    if context.response.content.contains("phishing.example") {
        PolicyDecision::deny("the answer links to a blocked domain")
    } else {
        PolicyDecision::Allow {
            audit: true,
            labels: Vec::new(),
        }
    }
}

/// The scripted model: a tool call for the first turn, an answer once the tool has run.
enum ModelTurn {
    ToolCall { tool: String, arguments: Value },
    Answer(String),
}

fn scripted_model(messages: &[Message]) -> ModelTurn {
    match messages.last() {
        Some(last) if last.content.starts_with("tool result:") => ModelTurn::Answer(
            "Tomorrow in Paris: 14°C and light rain. Source: weather.example".into(),
        ),
        _ => ModelTurn::ToolCall {
            tool: "web_search".into(),
            arguments: json!({"query": "weather Paris tomorrow"}),
        },
    }
}

fn print_record(record: &AuditRecord<'_>) {
    println!(
        "  audit  {:<9} {:<18} {:<16} {}",
        record.interception_point,
        record.policy_id,
        record.decision,
        record.reason.as_deref().unwrap_or("-")
    );
}

/// With `--features otel`, every decision is also an OpenTelemetry span, printed on stdout by
/// the OTel stdout exporter.
#[cfg(feature = "otel")]
fn audit_handler() -> (
    impl portcullis::AuditHandler,
    opentelemetry_sdk::trace::SdkTracerProvider,
) {
    use portcullis::AuditHandler as _;
    use portcullis::otel::OtelAuditHandler;
    use portcullis::otel::opentelemetry::trace::TracerProvider as _;

    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let spans = OtelAuditHandler::new(provider.tracer("portcullis"));
    let audit = move |record: &AuditRecord<'_>| {
        print_record(record);
        spans.handle(record);
    };
    (audit, provider)
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "otel")]
    let (audit, tracer_provider) = audit_handler();
    #[cfg(not(feature = "otel"))]
    let audit = print_record;

    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rules");
    let engine = PolicyEngine::builder()
        .policy_set(policy_set! {
            on_error: deny,
            input: [
                // Compiled into Rust while this example builds; a mistake in the file is a
                // compile error.
                dsl_policy!(input, "examples/rules/no_ssn.json"),
                // Read and checked when the engine is built.
                DslInputPolicy::new("block_secrets", rules)?,
            ],
            tool_call: [approved_tools],
            output: [no_phishing],
        })
        .on_audit(audit)
        .build();

    let metadata =
        Metadata::new("travel-agent", "session-0001").with_timestamp("2026-11-22T09:00:00.000Z");
    let mut messages = vec![
        Message::system("You are a concise travel assistant."),
        Message::user("My SSN is 123-45-6789. What's the weather in Paris tomorrow?"),
    ];

    for turn in 1..=3 {
        println!("turn {turn}: input ({} messages)", messages.len());
        let input = InputContext::new(messages.clone(), metadata.clone());
        let checked = engine.evaluate_input(&input).await?;
        for entry in checked.decisions() {
            println!("  decision {} -> {}", entry.policy_id, entry.decision);
        }
        let forwarded = checked.into_context().messages;
        println!(
            "  the model sees: {:?}",
            forwarded.last().map(|m| &m.content)
        );

        match scripted_model(&forwarded) {
            ModelTurn::ToolCall { tool, arguments } => {
                let call = ToolCallContext::new(
                    tool,
                    object(arguments),
                    Message::assistant("Let me look that up."),
                    metadata.clone(),
                );
                let checked = engine.evaluate_tool_call(&call).await?;
                let call = checked.context();
                println!(
                    "  tool {} runs with {}",
                    call.tool_name,
                    Value::Object(call.arguments.clone())
                );
                messages.push(Message::assistant(format!("calling {}", call.tool_name)));
                messages.push(Message::user("tool result: 14°C, light rain"));
            }
            ModelTurn::Answer(text) => {
                let answer = OutputContext::new(Message::assistant(text), metadata.clone());
                let checked = engine.evaluate_output(&answer).await?;
                println!("  the user reads: {}", checked.context().response.content);
                break;
            }
        }
    }

    // A secret in the conversation never reaches the model.
    let leaked = InputContext::new(
        vec![Message::user("here is our API key: sk-live-123")],
        metadata.clone(),
    );
    report(engine.evaluate_input(&leaked).await.map(|_| ()));

    // A tool the policy does not approve is denied before it runs.
    let call = ToolCallContext::new(
        "shell",
        object(json!({"command": "rm -rf /"})),
        Message::assistant("Running a command."),
        metadata.clone(),
    );
    report(engine.evaluate_tool_call(&call).await.map(|_| ()));

    #[cfg(feature = "rego")]
    rego_tool_calls(&metadata).await?;

    #[cfg(feature = "otel")]
    let _ = tracer_provider.shutdown();
    Ok(())
}

fn report(result: Result<(), EngineError>) {
    match result {
        Err(EngineError::Denied(denial)) => {
            println!("denied by {}: {denial}", denial.policy_id())
        }
        Err(error) => println!("failed: {error}"),
        Ok(()) => println!("allowed"),
    }
}

/// The same kind of tool-call check, written in Rego and compiled by OPA to WebAssembly,
/// evaluated in process. Uses the fixture bundle when it is beside the checkout.
#[cfg(feature = "rego")]
async fn rego_tool_calls(metadata: &Metadata) -> Result<(), Box<dyn std::error::Error>> {
    use portcullis::rego::RegoToolCallPolicy;

    let fixtures = std::env::var("PORTCULLIS_OPA_FIXTURES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures").to_owned());
    let bundle = std::path::Path::new(&fixtures).join("rego-wasm/approved-tools.tar.gz");
    if !bundle.is_file() {
        println!(
            "(no Rego fixture at {}; skipping the Rego policy)",
            bundle.display()
        );
        return Ok(());
    }
    println!("Rego (OPA WebAssembly, in process):");
    let engine = PolicyEngine::builder()
        .policy_set(
            portcullis::PolicySet::builder()
                .tool_call(RegoToolCallPolicy::new("approved-tools", &bundle)?)
                .build(),
        )
        .on_audit(print_record)
        .build();
    for tool in ["web_search", "delete_database"] {
        let call = ToolCallContext::new(
            tool,
            Map::new(),
            Message::assistant("calling"),
            metadata.clone(),
        );
        report(engine.evaluate_tool_call(&call).await.map(|_| ()));
    }
    Ok(())
}
