//! An async-openai client guarded by Portcullis, against a scripted OpenAI-compatible server
//! this example starts on 127.0.0.1 (no network, no API key).
//!
//! Run with `cargo run -p portcullis-openai --example openai_client`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{ChatCompletionMessageToolCalls, CreateChatCompletionRequest};
use async_openai::types::responses::{CreateResponse, ResponseStreamEvent};
use futures_util::StreamExt;
use portcullis_engine::stream::StreamingRule;
use portcullis_engine::{
    AuditRecord, BoxError, InputContext, OutputContext, Policy, PolicyDecision, PolicyEngine,
    PolicySet, Redaction, ToolCallContext, async_trait,
};
use portcullis_openai::PortcullisLayer;
use serde_json::json;
use support::{Reply, ScriptedServer};

const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";

/// Keeps SSNs out of prompts.
struct RedactPromptSsn;

#[async_trait]
impl Policy<InputContext> for RedactPromptSsn {
    fn id(&self) -> &str {
        "redact_prompt_ssn"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "messages.*.content",
            SSN,
        )]))
    }
}

/// Keeps SSNs out of answers, streamed ones included.
struct RedactAnswerSsn;

#[async_trait]
impl Policy<OutputContext> for RedactAnswerSsn {
    fn id(&self) -> &str {
        "redact_answer_ssn"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "response.content",
            SSN,
        )]))
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::Replace {
            pattern: SSN.to_owned(),
            replacement: "[REDACTED]".to_owned(),
            max_match_len: None,
        }])
    }
}

/// No destructive tools.
struct NoDestructiveTools;

#[async_trait]
impl Policy<ToolCallContext> for NoDestructiveTools {
    fn id(&self) -> &str {
        "no_destructive_tools"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.tool_name.starts_with("delete_") {
            PolicyDecision::deny("destructive tool")
        } else {
            PolicyDecision::allow()
        })
    }
}

fn request(text: &str) -> Result<CreateChatCompletionRequest, serde_json::Error> {
    serde_json::from_value(json!({
        "model": "scripted-model",
        "messages": [{ "role": "user", "content": text }],
        "metadata": { "session_id": "example-session" }
    }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = ScriptedServer::start(vec![
        Reply::Json(support::tool_call_completion(
            None,
            &[
                ("delete_database", r#"{"confirm": true}"#),
                ("search", r#"{"query": "open invoices"}"#),
            ],
        )),
        Reply::Sse(support::streamed_text(&[
            "The SSN on file is 98",
            "7-65-4321; anything else?",
        ])),
        Reply::Sse(support::response_events(
            support::streamed_message(0, "msg_1", &["Still 98", "7-65-4321."]),
            vec![support::message_item("msg_1", "Still 987-65-4321.")],
        )),
    ])
    .await;

    // The guard, in the few lines an application adds.
    let set = PolicySet::builder()
        .input(RedactPromptSsn)
        .tool_call(NoDestructiveTools)
        .output(RedactAnswerSsn)
        .build();
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .on_audit(|record: &AuditRecord<'_>| {
            let metadata = record.context.metadata();
            println!(
                "  audit: {} {} {:?} (agent {}, session {})",
                record.interception_point,
                record.policy_id,
                record.decision,
                metadata.agent_id,
                metadata.session_id
            );
        })
        .build();
    let service = PortcullisLayer::new(engine)
        .agent_id("invoice-bot")
        .into_default_service();
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key("not-needed");
    let client = Client::with_config(config).with_http_service(service);

    println!("1. A tool-calling answer:");
    let response = client
        .chat()
        .create(request("My SSN is 123-45-6789. Clean up my account.")?)
        .await?;
    println!(
        "  the server received: {}",
        server.requests()[0]["messages"][0]["content"]
    );
    let message = &response.choices[0].message;
    println!("  text: {:?}", message.content);
    for call in message.tool_calls.iter().flatten() {
        if let ChatCompletionMessageToolCalls::Function(call) = call {
            println!(
                "  tool to run: {}({})",
                call.function.name, call.function.arguments
            );
        }
    }

    println!("2. A streamed answer:");
    let mut stream = client
        .chat()
        .create_stream(request("What SSN do you have on file?")?)
        .await?;
    let mut shown = String::new();
    while let Some(chunk) = stream.next().await {
        for choice in chunk?.choices {
            shown.push_str(choice.delta.content.as_deref().unwrap_or_default());
        }
    }
    println!("  the reader saw: {shown:?}");

    println!("3. A streamed answer of the Responses API:");
    let request: CreateResponse = serde_json::from_value(json!({
        "model": "scripted-model",
        "input": "And now?",
        "stream": true
    }))?;
    let mut stream = client.responses().create_stream(request).await?;
    let mut shown = String::new();
    while let Some(event) = stream.next().await {
        if let ResponseStreamEvent::ResponseOutputTextDelta(delta) = event? {
            shown.push_str(&delta.delta);
        }
    }
    println!("  the reader saw: {shown:?}");

    println!("4. Any other endpoint, unless listed with pass_through:");
    match client.models().list().await {
        Ok(_) => println!("  listed"),
        Err(error) => println!("  {error}"),
    }
    Ok(())
}
