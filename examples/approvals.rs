//! Approvals: a scripted agent whose `send_email` calls wait for a person.
//!
//! `cargo run --example approvals`
//!
//! A tool-call policy escalates every `send_email`. The resolver plays the person on call: it
//! approves mail to the team's address, refuses mail to a stranger, and leaves anything else
//! pending (as a ticket would). A pending call fails with `ApprovalRequired`; the application
//! records the grant a person gave for that exact action, and the retried call proceeds once.
//! A retry whose arguments changed is another action, and needs another approval.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use portcullis::{
    ApprovalAnswer, ApprovalRequest, ApprovalResolver, AuditRecord, BoxError, EngineError, Message,
    Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};
use serde_json::{Value, json};

/// Every e-mail leaves the company: ask first.
struct AskBeforeEmail;

#[async_trait]
impl Policy<ToolCallContext> for AskBeforeEmail {
    fn id(&self) -> &str {
        "ask_before_email"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.tool_name == "send_email" {
            PolicyDecision::escalate("e-mail leaves the company")
        } else {
            PolicyDecision::allow()
        })
    }
}

/// The person on call, scripted.
struct OnCall;

#[async_trait]
impl ApprovalResolver for OnCall {
    async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
        let to = request.context["arguments"]["to"]
            .as_str()
            .unwrap_or_default();
        println!(
            "  resolver asked about mail to {to} ({})",
            request.action_digest
        );
        Ok(match to {
            "team@example.com" => ApprovalAnswer::Granted { by: "dana".into() },
            "stranger@elsewhere.test" => ApprovalAnswer::Refused {
                reason: Some("not a known recipient".into()),
            },
            _ => ApprovalAnswer::Pending,
        })
    }
}

fn send_email(to: &str, body: &str) -> ToolCallContext {
    let Value::Object(arguments) = json!({"to": to, "subject": "Report", "body": body}) else {
        unreachable!("a JSON object literal")
    };
    ToolCallContext::new(
        "send_email",
        arguments,
        Message::assistant("I will send the report."),
        Metadata::new("mail-agent", "session-1"),
    )
}

/// Runs a tool call through the engine, as an agent loop would, and says what happened.
async fn run(engine: &PolicyEngine, call: &ToolCallContext) -> Option<ApprovalRequest> {
    match engine.evaluate_tool_call(call).await {
        Ok(_) => {
            println!("  -> the tool runs: mail sent to {}", call.arguments["to"]);
            None
        }
        Err(EngineError::ApprovalRequired(request)) => {
            println!("  -> approval required: {request}");
            Some(*request)
        }
        Err(error) => {
            println!("  -> the tool does not run: {error}");
            None
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(AskBeforeEmail).build())
        .approvals(OnCall)
        .approval_timeout(Duration::from_secs(5))
        .on_audit(|record: &AuditRecord<'_>| {
            let reason = record.reason.as_deref().unwrap_or("");
            println!("  audit: {} {} {reason}", record.policy_id, record.decision);
        })
        .build();

    println!("1. mail to the team: the resolver approves");
    run(
        &engine,
        &send_email("team@example.com", "Numbers attached."),
    )
    .await;

    println!("2. mail to a stranger: the resolver refuses");
    run(
        &engine,
        &send_email("stranger@elsewhere.test", "Numbers attached."),
    )
    .await;

    println!("3. mail to a partner: nobody answers yet");
    let call = send_email("partner@example.org", "Numbers attached.");
    let Some(request) = run(&engine, &call).await else {
        return Err("expected an approval request".into());
    };
    println!("   a person reads the request and approves it; the application records the grant");
    engine
        .approvals()
        .grant(&request.action_digest, "erin", Duration::from_secs(600))
        .await?;

    println!("4. the agent retries the same call: the grant lets it through, once");
    let mut retried = call.clone();
    retried.metadata = Metadata::new("mail-agent", "session-1");
    run(&engine, &retried).await;

    println!("5. the agent retries with another body: another action, another approval");
    let mut changed = call.clone();
    changed
        .arguments
        .insert("body".into(), json!("Numbers attached, and the salaries."));
    let again = run(&engine, &changed).await;
    match again {
        Some(next) if next.action_digest != request.action_digest => {
            println!("   (its digest differs: {})", next.action_digest);
        }
        _ => return Err("the changed call should need a new approval".into()),
    }
    Ok(())
}
