//! Escalations through the guard, with real rmcp clients and servers on both sides: a client
//! that supports elicitation is asked, one that does not gets an error naming the approval
//! request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use portcullis_engine::{
    BoxError, Policy, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};
use portcullis_mcp::{GuardedClient, GuardedServer, ToolGuard, approval_request, denial};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::json;
use support::upstream::Upstream;
use support::{TestError, connect_in_process, text};

/// Escalates every `send_email` (id `ask_before_email`).
struct AskBeforeEmail;

#[async_trait]
impl Policy<ToolCallContext> for AskBeforeEmail {
    fn id(&self) -> &str {
        "ask_before_email"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.tool_name == "send_email" {
            PolicyDecision::escalate("email leaves the company")
        } else {
            PolicyDecision::allow()
        })
    }
}

fn engine() -> Arc<PolicyEngine> {
    let set = PolicySet::builder().tool_call(AskBeforeEmail).build();
    Arc::new(PolicyEngine::builder().policy_set(set).build())
}

/// An MCP client that declares form elicitation and answers every request with `action`
/// (and `approve: true` when it accepts), recording the messages it was shown.
#[derive(Clone)]
struct Person {
    action: ElicitationAction,
    approve: bool,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Person {
    fn new(action: ElicitationAction, approve: bool) -> Self {
        Person {
            action,
            approve,
            asked: Arc::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked
            .lock()
            .map(|asked| asked.clone())
            .unwrap_or_default()
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, Implementation::new("person-client", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request
            && let Ok(mut asked) = self.asked.lock()
        {
            asked.push(message);
        }
        let mut result = ElicitResult::new(self.action.clone());
        if self.action == ElicitationAction::Accept {
            result.content = Some(json!({ "approve": self.approve }));
        }
        Ok(result)
    }
}

fn email() -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("send_email");
    params.arguments = Some(
        json!({"to": "bob@partner.com", "body": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    params
}

/// The upstream, the guard in front of it, and `person` as the client in front of the guard.
async fn through_guard<C: ClientHandler>(
    person: C,
) -> Result<
    (
        Upstream,
        rmcp::service::RunningService<RoleClient, C>,
        impl Drop,
    ),
    TestError,
> {
    let upstream = Upstream::default();
    let (upstream_client, upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedServer::new(upstream_client.peer().clone(), ToolGuard::new(engine()));
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(guarded.serve(server_end));
    let client = person.serve(client_end).await?;
    let guard = serving.await??;
    Ok((
        upstream,
        client,
        Box::new((upstream_client, upstream_server, guard)),
    ))
}

#[tokio::test]
async fn an_approval_through_elicitation_lets_the_call_run_once() -> Result<(), TestError> {
    let person = Person::new(ElicitationAction::Accept, true);
    let (upstream, client, _keep) = through_guard(person.clone()).await?;
    let result = client.call_tool(email()).await?;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(text(&result), "sent to \"bob@partner.com\"");
    assert_eq!(upstream.count("send_email"), 1);
    let asked = person.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("send_email")
            && asked[0].contains("bob@partner.com")
            && asked[0].contains("email leaves the company"),
        "{}",
        asked[0]
    );
    // The grant was single use: the next identical call asks again.
    client.call_tool(email()).await?;
    assert_eq!(person.asked().len(), 2);
    assert_eq!(upstream.count("send_email"), 2);
    Ok(())
}

#[tokio::test]
async fn a_declined_or_unticked_approval_refuses_the_call() -> Result<(), TestError> {
    for (person, why) in [
        (Person::new(ElicitationAction::Decline, false), "declined"),
        (Person::new(ElicitationAction::Cancel, false), "cancelled"),
        (
            Person::new(ElicitationAction::Accept, false),
            "did not tick",
        ),
    ] {
        let (upstream, client, _keep) = through_guard(person.clone()).await?;
        let result = client.call_tool(email()).await?;
        assert_eq!(result.is_error, Some(true));
        assert!(text(&result).contains(why), "{}", text(&result));
        let denial = denial(&result).expect("a refusal by the escalating policy");
        assert_eq!(denial.policy_id(), "ask_before_email");
        assert_eq!(upstream.count("send_email"), 0, "the tool did not run");
        assert_eq!(person.asked().len(), 1);
    }
    Ok(())
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_approval_request() -> Result<(), TestError> {
    let (upstream, client, _keep) = through_guard(()).await?;
    let result = client.call_tool(email()).await?;
    assert_eq!(result.is_error, Some(true));
    let request = approval_request(&result).expect("the approval request");
    assert_eq!(request.policy_ids, ["ask_before_email"]);
    assert_eq!(request.context["arguments"]["to"], "bob@partner.com");
    let message = text(&result);
    assert!(
        message.contains(&request.action_digest) && message.contains(&request.id),
        "{message}"
    );
    assert_eq!(upstream.count("send_email"), 0);
    // Other tools are untouched by the escalation.
    let mut search = CallToolRequestParams::new("search");
    search.arguments = json!({"query": "x"}).as_object().cloned();
    let result = client.call_tool(search).await?;
    assert_ne!(result.is_error, Some(true));
    // A tool whose calls need an approval is still listed.
    let tools = client.list_all_tools().await?;
    assert!(tools.iter().any(|tool| tool.name == "send_email"));
    Ok(())
}

#[tokio::test]
async fn the_client_form_reports_the_request_and_a_recorded_grant_lets_the_call_through()
-> Result<(), TestError> {
    let engine = engine();
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedClient::new(
        upstream_client.peer().clone(),
        ToolGuard::new(Arc::clone(&engine)),
    );
    let result = guarded.call_tool(email()).await?;
    let request = approval_request(&result).expect("the approval request");
    assert_eq!(upstream.count("send_email"), 0);
    engine
        .approvals()
        .grant(
            &request.action_digest,
            "on-call",
            std::time::Duration::from_secs(60),
        )
        .await?;
    let result = guarded.call_tool(email()).await?;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(upstream.count("send_email"), 1);
    assert!(approval_request(&result).is_none());
    Ok(())
}
