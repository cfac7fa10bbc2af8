//! The policy-server Rego backend (`server`) against a real OPA-REST-compatible server on 127.0.0.1 that
//! evaluates the Rego for real (regorus).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// A test fails by panicking: unwrapping is how these tests say "this must work".

use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_engine::{
    EngineError, InputContext, Message, Metadata, OnError, OutputContext, Policy, PolicyDecision,
    PolicyEngine, PolicySet, Redaction, ToolCallContext, TransformOperation,
};
use portcullis_rego::server::{
    RegoServerClient, RegoServerClientOptions, RegoServerInputPolicy, RegoServerOutputPolicy,
    RegoServerToolCallPolicy,
};
use portcullis_rego::server::{RemoteError, RemoteErrorKind};
use portcullis_testing::{EvaluateServer, RegoServer, Reply};
use serde_json::json;

fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-1").with_timestamp("2026-01-02T03:04:05.678Z")
}

fn input(text: &str) -> InputContext {
    InputContext::new(vec![Message::user(text)], metadata())
}

fn output(text: &str) -> OutputContext {
    OutputContext::new(Message::assistant(text), metadata())
}

fn tool_call(tool: &str, path: &str) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("path".into(), json!(path));
    ToolCallContext::new(tool, arguments, Message::assistant("calling"), metadata())
}

/// Object decisions: the `decision` rule is a whole decision object.
const INPUT_OBJECT_STYLE: &str = r#"
package portcullis.input

default decision := {"decision": "allow"}

decision := {"decision": "deny", "reason": "no passwords, please"} if {
    some message in input.messages
    contains(lower(message.content), "password")
}

decision := {"decision": "audit", "reason": "mentions the CEO"} if {
    some message in input.messages
    contains(message.content, "CEO")
}
"#;

/// String decisions completed by sibling rules.
const OUTPUT_STRING_STYLE: &str = r#"
package portcullis.output

ssn := `\d{3}-\d{2}-\d{4}`

default decision := "allow"

decision := "redact" if regex.match(ssn, input.response.content)

redactions := [{"field": "response.content", "strategy": "replace", "pattern": ssn, "replacement": "***-**-****"}]
"#;

const TOOL_CALL_STRING_STYLE: &str = r#"
package portcullis.tool_call

default decision := "allow"

decision := "deny" if {
    input.tool_name == "read_file"
    startswith(input.arguments.path, "/etc/")
}

decision := "transform" if {
    input.tool_name == "search"
}

reason := sprintf("%s may not read %s", [input.tool_name, input.arguments.path])

transformation := {"operations": [{"op": "set", "field": "arguments.safe_search", "value": true}]}
"#;

const BOOLEAN_STYLE: &str = r#"
package portcullis.boolean

default decision := false

decision if input.metadata.agent_id == "agent-7"

reason := "only agent-7 may talk"
"#;

async fn server_with_policies() -> (RegoServer, RegoServerClientOptions) {
    let server = RegoServer::start().await.unwrap();
    let options = RegoServerClientOptions::new(server.url());
    let client = RegoServerClient::new(options.clone()).unwrap();
    for (id, source) in [
        ("input.rego", INPUT_OBJECT_STYLE),
        ("output.rego", OUTPUT_STRING_STYLE),
        ("tool_call.rego", TOOL_CALL_STRING_STYLE),
        ("boolean.rego", BOOLEAN_STYLE),
    ] {
        client.put_policy(id, source).await.unwrap();
    }
    (server, options)
}

#[tokio::test]
async fn object_decisions_come_back() {
    let (server, options) = server_with_policies().await;
    let policy = RegoServerInputPolicy::new("input", options, "portcullis/input").unwrap();
    assert_eq!(
        policy.evaluate(&input("hello")).await.unwrap(),
        PolicyDecision::allow()
    );
    assert_eq!(
        policy.evaluate(&input("my Password is x")).await.unwrap(),
        PolicyDecision::deny("no passwords, please")
    );
    assert_eq!(
        policy.evaluate(&input("the CEO said so")).await.unwrap(),
        PolicyDecision::audit("mentions the CEO")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn string_decisions_are_completed_by_sibling_rules() {
    let (server, options) = server_with_policies().await;
    let output_policy =
        RegoServerOutputPolicy::new("ssn", options.clone(), "portcullis.output").unwrap();
    assert_eq!(
        output_policy.evaluate(&output("fine")).await.unwrap(),
        PolicyDecision::allow()
    );
    assert_eq!(
        output_policy
            .evaluate(&output("it is 123-45-6789"))
            .await
            .unwrap(),
        PolicyDecision::redact(
            [Redaction::replace("response.content", r"\d{3}-\d{2}-\d{4}")
                .with_replacement("***-**-****")]
        )
    );

    let tool_policy =
        RegoServerToolCallPolicy::new("tools", options.clone(), "portcullis/tool_call").unwrap();
    assert_eq!(
        tool_policy
            .evaluate(&tool_call("read_file", "/etc/shadow"))
            .await
            .unwrap(),
        PolicyDecision::deny("read_file may not read /etc/shadow")
    );
    assert_eq!(
        tool_policy
            .evaluate(&tool_call("search", "cats"))
            .await
            .unwrap(),
        PolicyDecision::transform([TransformOperation::set("arguments.safe_search", true)])
    );
    assert_eq!(
        tool_policy
            .evaluate(&tool_call("read_file", "/home/me/notes"))
            .await
            .unwrap(),
        PolicyDecision::allow()
    );

    // Through an engine the decisions take effect.
    let engine = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .output(output_policy)
                .tool_call(tool_policy)
                .build(),
        )
        .build();
    let context = output("call 123-45-6789 now");
    let evaluation = engine.evaluate_output(&context).await.unwrap();
    assert_eq!(
        evaluation.context().response.content,
        "call ***-**-**** now"
    );
    let context = tool_call("search", "cats");
    let evaluation = engine.evaluate_tool_call(&context).await.unwrap();
    assert_eq!(evaluation.context().arguments["safe_search"], true);
    let denied = engine
        .evaluate_tool_call(&tool_call("read_file", "/etc/passwd"))
        .await
        .unwrap_err();
    assert_eq!(
        denied.as_denial().and_then(|denial| denial.reason()),
        Some("read_file may not read /etc/passwd")
    );
    assert_eq!(denied.policy_id(), "tools");
    server.shutdown().await;
}

#[tokio::test]
async fn boolean_decisions_and_a_path_to_the_decision_rule() {
    let (server, options) = server_with_policies().await;
    let policy =
        RegoServerInputPolicy::new("boolean", options.clone(), "portcullis/boolean").unwrap();
    assert_eq!(
        policy.evaluate(&input("hi")).await.unwrap(),
        PolicyDecision::allow()
    );
    let stranger = InputContext::new(vec![Message::user("hi")], Metadata::new("agent-9", "s"));
    assert_eq!(
        policy.evaluate(&stranger).await.unwrap(),
        PolicyDecision::deny("only agent-7 may talk")
    );

    // The rule itself: a bare boolean, without siblings.
    let rule =
        RegoServerInputPolicy::new("rule", options.clone(), "portcullis/boolean/decision").unwrap();
    assert_eq!(
        rule.evaluate(&stranger).await.unwrap(),
        PolicyDecision::deny("denied by data.portcullis.boolean.decision")
    );
    // The object rule itself.
    let rule = RegoServerInputPolicy::new("rule", options, "portcullis/input/decision").unwrap();
    assert_eq!(
        rule.evaluate(&input("password")).await.unwrap(),
        PolicyDecision::deny("no passwords, please")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn requests_are_shaped_as_the_opa_api_expects() {
    let server = RegoServer::start_with_token("t0ken").await.unwrap();
    let options = RegoServerClientOptions::new(server.url()).bearer_token("t0ken");
    let client = RegoServerClient::new(options.clone()).unwrap();
    client
        .put_policy("teams/input", INPUT_OBJECT_STYLE)
        .await
        .unwrap();
    let policy = RegoServerInputPolicy::new("input", options, "data.portcullis.input").unwrap();
    let context = input("hello");
    policy.evaluate(&context).await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let put = &requests[0];
    assert_eq!(put.method, "PUT");
    assert_eq!(put.path, "/v1/policies/teams/input");
    assert_eq!(put.header("content-type"), Some("text/plain"));
    assert_eq!(put.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(put.body, INPUT_OBJECT_STYLE.as_bytes());
    let post = &requests[1];
    assert_eq!(post.method, "POST");
    assert_eq!(post.path, "/v1/data/portcullis/input");
    assert_eq!(post.header("content-type"), Some("application/json"));
    assert_eq!(post.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(post.json(), Some(json!({ "input": context })));

    // Without the token the server's error comes back whole.
    let anonymous = RegoServerInputPolicy::new(
        "input",
        RegoServerClientOptions::new(server.url()),
        "portcullis/input",
    )
    .unwrap();
    let error = anonymous.evaluate(&context).await.unwrap_err();
    let error = error.downcast::<RemoteError>().unwrap();
    assert_eq!(error.status(), Some(401));
    let service = error.service_error().unwrap();
    assert_eq!(service.code, "unauthorized");
    assert_eq!(service.message, "request rejected by administrative policy");
    assert!(
        error.to_string().ends_with(
            "HTTP 401 Unauthorized: unauthorized: request rejected by administrative policy"
        ),
        "{error}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn policy_upload_errors_carry_the_servers_code_message_and_locations() {
    let server = RegoServer::start().await.unwrap();
    let client = RegoServerClient::new(RegoServerClientOptions::new(server.url())).unwrap();
    let error = client
        .put_policy("broken", "package broken\n\ndecision := if {\n")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), RemoteErrorKind::Status);
    assert_eq!(error.status(), Some(400));
    let service = error.service_error().unwrap();
    assert_eq!(service.code, "invalid_parameter");
    assert_eq!(
        service.message,
        "error(s) occurred while compiling module(s)"
    );
    assert_eq!(service.details.len(), 1);
    assert!(
        service.details[0].starts_with("rego_parse_error: "),
        "{service:?}"
    );
    assert!(service.details[0].ends_with("(broken)"), "{service:?}");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "PUT {}/v1/policies/broken: HTTP 400 Bad Request: invalid_parameter: error(s) occurred while compiling module(s); rego_parse_error: ",
            server.url()
        )),
        "{text}"
    );

    // A refused upload leaves the server as it was: the package is still undefined.
    let policy = RegoServerInputPolicy::new(
        "broken",
        RegoServerClientOptions::new(server.url()),
        "broken",
    )
    .unwrap();
    let error = policy.evaluate(&input("x")).await.unwrap_err();
    assert!(
        error.to_string().contains("policy produced no decision"),
        "{error}"
    );

    // An id that cannot name a policy is refused before any request.
    let error = client.put_policy("  ", "package x").await.unwrap_err();
    assert_eq!(error.kind(), RemoteErrorKind::InvalidRequest);
    assert!(
        error
            .to_string()
            .contains("invalid policy id \"  \": it is empty"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 2);

    // Deleting a policy: the server answers, and a second delete is the server's 404.
    client
        .put_policy("x", "package x\n\ny := 1\n")
        .await
        .unwrap();
    client.delete_policy("x").await.unwrap();
    let error = client.delete_policy("x").await.unwrap_err();
    assert_eq!(error.status(), Some(404));
    assert_eq!(error.service_error().unwrap().code, "resource_not_found");
    server.shutdown().await;
}

#[tokio::test]
async fn undefined_and_malformed_documents_are_evaluation_errors() {
    let (server, options) = server_with_policies().await;
    let client = RegoServerClient::new(options.clone()).unwrap();
    client
        .put_policy(
            "odd.rego",
            r#"
            package odd

            no_default_decision := "allow" if input.never

            decision := 42

            only_siblings := {"reason": "x"}
            "#,
        )
        .await
        .unwrap();
    client
        .put_policy(
            "partial.rego",
            "package partial\n\ndecision := \"allow\" if input.metadata.agent_id == \"someone else\"\n",
        )
        .await
        .unwrap();

    let cases = [
        (
            "not/loaded",
            "policy produced no decision: `data.not.loaded` is undefined (no `result`)",
        ),
        (
            "partial",
            "`data.partial` has no `decision` rule (its rules: none)",
        ),
        (
            "odd",
            "`data.odd` decision is 42: expected an object, a string or a boolean",
        ),
        (
            "odd/only_siblings",
            "`data.odd.only_siblings` has no `decision` rule (its rules: reason)",
        ),
    ];
    for (path, message) in cases {
        for on_error in [OnError::Deny, OnError::Allow] {
            let policy = RegoServerInputPolicy::new("remote", options.clone(), path).unwrap();
            let engine = PolicyEngine::builder()
                .policy_set(
                    PolicySet::builder()
                        .input(policy)
                        .on_error(on_error)
                        .build(),
                )
                .build();
            let context = input("hello");
            let result = engine.evaluate_input(&context).await;
            match on_error {
                OnError::Deny => {
                    let Err(EngineError::Evaluation(error)) = result else {
                        panic!("{path}: expected an evaluation error");
                    };
                    let remote = error.cause().downcast_ref::<RemoteError>().unwrap();
                    assert_eq!(remote.kind(), RemoteErrorKind::Shape, "{path}");
                    assert_eq!(remote.status(), Some(200), "{path}");
                    assert!(remote.to_string().contains(message), "{path}: {remote}");
                }
                OnError::Allow => assert!(result.is_ok(), "{path}"),
            }
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn evaluation_failures_on_the_server_surface_its_error() {
    let server = RegoServer::start().await.unwrap();
    let options = RegoServerClientOptions::new(server.url());
    RegoServerClient::new(options.clone())
        .unwrap()
        .put_policy(
            "conflict",
            // Two complete definitions with different values: OPA's eval_conflict_error.
            "package conflict\n\ndecision := \"allow\" if true\n\ndecision := \"deny\" if true\n",
        )
        .await
        .unwrap();
    let policy = RegoServerInputPolicy::new("conflict", options, "conflict").unwrap();
    let error = policy.evaluate(&input("x")).await.unwrap_err();
    let error = error.downcast::<RemoteError>().unwrap();
    assert_eq!(error.kind(), RemoteErrorKind::Status);
    assert_eq!(error.status(), Some(500));
    assert_eq!(error.service_error().unwrap().code, "internal_error");
    assert!(
        error
            .to_string()
            .contains("HTTP 500 Internal Server Error: internal_error: "),
        "{error}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn transport_failures_follow_on_error() {
    // Refused: nothing listens.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    // A server that never answers (a hung policy server).
    let stalled = EvaluateServer::replying(Reply::stall()).await.unwrap();
    let timeout = Duration::from_millis(300);

    for (url, kind) in [
        (refused, RemoteErrorKind::Connect),
        (stalled.url(), RemoteErrorKind::TimedOut),
    ] {
        let options = RegoServerClientOptions::new(url).timeout(timeout);
        for on_error in [OnError::Deny, OnError::Allow] {
            let policy = RegoServerInputPolicy::new("remote", options.clone(), "p").unwrap();
            let engine = PolicyEngine::builder()
                .policy_set(
                    PolicySet::builder()
                        .input(policy)
                        .on_error(on_error)
                        .build(),
                )
                .build();
            let started = Instant::now();
            let context = input("hello");
            let result = engine.evaluate_input(&context).await;
            assert!(started.elapsed() < timeout + Duration::from_secs(2));
            match (on_error, result) {
                (OnError::Deny, Err(EngineError::Evaluation(error))) => {
                    let remote = error.cause().downcast_ref::<RemoteError>().unwrap();
                    assert_eq!(remote.kind(), kind, "{remote}");
                }
                (OnError::Allow, Ok(evaluation)) => assert!(evaluation.decisions().is_empty()),
                (on_error, result) => panic!("{on_error:?}: unexpected {:?}", result.err()),
            }
        }
    }
    stalled.shutdown().await;
}

#[tokio::test]
async fn concurrent_evaluations_share_one_client() {
    let (server, options) = server_with_policies().await;
    let policy =
        Arc::new(RegoServerInputPolicy::new("input", options, "portcullis/input").unwrap());
    let after_upload = server.connections_accepted();
    let mut tasks = tokio::task::JoinSet::new();
    for call in 0..24 {
        let policy = Arc::clone(&policy);
        tasks.spawn(async move {
            let text = if call % 2 == 0 { "hello" } else { "password" };
            (
                call,
                policy
                    .evaluate(&input(text))
                    .await
                    .map_err(|e| e.to_string()),
            )
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (call, decision) = joined.unwrap();
        let expected = if call % 2 == 0 {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("no passwords, please")
        };
        assert_eq!(decision.unwrap(), expected);
    }
    let opened = server.connections_accepted() - after_upload;
    assert!(opened <= 24, "opened {opened}");
    for _ in 0..5 {
        policy.evaluate(&input("hello")).await.unwrap();
    }
    assert_eq!(
        server.connections_accepted() - after_upload,
        opened,
        "later calls reuse pooled connections"
    );
    server.shutdown().await;
}

#[test]
fn bad_package_paths_fail_at_construction() {
    let options = RegoServerClientOptions::new("http://localhost:8181");
    let error = RegoServerInputPolicy::new("p", options.clone(), "").unwrap_err();
    assert_eq!(error.to_string(), r#"invalid package path "": it is empty"#);
    let error = RegoServerInputPolicy::new("p", options, "a//b").unwrap_err();
    assert_eq!(
        error.to_string(),
        r#"invalid package path "a//b": it has an empty segment"#
    );
    let error = RegoServerClient::new(RegoServerClientOptions::new("localhost:8181")).unwrap_err();
    assert!(error.to_string().starts_with("invalid base URL"), "{error}");
}

#[tokio::test]
async fn ids_and_paths_cannot_name_other_documents_of_the_server() {
    // A policy id or package path from configuration stays under /v1/policies or /v1/data:
    // `..`, `.` and control characters are refused before any request is sent.
    let server = EvaluateServer::start().await.expect("server");
    let client = RegoServerClient::new(RegoServerClientOptions::new(server.url())).expect("client");
    for id in ["../data/x", "a/../../b", "./x", "a/..", "x\0y", "a/\u{7f}"] {
        let error = client.put_policy(id, "package x").await.expect_err(id);
        assert_eq!(
            error.kind(),
            RemoteErrorKind::InvalidRequest,
            "{id}: {error}"
        );
        assert!(
            error.to_string().contains("invalid policy id"),
            "{id}: {error}"
        );
        let error = client.delete_policy(id).await.expect_err(id);
        assert_eq!(
            error.kind(),
            RemoteErrorKind::InvalidRequest,
            "{id}: {error}"
        );
    }
    for path in ["a/../b", "./a", "a/\0", "a/b\tc"] {
        let error = client.evaluate(path, &json!({})).await.expect_err(path);
        assert_eq!(
            error.kind(),
            RemoteErrorKind::InvalidRequest,
            "{path}: {error}"
        );
        let options = RegoServerClientOptions::new(server.url());
        assert!(
            RegoServerInputPolicy::new("p", options, path).is_err(),
            "{path}"
        );
    }
    assert!(server.requests().is_empty(), "{:?}", server.requests());
    // The control: a plain id does reach the server.
    client
        .put_policy("team/pii", "package x")
        .await
        .expect("plain id");
    assert_eq!(server.requests()[0].path, "/v1/policies/team/pii");
    server.shutdown().await;
}
