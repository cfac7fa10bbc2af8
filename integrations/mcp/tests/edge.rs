//! The guard as an attacker meets it: secrets hidden where the text policies did not look,
//! params that do not parse, methods the guard does not know, and two clients sharing one
//! upstream over streamable HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis_mcp::{
    DENIAL_ERROR_CODE, GuardedClient, GuardedServer, JsonRpcLines, UpstreamRelay, denial,
};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientRequest, CustomRequest, ErrorCode, GetPromptRequestParams,
    ReadResourceRequestParams, ResourceContents, ServerResult,
};
use rmcp::service::{NotificationContext, RoleClient, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use support::upstream::{LAUNCH, RECORD, Upstream};
use support::{HttpServer, InProcess, TestError, connect_in_process, engine, text, tool_guard};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn call(name: &'static str) -> CallToolRequestParams {
    CallToolRequestParams::new(name)
}

#[tokio::test]
async fn a_secret_only_in_structured_content_is_judged() -> Result<(), TestError> {
    let setup = InProcess::start().await?;
    let client = setup.client.peer();

    // A deny that matches only the structured result withholds the whole result.
    let launch = client.call_tool(call("structured_launch")).await?;
    assert_eq!(launch.is_error, Some(true));
    assert_eq!(launch.structured_content, None);
    assert!(!text(&launch).contains("0000"), "{}", text(&launch));
    let refusal = denial(&launch).ok_or("no denial in the result")?;
    assert_eq!(refusal.policy_id(), "no_launch_codes");
    let judged = setup.audit.contexts("output").pop().ok_or("no audit")?;
    assert_eq!(
        judged["response"]["content"],
        format!("Status ready.\n{{\"note\":\"{LAUNCH}\"}}")
    );

    // A redaction reaches the structured result though no text block changed.
    let secret = client.call_tool(call("structured_secret")).await?;
    assert_eq!(secret.is_error, Some(false));
    assert_eq!(
        secret.structured_content,
        Some(json!({"ssn": "[REDACTED]"}))
    );
    assert_eq!(text(&secret), "Record found.");

    // The client form judges it the same way.
    let guarded = GuardedClient::new(
        setup.upstream_client.peer().clone(),
        tool_guard(&engine().0),
    );
    let launch = guarded.call_tool(call("structured_launch")).await?;
    assert_eq!(launch.is_error, Some(true));
    assert_eq!(launch.structured_content, None);
    let secret = guarded.call_tool(call("structured_secret")).await?;
    assert_eq!(
        secret.structured_content,
        Some(json!({"ssn": "[REDACTED]"}))
    );
    Ok(())
}

/// A raw JSON-RPC client of a guarded server on in-process pipes, initialized; the guard
/// reads them as `portcullis proxy mcp` reads its stdio ([`JsonRpcLines`]).
struct RawClient {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    _guard: rmcp::service::RunningService<rmcp::RoleServer, GuardedServer>,
}

impl RawClient {
    async fn start(guarded: GuardedServer) -> Result<RawClient, TestError> {
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server_end);
        let serving = tokio::spawn(guarded.serve(JsonRpcLines::new(server_read, server_write)));
        let (read, mut write) = tokio::io::split(client_end);
        let mut lines = BufReader::new(read).lines();
        send(
            &mut write,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await?;
        lines.next_line().await?.ok_or("closed before initialize")?;
        let guard = serving.await??;
        send(
            &mut write,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await?;
        Ok(RawClient {
            lines,
            write,
            _guard: guard,
        })
    }

    /// Sends a request and reads the answer with its id.
    async fn request(&mut self, id: u64, method: &str, params: Value) -> Result<Value, TestError> {
        send(
            &mut self.write,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await?;
        loop {
            let message = self.next_message().await?;
            if message["id"] == id {
                return Ok(message);
            }
        }
    }

    /// Checks with a well-formed call (id `id`) that the session still works, guarded: the
    /// record is read with its SSN redacted.
    async fn reads_a_guarded_record(&mut self, id: u64) -> Result<(), TestError> {
        let answer = self
            .request(
                id,
                "tools/call",
                json!({"name": "read_file", "arguments": {"path": "/hr/jane"}}),
            )
            .await?;
        assert_eq!(
            answer["result"]["content"][0]["text"],
            "Employee: Jane Roe\nSSN: [REDACTED]"
        );
        Ok(())
    }

    /// The next message the guard writes (at most 10 s away).
    async fn next_message(&mut self) -> Result<Value, TestError> {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .map_err(|_| "no answer within 10 s")??
            .ok_or("the guard closed the connection")?;
        Ok(serde_json::from_str(&line)?)
    }
}

async fn send(
    write: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>,
    message: Value,
) -> Result<(), TestError> {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    write.write_all(&line).await?;
    Ok(())
}

fn guarded_over(upstream_client: &support::Client) -> GuardedServer {
    GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine().0))
}

#[tokio::test]
async fn tool_calls_whose_params_do_not_parse_never_reach_the_upstream() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    // Even listed to pass, MCP's own methods are never forwarded unchecked.
    let guarded = guarded_over(&upstream_client).pass_through_method("tools/call");
    let mut client = RawClient::start(guarded).await?;
    let mut id = 1;
    for arguments in [json!("x"), json!([]), json!(5), json!(true)] {
        for name in ["delete_database", "read_file"] {
            let answer = client
                .request(
                    id,
                    "tools/call",
                    json!({"name": name, "arguments": arguments}),
                )
                .await?;
            id += 1;
            assert_eq!(
                answer["error"]["code"],
                ErrorCode::INVALID_PARAMS.0,
                "{name} {arguments}: {answer}"
            );
        }
    }
    let answer = client
        .request(id, "tools/call", json!({"arguments": {}}))
        .await?;
    id += 1;
    assert!(answer.get("error").is_some(), "{answer}");
    // The upstream's own log: nothing arrived, neither as a tool call nor as anything else.
    assert_eq!(upstream.calls(), []);
    assert_eq!(upstream.custom_requests(), []);
    // A well-formed call still works, guarded.
    client.reads_a_guarded_record(id).await
}

/// Requests whose `params` is not an object do not fit any MCP message: each is answered with
/// an invalid-params error carrying its id (the client is not left waiting), and none reaches
/// the upstream, whatever its method.
#[tokio::test]
async fn requests_whose_params_are_not_an_object_are_answered_and_never_forwarded()
-> Result<(), TestError> {
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    // Even listed to pass, neither MCP's own methods nor a listed one get through unread.
    let guarded = guarded_over(&upstream_client)
        .pass_through_method("tools/call")
        .pass_through_method("vendor/echo");
    let mut client = RawClient::start(guarded).await?;
    let mut id = 1;
    for method in [
        "tools/call",
        "resources/read",
        "prompts/get",
        "tools/list",
        "vendor/echo",
    ] {
        for params in [
            json!("delete_database"),
            json!(["delete_database"]),
            json!(5),
            json!(true),
        ] {
            let answer = client.request(id, method, params.clone()).await?;
            assert_eq!(answer["id"], id, "{method} {params}: {answer}");
            assert_eq!(
                answer["error"]["code"],
                ErrorCode::INVALID_PARAMS.0,
                "{method} {params}: {answer}"
            );
            id += 1;
        }
    }
    // A request with a string id is answered with that id.
    send(
        &mut client.write,
        json!({"jsonrpc": "2.0", "id": "abc", "method": "tools/call", "params": "x"}),
    )
    .await?;
    let answer = client.next_message().await?;
    assert_eq!(answer["id"], "abc", "{answer}");
    assert_eq!(answer["error"]["code"], ErrorCode::INVALID_PARAMS.0);
    assert_eq!(upstream.calls(), []);
    assert_eq!(upstream.custom_requests(), []);
    // The session goes on: a well-formed call is answered, guarded.
    client.reads_a_guarded_record(id).await
}

/// Notifications of methods the guard does not know (a vendor's, or one only a server may
/// send) are dropped: the upstream never hears them, unless the method is listed to pass.
#[tokio::test]
async fn unknown_client_notifications_never_reach_the_upstream() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = guarded_over(&upstream_client).pass_through_method("vendor/listed");
    let mut client = RawClient::start(guarded).await?;
    for method in [
        "vendor/poke",
        "notifications/vendor/poke",
        "notifications/message",
        "notifications/tools/list_changed",
        "notifications/resources/updated",
    ] {
        send(
            &mut client.write,
            json!({"jsonrpc": "2.0", "method": method, "params": {"run": "rm -rf /"}}),
        )
        .await?;
    }
    // The listed one, sent last, arrives: the others had their chance to.
    send(
        &mut client.write,
        json!({"jsonrpc": "2.0", "method": "vendor/listed", "params": {"n": 1}}),
    )
    .await?;
    let mut waited = Duration::ZERO;
    while upstream.custom_notifications().is_empty() {
        assert!(
            waited < Duration::from_secs(10),
            "the listed notification did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    // A round trip through the guard and the upstream, for anything still on its way.
    let answer = client
        .request(
            1,
            "tools/call",
            json!({"name": "read_file", "arguments": {}}),
        )
        .await?;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(
        upstream.custom_notifications(),
        [("vendor/listed".to_owned(), Some(json!({"n": 1})))]
    );
    Ok(())
}

#[tokio::test]
async fn unknown_methods_are_refused_unless_listed() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let echo = |method: &str| {
        ClientRequest::CustomRequest(CustomRequest::new(method, Some(json!({"a": 1}))))
    };

    let (client, _guard) = connect_in_process(guarded_over(&upstream_client)).await?;
    let refused = client.peer().send_request(echo("vendor/echo")).await;
    let Err(ServiceError::McpError(error)) = refused else {
        panic!("expected a JSON-RPC error, got {refused:?}");
    };
    assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND);
    assert_eq!(upstream.custom_requests(), []);

    let listed = guarded_over(&upstream_client).pass_through_method("vendor/echo");
    let (client, _guard) = connect_in_process(listed).await?;
    let answer = client.peer().send_request(echo("vendor/echo")).await?;
    let ServerResult::CustomResult(answer) = answer else {
        panic!("expected the upstream's answer, got {answer:?}");
    };
    assert_eq!(answer.0, json!({"echo": "vendor/echo"}));
    // Only the listed method passes.
    let refused = client.peer().send_request(echo("vendor/other")).await;
    assert!(
        matches!(refused, Err(ServiceError::McpError(_))),
        "{refused:?}"
    );
    assert_eq!(
        upstream.custom_requests(),
        [("vendor/echo".to_owned(), Some(json!({"a": 1})))]
    );
    Ok(())
}

/// Checks `resources/read` and `prompts/get` through `read` and `prompt`.
async fn resources_and_prompts_scenario<R, P>(
    read: impl Fn(&'static str) -> R,
    prompt: impl Fn(&'static str) -> P,
    audit: &support::Audit,
) -> Result<(), TestError>
where
    R: Future<Output = Result<rmcp::model::ReadResourceResult, ServiceError>>,
    P: Future<Output = Result<rmcp::model::GetPromptResult, ServiceError>>,
{
    let hr = read("file:///hr.txt").await?;
    let Some(ResourceContents::TextResourceContents { text, .. }) = hr.contents.first() else {
        panic!("no text contents: {hr:?}");
    };
    assert_eq!(text, "Employee: Jane Roe\nSSN: [REDACTED]");
    let judged = audit.contexts("output").pop().ok_or("no audit")?;
    assert_eq!(judged["response"]["content"], RECORD);
    assert_eq!(judged["metadata"]["mcp_method"], "resources/read");
    assert_eq!(judged["metadata"]["arguments"]["uri"], "file:///hr.txt");

    let launch = read("file:///launch.txt").await;
    let Err(ServiceError::McpError(error)) = launch else {
        panic!("expected a refusal, got {launch:?}");
    };
    assert_eq!(error.code, DENIAL_ERROR_CODE);
    assert!(!error.message.contains("0000"), "{}", error.message);
    assert_eq!(
        error.data.as_ref().map(|data| &data["policy_id"]),
        Some(&json!("no_launch_codes"))
    );

    let hr = prompt("hr").await?;
    let texts: Vec<&str> = hr
        .messages
        .iter()
        .filter_map(|message| message.content.as_text().map(|text| text.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        ["Here is the record:", "Employee: Jane Roe\nSSN: [REDACTED]"]
    );
    let judged = audit.contexts("output").pop().ok_or("no audit")?;
    assert_eq!(
        judged["response"]["content"],
        format!("Here is the record:\n{RECORD}")
    );
    assert_eq!(judged["metadata"]["mcp_method"], "prompts/get");
    let launch = prompt("launch").await;
    let Err(ServiceError::McpError(error)) = launch else {
        panic!("expected a refusal, got {launch:?}");
    };
    assert_eq!(error.code, DENIAL_ERROR_CODE);
    Ok(())
}

#[tokio::test]
async fn resources_and_prompts_go_through_the_output_policies() -> Result<(), TestError> {
    let setup = InProcess::start().await?;
    let peer = setup.client.peer();
    resources_and_prompts_scenario(
        |uri| peer.read_resource(ReadResourceRequestParams::new(uri)),
        |name| peer.get_prompt(GetPromptRequestParams::new(name)),
        &setup.audit,
    )
    .await?;

    let (engine, audit) = engine();
    let guarded = GuardedClient::new(setup.upstream_client.peer().clone(), tool_guard(&engine));
    resources_and_prompts_scenario(
        |uri| guarded.read_resource(ReadResourceRequestParams::new(uri)),
        |name| guarded.get_prompt(GetPromptRequestParams::new(name)),
        &audit,
    )
    .await
}

/// A client that counts the `tools/list_changed` notifications it receives.
#[derive(Debug, Clone, Default)]
struct ListChanges(Arc<AtomicUsize>);

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl ListChanges {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A guard whose every session connects to `upstream` on streamable HTTP.
fn per_session_over(upstream: &HttpServer) -> GuardedServer {
    let (engine, _audit) = engine();
    let url = upstream.url.clone();
    GuardedServer::per_session(tool_guard(&engine), move |relay: UpstreamRelay| {
        let transport = StreamableHttpClientTransport::from_uri(url.as_str());
        async move { Ok(relay.serve(transport).await?) }
    })
}

#[tokio::test]
async fn each_http_client_has_its_own_upstream_session() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let upstream_http = HttpServer::start(upstream.clone()).await?;
    let guarded = per_session_over(&upstream_http);
    let guard_http = HttpServer::guard(guarded).await?;
    let connect = |changes: ListChanges| {
        changes.serve(StreamableHttpClientTransport::from_uri(
            guard_http.url.as_str(),
        ))
    };
    let (first, second) = (ListChanges::default(), ListChanges::default());
    let first_client = connect(first.clone()).await?;
    let second_client = connect(second.clone()).await?;
    assert_eq!(upstream.sessions(), 2, "one upstream session per client");

    // The upstream notifies the session that called: only its client hears it.
    first_client.call_tool(call("notify_me")).await?;
    let mut waited = Duration::ZERO;
    while first.count() == 0 {
        assert!(
            waited < Duration::from_secs(10),
            "the notification did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    second_client.call_tool(call("read_file")).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(second.count(), 0, "the other client heard it");
    assert_eq!(first.count(), 1);

    // Both are guarded.
    let refused = second_client.call_tool(call("delete_database")).await?;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(upstream.count("delete_database"), 0);
    Ok(())
}

#[tokio::test]
async fn sessions_with_an_upstream_of_their_own_are_bounded() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let upstream_http = HttpServer::start(upstream.clone()).await?;
    let guarded = per_session_over(&upstream_http).max_sessions(2);
    let guard_http = HttpServer::guard(guarded).await?;
    let first = guard_http.client().await?;
    let second = guard_http.client().await?;
    assert!(
        guard_http.client().await.is_err(),
        "a third session was served"
    );
    assert_eq!(upstream.sessions(), 2);
    // A session that ends frees its place.
    first.cancel().await?;
    let mut third = None;
    for _ in 0..200 {
        if let Ok(client) = guard_http.client().await {
            third = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let third = third.ok_or("the ended session's place was never freed")?;
    third.call_tool(call("read_file")).await?;
    second.call_tool(call("read_file")).await?;
    Ok(())
}
