//! A rig agent guarded by Portcullis, against a scripted OpenAI-compatible server this
//! example starts on 127.0.0.1 (no network, no API key).
//!
//! Run with `cargo run -p portcullis-rig --example rig_agent`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../openai/tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::error::Error;

use futures_util::StreamExt;
use portcullis_engine::{
    AuditRecord, BoxError, InputContext, OutputContext, Policy, PolicyDecision, PolicyEngine,
    PolicySet, Redaction, ToolCallContext, async_trait,
};
use portcullis_rig::PortcullisHook;
use rig_agent::AgentBuilder;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::streaming::{Item, StreamEvent};
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::PortableTool;
use serde_json::{Map, Value, json};
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

/// Keeps SSNs out of answers.
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

/// Looks up invoices.
struct Search;

impl PortableTool for Search {
    const NAME: &'static str = "search";
    type Args = Map<String, Value>;
    type Output = String;
    type Error = Infallible;

    fn description(&self) -> String {
        "Searches the invoices.".to_owned()
    }

    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": { "query": { "type": "string" } } })
    }

    async fn call(&self, arguments: Self::Args) -> Result<Self::Output, Self::Error> {
        println!("  search ran with {}", Value::Object(arguments));
        Ok("2 open invoices".to_owned())
    }
}

/// Deletes the database: the policies never let it run.
struct DeleteDatabase;

impl PortableTool for DeleteDatabase {
    const NAME: &'static str = "delete_database";
    type Args = Map<String, Value>;
    type Output = String;
    type Error = Infallible;

    fn description(&self) -> String {
        "Deletes everything.".to_owned()
    }

    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": {} })
    }

    async fn call(&self, _: Self::Args) -> Result<Self::Output, Self::Error> {
        println!("  delete_database ran (it should not have)");
        Ok("deleted".to_owned())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = ScriptedServer::start(vec![
        Reply::Json(support::tool_call_completion(
            Some("Let me look."),
            &[
                ("delete_database", "{}"),
                ("search", r#"{"query": "open invoices"}"#),
            ],
        )),
        Reply::Json(support::text_completion(
            "You have 2 open invoices under SSN 987-65-4321.",
        )),
        Reply::Sse(support::streamed_text(&["Still SSN 98", "7-65-4321."])),
    ])
    .await;
    let model = OpenAIConfig::new("not-needed")
        .with_base_url(server.base_url())
        .client()
        .chat("scripted-model");

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
    let hook = PortcullisHook::new(engine).session_id("example-session");
    let agent = AgentBuilder::new(model)
        .name("invoice-bot")
        .tool(Search)
        .tool(DeleteDatabase)
        .default_max_turns(3)
        .add_hook(hook.clone())
        .build();

    let response = agent
        .prompt("My SSN is 123-45-6789. Clean up my account and list my invoices.")
        .await?;
    let first = &server.requests()[0];
    println!("the server received: {}", first["messages"][0]["content"]);
    println!("the caller read: {:?}", response.output());

    // A streamed run: its text goes through the streaming guard before anyone reads it.
    let mut stream = hook.stream_prompt(&agent, "And which SSN is on file?");
    let mut shown = String::new();
    while let Some(item) = stream.next().await {
        if let MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
            text,
            ..
        })) = item?
        {
            shown.push_str(&text);
        }
    }
    println!("the stream's reader saw: {shown:?}");
    Ok(())
}
