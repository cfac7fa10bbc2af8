//! Streams a scripted answer through the output guard and prints what it releases.
//!
//! The answer carries an SSN split across two chunks, and later a link to a blocked domain.
//! The guard releases text as soon as no rule can still match it, replaces the SSN although
//! it arrives in pieces, and stops before any byte of the blocked link goes out.
//!
//! Run it with `cargo run --example streaming`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis::stream::StreamingRule;
use portcullis::{
    AuditRecord, BoxError, Metadata, OutputContext, Policy, PolicyDecision, PolicyEngine,
    PolicySet, Redaction, StreamItem, async_trait,
};

const SSN: &str = r"\b\d{3}-\d{2}-\d{4}\b";

/// Replaces SSNs; its streaming form is the same regular expression.
struct RedactSsn;

#[async_trait]
impl Policy<OutputContext> for RedactSsn {
    fn id(&self) -> &str {
        "redact_ssn"
    }

    async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(PolicyDecision::redact([Redaction::replace(
            "response.content",
            SSN,
        )]))
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::Replace {
            pattern: SSN.into(),
            replacement: "[REDACTED]".into(),
            max_match_len: None,
        }])
    }
}

/// Denies answers that mention a blocked domain, ignoring case.
struct BlockedDomains;

const BLOCKED: [&str; 2] = ["phishing.example", "malware.example"];

#[async_trait]
impl Policy<OutputContext> for BlockedDomains {
    fn id(&self) -> &str {
        "blocked_domains"
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        let text = context.response.content.to_lowercase();
        Ok(if BLOCKED.iter().any(|domain| text.contains(domain)) {
            PolicyDecision::deny("the answer links to a blocked domain")
        } else {
            PolicyDecision::allow()
        })
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(vec![StreamingRule::deny_on_any(
            &BLOCKED,
            Some("the answer links to a blocked domain".into()),
        )])
    }
}

async fn stream(engine: &PolicyEngine, title: &str, chunks: &[&str]) {
    println!("{title}");
    let mut guard = engine.output_stream(Metadata::new("support-bot", "session-3"));
    println!(
        "  mode {:?}, holding back at most {} bytes",
        guard.plan().mode(),
        guard.plan().hold_back()
    );
    let mut items = Vec::new();
    for chunk in chunks {
        println!("  model   -> {chunk:?}");
        for item in guard.push(chunk).await {
            show(&item);
            items.push(item);
        }
    }
    for item in guard.finish().await {
        show(&item);
        items.push(item);
    }
    println!();
}

fn show(item: &StreamItem) {
    match item {
        StreamItem::Text(text) => println!("  reader  <- {text:?}"),
        StreamItem::Denied(denial) => println!("  DENIED by {}: {denial}", denial.policy_id()),
        StreamItem::Error(error) => println!("  ERROR: {error}"),
        StreamItem::ApprovalRequired(request) => println!("  APPROVAL REQUIRED: {request}"),
    }
}

#[tokio::main]
async fn main() {
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(RedactSsn)
                .output(BlockedDomains)
                .build(),
        )
        .on_audit(|record: &AuditRecord<'_>| {
            if let Some(report) = record.stream {
                println!(
                    "  audit: stream {} ({}), {} chars in, {} out, at most {} held",
                    report.event,
                    report.outcome.map_or("-", |outcome| outcome.as_str()),
                    report.raw_chars,
                    report.released_chars,
                    report.max_held_chars
                );
            } else {
                println!("  audit: {} {}", record.policy_id, record.decision);
            }
        })
        .build();

    stream(
        &engine,
        "An answer with an SSN split across chunks:",
        &[
            "Sure. The number on file is 123-",
            "45-",
            "6789; I have updated your profile ",
            "and sent a confirmation e-mail. Anything else?",
        ],
    )
    .await;

    stream(
        &engine,
        "An answer that turns to a blocked link:",
        &[
            "To reset your password, open ",
            "https://PHISH",
            "ING.example/reset and enter ",
            "your current password.",
        ],
    )
    .await;
}
