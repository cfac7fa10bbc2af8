//! What the hardening tests and benchmarks share: where the OPA fixtures are, one engine mixing
//! code, DSL, Rego and remote policies, and inputs with their expected outcomes.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use portcullis::dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis::http::{HttpClientOptions, HttpInputPolicy, HttpToolCallPolicy};
use portcullis::rego::{RegoBundle, RegoInputPolicy, RegoToolCallPolicy};
use portcullis::{
    BoxError, EngineError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine,
    PolicySet, Role, ToolCallContext,
};
use portcullis_testing::{EvaluateServer, Reply};

/// The OPA fixtures folder: `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures` beside the
/// workspace. Panics with where it looked when the folder is missing.
pub fn fixtures() -> PathBuf {
    let dir = std::env::var_os("PORTCULLIS_OPA_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        dir.join("rego-wasm").is_dir(),
        "the OPA WebAssembly fixtures are missing: looked in {}; set PORTCULLIS_OPA_FIXTURES",
        dir.display()
    );
    dir
}

/// A fixture bundle, opened with a generous time limit: on a loaded machine (the tests share
/// two cores with builds) a thread may be descheduled for longer than the default 100 ms.
pub fn bundle(relative: &str) -> RegoBundle {
    let path = fixtures().join(relative);
    RegoBundle::open(&path)
        .and_then(|bundle| bundle.with_time_limit(Duration::from_secs(30)))
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A DSL rule redacting e-mail addresses at example.com in every message.
pub const EMAIL_RULE: &str = r#"{
  "condition": { "always": true },
  "action": "redact",
  "redactions": [
    {
      "field": "messages.*.content",
      "strategy": "replace",
      "pattern": "\\b[a-z0-9.]+@example\\.com\\b",
      "replacement": "[EMAIL]"
    }
  ]
}"#;

/// A DSL rule for tool calls that denies `rm_rf`.
pub const TOOL_RULE: &str = r#"{
  "condition": { "field": "tool_name", "equals": "rm_rf" },
  "action": "deny",
  "reason": "rm_rf is never allowed"
}"#;

/// A code policy: denies any message containing "forbidden".
#[derive(Debug)]
pub struct NoForbiddenWord;

#[async_trait::async_trait]
impl Policy<InputContext> for NoForbiddenWord {
    fn id(&self) -> &str {
        "code-forbidden"
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        let forbidden = context
            .messages
            .iter()
            .any(|message| message.content.contains("forbidden"));
        Ok(if forbidden {
            PolicyDecision::deny("the word is forbidden")
        } else {
            PolicyDecision::allow()
        })
    }
}

/// The remote decision service of the mixed engine: denies any request whose body mentions
/// `veto`, allows the rest.
pub async fn remote_service() -> EvaluateServer {
    EvaluateServer::scripted(|request| {
        let body = String::from_utf8_lossy(&request.body);
        if body.contains("veto") {
            Reply::decision(&PolicyDecision::deny("blocked by the remote service"))
        } else {
            Reply::decision(&PolicyDecision::allow())
        }
    })
    .await
    .expect("the remote decision service starts")
}

/// One engine with, for input, a code policy, a remote policy, a Rego policy (no-ssn-input)
/// and a DSL redaction, in that order; for tool calls a Rego policy (approved-tools), a DSL rule
/// and a remote policy.
pub fn mixed_engine(server: &EvaluateServer) -> Arc<PolicyEngine> {
    let remote = HttpClientOptions::new(server.url()).timeout(Duration::from_secs(60));
    let set = PolicySet::builder()
        .input(NoForbiddenWord)
        .input(HttpInputPolicy::new("remote-block", remote.clone()).expect("remote policy"))
        .input(
            RegoInputPolicy::from_bundle("rego-ssn", bundle("rego-wasm/no-ssn-input.tar.gz"))
                .expect("rego policy"),
        )
        .input(DslInputPolicy::from_source("dsl-email", EMAIL_RULE, "email.json").expect("dsl"))
        .tool_call(
            RegoToolCallPolicy::from_bundle(
                "rego-tools",
                bundle("rego-wasm/approved-tools.tar.gz"),
            )
            .expect("rego policy"),
        )
        .tool_call(DslToolCallPolicy::from_source("dsl-rm", TOOL_RULE, "rm.json").expect("dsl"))
        .tool_call(HttpToolCallPolicy::new("remote-tools", remote).expect("remote policy"))
        .build();
    Arc::new(PolicyEngine::builder().policy_set(set).build())
}

/// What an evaluation must end as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Allowed, the context unchanged.
    Allow,
    /// Allowed with the last message's content changed to this.
    Redacted(String),
    /// Denied by this policy with this reason.
    Denied(&'static str, &'static str),
}

/// The `i`-th case of the mix: its context and what it must end as. The kinds cycle so that
/// every policy allows, redacts or denies in turn.
pub enum Case {
    /// A model input.
    Input(InputContext, Expected),
    /// A tool call.
    ToolCall(ToolCallContext, Expected),
}

fn metadata(i: usize) -> Metadata {
    Metadata::new(format!("agent-{}", i % 7), format!("session-{i}"))
}

fn input(i: usize, text: String) -> InputContext {
    InputContext::new(
        vec![Message::system("be brief"), Message::new(Role::User, text)],
        metadata(i),
    )
}

/// The `i`-th case.
pub fn case(i: usize) -> Case {
    match i % 8 {
        0 => Case::Input(input(i, format!("hello number {i}")), Expected::Allow),
        1 => Case::Input(
            input(i, format!("write to user{i}@example.com today")),
            Expected::Redacted("write to [EMAIL] today".to_owned()),
        ),
        2 => Case::Input(
            input(i, format!("a forbidden word, {i}")),
            Expected::Denied("code-forbidden", "the word is forbidden"),
        ),
        3 => Case::Input(
            input(i, format!("the service will veto this, {i}")),
            Expected::Denied("remote-block", "blocked by the remote service"),
        ),
        4 => Case::Input(
            input(i, format!("my number is 123-45-{:04}", i % 10_000)),
            Expected::Denied("rego-ssn", "Message contains a potential SSN."),
        ),
        5..=7 => {
            let (tool, expected) = match i % 8 {
                5 => ("web_search", Expected::Allow),
                6 => (
                    "delete_database",
                    Expected::Denied("rego-tools", "Tool is not in the approved list."),
                ),
                _ => ("summarize", Expected::Allow),
            };
            let mut arguments = serde_json::Map::new();
            arguments.insert("query".into(), serde_json::json!(format!("q{i}")));
            arguments.insert("n".into(), serde_json::json!(i));
            let call = ToolCallContext::new(
                tool,
                arguments,
                Message::new(Role::Assistant, "calling a tool"),
                metadata(i),
            );
            Case::ToolCall(call, expected)
        }
        _ => unreachable!(),
    }
}

fn check<C: Clone + std::fmt::Debug + PartialEq>(
    outcome: Result<portcullis::Evaluation<'_, C>, EngineError>,
    expected: &Expected,
    content: impl Fn(&C) -> Option<String>,
    original: &C,
) -> Result<(), String> {
    match (outcome, expected) {
        (Ok(evaluation), Expected::Allow) if evaluation.context() == original => Ok(()),
        (Ok(evaluation), Expected::Redacted(text))
            if content(evaluation.context()).as_deref() == Some(text.as_str()) =>
        {
            Ok(())
        }
        (Err(EngineError::Denied(denial)), Expected::Denied(policy, reason))
            if denial.policy_id() == *policy && denial.reason() == Some(*reason) =>
        {
            Ok(())
        }
        (Ok(evaluation), expected) => Err(format!(
            "expected {expected:?}, got an allowed context {:?}",
            evaluation.context()
        )),
        (Err(error), expected) => Err(format!("expected {expected:?}, got the error {error}")),
    }
}

/// Evaluates the `i`-th case on `engine` and checks its outcome.
pub async fn run_case(engine: &PolicyEngine, i: usize) -> Result<(), String> {
    match case(i) {
        Case::Input(context, expected) => check(
            engine.evaluate_input(&context).await,
            &expected,
            |context: &InputContext| context.messages.last().map(|m| m.content.clone()),
            &context,
        ),
        Case::ToolCall(context, expected) => check(
            engine.evaluate_tool_call(&context).await,
            &expected,
            |_: &ToolCallContext| None,
            &context,
        ),
    }
    .map_err(|problem| format!("case {i}: {problem}"))
}

/// Runs cases `range` all at once on `engine`; the problems of the ones that went wrong.
pub async fn run_concurrently(
    engine: &Arc<PolicyEngine>,
    range: std::ops::Range<usize>,
) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in range {
        let engine = Arc::clone(engine);
        tasks.spawn(async move { run_case(&engine, i).await });
    }
    let mut problems = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(problem)) => problems.push(problem),
            Err(error) => problems.push(format!("a task failed: {error}")),
        }
    }
    problems
}

/// The resident memory of this process, in bytes (Linux: `/proc/self/statm`, 4 KiB pages);
/// `None` elsewhere.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
