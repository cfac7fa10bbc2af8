//! A small, deterministic agent loop guarded by Portcullis.
//!
//! The "model" is scripted: it answers the user's question by asking for a tool, then writes
//! an answer from the tool's result. The engine checks the input before the model sees it,
//! the tool call before the tool runs, and the answer before the user sees it, and every
//! decision is printed as an audit record.
//!
//! Run it with `cargo run --example quickstart`.

use portcullis::{
    AuditRecord, BoxError, EngineError, InputContext, InputPolicy, Message, Metadata,
    OutputContext, OutputPolicy, PolicyDecision, PolicyEngine, PolicySet, Redaction,
    ToolCallContext, ToolCallPolicy, TransformOperation, async_trait,
};
use serde_json::{Map, Value, json};

/// Replaces US social security numbers in every message before it reaches the model.
struct RedactSsn;

#[async_trait]
impl InputPolicy for RedactSsn {
    fn id(&self) -> &str {
        "redact_ssn"
    }

    async fn evaluate(&self, _context: &InputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "messages.*.content",
            r"\b\d{3}-\d{2}-\d{4}\b",
        )
        .with_replacement("[SSN]")]))
    }
}

/// Lets the model call only approved tools, and caps search results.
struct ApprovedTools;

#[async_trait]
impl ToolCallPolicy for ApprovedTools {
    fn id(&self) -> &str {
        "approved_tools"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(match context.tool_name.as_str() {
            "web_search" => {
                PolicyDecision::transform([TransformOperation::set("arguments.max_results", 3)])
            }
            "read_file" | "summarize" => PolicyDecision::allow(),
            other => PolicyDecision::deny(format!("tool `{other}` is not approved")),
        })
    }
}

/// Keeps links to a known phishing domain out of answers.
struct NoPhishingLinks;

#[async_trait]
impl OutputPolicy for NoPhishingLinks {
    fn id(&self) -> &str {
        "no_phishing_links"
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.response.content.contains("phishing.example") {
            PolicyDecision::deny("the answer links to a blocked domain")
        } else {
            PolicyDecision::Allow { audit: true }
        })
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

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[tokio::main]
async fn main() -> Result<(), EngineError> {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(RedactSsn)
                .tool_call(ApprovedTools)
                .output(NoPhishingLinks)
                .build(),
        )
        .on_audit(print_record)
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

    // A tool the policy does not approve is denied before it runs.
    let call = ToolCallContext::new(
        "shell",
        object(json!({"command": "rm -rf /"})),
        Message::assistant("Running a command."),
        metadata.clone(),
    );
    match engine.evaluate_tool_call(&call).await {
        Err(EngineError::Denied(denial)) => {
            println!("denied by {}: {}", denial.policy_id(), denial)
        }
        other => println!("unexpected: {other:?}"),
    }
    Ok(())
}
