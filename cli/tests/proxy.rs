//! `portcullis proxy openai` and `portcullis proxy mcp`, run as processes: real clients in
//! front (plain HTTP, rmcp), real servers behind (a scripted OpenAI-compatible upstream on
//! 127.0.0.1, an MCP server as a child process on stdio or on streamable HTTP).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};

use portcullis_testing::{EvaluateServer, Reply};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, FormElicitationCapability,
    Implementation,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::{Value, json};

type TestError = Box<dyn std::error::Error + Send + Sync>;

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy/portcullis.yaml")
}

/// A process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` and reads its standard error (or output) until a line contains
/// `marker`; returns the rest of that line after the marker. The stream keeps being
/// drained (and echoed to standard error) so the process never blocks on it.
fn start_and_read(command: Command, marker: &str, from_stdout: bool) -> (Running, String) {
    let (running, found, _later) = start_and_watch(command, marker, from_stdout);
    (running, found)
}

/// [`start_and_read`], and the lines the stream has after the marker's, as they come.
fn start_and_watch(
    mut command: Command,
    marker: &str,
    from_stdout: bool,
) -> (Running, String, mpsc::Receiver<String>) {
    if from_stdout {
        command.stdout(Stdio::piped()).stderr(Stdio::inherit());
    } else {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
    }
    let mut child = command
        .stdin(Stdio::null())
        .spawn()
        .expect("the process starts");
    let stream: Box<dyn std::io::Read + Send> = if from_stdout {
        Box::new(child.stdout.take().expect("stdout"))
    } else {
        Box::new(child.stderr.take().expect("stderr"))
    };
    let mut lines = BufReader::new(stream).lines();
    let mut found = None;
    for line in lines.by_ref() {
        let line = line.expect("a line");
        eprintln!("{line}");
        if let Some(at) = line.find(marker) {
            found = Some(line[at + marker.len()..].trim().to_owned());
            break;
        }
    }
    let found = found.unwrap_or_else(|| panic!("the process never printed {marker:?}"));
    let (later, watched) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("{line}");
            let _ = later.send(line);
        }
    });
    (Running(child), found, watched)
}

fn portcullis() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command.env("NO_COLOR", "1");
    command
}

/// A chat completion chunk event of choice 0.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "scripted-model",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }]
    });
    format!("data: {chunk}\n\n")
}

/// The scripted upstream: a streamed answer when asked for one (text with an SSN split
/// across chunks, two tool calls whose deltas are split across chunks), else a whole answer
/// with an SSN and the same two calls.
fn scripted(request: &portcullis_testing::RecordedRequest) -> Reply {
    let body = request.json().unwrap_or(Value::Null);
    if request.path.ends_with("/models") {
        return Reply::json(json!({"object": "list", "data": [{"id": "scripted-model"}]}));
    }
    if request.path.ends_with("/responses") {
        return Reply::json(json!({
            "id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
            "model": "scripted-model", "parallel_tool_calls": true, "tool_choice": "auto",
            "tools": [],
            "output": [{
                "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "Your SSN is 987-65-4321.",
                             "annotations": []}]
            }]
        }));
    }
    if body["stream"] == true {
        let events = [
            chunk(
                json!({"role": "assistant", "content": "Your SSN is 987-6"}),
                None,
            ),
            chunk(json!({"content": "5-4321. Searching."}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                    "function": {"name": "search", "arguments": "{\"query\""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                    "function": {"name": "delete_database", "arguments": "{}"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ": \"cats\"}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            "data: [DONE]\n\n".to_owned(),
        ];
        return Reply::status(200)
            .with_content_type("text/event-stream")
            .with_body(events.concat());
    }
    Reply::json(json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "scripted-model",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Your SSN is 987-65-4321.",
                "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "search", "arguments": "{\"query\": \"cats\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "delete_database", "arguments": "{}"}}
                ]
            },
            "finish_reason": "tool_calls"
        }]
    }))
}

async fn read_json(response: reqwest::Response) -> Result<Value, TestError> {
    Ok(serde_json::from_slice(&response.bytes().await?)?)
}

fn start_openai_proxy(upstream: &str, extra: &[&str]) -> (Running, String) {
    start_openai_proxy_with(&manifest(), upstream, extra, &[])
}

/// Starts `portcullis proxy openai` on `manifest` in front of `upstream`, with `extra`
/// arguments and `env` variables; the process and the proxy's base URL.
fn start_openai_proxy_with(
    manifest: &Path,
    upstream: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Running, String) {
    let mut command = portcullis();
    command
        .arg("proxy")
        .arg("openai")
        .arg(manifest)
        .args(["--upstream", upstream, "--listen", "127.0.0.1:0"])
        .args(extra)
        .envs(env.iter().copied());
    let (process, rest) = start_and_read(command, "listening on ", false);
    let base = rest
        .split_whitespace()
        .next()
        .expect("an address")
        .to_owned();
    (process, base)
}

#[tokio::test]
async fn proxy_openai_guards_chat_completions_whole_and_streamed() -> Result<(), TestError> {
    let upstream = EvaluateServer::scripted(scripted).await?;
    let (_proxy, base) = start_openai_proxy(&upstream.url(), &["--pass-through", "/v1/models"]);
    let http = reqwest::Client::new();
    let request = |body: Value| {
        http.post(format!("{base}/v1/chat/completions"))
            .header("authorization", "Bearer upstream-key")
            .header("content-type", "application/json")
            .body(body.to_string())
    };

    // Whole: the prompt's SSN is redacted upstream, the answer's in the answer, the
    // destructive call refused.
    let answer: Value = request(json!({
        "model": "scripted-model",
        "messages": [{"role": "user", "content": "My SSN is 123-45-6789."}]
    }))
    .send()
    .await
    .map(read_json)?
    .await?;
    let message = &answer["choices"][0]["message"];
    assert!(
        message["content"]
            .as_str()
            .is_some_and(|text| text.starts_with("Your SSN is [REDACTED].")
                && text.contains("no_delete_database")),
        "{answer}"
    );
    assert_eq!(message["tool_calls"].as_array().map(Vec::len), Some(1));
    assert_eq!(message["tool_calls"][0]["function"]["name"], "search");
    let received = upstream.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(
        received[0].json().expect("JSON")["messages"][0]["content"],
        "My SSN is [REDACTED]."
    );
    assert_eq!(
        received[0]
            .headers
            .get("authorization")
            .map(|value| value.as_bytes()),
        Some(&b"Bearer upstream-key"[..])
    );

    // Streamed: the same, with the text and the calls' deltas split across chunks.
    let streamed = request(json!({
        "model": "scripted-model",
        "stream": true,
        "messages": [{"role": "user", "content": "Find cats."}]
    }))
    .send()
    .await?
    .text()
    .await?;
    assert!(!streamed.contains("4321"), "{streamed}");
    let mut text = String::new();
    let mut calls = Vec::new();
    for data in streamed
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
    {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data)?;
        let delta = &chunk["choices"][0]["delta"];
        text.push_str(delta["content"].as_str().unwrap_or_default());
        calls.extend(delta["tool_calls"].as_array().cloned().unwrap_or_default());
    }
    assert!(
        text.starts_with("Your SSN is [REDACTED]. Searching."),
        "{text}"
    );
    assert!(text.contains("no_delete_database"), "{text}");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["function"]["arguments"], "{\"query\": \"cats\"}");

    // A denied prompt is a 403 policy error; nothing reaches the upstream.
    let before = upstream.requests().len();
    let denied = request(json!({
        "model": "scripted-model",
        "messages": [{"role": "user", "content": "What is the admin password?"}]
    }))
    .send()
    .await?;
    assert_eq!(denied.status().as_u16(), 403);
    let denied = read_json(denied).await?;
    assert_eq!(denied["error"]["type"], "policy_denied");
    assert_eq!(denied["error"]["code"], "no_password_requests");
    assert_eq!(upstream.requests().len(), before);

    // Other paths: 404 unless passed through.
    let refused = http.post(format!("{base}/v1/embeddings")).send().await?;
    assert_eq!(refused.status().as_u16(), 404);
    assert_eq!(upstream.requests().len(), before);
    let models = http.get(format!("{base}/v1/models")).send().await?;
    assert_eq!(models.status().as_u16(), 200);
    assert_eq!(upstream.requests().len(), before + 1);

    // The Responses API.
    let answer: Value = http
        .post(format!("{base}/v1/responses"))
        .header("content-type", "application/json")
        .body(json!({"model": "scripted-model", "input": "SSN 123-45-6789?"}).to_string())
        .send()
        .await
        .map(read_json)?
        .await?;
    assert_eq!(
        answer["output"][0]["content"][0]["text"],
        "Your SSN is [REDACTED]."
    );
    let last = upstream.requests().pop().expect("a request");
    assert_eq!(last.path, "/v1/responses");
    assert_eq!(last.json().expect("JSON")["input"], "SSN [REDACTED]?");
    Ok(())
}

/// The official `openai` Python package against the proxy, when it is installed (`.ci/run`
/// installs it and sets `PORTCULLIS_REQUIRE_PYTHON_OPENAI=1`, which makes its absence a
/// failure).
const PYTHON_CLIENT: &str = r#"
import json, sys
import openai

client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="upstream-key", max_retries=0)
out = {}
whole = client.chat.completions.create(
    model="scripted-model",
    messages=[{"role": "user", "content": "My SSN is 123-45-6789."}],
)
out["whole"] = whole.choices[0].message.content
out["calls"] = [call.function.name for call in whole.choices[0].message.tool_calls or []]
text, arguments = "", {}
stream = client.chat.completions.create(
    model="scripted-model", stream=True,
    messages=[{"role": "user", "content": "Find cats."}],
)
for chunk in stream:
    for choice in chunk.choices:
        text += choice.delta.content or ""
        for call in choice.delta.tool_calls or []:
            arguments[str(call.index)] = arguments.get(str(call.index), "") + (call.function.arguments or "")
out["streamed"] = text
out["streamed_arguments"] = arguments
out["responses"] = client.responses.create(model="scripted-model", input="SSN 123-45-6789?").output_text
try:
    client.chat.completions.create(
        model="scripted-model",
        messages=[{"role": "user", "content": "What is the admin password?"}],
    )
    out["denied"] = None
except openai.PermissionDeniedError as error:
    out["denied"] = {"status": error.status_code, "type": error.type, "code": error.code}
print(json.dumps(out))
"#;

/// Runs a Python `script` with the proxy's base URL as its argument; what it printed, as
/// JSON.
async fn run_python(script: &str, base: &str) -> Result<Value, TestError> {
    let output = tokio::process::Command::new("python3")
        .args(["-c", script, base])
        .output()
        .await?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

#[tokio::test]
async fn the_official_python_client_is_guarded() -> Result<(), TestError> {
    if !portcullis_testing::python_openai_installed() {
        return Ok(());
    }
    let upstream = EvaluateServer::scripted(scripted).await?;
    let (_proxy, base) = start_openai_proxy(&upstream.url(), &[]);
    let out = run_python(PYTHON_CLIENT, &base).await?;
    let whole = out["whole"].as_str().unwrap_or_default();
    assert!(
        whole.starts_with("Your SSN is [REDACTED].") && whole.contains("no_delete_database"),
        "{out}"
    );
    assert_eq!(out["calls"], json!(["search"]));
    let streamed = out["streamed"].as_str().unwrap_or_default();
    assert!(
        streamed.starts_with("Your SSN is [REDACTED]. Searching."),
        "{out}"
    );
    assert!(!streamed.contains("4321"), "{out}");
    assert_eq!(
        out["streamed_arguments"],
        json!({"0": "{\"query\": \"cats\"}"})
    );
    assert_eq!(out["responses"], "Your SSN is [REDACTED].");
    assert_eq!(
        out["denied"],
        json!({"status": 403, "type": "policy_denied", "code": "no_password_requests"})
    );
    Ok(())
}

#[tokio::test]
async fn proxy_openai_builds_the_engine_the_manifest_describes() -> Result<(), TestError> {
    // A manifest with an audit log: the proxy's decisions land in it.
    let dir = std::env::temp_dir().join(format!("portcullis-proxy-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rules = manifest()
        .parent()
        .expect("the fixtures folder")
        .join("rules");
    let manifest_path = dir.join("portcullis.yaml");
    std::fs::write(
        &manifest_path,
        format!(
            "input:\n  - dsl: {}\naudit:\n  jsonl: audit.jsonl\n",
            rules.join("no_password_requests.json").display()
        ),
    )?;
    let upstream = EvaluateServer::scripted(scripted).await?;
    let (_proxy, base) = start_openai_proxy_with(&manifest_path, &upstream.url(), &[], &[]);
    let denied = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(
            json!({"model": "m", "messages": [{"role": "user", "content": "the admin password?"}]})
                .to_string(),
        )
        .send()
        .await?;
    assert_eq!(denied.status().as_u16(), 403);
    // The log is written by a thread of its own: the record follows the answer shortly.
    let mut log = String::new();
    for _ in 0..200 {
        log = std::fs::read_to_string(dir.join("audit.jsonl"))?;
        if log.ends_with('\n') {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let record: Value = serde_json::from_str(log.lines().next().ok_or("an audit record")?)?;
    assert_eq!(record["policy_id"], "no_password_requests");
    assert_eq!(record["decision"], "deny");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn proxy_commands_refuse_bad_arguments_with_status_1() {
    let run = |args: &[&str]| {
        let output = portcullis()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let manifest = manifest();
    let manifest = manifest.to_str().expect("a UTF-8 path");
    let (code, stderr) = run(&[
        "proxy",
        "openai",
        manifest,
        "--upstream",
        "ftp://x",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("ftp://x"), "{stderr}");
    let (code, stderr) = run(&["proxy", "mcp", manifest]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--upstream"), "{stderr}");
    let (code, stderr) = run(&[
        "proxy",
        "openai",
        "missing.yaml",
        "--upstream",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
}

#[test]
fn proxy_openai_listens_beyond_loopback_only_with_a_token_or_when_told() {
    let manifest = manifest();
    let manifest = manifest.to_str().expect("a UTF-8 path");
    let run = |args: &[&str]| {
        let output = portcullis()
            .args([
                "proxy",
                "openai",
                manifest,
                "--upstream",
                "http://127.0.0.1:9",
            ])
            .args(args)
            .env_remove("PORTCULLIS_UNSET_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    let (code, stderr) = run(&[
        "--listen",
        "0.0.0.0:0",
        "--token-env",
        "PORTCULLIS_UNSET_TOKEN",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("PORTCULLIS_UNSET_TOKEN"), "{stderr}");
    let (code, stderr) = run(&["--session-from", "token"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--token-env"), "{stderr}");
    let (code, stderr) = run(&["--session-from", "cookie"]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// The official client with the proxy's token as its key: a wrong one is an authentication
/// error; the right one goes through, and the upstream sees the proxy's key only.
const PYTHON_TOKEN_CLIENT: &str = r#"
import json, sys
import openai

out = {}
for name, key in [("wrong", "not-the-token"), ("right", "proxy-token")]:
    client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key=key, max_retries=0)
    try:
        answer = client.responses.create(model="scripted-model", input="Hello?")
        out[name] = answer.output_text
    except openai.AuthenticationError as error:
        out[name] = {"status": error.status_code, "code": error.code}
print(json.dumps(out))
"#;

#[tokio::test]
async fn proxy_openai_authenticates_clients_and_sends_its_own_upstream_key() -> Result<(), TestError>
{
    if !portcullis_testing::python_openai_installed() {
        return Ok(());
    }
    let upstream = EvaluateServer::scripted(scripted).await?;
    let (_proxy, base) = start_openai_proxy_with(
        &manifest(),
        &upstream.url(),
        &[
            "--token-env",
            "PROXY_TOKEN",
            "--upstream-key-env",
            "UPSTREAM_KEY",
        ],
        &[
            ("PROXY_TOKEN", "proxy-token"),
            ("UPSTREAM_KEY", "upstream-secret"),
        ],
    );
    let out = run_python(PYTHON_TOKEN_CLIENT, &base).await?;
    assert_eq!(
        out["wrong"],
        json!({"status": 401, "code": "invalid_proxy_token"}),
        "{out}"
    );
    assert_eq!(out["right"], "Your SSN is [REDACTED].", "{out}");
    let requests = upstream.requests();
    assert_eq!(
        requests.len(),
        1,
        "only the authenticated request went upstream"
    );
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer upstream-secret")
    );
    Ok(())
}

/// Sends `signal` to the process.
#[cfg(unix)]
fn signal(process: &Running, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &process.0.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Posts a prompt to the proxy; the status.
async fn prompt_status(base: &str, prompt: &str) -> Result<u16, TestError> {
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}).to_string())
        .send()
        .await?;
    Ok(answer.status().as_u16())
}

/// Waits (a bounded number of rounds) until the proxy denies the prompt.
async fn until_denied(base: &str, prompt: &str) -> Result<bool, TestError> {
    for _ in 0..300 {
        if prompt_status(base, prompt).await? == 403 {
            return Ok(true);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(false)
}

#[cfg(unix)]
#[tokio::test]
async fn proxy_openai_reloads_its_manifest_on_change_and_on_sighup() -> Result<(), TestError> {
    let dir = std::env::temp_dir().join(format!("portcullis-proxy-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rules = manifest()
        .parent()
        .expect("the fixtures folder")
        .join("rules");
    let with = |rule: &str| {
        format!(
            "input:\n  - dsl: {}\n",
            rules.join(format!("{rule}.json")).display()
        )
    };
    let upstream = EvaluateServer::scripted(scripted).await?;
    let start = |path: &Path, interval: &str| {
        start_openai_proxy_with(path, &upstream.url(), &["--watch-interval", interval], &[])
    };

    // A change of the manifest's file reloads it.
    let watched = dir.join("watched.yaml");
    std::fs::write(&watched, with("redact_prompt_ssn"))?;
    let (_watching, base) = start(&watched, "100ms");
    assert_eq!(
        prompt_status(&base, "What is the admin password?").await?,
        200
    );
    std::fs::write(&watched, with("no_password_requests"))?;
    assert!(until_denied(&base, "What is the admin password?").await?);

    // SIGHUP reloads it, however long the watch interval.
    let signalled = dir.join("signalled.yaml");
    std::fs::write(&signalled, with("redact_prompt_ssn"))?;
    let (process, base) = start(&signalled, "1h");
    assert_eq!(
        prompt_status(&base, "What is the admin password?").await?,
        200
    );
    std::fs::write(&signalled, with("no_password_requests"))?;
    signal(&process, "HUP");
    assert!(until_denied(&base, "What is the admin password?").await?);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(unix)]
#[tokio::test]
async fn proxy_openai_drains_the_streams_in_flight_on_sigterm() -> Result<(), TestError> {
    // The upstream answers a stream two seconds late: SIGTERM comes while it is in flight.
    let upstream = EvaluateServer::scripted(|request| {
        let mut reply = scripted(request);
        if request.json().is_some_and(|body| body["stream"] == true) {
            reply = reply.after(std::time::Duration::from_secs(2));
        }
        reply
    })
    .await?;
    let (process, base) = start_openai_proxy(&upstream.url(), &["--drain-timeout", "60s"]);
    let request = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(
                json!({"model": "m", "stream": true,
                       "messages": [{"role": "user", "content": "Find cats."}]})
                .to_string(),
            )
            .send(),
    );
    for _ in 0..300 {
        if !upstream.requests().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(upstream.requests().len(), 1);
    signal(&process, "TERM");
    let answer = request.await??;
    assert_eq!(answer.status().as_u16(), 200);
    let text = answer.text().await?;
    assert!(text.contains("[DONE]"), "the stream was cut: {text}");
    assert!(!text.contains("4321"), "{text}");
    let status = tokio::task::spawn_blocking(move || {
        let mut process = process;
        process.0.wait()
    })
    .await??;
    assert_eq!(status.code(), Some(0));
    Ok(())
}

/// The crate's `mcp_upstream` example, which `cargo test` builds next to the test binaries.
fn mcp_upstream() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary");
    let profile = test_binary
        .parent()
        .and_then(Path::parent)
        .expect("the target directory");
    let path = profile
        .join("examples")
        .join(format!("mcp_upstream{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: build the crate's examples",
        path.display()
    );
    path
}

/// An MCP client that declares form elicitation and approves what it is asked.
#[derive(Clone, Default)]
struct Approver {
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Approver {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, Implementation::new("approver", "1.0.0"))
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
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = Some(json!({"approve": true}));
        Ok(result)
    }
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name);
    params.arguments = arguments.as_object().cloned();
    params
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What every MCP proxy test checks through `client`; `approves` when the client answers
/// elicitations.
async fn mcp_scenario<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
    approves: bool,
) -> Result<(), TestError> {
    let names: Vec<String> = client
        .list_all_tools()
        .await?
        .iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert!(names.contains(&"echo".to_owned()), "{names:?}");
    assert!(names.contains(&"send_email".to_owned()), "{names:?}");
    assert!(!names.contains(&"delete_database".to_owned()), "{names:?}");

    let echoed = client
        .call_tool(call("echo", json!({"text": "hello"})))
        .await?;
    assert_eq!(text(&echoed), "hello");
    let record = client.call_tool(call("read_record", json!({}))).await?;
    assert_eq!(text(&record), "Employee: Jane Roe\nSSN: [REDACTED]");
    let launch = client.call_tool(call("launch_status", json!({}))).await?;
    assert_eq!(launch.is_error, Some(true));
    assert!(!text(&launch).contains("0000"), "{}", text(&launch));
    let deleted = client.call_tool(call("delete_database", json!({}))).await?;
    assert_eq!(deleted.is_error, Some(true));
    assert!(
        text(&deleted).contains("destructive tool"),
        "{}",
        text(&deleted)
    );

    let email = client
        .call_tool(call("send_email", json!({"to": "bob@partner.com"})))
        .await?;
    if approves {
        assert_ne!(email.is_error, Some(true), "{}", text(&email));
        assert_eq!(text(&email), "sent to \"bob@partner.com\"");
    } else {
        assert_eq!(email.is_error, Some(true));
        let request = portcullis_mcp::approval_request(&email).expect("the approval request");
        assert_eq!(request.policy_ids, ["ask_before_email"]);
        assert!(
            text(&email).contains(&request.action_digest),
            "{}",
            text(&email)
        );
    }
    Ok(())
}

#[tokio::test]
async fn proxy_mcp_on_stdio_with_a_child_process_upstream() -> Result<(), TestError> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command
        .arg("proxy")
        .arg("mcp")
        .arg(manifest())
        .arg("--")
        .arg(mcp_upstream());
    let approver = Approver::default();
    let client = approver
        .clone()
        .serve(TokioChildProcess::new(command)?)
        .await?;
    mcp_scenario(&client, true).await?;
    let asked = approver
        .asked
        .lock()
        .map(|asked| asked.clone())
        .unwrap_or_default();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("email leaves the company"),
        "{}",
        asked[0]
    );
    client.cancel().await?;
    Ok(())
}

/// On stdio, SIGTERM lets the call in flight be answered, refuses a new one, and exits 0.
#[cfg(unix)]
#[test]
fn proxy_mcp_on_stdio_drains_on_sigterm() -> Result<(), TestError> {
    let mut client = StdioClient::start("drain-test")?;
    // `pause` answers after 800 ms: it is in flight when SIGTERM arrives.
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "pause", "arguments": {}}}))?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(&client.proxy, "TERM");
    std::thread::sleep(std::time::Duration::from_millis(150));
    client.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "too late"}}}))?;

    let refused = client.answer(3)?;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("stopping"), "{refused}");
    let paused = client.answer(2)?;
    assert_eq!(paused["result"]["content"][0]["text"], "paused", "{paused}");
    assert_eq!(client.proxy.0.wait()?.code(), Some(0));
    Ok(())
}

/// A raw JSON-RPC client of `portcullis proxy mcp` on its stdio (the example upstream as its
/// child process), initialized.
struct StdioClient {
    proxy: Running,
    stdin: std::process::ChildStdin,
    answers: mpsc::Receiver<String>,
}

impl StdioClient {
    fn start(name: &str) -> Result<StdioClient, TestError> {
        let mut child = portcullis()
            .args(["proxy", "mcp"])
            .arg(manifest())
            .arg("--")
            .arg(mcp_upstream())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("stdin")?;
        let stdout = child.stdout.take().ok_or("stdout")?;
        let (lines, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut client = StdioClient {
            proxy: Running(child),
            stdin,
            answers,
        };
        client.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": name, "version": "1.0.0"}}}),
        )?;
        client.answer(1)?;
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(client)
    }

    /// Writes `message` as one line.
    fn send(&mut self, message: Value) -> Result<(), TestError> {
        use std::io::Write;
        writeln!(self.stdin, "{message}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// The next message with the id `id` (other messages are passed over), within 20 s.
    fn answer(&self, id: impl Into<Value>) -> Result<Value, TestError> {
        let id = id.into();
        loop {
            let line = self
                .answers
                .recv_timeout(std::time::Duration::from_secs(20))?;
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] == id {
                return Ok(message);
            }
        }
    }
}

/// A request on stdio whose `params` is not an object is answered with an invalid-params
/// error carrying its id (rmcp alone would answer without one, and the client would wait
/// forever), and the tool never runs.
#[test]
fn proxy_mcp_on_stdio_answers_requests_whose_params_are_not_an_object() -> Result<(), TestError> {
    let mut client = StdioClient::start("malformed")?;
    for (id, params) in [
        (json!(2), json!("echo")),
        (json!("three"), json!(["echo", {"text": "hi"}])),
        (json!(4), json!(5)),
    ] {
        client
            .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))?;
        let answer = client.answer(id.clone())?;
        assert_eq!(answer["error"]["code"], -32602, "{id} {params}: {answer}");
        assert!(answer.get("result").is_none(), "{answer}");
    }
    // The session goes on.
    client.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "still here"}}}))?;
    let echoed = client.answer(5)?;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "still here",
        "{echoed}"
    );
    Ok(())
}

#[tokio::test]
async fn proxy_mcp_reaches_an_https_upstream_over_tls() -> Result<(), TestError> {
    // A listener that records the first bytes it receives: a TLS client says hello first.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let first = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await?;
        let mut bytes = [0_u8; 3];
        tokio::io::AsyncReadExt::read_exact(&mut stream, &mut bytes).await?;
        Ok::<_, std::io::Error>(bytes)
    });
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("proxy")
        .arg("mcp")
        .arg(manifest())
        .args(["--upstream", &format!("https://{address}/mcp")])
        .stdin(Stdio::null())
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("did not initialize"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A TLS handshake record (0x16) of TLS 1.x (0x03 ..).
    let first = first.await??;
    assert_eq!(&first[..2], &[0x16, 0x03], "{first:?}");
    Ok(())
}

#[tokio::test]
async fn proxy_mcp_on_streamable_http_both_sides() -> Result<(), TestError> {
    let mut upstream = Command::new(mcp_upstream());
    upstream.arg("--http");
    let (_upstream, upstream_url) = start_and_read(upstream, "http://", true);
    let upstream_url = format!("http://{upstream_url}");

    let mut proxy = portcullis();
    proxy.arg("proxy").arg("mcp").arg(manifest()).args([
        "--upstream",
        &upstream_url,
        "--listen",
        "127.0.0.1:0",
    ]);
    let (_proxy, proxy_url) = start_and_read(proxy, "listening on ", false);

    let client = ().serve(StreamableHttpClientTransport::from_uri(proxy_url.as_str())).await?;
    mcp_scenario(&client, false).await?;
    client.cancel().await?;

    // Only the MCP endpoint is served.
    let other = proxy_url.trim_end_matches("/mcp").to_owned() + "/other";
    let status = reqwest::get(other).await?.status().as_u16();
    assert_eq!(status, 404);
    Ok(())
}

/// A folder of its own under the system's temporary folder, for a manifest a test edits.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portcullis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("rules")).expect("a scratch folder");
    std::fs::write(
        dir.join("rules/no_echo.json"),
        r#"{"condition": {"field": "tool_name", "equals": "echo"}, "action": "deny", "reason": "no echoes"}"#,
    )
    .expect("a rule");
    dir
}

/// Writes the manifest in `dir`: with `deny_echo`, a rule that denies the `echo` tool.
fn write_manifest(dir: &Path, deny_echo: bool) -> PathBuf {
    let path = dir.join("portcullis.yaml");
    let tool_call = if deny_echo {
        "tool_call:\n  - dsl: rules/no_echo.json\n"
    } else {
        "tool_call: []\n"
    };
    std::fs::write(&path, format!("on_error: deny\n{tool_call}")).expect("the manifest");
    path
}

/// Calls `echo` until the proxy denies it (at most 10 s): the set was reloaded.
async fn until_echo_denied<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
) -> Result<(), TestError> {
    for _ in 0..200 {
        let echoed = client
            .call_tool(call("echo", json!({"text": "hello"})))
            .await?;
        if echoed.is_error == Some(true) {
            assert!(text(&echoed).contains("no echoes"), "{}", text(&echoed));
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err("the proxy never picked up the new manifest".into())
}

fn start_mcp_http_proxy(manifest: &Path, extra: &[&str]) -> (Running, String) {
    let mut proxy = portcullis();
    proxy
        .arg("proxy")
        .arg("mcp")
        .arg(manifest)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--")
        .arg(mcp_upstream());
    start_and_read(proxy, "listening on ", false)
}

#[tokio::test]
async fn proxy_mcp_reloads_on_change() -> Result<(), TestError> {
    let dir = scratch("mcp-reload-change");
    let manifest = write_manifest(&dir, false);
    let (_proxy, url) = start_mcp_http_proxy(&manifest, &["--watch-interval", "50ms"]);
    let client = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?;
    let echoed = client
        .call_tool(call("echo", json!({"text": "hello"})))
        .await?;
    assert_eq!(text(&echoed), "hello");
    write_manifest(&dir, true);
    until_echo_denied(&client).await?;
    client.cancel().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(unix)]
#[tokio::test]
async fn proxy_mcp_reloads_on_sighup_and_drains_on_sigterm() -> Result<(), TestError> {
    let dir = scratch("mcp-reload-hangup");
    let manifest = write_manifest(&dir, false);
    // The watcher would look again in an hour: only SIGHUP can reload.
    let (mut proxy, url) = start_mcp_http_proxy(&manifest, &["--watch-interval", "1h"]);
    let client = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?;
    write_manifest(&dir, true);
    let echoed = client
        .call_tool(call("echo", json!({"text": "hello"})))
        .await?;
    assert_eq!(text(&echoed), "hello", "reloaded before SIGHUP");
    signal(&proxy, "HUP");
    until_echo_denied(&client).await?;

    // A call in flight when SIGTERM arrives is answered; then the proxy exits 0.
    let paused = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("pause", json!({}))).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    signal(&proxy, "TERM");
    let paused = paused.await??;
    assert_eq!(text(&paused), "paused");
    let status = proxy.0.wait()?;
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A reload that changes the sections `proxy mcp` built its engine with (`sessions`, `audit`,
/// `approvals`) swaps the policies in, and says on standard error that those changes wait
/// for a restart.
#[tokio::test]
async fn proxy_mcp_warns_when_a_reload_changes_sections_it_does_not_apply() -> Result<(), TestError>
{
    let dir = scratch("mcp-reload-sections");
    let manifest = dir.join("portcullis.yaml");
    let write = |text: &str| -> std::io::Result<()> {
        let temporary = dir.join("portcullis.tmp");
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, &manifest)
    };
    write(
        "on_error: deny\ntool_call: []\nsessions: { store: memory, ttl: 1h }\napprovals: { timeout: 1m }\n",
    )?;
    let mut proxy = portcullis();
    proxy
        .args(["proxy", "mcp"])
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0", "--watch-interval", "50ms", "--"])
        .arg(mcp_upstream());
    let (_proxy, url, lines) = start_and_watch(proxy, "listening on ", false);
    let client = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?;
    let echoed = client
        .call_tool(call("echo", json!({"text": "hello"})))
        .await?;
    assert_eq!(text(&echoed), "hello");

    write(
        "on_error: deny\ntool_call:\n  - dsl: rules/no_echo.json\nsessions: { store: memory, ttl: 2h }\napprovals: { timeout: 5m }\naudit: { jsonl: audit.jsonl }\n",
    )?;
    let printed = tokio::task::spawn_blocking(move || {
        portcullis_testing::wait_for_lines(
            &lines,
            &[
                "`sessions` changed",
                "`audit` changed",
                "`approvals` changed",
                "policy set reloaded",
            ],
            std::time::Duration::from_secs(20),
        )
    })
    .await?;
    for section in ["sessions", "audit", "approvals"] {
        let line = printed
            .iter()
            .find(|line| line.contains(&format!("`{section}` changed")))
            .ok_or("the warning")?;
        assert!(
            line.contains("portcullis.yaml:")
                && line.contains("warning")
                && line.contains("restart"),
            "{line}"
        );
    }
    // The policies did change; the audit section did not apply (no log was opened).
    until_echo_denied(&client).await?;
    assert!(!dir.join("audit.jsonl").exists());
    client.cancel().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Over streamable HTTP every client of `proxy mcp` has an upstream session of its own,
/// whether the upstream is a command (a child process per client) or an HTTP server (a
/// session per client): no client's calls run in another's session.
#[tokio::test]
async fn proxy_mcp_gives_each_http_client_its_own_upstream_session() -> Result<(), TestError> {
    let mut upstream = Command::new(mcp_upstream());
    upstream.arg("--http");
    let (_upstream, upstream_url) = start_and_read(upstream, "http://", true);
    let upstream_url = format!("http://{upstream_url}");
    let command = mcp_upstream();
    let command = command.to_str().ok_or("a UTF-8 path")?;
    for upstream in [["--upstream", upstream_url.as_str()], ["--", command]] {
        let mut proxy = portcullis();
        proxy
            .args(["proxy", "mcp"])
            .arg(manifest())
            .args(["--listen", "127.0.0.1:0"])
            .args(upstream);
        let (_proxy, url) = start_and_read(proxy, "listening on ", false);
        let first = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?;
        let second = ().serve(StreamableHttpClientTransport::from_uri(url.as_str())).await?;
        let session = async |client: &RunningService<RoleClient, ()>| -> Result<String, TestError> {
            Ok(text(&client.call_tool(call("session", json!({}))).await?))
        };
        let (first_session, second_session) = (session(&first).await?, session(&second).await?);
        assert!(first_session.starts_with("process "), "{first_session}");
        assert_ne!(
            first_session, second_session,
            "{upstream:?}: two clients share one upstream session"
        );
        // Each client stays in its own.
        assert_eq!(session(&first).await?, first_session);
        assert_eq!(session(&second).await?, second_session);
        // Both are guarded.
        let deleted = second.call_tool(call("delete_database", json!({}))).await?;
        assert_eq!(deleted.is_error, Some(true), "{upstream:?}");
        first.cancel().await?;
        second.cancel().await?;
    }
    Ok(())
}

#[tokio::test]
async fn proxy_mcp_http_clients_authenticate() -> Result<(), TestError> {
    // Beyond loopback without a token: refused before anything starts.
    let output = portcullis()
        .args(["proxy", "mcp"])
        .arg(manifest())
        .args(["--listen", "0.0.0.0:0", "--"])
        .arg(mcp_upstream())
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");

    let mut proxy = portcullis();
    proxy
        .args(["proxy", "mcp"])
        .arg(manifest())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--token-env",
            "MCP_PROXY_TEST_TOKEN",
        ])
        .env("MCP_PROXY_TEST_TOKEN", "s3cret")
        .arg("--")
        .arg(mcp_upstream());
    let (_proxy, url) = start_and_read(proxy, "listening on ", false);
    let http = reqwest::Client::new();
    for token in [None, Some("Bearer wrong"), Some("Bearer s3cre")] {
        let mut request = http
            .post(url.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        assert_eq!(request.send().await?.status().as_u16(), 401, "{token:?}");
    }
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.as_str(),
        )
        .auth_header("s3cret");
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
    mcp_scenario(&client, false).await?;
    client.cancel().await?;
    Ok(())
}

/// The untrusted-content pattern through `portcullis proxy mcp` (stdio, the example upstream
/// as a child process), its sessions on a real Redis: the `web_fetch` result is judged at
/// `tool_result` (its SSN redacted) and labels the session, so the `send_email` call that
/// follows is refused before it reaches the upstream.
#[tokio::test]
async fn proxy_mcp_judges_tool_results_and_a_web_page_stops_email_on_redis() -> Result<(), TestError>
{
    let Some(redis) = portcullis_testing::redis::RedisServer::start() else {
        return Ok(());
    };
    let dir = scratch("mcp-tool-result");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tool-result/rules");
    for rule in ["label_web_results.json", "no_email_after_untrusted.json"] {
        std::fs::copy(fixtures.join(rule), dir.join("rules").join(rule))?;
    }
    std::fs::write(
        dir.join("rules/redact_result_ssn.json"),
        r#"{"condition": {"always": true}, "action": "redact",
            "redactions": [{"field": "content", "strategy": "replace", "pattern": "\\d{3}-\\d{2}-\\d{4}"}]}"#,
    )?;
    let manifest = dir.join("portcullis.yaml");
    std::fs::write(
        &manifest,
        format!(
            "tool_result:\n  - dsl: rules/label_web_results.json\n  - dsl: rules/redact_result_ssn.json\ntool_call:\n  - dsl: rules/no_email_after_untrusted.json\nsessions: {{ store: \"{}\" }}\n",
            redis.url()
        ),
    )?;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command
        .arg("proxy")
        .arg("mcp")
        .arg(&manifest)
        .arg("--")
        .arg(mcp_upstream());
    let client = ().serve(TokioChildProcess::new(command)?).await?;

    let sent = client
        .call_tool(call("send_email", json!({"to": "bob@example.com"})))
        .await?;
    assert_ne!(sent.is_error, Some(true), "{}", text(&sent));
    let page = client
        .call_tool(call("web_fetch", json!({"url": "https://evil.test"})))
        .await?;
    assert_ne!(page.is_error, Some(true), "{}", text(&page));
    assert!(
        text(&page).contains("Ignore previous instructions"),
        "{}",
        text(&page)
    );
    assert!(!text(&page).contains("123-45-6789"), "{}", text(&page));
    let refused = client
        .call_tool(call("send_email", json!({"to": "bob@example.com"})))
        .await?;
    assert_eq!(refused.is_error, Some(true));
    let denial = portcullis_mcp::denial(&refused).ok_or("no denial in the result")?;
    assert_eq!(denial.policy_id(), "no_email_after_untrusted");
    client.cancel().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
