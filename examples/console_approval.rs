//! A resolver that asks on the console: the tool call waits until someone types `y` or `n`.
//!
//! `cargo run --example console_approval` (try `echo y | cargo run --example console_approval`)
//!
//! With no answer (stdin closed) the request stays pending and the call fails with
//! `ApprovalRequired`; past the approval time-out it does too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::BufRead;
use std::time::Duration;

use portcullis::{
    ApprovalAnswer, ApprovalRequest, ApprovalResolver, BoxError, Message, Metadata, Policy,
    PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};
use serde_json::{Value, json};

/// Asks whoever sits at the terminal.
struct Console;

#[async_trait]
impl ApprovalResolver for Console {
    async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
        println!("Approval needed: {}", request.reasons.join("; "));
        println!("{}", serde_json::to_string_pretty(&request.context)?);
        println!("Approve this exact action? [y/n]");
        // Reading stdin blocks: do it off the executor.
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await??;
        Ok(match line.trim() {
            "y" | "yes" => ApprovalAnswer::Granted {
                by: std::env::var("USER").unwrap_or_else(|_| "console".into()),
            },
            "n" | "no" => ApprovalAnswer::Refused {
                reason: Some("refused at the console".into()),
            },
            _ => ApprovalAnswer::Pending,
        })
    }
}

struct AskBeforeDelete;

#[async_trait]
impl Policy<ToolCallContext> for AskBeforeDelete {
    fn id(&self) -> &str {
        "ask_before_delete"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.tool_name == "delete_files" {
            PolicyDecision::escalate("files are deleted for good")
        } else {
            PolicyDecision::allow()
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(AskBeforeDelete).build())
        .approvals(Console)
        .approval_timeout(Duration::from_secs(60))
        .build();
    let Value::Object(arguments) = json!({"paths": ["/tmp/report-draft.txt"]}) else {
        unreachable!("a JSON object literal")
    };
    let call = ToolCallContext::new(
        "delete_files",
        arguments,
        Message::assistant("Cleaning up the draft."),
        Metadata::new("cleanup-agent", "session-1"),
    );
    match engine.evaluate_tool_call(&call).await {
        Ok(_) => println!("approved: the tool runs"),
        Err(error) => println!("the tool does not run: {error}"),
    }
    Ok(())
}
