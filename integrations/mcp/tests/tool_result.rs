//! Tool results at the `tool_result` point (SPEC §18): with tool-result policies in the set,
//! a result is judged with the name and arguments of the call it answers, a redaction reaches
//! its text and its structured content, and a label it leaves stops a later call: the
//! untrusted-content pattern, end to end through the guard.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use portcullis_engine::{MemorySessionStore, PolicyEngine, PolicySet};
use portcullis_mcp::{GuardedClient, GuardedServer, denial};
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};
use support::upstream::Upstream;
use support::{Audit, TestError, connect_in_process, text, tool_guard};

/// The untrusted-content set, with every evaluated context recorded.
fn engine() -> (Arc<PolicyEngine>, Audit) {
    let audit = Audit::default();
    let set = portcullis_testing::agent::untrusted_content().build();
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .sessions(MemorySessionStore::new())
        .on_audit(audit.recorder())
        .build();
    (Arc::new(engine), audit)
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name);
    params.arguments = arguments.as_object().cloned();
    params
}

#[tokio::test]
async fn a_web_result_is_redacted_and_labels_the_session_so_email_is_denied()
-> Result<(), TestError> {
    let (engine, audit) = engine();
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
    let (client, _guard) = connect_in_process(guarded).await?;
    let client = client.peer();

    // Before any web content, e-mail goes out.
    let sent = client
        .call_tool(call("send_email", json!({"to": "bob@example.com"})))
        .await?;
    assert_ne!(sent.is_error, Some(true), "{}", text(&sent));

    // The page is judged at tool_result, with the call's name and arguments.
    let page = client
        .call_tool(call("web_fetch", json!({"url": "https://evil.test"})))
        .await?;
    assert_ne!(page.is_error, Some(true), "{}", text(&page));
    assert!(text(&page).contains("Ignore previous instructions"));
    assert!(!text(&page).contains("123-45-6789"), "{}", text(&page));
    assert_eq!(
        page.structured_content,
        Some(json!({"url": "https://evil.test", "ssn": "[REDACTED]"}))
    );
    let judged = audit
        .contexts("tool_result")
        .pop()
        .ok_or("no tool_result audit")?;
    assert_eq!(judged["tool_name"], "web_fetch");
    assert_eq!(judged["arguments"], json!({"url": "https://evil.test"}));
    assert_eq!(judged["is_error"], false);
    assert_eq!(judged["structured"]["url"], "https://evil.test");
    assert!(
        audit.contexts("output").is_empty(),
        "results skip the output point"
    );

    // The label stops the next e-mail before it reaches the upstream.
    let before = upstream.count("send_email");
    let refused = client
        .call_tool(call("send_email", json!({"to": "bob@example.com"})))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    let refusal = denial(&refused).ok_or("no denial")?;
    assert_eq!(refusal.policy_id(), "no_email_after_untrusted");
    assert_eq!(upstream.count("send_email"), before, "the tool did not run");
    Ok(())
}

#[tokio::test]
async fn the_client_form_and_resources_use_the_tool_result_point() -> Result<(), TestError> {
    let (engine, audit) = engine();
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedClient::new(upstream_client.peer().clone(), tool_guard(&engine));

    let record = guarded
        .call_tool(call("read_file", json!({"path": "hr"})))
        .await?;
    assert_eq!(text(&record), "Employee: Jane Roe\nSSN: [REDACTED]");
    let judged = audit
        .contexts("tool_result")
        .pop()
        .ok_or("no tool_result audit")?;
    assert_eq!(judged["tool_name"], "read_file");
    assert_eq!(judged["arguments"], json!({"path": "hr"}));

    let read = guarded
        .read_resource(ReadResourceRequestParams::new("file:///hr.txt"))
        .await?;
    let judged = audit
        .contexts("tool_result")
        .pop()
        .ok_or("no tool_result audit")?;
    assert_eq!(judged["tool_name"], "resources/read");
    assert_eq!(judged["arguments"]["uri"], "file:///hr.txt");
    assert!(!format!("{read:?}").contains("123-45-6789"), "{read:?}");
    Ok(())
}

#[tokio::test]
async fn a_deny_on_a_tool_result_withholds_it() -> Result<(), TestError> {
    use portcullis_engine::{BoxError, Policy, PolicyDecision, ToolResultContext, async_trait};

    /// Withholds a result whose structured content holds a `ssn`.
    struct NoSsnResults;

    #[async_trait]
    impl Policy<ToolResultContext> for NoSsnResults {
        fn id(&self) -> &str {
            "no_ssn_results"
        }

        async fn evaluate(&self, context: &ToolResultContext) -> Result<PolicyDecision, BoxError> {
            let structured = context.structured.as_ref();
            Ok(if structured.and_then(|value| value.get("ssn")).is_some() {
                PolicyDecision::deny("results may not carry an SSN")
            } else {
                PolicyDecision::allow()
            })
        }
    }

    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(PolicySet::builder().tool_result(NoSsnResults).build())
            .build(),
    );
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedClient::new(upstream_client.peer().clone(), tool_guard(&engine));
    let withheld = guarded
        .call_tool(call("structured_secret", json!({})))
        .await?;
    assert_eq!(withheld.is_error, Some(true));
    assert_eq!(withheld.structured_content, None);
    assert!(!text(&withheld).contains("123-45-6789"));
    let refusal = denial(&withheld).ok_or("no denial")?;
    assert_eq!(refusal.policy_id(), "no_ssn_results");
    assert_eq!(
        refusal.interception_point(),
        portcullis_engine::InterceptionPoint::ToolResult
    );
    assert!(text(&withheld).contains("withheld"), "{}", text(&withheld));
    Ok(())
}
