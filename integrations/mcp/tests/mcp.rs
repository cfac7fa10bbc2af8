//! The guard with rmcp on both sides, over the real protocol: in-process pipes, streamable
//! HTTP on 127.0.0.1, and an upstream started as a child process on stdio.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use portcullis_engine::InterceptionPoint;
use portcullis_mcp::{GuardedClient, GuardedServer, UpstreamRelay, denial};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, JsonObject,
    ReadResourceRequestParams, ResourceContents, Tool,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use support::upstream::{INSTRUCTIONS, Upstream};
use support::{Audit, HttpServer, InProcess, TestError, connect_in_process, engine, tool_guard};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The two ways a test calls tools: through a guarded server (an rmcp client's peer) or
/// through the client form of the guard.
trait Tools {
    async fn call(
        &self,
        name: &'static str,
        arguments: Value,
    ) -> Result<CallToolResult, ServiceError>;
    async fn tools(&self) -> Result<Vec<Tool>, ServiceError>;
}

fn params(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name);
    if let Value::Object(arguments) = arguments {
        params.arguments = Some(arguments);
    }
    params
}

impl Tools for Peer<RoleClient> {
    async fn call(
        &self,
        name: &'static str,
        arguments: Value,
    ) -> Result<CallToolResult, ServiceError> {
        self.call_tool(params(name, arguments)).await
    }

    async fn tools(&self) -> Result<Vec<Tool>, ServiceError> {
        self.list_all_tools().await
    }
}

impl Tools for GuardedClient {
    async fn call(
        &self,
        name: &'static str,
        arguments: Value,
    ) -> Result<CallToolResult, ServiceError> {
        self.call_tool(params(name, arguments)).await
    }

    async fn tools(&self) -> Result<Vec<Tool>, ServiceError> {
        self.list_all_tools().await
    }
}

fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect()
}

fn last_arguments(upstream: &Upstream, name: &str) -> Option<JsonObject> {
    upstream
        .calls()
        .into_iter()
        .rev()
        .find(|(tool, _)| tool == name)
        .and_then(|(_, arguments)| arguments)
}

/// Every tool check of the assignment, through `tools`, against the scripted upstream
/// whose record is `upstream`.
async fn tool_scenario(
    tools: &impl Tools,
    upstream: &Upstream,
    audit: &Audit,
) -> Result<(), TestError> {
    // tools/list: `delete_database` is denied by policy, so it is hidden.
    let names: Vec<String> = tools
        .tools()
        .await?
        .iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "send_email",
            "read_file",
            "lookup_employee",
            "launch_status",
            "search"
        ]
    );
    let listed = audit.contexts("tool_call");
    assert!(
        listed
            .iter()
            .all(|context| context["metadata"]["mcp_method"] == "tools/list")
    );
    // (`guard_tools` sets the limit of `search`, so later policies see it.)
    assert!(
        listed
            .iter()
            .filter(|context| context["tool_name"] != "search")
            .all(|context| context["arguments"] == json!({}))
    );

    // An allowed call reaches the upstream unchanged.
    let sent = tools
        .call("send_email", json!({"to": "ann@example.com", "body": "hi"}))
        .await?;
    assert_eq!(sent.is_error, Some(false));
    assert_eq!(texts(&sent), [r#"sent to "ann@example.com""#]);
    assert_eq!(upstream.count("send_email"), 1);
    let checked = audit
        .contexts("tool_call")
        .pop()
        .ok_or("no tool-call audit")?;
    assert_eq!(checked["tool_name"], "send_email");
    assert_eq!(checked["metadata"]["mcp_method"], "tools/call");
    assert_eq!(checked["metadata"]["agent_id"], "test-agent");
    assert_eq!(checked["metadata"]["session_id"], "session-1");
    assert_eq!(checked["calling_message"]["role"], "assistant");
    assert!(
        checked["calling_message"]["content"]
            .as_str()
            .is_some_and(|text| text.contains("send_email"))
    );

    // A denied call is an error result with the reason; the upstream is never called.
    let refused = tools
        .call("send_email", json!({"to": "eve@evil.test", "body": "hi"}))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        texts(&refused)[0].contains("mail may only go to example.com"),
        "{:?}",
        texts(&refused)
    );
    let refusal = denial(&refused).ok_or("no denial in the result")?;
    assert_eq!(refusal.policy_id(), "no_external_email");
    assert_eq!(refusal.interception_point(), InterceptionPoint::ToolCall);
    assert_eq!(upstream.count("send_email"), 1);

    // A tool hidden from the list and called anyway is still denied.
    let destroyed = tools.call("delete_database", json!({})).await?;
    assert_eq!(destroyed.is_error, Some(true));
    assert_eq!(
        denial(&destroyed)
            .map(|d| d.policy_id().to_owned())
            .as_deref(),
        Some("guard_tools")
    );
    assert_eq!(upstream.count("delete_database"), 0);

    // A tool the upstream does not list is still checked: its arguments are redacted.
    let secret = tools
        .call("secret_tool", json!({"query": "who has 111-22-3333?"}))
        .await?;
    assert_eq!(secret.is_error, Some(false));
    assert_eq!(
        last_arguments(upstream, "secret_tool").map(Value::Object),
        Some(json!({"query": "who has [REDACTED]?"}))
    );

    // A transformation rewrites the arguments sent upstream.
    tools
        .call("search", json!({"query": "invoices", "limit": 50}))
        .await?;
    assert_eq!(
        last_arguments(upstream, "search").map(Value::Object),
        Some(json!({"query": "invoices", "limit": 5}))
    );

    // Output: the SSN of a text result is redacted.
    let record = tools.call("read_file", json!({"path": "/hr/jane"})).await?;
    assert_eq!(record.is_error, Some(false));
    assert_eq!(texts(&record), ["Employee: Jane Roe\nSSN: [REDACTED]"]);
    let output = audit.contexts("output").pop().ok_or("no output audit")?;
    assert_eq!(output["response"]["content"], support::upstream::RECORD);
    assert_eq!(output["metadata"]["mcp_method"], "tools/call");
    assert_eq!(output["metadata"]["tool_name"], "read_file");

    // Output: every text block and every string of structuredContent is redacted.
    let employee = tools
        .call("lookup_employee", json!({"name": "Jane"}))
        .await?;
    assert_eq!(
        texts(&employee),
        ["Found Jane Roe.", "Her SSN is [REDACTED]."]
    );
    assert_eq!(
        employee.structured_content,
        Some(json!({
            "name": "Jane Roe",
            "ssn": "[REDACTED]",
            "history": [{"note": "badge [REDACTED] reissued"}, 42],
        }))
    );
    // The policies read the structured result as JSON text after the text blocks.
    let output = audit.contexts("output").pop().ok_or("no output audit")?;
    let read = output["response"]["content"].as_str().unwrap_or_default();
    let structured = read
        .strip_prefix("Found Jane Roe.\nHer SSN is 123-45-6789.\n")
        .ok_or(format!("not the text blocks first: {read}"))?;
    assert_eq!(
        serde_json::from_str::<Value>(structured)?,
        json!({
            "name": "Jane Roe",
            "ssn": "123-45-6789",
            "history": [{"note": "badge 987-65-4321 reissued"}, 42],
        })
    );

    // Output: a denied result is replaced; the tool did run.
    let status = tools.call("launch_status", json!({})).await?;
    assert_eq!(status.is_error, Some(true));
    assert_eq!(upstream.count("launch_status"), 1);
    let all_text = texts(&status).join("\n");
    assert!(!all_text.contains("0000"), "{all_text}");
    assert!(all_text.contains("mentions the launch codes"), "{all_text}");
    let refusal = denial(&status).ok_or("no denial in the result")?;
    assert_eq!(refusal.policy_id(), "no_launch_codes");
    assert_eq!(refusal.interception_point(), InterceptionPoint::Output);
    Ok(())
}

/// Resources, prompts and the server's own description pass through the guard.
async fn pass_through_scenario(client: &Peer<RoleClient>) -> Result<(), TestError> {
    let info = client.peer_info().ok_or("no server info")?;
    assert_eq!(info.instructions.as_deref(), Some(INSTRUCTIONS));
    assert!(info.capabilities.resources.is_some());
    assert!(info.capabilities.prompts.is_some());

    let resources = client.list_all_resources().await?;
    assert_eq!(resources.len(), 1);
    let read = client
        .read_resource(ReadResourceRequestParams::new("file:///notes.txt"))
        .await?;
    match read.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => {
            assert_eq!(text, "the notes at file:///notes.txt");
        }
        other => panic!("unexpected resource contents: {other:?}"),
    }

    let prompts = client.list_all_prompts().await?;
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "greeting");
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("greeting"))
        .await?;
    assert_eq!(prompt.messages.len(), 2);
    Ok(())
}

#[tokio::test]
async fn in_process_guarded_server() -> Result<(), TestError> {
    let setup = InProcess::start().await?;
    tool_scenario(setup.client.peer(), &setup.upstream, &setup.audit).await?;
    pass_through_scenario(setup.client.peer()).await?;
    Ok(())
}

#[tokio::test]
async fn in_process_guarded_client() -> Result<(), TestError> {
    let (engine, audit) = engine();
    let upstream = Upstream::default();
    let (client, _server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedClient::new(client.peer().clone(), tool_guard(&engine));
    tool_scenario(&guarded, &upstream, &audit).await
}

#[tokio::test]
async fn streamable_http_on_both_sides() -> Result<(), TestError> {
    let (engine, audit) = engine();
    let upstream = Upstream::default();
    let upstream_http = HttpServer::start(upstream.clone()).await?;
    let upstream_client = upstream_http.client().await?;
    let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
    let guard_http = HttpServer::guard(guarded).await?;
    let client = guard_http.client().await?;
    tool_scenario(client.peer(), &upstream, &audit).await?;
    pass_through_scenario(client.peer()).await?;

    // Malformed JSON-RPC bodies get an HTTP error; the guard keeps serving its sessions.
    for body in [
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method",
        "[1, 2, 3]",
        "\"tools/call\"",
    ] {
        let status = raw_post(guard_http.address, body).await?;
        assert!((400..500).contains(&status), "{body}: HTTP {status}");
    }
    let record = client
        .call_tool(params("read_file", json!({"path": "/hr/jane"})))
        .await?;
    assert_eq!(texts(&record), ["Employee: Jane Roe\nSSN: [REDACTED]"]);
    Ok(())
}

/// Posts `body` to `/mcp` as an MCP client would, over a plain TCP connection; returns the
/// HTTP status.
async fn raw_post(address: std::net::SocketAddr, body: &str) -> Result<u16, TestError> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut lines = BufReader::new(stream).lines();
    let status_line = lines.next_line().await?.ok_or("no HTTP answer")?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line}"))?;
    Ok(status)
}

fn scripted_upstream_command() -> Result<tokio::process::Command, TestError> {
    // `cargo test` builds the crate's examples next to the test binaries' directory.
    let test_binary = std::env::current_exe()?;
    let profile = test_binary
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no target directory")?;
    let path = profile
        .join("examples")
        .join(format!("scripted_upstream{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        return Err(format!("{} is missing: build the crate's examples", path.display()).into());
    }
    Ok(tokio::process::Command::new(path))
}

#[tokio::test]
async fn stdio_child_process_upstream() -> Result<(), TestError> {
    let (engine, _audit) = engine();
    let mut command = scripted_upstream_command()?;
    command.env("SCRIPTED_UPSTREAM_EXIT_TOOL", "1");
    // The guard owns the connection: no other handle keeps it open.
    let guarded = GuardedServer::from_running(
        ().serve(TokioChildProcess::new(command)?).await?,
        tool_guard(&engine),
    );
    let (client, _guard) = connect_in_process(guarded).await?;

    let names: Vec<String> = client
        .list_all_tools()
        .await?
        .iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert!(!names.contains(&"delete_database".to_owned()), "{names:?}");
    let record = client
        .call_tool(params("read_file", json!({"path": "/hr/jane"})))
        .await?;
    assert_eq!(texts(&record), ["Employee: Jane Roe\nSSN: [REDACTED]"]);
    let refused = client
        .call_tool(params("send_email", json!({"to": "eve@evil.test"})))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    pass_through_scenario(client.peer()).await?;

    // The upstream process dies in the middle of a call.
    let died = client.call_tool(params("exit", json!({}))).await;
    let Err(ServiceError::McpError(error)) = died else {
        panic!("expected an MCP error, got {died:?}");
    };
    assert!(
        error.message.contains("upstream MCP server"),
        "{}",
        error.message
    );
    assert_upstream_gone(client.peer()).await
}

/// With its upstream gone, the guard answers every request: a clear error for calls that
/// need the upstream, the refusal for a denied call.
async fn assert_upstream_gone(client: &Peer<RoleClient>) -> Result<(), TestError> {
    for _ in 0..2 {
        let call = client
            .call_tool(params("read_file", json!({"path": "/x"})))
            .await;
        let Err(ServiceError::McpError(error)) = call else {
            panic!("expected an MCP error, got {call:?}");
        };
        assert!(
            error
                .message
                .contains("tools/call: the upstream MCP server"),
            "{}",
            error.message
        );
        let listed = client.list_all_prompts().await;
        assert!(
            matches!(listed, Err(ServiceError::McpError(_))),
            "{listed:?}"
        );
        let refused = client
            .call_tool(params("delete_database", json!({})))
            .await?;
        assert_eq!(refused.is_error, Some(true));
    }
    Ok(())
}

#[tokio::test]
async fn upstream_dying_mid_session() -> Result<(), TestError> {
    let setup = InProcess::start().await?;
    let peer = setup.client.peer().clone();
    peer.call_tool(params("read_file", json!({"path": "/hr/jane"})))
        .await?;
    setup.upstream_server.cancel().await?;
    assert_upstream_gone(&peer).await?;
    drop(setup.upstream_client);
    Ok(())
}

/// A client that counts the `tools/list_changed` notifications it receives.
#[derive(Debug, Clone, Default)]
struct ListChanges(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn upstream_notifications_reach_the_client() -> Result<(), TestError> {
    let (engine, _audit) = engine();
    let (guard_end, upstream_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(Upstream::default().serve(upstream_end));
    let relay = UpstreamRelay::default();
    let upstream_client = relay.clone().serve(guard_end).await?;
    let upstream_server = serving.await??;
    let guarded = GuardedServer::from_running(upstream_client, tool_guard(&engine)).relay(relay);

    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(guarded.serve(server_end));
    let changes = ListChanges::default();
    let client = changes.clone().serve(client_end).await?;
    let _guard = serving.await??;

    upstream_server.peer().notify_tool_list_changed().await?;
    let mut waited = Duration::ZERO;
    while changes.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            waited < Duration::from_secs(10),
            "the notification did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert_eq!(client.list_all_tools().await?.len(), 5);
    Ok(())
}

#[tokio::test]
async fn a_cancelled_call_is_cancelled_upstream() -> Result<(), TestError> {
    let setup = InProcess::start().await?;
    // Dropping the call's future makes rmcp send `notifications/cancelled`.
    let call = setup.client.call_tool(params("slow", json!({})));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), call)
            .await
            .is_err()
    );
    let mut waited = Duration::ZERO;
    while setup.upstream.cancelled() == 0 {
        assert!(
            waited < Duration::from_secs(10),
            "the upstream call was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert_eq!(setup.upstream.count("slow"), 1);
    // The guard goes on serving.
    let record = setup
        .client
        .call_tool(params("read_file", json!({"path": "/hr/jane"})))
        .await?;
    assert_eq!(texts(&record), ["Employee: Jane Roe\nSSN: [REDACTED]"]);
    Ok(())
}

/// An upstream that answers `initialize` properly, then garbage to everything.
async fn garbage_upstream(stream: tokio::io::DuplexStream) -> std::io::Result<()> {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let Some(id) = message.get("id").cloned() else {
            continue;
        };
        let reply = if message["method"] == "initialize" {
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "1"},
            }})
            .to_string()
        } else if message["method"] == "tools/list" {
            json!({"jsonrpc": "2.0", "id": id, "result": {"tools": "not a list"}}).to_string()
        } else {
            "{this is not json".to_owned()
        };
        write.write_all(reply.as_bytes()).await?;
        write.write_all(b"\n").await?;
    }
    Ok(())
}

#[tokio::test]
async fn upstream_answering_garbage() -> Result<(), TestError> {
    let (engine, _audit) = engine();
    let (guard_end, upstream_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(garbage_upstream(upstream_end));
    let upstream_client = ().serve(guard_end).await?;
    let guarded = GuardedServer::from_client(
        GuardedClient::new(upstream_client.peer().clone(), tool_guard(&engine))
            .upstream_timeout(Duration::from_secs(1)),
    );
    let (client, _guard) = connect_in_process(guarded).await?;
    for _ in 0..2 {
        let listed = client.list_all_tools().await;
        let Err(ServiceError::McpError(error)) = listed else {
            panic!("expected an MCP error, got {listed:?}");
        };
        assert!(
            error
                .message
                .contains("tools/list: the upstream MCP server"),
            "{}",
            error.message
        );
        let called = client.call_tool(params("read_file", json!({}))).await;
        let Err(ServiceError::McpError(error)) = called else {
            panic!("expected an MCP error, got {called:?}");
        };
        assert!(
            error
                .message
                .contains("tools/call: the upstream MCP server"),
            "{}",
            error.message
        );
    }
    let refused = client
        .call_tool(params("delete_database", json!({})))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    Ok(())
}

/// Fails every evaluation, for the fail-closed checks.
#[derive(Debug, Clone, Copy)]
struct Broken;

#[portcullis_engine::async_trait]
impl portcullis_engine::Policy<portcullis_engine::ToolCallContext> for Broken {
    fn id(&self) -> &str {
        "broken"
    }

    async fn evaluate(
        &self,
        _: &portcullis_engine::ToolCallContext,
    ) -> Result<portcullis_engine::PolicyDecision, portcullis_engine::BoxError> {
        Err("the policy server is down".into())
    }
}

#[portcullis_engine::async_trait]
impl portcullis_engine::Policy<portcullis_engine::OutputContext> for Broken {
    fn id(&self) -> &str {
        "broken"
    }

    async fn evaluate(
        &self,
        _: &portcullis_engine::OutputContext,
    ) -> Result<portcullis_engine::PolicyDecision, portcullis_engine::BoxError> {
        Err("the policy server is down".into())
    }
}

#[tokio::test]
async fn policies_that_cannot_be_evaluated_fail_closed() -> Result<(), TestError> {
    let upstream = Upstream::default();
    let (client, _server) = connect_in_process(upstream.clone()).await?;
    let connect = |set| {
        let engine = portcullis_engine::PolicyEngine::builder()
            .policy_set(set)
            .build();
        GuardedClient::new(
            client.peer().clone(),
            tool_guard(&std::sync::Arc::new(engine)),
        )
    };

    // A broken tool-call policy: no tool is listed, no call goes upstream.
    let guarded = connect(
        portcullis_engine::PolicySet::builder()
            .tool_call(Broken)
            .build(),
    );
    assert!(guarded.list_all_tools().await?.is_empty());
    let refused = guarded
        .call("read_file", json!({"path": "/hr/jane"}))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        texts(&refused)[0].contains("could not be evaluated"),
        "{:?}",
        texts(&refused)
    );
    assert!(
        denial(&refused).is_none(),
        "an evaluation error is not a denial"
    );
    assert_eq!(upstream.count("read_file"), 0);

    // A broken output policy: the tool runs, its result is withheld.
    let guarded = connect(
        portcullis_engine::PolicySet::builder()
            .output(Broken)
            .build(),
    );
    let withheld = guarded
        .call("read_file", json!({"path": "/hr/jane"}))
        .await?;
    assert_eq!(upstream.count("read_file"), 1);
    assert_eq!(withheld.is_error, Some(true));
    assert!(!texts(&withheld).join("\n").contains("123-45-6789"));
    assert!(texts(&withheld)[0].starts_with("The result of tool \"read_file\" was withheld"));
    Ok(())
}

#[tokio::test]
async fn malformed_json_rpc_from_the_client() -> Result<(), TestError> {
    let (engine, _audit) = engine();
    let upstream = Upstream::default();
    let (upstream_client, _upstream_server) = connect_in_process(upstream.clone()).await?;
    let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(guarded.serve(server_end));
    let (read, mut write) = tokio::io::split(client_end);
    let mut lines = BufReader::new(read).lines();

    let send = |message: String| {
        let mut line = message.into_bytes();
        line.push(b'\n');
        line
    };
    write
        .write_all(&send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        ))
        .await?;
    let initialized: Value = serde_json::from_str(&lines.next_line().await?.ok_or("closed")?)?;
    assert_eq!(initialized["id"], 1);
    // Dropping the running guard would stop it: keep it.
    let _guard = serving.await??;
    write
        .write_all(&send(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        ))
        .await?;

    // Garbage of several kinds: not JSON, JSON but not JSON-RPC, an unknown method, a
    // tools/call without a name.
    write
        .write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\n")
        .await?;
    write.write_all(b"[1, 2, 3]\n").await?;
    write
        .write_all(&send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}).to_string(),
        ))
        .await?;
    write
        .write_all(&send(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"arguments": 5}})
                .to_string(),
        ))
        .await?;
    // Then a real call: the guard still answers it, guarded.
    write
        .write_all(&send(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "/hr/jane"}}})
            .to_string(),
        ))
        .await?;
    let mut answered = Vec::new();
    while let Some(line) =
        tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await??
    {
        let message: Value = serde_json::from_str(&line)?;
        answered.push(message.clone());
        if message["id"] == 5 {
            assert_eq!(
                message["result"]["content"][0]["text"],
                "Employee: Jane Roe\nSSN: [REDACTED]"
            );
            break;
        }
    }
    for id in [3, 4] {
        let answer = answered.iter().find(|message| message["id"] == id);
        assert!(
            answer.is_some_and(|answer| answer.get("error").is_some()),
            "{id}: {answered:?}"
        );
    }
    assert_eq!(upstream.count("read_file"), 1);
    Ok(())
}
