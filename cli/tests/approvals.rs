//! Approvals everywhere, through real processes and real HTTP: the service's approval routes
//! and `portcullis approvals`, two services sharing grants on a real Redis (a grant made on one
//! is spent once, on either), and the OpenAI proxy whose escalated tool call a person grants
//! through the service, so that the model's retry (a new call id, other words) passes once.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use portcullis_testing::process::{Process, Scratch};
use portcullis_testing::redis::RedisServer;
use portcullis_testing::{EvaluateServer, Reply};
use serde_json::{Value, json};

const TOKEN: &str = "approver-token-1";
const TOKEN_VARIABLE: &str = "PORTCULLIS_APPROVALS_TEST_TOKEN";

/// A scratch folder with the escalating rule and a manifest using it; `approvals` is the
/// manifest's `approvals` section, if any.
fn escalating(name: &str, approvals: Option<&str>) -> Scratch {
    let scratch = Scratch::new(&format!("approvals-{name}"));
    let rule = json!({
        "condition": {"field": "tool_name", "equals": "send_email"},
        "action": "escalate",
        "reason": "email leaves the company",
    });
    scratch.write("rules/ask_before_email.json", &rule.to_string());
    let mut manifest = "tool_call:\n  - dsl: rules/ask_before_email.json\n".to_owned();
    if let Some(approvals) = approvals {
        manifest.push_str(&format!("approvals: {approvals}\n"));
    }
    scratch.write("portcullis.yaml", &manifest);
    scratch
}

fn manifest(scratch: &Scratch) -> PathBuf {
    scratch.path().join("portcullis.yaml")
}

fn portcullis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_portcullis"))
}

/// `portcullis serve manifest` on a free port with the token: the process and its base URL.
fn serve(manifest: &Path) -> (Process, String) {
    let mut command = portcullis();
    command
        .arg("serve")
        .arg(manifest)
        .args(["--listen", "127.0.0.1:0", "--token-env", TOKEN_VARIABLE])
        .env(TOKEN_VARIABLE, TOKEN);
    let (process, address) = Process::start(command, "serving decisions on http://");
    (process, format!("http://{address}"))
}

/// A client of one service.
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: base.to_owned(),
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("an answer");
        read(response).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("an answer");
        read(response).await
    }

    /// The outcome of a tool call to `send_email` for `to`.
    async fn email(&self, to: &str) -> Value {
        let call = json!({
            "tool_name": "send_email",
            "arguments": {"to": to, "body": "the quarterly report"},
            "calling_message": {"role": "assistant", "content": "Sending."},
            "metadata": {"agent_id": "mailer", "session_id": "s-1",
                         "timestamp": "2026-01-01T00:00:00Z"},
        });
        let (status, outcome) = self.post("/v1/evaluate/tool_call", &call).await;
        assert_eq!(status, 200, "{outcome}");
        outcome
    }
}

async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("a body");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

/// The id of the approval an outcome waits for.
fn waiting(outcome: &Value) -> String {
    assert_eq!(outcome["outcome"], "approval_required", "{outcome}");
    outcome["approval"]["id"]
        .as_str()
        .expect("an approval id")
        .to_owned()
}

/// `portcullis approvals <args> --server base --token-env ..`: exit status, stdout, stderr.
fn approvals_command(base: &str, args: &[&str]) -> (i32, String, String) {
    let output = portcullis()
        .arg("approvals")
        .args(args)
        .args(["--server", base, "--token-env", TOKEN_VARIABLE])
        .env(TOKEN_VARIABLE, TOKEN)
        .output()
        .expect("runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_routes_and_the_command_line_grant_and_refuse() {
    let scratch = escalating("routes", None);
    let (_service, base) = serve(&manifest(&scratch));
    let client = Client::new(&base);

    let id = waiting(&client.email("bob@example.com").await);
    // A retry before anyone answered finds the same request.
    assert_eq!(waiting(&client.email("bob@example.com").await), id);

    let (status, listed) = client.get("/v1/approvals?status=pending").await;
    assert_eq!(status, 200, "{listed}");
    let approvals = listed["approvals"].as_array().expect("a list");
    assert_eq!(approvals.len(), 1, "{listed}");
    let record = &approvals[0];
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["status"], "pending");
    assert_eq!(record["interception_point"], "tool_call");
    assert_eq!(record["policy_ids"], json!(["ask_before_email"]));
    assert_eq!(record["reasons"], json!(["email leaves the company"]));
    assert_eq!(record["context"]["tool_name"], "send_email");
    assert_eq!(record["context"]["arguments"]["to"], "bob@example.com");
    assert_eq!(record["context"]["metadata"]["agent_id"], "mailer");
    let (status, one) = client.get(&format!("/v1/approvals/{id}")).await;
    assert_eq!((status, &one["id"]), (200, &json!(id)), "{one}");

    // What the routes refuse.
    let anonymous = reqwest::get(format!("{base}/v1/approvals")).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let plain = reqwest::Client::new()
        .post(format!("{base}/v1/approvals/{id}/grant"))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body(r#"{"by": "erin"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 415);
    for (body, code) in [
        (json!({}), "invalid_request"),
        (json!({"by": "  "}), "invalid_request"),
        (json!({"by": "erin", "ttl": "soon"}), "invalid_request"),
        (json!({"by": "erin", "ttl": "0s"}), "invalid_request"),
        (json!({"by": "erin", "ttl": "90d"}), "invalid_request"),
        (json!(["erin"]), "invalid_request"),
    ] {
        let (status, error) = client
            .post(&format!("/v1/approvals/{id}/grant"), &body)
            .await;
        assert_eq!(
            (status, &error["error"]["code"]),
            (400, &json!(code)),
            "{body}: {error}"
        );
    }
    let (status, error) = client.get("/v1/approvals?status=someday").await;
    assert_eq!(status, 400, "{error}");
    let (status, error) = client.get("/v1/approvals/apr-unknown").await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (404, &json!("unknown_approval"))
    );

    // The command line lists and grants.
    let (code, out, err) = approvals_command(&base, &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&id) && out.contains("send_email"), "{out}");
    assert!(out.contains("bob@example.com"), "{out}");
    let (code, out, err) =
        approvals_command(&base, &["grant", &id, "--by", "erin", "--ttl", "10m"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("granted by erin"), "{out}");
    let (code, _, err) = approvals_command(&base, &["grant", &id, "--by", "frank"]);
    assert_eq!(code, 1);
    assert!(err.contains("already_decided"), "{err}");
    let (code, _, err) = approvals_command(&base, &["refuse", "apr-unknown", "--by", "erin"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown_approval"), "{err}");

    // The grant lets the retry through once; the next call asks again.
    let passed = client.email("bob@example.com").await;
    assert_eq!(passed["outcome"], "allowed", "{passed}");
    let again = waiting(&client.email("bob@example.com").await);
    assert_ne!(again, id);

    // A refusal: the retry is a denial by the escalating policy, with the reason.
    let (status, refused) = client
        .post(
            &format!("/v1/approvals/{again}/refuse"),
            &json!({"by": "erin", "reason": "not to bob"}),
        )
        .await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["status"], "refused");
    assert_eq!(refused["decided_by"], "erin");
    let denied = client.email("bob@example.com").await;
    assert_eq!(denied["outcome"], "denied", "{denied}");
    assert_eq!(denied["denial"]["policy_id"], "ask_before_email");
    assert!(
        denied["denial"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not to bob"),
        "{denied}"
    );
    let (status, conflict) = client
        .post(
            &format!("/v1/approvals/{again}/grant"),
            &json!({"by": "frank"}),
        )
        .await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["approval"]["status"], "refused");

    let (_, all) = client.get("/v1/approvals?status=all").await;
    let statuses: Vec<&str> = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["refused", "granted"], "{all}");
    let (code, out, _) = approvals_command(&base, &["list", "--status", "refused", "--json"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(listed["approvals"][0]["reason"], "not to bob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_one_redis_spend_a_grant_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let scratch = escalating(
        "replicas",
        Some(&format!("{{ store: \"{}\", timeout: 5m }}", redis.url())),
    );
    let (_one, first) = serve(&manifest(&scratch));
    let (_two, second) = serve(&manifest(&scratch));
    let (one, two) = (Client::new(&first), Client::new(&second));

    let id = waiting(&one.email("bob@example.com").await);
    // The other replica sees the request, and a retry there finds it too.
    assert_eq!(waiting(&two.email("bob@example.com").await), id);
    let (_, listed) = two.get("/v1/approvals?status=pending").await;
    assert_eq!(listed["approvals"][0]["id"], id.as_str(), "{listed}");

    let (status, granted) = two
        .post(
            &format!("/v1/approvals/{id}/grant"),
            &json!({"by": "erin", "ttl": 600}),
        )
        .await;
    assert_eq!(status, 200, "{granted}");
    let (status, _) = one
        .post(
            &format!("/v1/approvals/{id}/grant"),
            &json!({"by": "frank"}),
        )
        .await;
    assert_eq!(status, 409, "decided once, on either replica");

    // Both replicas retry at once: exactly one passes.
    let (a, b) = tokio::join!(one.email("bob@example.com"), two.email("bob@example.com"));
    let passed = [&a, &b]
        .iter()
        .filter(|outcome| outcome["outcome"] == "allowed")
        .count();
    assert_eq!(passed, 1, "{a}\n{b}");
    let other = if a["outcome"] == "allowed" { &b } else { &a };
    assert_eq!(other["outcome"], "approval_required", "{other}");
}

/// The scripted model: each answer calls `send_email` for the same recipient, with a call id
/// and words of its own (as a model's retry does).
fn model(calls: Arc<AtomicUsize>) -> impl Fn(&portcullis_testing::RecordedRequest) -> Reply {
    move |_request| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::json(json!({
            "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": n,
            "model": "scripted-model",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": format!("Attempt {n}: sending the report."),
                    "tool_calls": [{"id": format!("call_{n}"), "type": "function",
                        "function": {"name": "send_email",
                                     "arguments": "{\"to\": \"bob@example.com\"}"}}]
                },
                "finish_reason": "tool_calls"
            }]
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_proxys_escalated_call_is_granted_by_the_route_and_the_retry_passes_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let scratch = escalating("proxy", Some(&format!("{{ store: \"{}\" }}", redis.url())));
    let upstream = EvaluateServer::scripted(model(Arc::new(AtomicUsize::new(0))))
        .await
        .expect("the upstream starts");
    let mut command = portcullis();
    command
        .arg("proxy")
        .arg("openai")
        .arg(manifest(&scratch))
        .args(["--upstream", &upstream.url(), "--listen", "127.0.0.1:0"]);
    let (_proxy, proxy) = Process::start(command, "listening on ");
    let (_service, base) = serve(&manifest(&scratch));
    let service = Client::new(&base);

    let http = reqwest::Client::new();
    let ask = || async {
        let response = http
            .post(format!("{proxy}/v1/chat/completions"))
            .header("authorization", "Bearer upstream-key")
            .header("content-type", "application/json")
            .body(
                json!({"model": "scripted-model",
                       "messages": [{"role": "user", "content": "Mail bob the report."}]})
                .to_string(),
            )
            .send()
            .await
            .expect("an answer");
        read(response).await
    };

    let (status, refused) = ask().await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["type"], "approval_required", "{refused}");
    let id = refused["error"]["portcullis"]["approval_request"]["id"]
        .as_str()
        .expect("the request's id")
        .to_owned();

    let (status, record) = service.get(&format!("/v1/approvals/{id}")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["context"]["tool_name"], "send_email");
    assert_eq!(record["context"]["arguments"]["to"], "bob@example.com");
    assert_eq!(record["context"]["metadata"]["tool_call_id"], "call_1");
    let (status, granted) = service
        .post(
            &format!("/v1/approvals/{id}/grant"),
            &json!({"by": "erin", "ttl": "5m"}),
        )
        .await;
    assert_eq!(status, 200, "{granted}");

    // The model's retry: call_2, other words, the same action: it passes, once.
    let (status, answer) = ask().await;
    assert_eq!(status, 200, "{answer}");
    let call = &answer["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_2", "{answer}");
    assert_eq!(call["function"]["name"], "send_email");
    let (status, again) = ask().await;
    assert_eq!(status, 403, "{again}");
    assert_eq!(again["error"]["type"], "approval_required");
    assert_ne!(
        again["error"]["portcullis"]["approval_request"]["id"],
        id.as_str()
    );
}

#[test]
fn the_console_needs_a_token() {
    let scratch = escalating("console-token", None);
    let output = portcullis()
        .arg("serve")
        .arg(manifest(&scratch))
        .args(["--listen", "127.0.0.1:0", "--console"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`--console` needs `--token-env"),
        "{stderr}"
    );
}

/// An open decision feed does not hold a stopping service until its drain time-out (30 s):
/// SIGTERM ends the feed, and the service exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_open_decision_feeds() {
    let scratch = escalating("console-stop", None);
    let mut command = portcullis();
    command
        .arg("serve")
        .arg(manifest(&scratch))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--console",
            "--token-env",
            TOKEN_VARIABLE,
        ])
        .env(TOKEN_VARIABLE, TOKEN);
    let (mut service, address) = Process::start(command, "serving decisions on http://");
    let base = format!("http://{address}");
    let mut feed = reqwest::Client::new()
        .get(format!("{base}/v1/decisions/feed"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the feed opens");
    assert_eq!(feed.status().as_u16(), 200);
    assert_eq!(
        feed.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let first = feed.chunk().await.expect("a chunk").expect("the counts");
    assert!(String::from_utf8_lossy(&first).starts_with("event: counts\n"));
    // A decision reaches the open feed.
    Client::new(&base).email("bob@example.com").await;
    let mut seen = String::new();
    while !seen.contains("event: decision") {
        let chunk = feed.chunk().await.expect("a chunk").expect("more");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        seen.contains("\"policy_id\":\"ask_before_email\""),
        "{seen}"
    );

    let stopped = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &service.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    while feed.chunk().await.ok().flatten().is_some() {}
    let exit = service.wait().expect("the service exits");
    assert!(exit.success(), "{exit}");
    assert!(
        stopped.elapsed() < std::time::Duration::from_secs(15),
        "the service waited for the feed: {:?}",
        stopped.elapsed()
    );
}
