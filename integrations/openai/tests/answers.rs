//! What the model answers, as an attacker upstream writes it: every answer, item, part and
//! event reaches the client only once the policies read it, and what they cannot read is
//! not released. A scripted upstream on 127.0.0.1 answers with the attacking body or stream;
//! the proxy in front of it is reached over real HTTP (and through the official `openai`
//! Python package where the client matters).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use portcullis_engine::{
    BoxError, OutputContext, Policy, PolicyDecision, PolicyEngine, PolicySet, async_trait,
};
use portcullis_openai::proxy::OpenAIProxy;
use serde_json::{Value, json};
use support::{Reply, ScriptedServer};
use tokio::task::JoinHandle;

/// What the escalating policy holds back: it must never reach the client.
const HELD: &str = "wire 9000 dollars to account 4242-7777";

/// Escalates every answer that mentions a wire transfer (id `approve_wires`), whole or
/// streamed (it has no streaming rules, so a stream's text is held whole).
struct ApproveWires;

#[async_trait]
impl Policy<OutputContext> for ApproveWires {
    fn id(&self) -> &str {
        "approve_wires"
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok(if context.response.content.contains("wire") {
            PolicyDecision::escalate("wire transfers need a person")
        } else {
            PolicyDecision::allow()
        })
    }
}

/// The agent's policies (SSNs redacted, launch codes denied) and [`ApproveWires`].
fn engine() -> Arc<PolicyEngine> {
    use portcullis_testing::agent::{
        GuardTools, NoLaunchCodes, NoPasswordRequests, RedactAnswerSsn, RedactPromptSsn,
    };
    let policies = PolicySet::builder()
        .input(NoPasswordRequests)
        .input(RedactPromptSsn)
        .tool_call(GuardTools)
        .output(NoLaunchCodes)
        .output(RedactAnswerSsn)
        .output(ApproveWires)
        .build();
    Arc::new(PolicyEngine::builder().policy_set(policies).build())
}

/// A proxy serving on a free port of 127.0.0.1 in front of a scripted upstream; both stop
/// when dropped.
struct Setup {
    server: ScriptedServer,
    address: std::net::SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Setup {
    async fn start(replies: Vec<Reply>) -> Setup {
        let server = ScriptedServer::start(replies).await;
        let upstream = server.base_url().trim_end_matches("/v1").to_owned();
        let proxy = OpenAIProxy::new(engine(), &upstream).expect("a valid upstream");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let _ = proxy.serve(listener).await;
        });
        Setup {
            server,
            address,
            task,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Posts a request to `path` (`stream` set as asked); returns the status and the body.
    async fn post(&self, path: &str, stream: bool) -> (u16, String) {
        let body = if path.ends_with("/responses") {
            json!({ "model": "scripted-model", "input": "Go on.", "stream": stream })
        } else {
            json!({ "model": "scripted-model", "stream": stream,
                    "messages": [{ "role": "user", "content": "Go on." }] })
        };
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.base()))
            .header("authorization", "Bearer upstream-key")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the proxy answers");
        let status = response.status().as_u16();
        let body = response.text().await.expect("a body");
        (status, body)
    }
}

/// The JSON `data` of each event of a stream, in order.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}

/// The error a stream ended with: its last event, which must be an error.
fn last_error(body: &str) -> Value {
    let last = events(body).pop().expect("events");
    assert!(last.get("error").is_some(), "not an error event: {body}");
    last["error"].clone()
}

/// Streams an answer from `path` whose upstream attacks with `attack`: the stream ends
/// with an error event saying what was not released, and nothing of the secret leaked.
async fn assert_stream_ends_unreleased(setup: &Setup, path: &str, attack: &Value) {
    let (status, body) = setup.post(path, true).await;
    assert_eq!(status, 200, "{attack}: {body}");
    assert!(
        !body.contains("31337") && !body.contains("4321"),
        "{attack} leaked: {body}"
    );
    let error = last_error(&body);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| message.contains("not released")),
        "{attack}: {body}"
    );
}

/// An error that names an approval request and nothing of what it holds.
fn assert_names_the_request_only(error: &Value, body: &str) {
    assert!(!body.contains("4242"), "the held text leaked: {body}");
    assert!(!body.contains("9000"), "the held text leaked: {body}");
    assert_eq!(error["type"], "approval_required", "{body}");
    assert_eq!(error["code"], "approve_wires", "{body}");
    let request = &error["portcullis"]["approval_request"];
    let mut fields: Vec<&str> = request
        .as_object()
        .expect("an approval request")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "action_digest",
            "id",
            "interception_point",
            "policy_ids",
            "reasons"
        ],
        "{body}"
    );
    assert_eq!(request["interception_point"], "output");
    assert_eq!(request["policy_ids"], json!(["approve_wires"]));
    assert_eq!(request["reasons"], json!(["wire transfers need a person"]));
    let digest = request["action_digest"].as_str().expect("a digest");
    assert_eq!(digest.len(), 64, "{body}");
    assert!(request["id"].as_str().is_some_and(|id| !id.is_empty()));
}

#[tokio::test]
async fn an_output_escalation_names_the_request_and_never_returns_the_held_answer() {
    let held = format!("Done. I will {HELD} now.");
    let setup = Setup::start(vec![
        Reply::Json(support::text_completion(&held)),
        Reply::Sse(support::streamed_text(&["Done. I will ", HELD, " now."])),
        Reply::Json(support::response(vec![support::message_item(
            "msg_1", &held,
        )])),
        Reply::Sse(support::response_events(
            support::streamed_message(0, "msg_2", &["Done. I will ", HELD, " now."]),
            vec![support::message_item("msg_2", &held)],
        )),
    ])
    .await;

    // Whole answers: a 403 naming the request.
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let stream = false;
        let (status, body) = setup.post(path, stream).await;
        assert_eq!(status, 403, "{path}: {body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        assert_names_the_request_only(&answer["error"], &body);
        // Streams: the error event that ends them names it the same way.
        let (status, body) = setup.post(path, true).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_names_the_request_only(&last_error(&body), &body);
    }
    assert_eq!(setup.server.recorded().len(), 4);
}

/// A streamed Responses API answer made of `events` (numbered by the helper), whose final
/// `response.output` is `output`.
fn response_stream(events: Vec<Value>, output: Vec<Value>) -> Reply {
    Reply::Sse(support::response_events(events, output))
}

#[tokio::test]
async fn responses_stream_events_the_guard_does_not_know_end_the_stream_unreleased() {
    let secret = "launch codes 31337 and SSN 987-65-4321";
    let attacks = vec![
        // An event type of the future, carrying text.
        json!({ "type": "response.future_text.delta", "output_index": 0, "delta": secret }),
        // A finished item without its place: it cannot be put with its parts.
        json!({ "type": "response.output_item.done",
                "item": support::message_item("msg_x", secret) }),
        // An item type the guard does not know.
        json!({ "type": "response.output_item.added", "output_index": 0,
                "item": { "type": "hologram", "id": "h_1", "script": secret } }),
        json!({ "type": "response.output_item.done", "output_index": 0,
                "item": { "type": "hologram", "id": "h_1", "script": secret } }),
        // A part type the guard does not know, added or done.
        json!({ "type": "response.content_part.added", "item_id": "msg_1", "output_index": 0,
                "content_index": 0, "part": { "type": "output_hologram", "text": secret } }),
        json!({ "type": "response.content_part.done", "item_id": "msg_1", "output_index": 0,
                "content_index": 0, "part": { "type": "output_hologram", "text": secret } }),
        // A message whose part is of a type the guard does not know.
        json!({ "type": "response.output_item.done", "output_index": 0,
                "item": { "type": "message", "id": "msg_1", "role": "assistant",
                          "status": "completed",
                          "content": [{ "type": "output_hologram", "text": secret }] } }),
    ];
    let replies = attacks
        .iter()
        .map(|attack| response_stream(vec![attack.clone()], Vec::new()))
        .collect();
    let setup = Setup::start(replies).await;
    for attack in &attacks {
        assert_stream_ends_unreleased(&setup, "/v1/responses", attack).await;
    }
}

/// The events of a hosted MCP call at `output_index` whose arguments and output stream, and
/// the finished item.
fn streamed_mcp_call(output_index: u32, arguments: &str, output: &str) -> (Vec<Value>, Value) {
    let item = json!({ "type": "mcp_call", "id": "mcp_1", "server_label": "crm",
                       "name": "lookup", "arguments": arguments, "output": output,
                       "status": "completed" });
    let mut added = item.clone();
    added["arguments"] = json!("");
    added["output"] = Value::Null;
    added["status"] = json!("in_progress");
    let at = |kind: &str| json!({ "type": kind, "item_id": "mcp_1", "output_index": output_index });
    let mut delta = at("response.mcp_call_arguments.delta");
    delta["delta"] = json!(arguments);
    let mut done = at("response.mcp_call_arguments.done");
    done["arguments"] = json!(arguments);
    let events = vec![
        json!({ "type": "response.output_item.added", "output_index": output_index, "item": added }),
        at("response.mcp_call.in_progress"),
        delta,
        done,
        at("response.mcp_call.completed"),
        json!({ "type": "response.output_item.done", "output_index": output_index, "item": item }),
    ];
    (events, item)
}

#[tokio::test]
async fn hosted_tool_items_and_audio_transcripts_go_through_the_output_policies_streamed() {
    let (mut upstream, mcp) = streamed_mcp_call(
        0,
        "{\"ssn\": \"987-65-4321\"}",
        "The customer's SSN is 123-45-6789.",
    );
    // The code a hosted interpreter runs, and what it printed.
    let code = json!({ "type": "code_interpreter_call", "id": "ci_1", "container_id": "c_1",
                       "status": "completed", "code": "print('111-22-3333')",
                       "outputs": [{ "type": "logs", "logs": "111-22-3333" }] });
    upstream.push(
        json!({ "type": "response.output_item.added", "output_index": 1,
                        "item": { "type": "code_interpreter_call", "id": "ci_1",
                                  "container_id": "c_1", "status": "in_progress",
                                  "code": "", "outputs": null } }),
    );
    upstream.push(
        json!({ "type": "response.code_interpreter_call_code.delta", "item_id": "ci_1",
                        "output_index": 1, "delta": "print('111-22-3333')" }),
    );
    upstream.push(json!({ "type": "response.output_item.done", "output_index": 1, "item": code }));
    // A status event of another hosted call, carrying more than its place.
    upstream.push(
        json!({ "type": "response.web_search_call.searching", "item_id": "ws_9",
                        "output_index": 7, "leak": "SSN 987-65-4321" }),
    );
    // An audio answer: its transcript is text the model wrote, its audio says the same.
    for piece in [
        "Your SSN is 555-",
        "44-3333, as I said. This sentence is long enough to clear the guards.",
    ] {
        upstream.push(json!({ "type": "response.audio.transcript.delta", "delta": piece }));
        upstream.push(json!({ "type": "response.audio.delta", "delta": "QVVESU8=" }));
    }
    upstream.push(json!({ "type": "response.audio.done" }));
    upstream.push(json!({ "type": "response.audio.transcript.done" }));
    let setup = Setup::start(vec![response_stream(upstream, vec![mcp, code])]).await;
    let (status, body) = setup.post("/v1/responses", true).await;
    assert_eq!(status, 200, "{body}");
    for secret in [
        "987-65-4321",
        "123-45-6789",
        "111-22-3333",
        "555-",
        "QVVESU8=",
    ] {
        assert!(!body.contains(secret), "{secret} leaked: {body}");
    }
    let events = events(&body);
    assert!(
        events.iter().all(|event| event.get("error").is_none()),
        "{body}"
    );
    let done: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done[0]["item"]["arguments"], "{\"ssn\": \"[REDACTED]\"}");
    assert_eq!(
        done[0]["item"]["output"],
        "The customer's SSN is [REDACTED]."
    );
    assert_eq!(done[1]["item"]["code"], "print('[REDACTED]')");
    assert_eq!(done[1]["item"]["outputs"][0]["logs"], "[REDACTED]");
    let transcript: String = events
        .iter()
        .filter(|event| event["type"] == "response.audio.transcript.delta")
        .filter_map(|event| event["delta"].as_str())
        .collect();
    assert!(transcript.starts_with("Your SSN is [REDACTED]"), "{body}");
    // The audio spoke the SSN: it is not released; its end is.
    assert!(
        events
            .iter()
            .all(|event| event["type"] != "response.audio.delta")
    );
    assert!(
        events
            .iter()
            .any(|event| event["type"] == "response.audio.done")
    );
    // A status event goes with nothing but its place; those of a held item wait with it.
    let searching = events
        .iter()
        .find(|event| event["type"] == "response.web_search_call.searching")
        .expect("the status event");
    assert_eq!(searching["item_id"], "ws_9");
    assert!(searching.get("leak").is_none());
    assert!(
        events
            .iter()
            .all(|event| event["type"] != "response.mcp_call.completed")
    );
    let output = &events.last().expect("events")["response"]["output"];
    assert_eq!(output[0]["output"], "The customer's SSN is [REDACTED].");
    assert_eq!(output[1]["outputs"][0]["logs"], "[REDACTED]");
}

#[tokio::test]
async fn whole_responses_refuse_what_they_cannot_read_and_read_hosted_tools() {
    let secret = "launch codes 31337 and SSN 987-65-4321";
    let unknown_item = json!({ "type": "hologram", "id": "h_1", "script": secret });
    let unknown_part = json!({ "type": "message", "id": "msg_1", "role": "assistant",
                               "status": "completed",
                               "content": [{ "type": "output_hologram", "text": secret }] });
    let not_a_string = json!({ "type": "message", "id": "msg_1", "role": "assistant",
                               "status": "completed",
                               "content": [{ "type": "output_text", "text": { "s": secret } }] });
    let search = json!({ "type": "web_search_call", "id": "ws_1", "status": "completed",
                         "action": { "type": "search", "query": "SSN 987-65-4321 owner" } });
    let mut cited = support::message_item("msg_2", "See the source.");
    cited["content"][0]["annotations"] = json!([{ "type": "url_citation", "start_index": 0,
        "end_index": 3, "url": "https://example.com/?q=987-65-4321",
        "title": "Records of 123-45-6789" }]);
    let setup = Setup::start(vec![
        Reply::Json(support::response(vec![unknown_item])),
        Reply::Json(support::response(vec![unknown_part])),
        Reply::Json(support::response(vec![not_a_string])),
        Reply::Json(support::response(vec![search, cited])),
    ])
    .await;
    for attack in [
        "an unknown item",
        "an unknown part",
        "a part of another shape",
    ] {
        let (status, body) = setup.post("/v1/responses", false).await;
        assert_eq!(status, 502, "{attack}: {body}");
        assert!(
            !body.contains("31337") && !body.contains("4321"),
            "{attack}: {body}"
        );
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            answer["error"]["type"], "upstream_error",
            "{attack}: {body}"
        );
    }
    let (status, body) = setup.post("/v1/responses", false).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("987-65-4321") && !body.contains("123-45-6789"),
        "{body}"
    );
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer["output"][0]["action"]["query"],
        "SSN [REDACTED] owner"
    );
    let annotation = &answer["output"][1]["content"][0]["annotations"][0];
    assert_eq!(annotation["title"], "Records of [REDACTED]");
    assert_eq!(annotation["url"], "https://example.com/?q=[REDACTED]");
    assert_eq!(annotation["start_index"], 0);
}

/// A chat completion whose only choice's message is `message`.
fn chat_answer(message: Value) -> Value {
    let mut answer = support::text_completion("");
    answer["choices"][0]["message"] = message;
    answer
}

#[tokio::test]
async fn chat_content_parts_are_each_read_and_what_cannot_be_read_is_refused() {
    let parts = json!({ "role": "assistant", "content": [
        { "type": "text", "text": "Your SSN is 987-65-4321." },
        { "type": "refusal", "refusal": "Not 123-45-6789." },
        { "type": "text", "text": "Bye." }
    ] });
    let secret = "launch codes 31337 and SSN 987-65-4321";
    let mut not_an_object = support::text_completion("Hi.");
    not_an_object["choices"]
        .as_array_mut()
        .expect("choices")
        .push(json!(secret));
    let setup = Setup::start(vec![
        Reply::Json(chat_answer(parts)),
        Reply::Json(not_an_object),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": [{ "type": "image_url", "image_url": { "url": secret } }] }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": { "text": secret } }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": "Hi.", "refusal": [secret] }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": "Hi.", "audio": { "id": "a", "data": "QQ==", "transcript": { "t": secret } } }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": null, "function_call": secret }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_1", "type": "hologram", "hologram": { "script": secret } }
            ] }),
        )),
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": [{ "type": "text", "text": "The launch codes are 31337." }] }),
        )),
    ])
    .await;
    let (status, body) = setup.post("/v1/chat/completions", false).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        json!([
            { "type": "text", "text": "Your SSN is [REDACTED]." },
            { "type": "refusal", "refusal": "Not [REDACTED]." },
            { "type": "text", "text": "Bye." }
        ])
    );
    for attack in [
        "a choice that is not an object",
        "a part of a type the guard does not know",
        "a content that is an object",
        "a refusal that is not a string",
        "a transcript that is not a string",
        "a function_call that is not an object",
        "a tool call of a kind the guard does not know",
    ] {
        let (status, body) = setup.post("/v1/chat/completions", false).await;
        assert_eq!(status, 502, "{attack}: {body}");
        assert!(
            !body.contains("31337") && !body.contains("4321"),
            "{attack}: {body}"
        );
    }
    // A denied part denies the answer.
    let (status, body) = setup.post("/v1/chat/completions", false).await;
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("31337"), "{body}");
}

#[tokio::test]
async fn streamed_chat_content_parts_are_read_and_what_cannot_be_read_ends_the_stream() {
    let parts = vec![
        support::chunk(
            json!({ "role": "assistant", "content": [
            { "type": "text", "text": "Your SSN is 987-" }
        ] }),
            None,
        ),
        support::chunk(
            json!({ "content": [
            { "type": "text", "text": "65-4321. This sentence is long enough to clear the guards." }
        ] }),
            None,
        ),
        support::chunk(json!({}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let secret = "launch codes 31337 and SSN 987-65-4321";
    let chunk_with = |choice: Value| {
        let chunk = json!({ "id": "chatcmpl-stream", "object": "chat.completion.chunk",
                            "created": 1, "model": "scripted-model", "choices": [choice] });
        vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".to_owned()]
    };
    let attacks = [
        json!(secret),
        json!({ "index": 0, "delta": { "content": [{ "type": "image_url", "image_url": { "url": secret } }] } }),
        json!({ "index": 0, "delta": { "content": { "text": secret } } }),
        json!({ "index": 0, "delta": { "reasoning_content": [secret] } }),
        json!({ "index": 0, "delta": { "audio": { "transcript": 7, "data": secret } } }),
        json!({ "index": 0, "delta": { "audio": secret } }),
    ];
    let mut replies = vec![Reply::Sse(parts)];
    replies.extend(
        attacks
            .iter()
            .map(|attack| Reply::Sse(chunk_with(attack.clone()))),
    );
    let setup = Setup::start(replies).await;

    let (status, body) = setup.post("/v1/chat/completions", true).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("4321"), "{body}");
    let text: String = events(&body)
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        text,
        "Your SSN is [REDACTED]. This sentence is long enough to clear the guards."
    );
    for attack in &attacks {
        assert_stream_ends_unreleased(&setup, "/v1/chat/completions", attack).await;
    }
}

/// The official `openai` Python package against the proxy: an escalated answer, whole and
/// streamed, and a Responses stream with an event the guard does not know.
const PYTHON_CLIENT: &str = r#"
import json, sys
import openai

client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="upstream-key", max_retries=0)
out = {}
try:
    client.chat.completions.create(model="scripted-model", messages=[{"role": "user", "content": "Pay."}])
    out["whole"] = None
except openai.PermissionDeniedError as error:
    out["whole"] = {"status": error.status_code, "body": error.body}
try:
    text = ""
    for chunk in client.chat.completions.create(
        model="scripted-model", stream=True, messages=[{"role": "user", "content": "Pay."}]
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
    out["streamed"] = {"text": text}
except openai.APIError as error:
    out["streamed"] = {"text": text, "body": error.body}
try:
    kinds = []
    for event in client.responses.create(model="scripted-model", input="Hi.", stream=True):
        kinds.append(event.type)
    out["unknown"] = {"kinds": kinds}
except openai.APIError as error:
    out["unknown"] = {"kinds": kinds, "body": error.body, "message": error.message}
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_gets_no_held_answer_and_no_unread_event() {
    if !portcullis_testing::python_openai_installed() {
        return;
    }
    let held = format!("Done. I will {HELD} now.");
    let unknown = json!({ "type": "response.future_text.delta", "output_index": 0,
                          "delta": "SSN 987-65-4321" });
    let setup = Setup::start(vec![
        Reply::Json(support::text_completion(&held)),
        Reply::Sse(support::streamed_text(&["Done. I will ", HELD, " now."])),
        response_stream(vec![unknown], Vec::new()),
    ])
    .await;
    let base = setup.base();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", PYTHON_CLIENT, &base])
            .output()
    })
    .await
    .expect("the client ran")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !stdout.contains("4242") && !stdout.contains("9000") && !stdout.contains("4321"),
        "{stdout}"
    );
    let out: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(out["whole"]["status"], 403, "{stdout}");
    // The SDK hands the error object (or the whole body) to the application.
    let whole = &out["whole"]["body"];
    let whole = whole.get("error").unwrap_or(whole);
    assert_names_the_request_only(whole, &stdout);
    let streamed = &out["streamed"]["body"];
    let streamed = streamed.get("error").unwrap_or(streamed);
    assert_names_the_request_only(streamed, &stdout);
    assert_eq!(out["streamed"]["text"], "", "{stdout}");
    let unknown = &out["unknown"];
    assert!(
        unknown["message"]
            .as_str()
            .is_some_and(|message| message.contains("not released")),
        "{stdout}"
    );
    assert!(
        !unknown["kinds"].as_array().is_some_and(|kinds| kinds
            .iter()
            .any(|kind| kind == "response.future_text.delta")),
        "{stdout}"
    );
}

#[tokio::test]
async fn chat_reasoning_under_its_other_name_and_citations_are_read_whole_and_streamed() {
    let said = "Thinking of SSN 987-65-4321. This sentence is long enough to clear the guards.";
    let setup = Setup::start(vec![
        Reply::Json(chat_answer(
            json!({ "role": "assistant", "content": "Hi.", "reasoning": said,
            "annotations": [{ "type": "url_citation", "url_citation": {
                "start_index": 0, "end_index": 2, "title": "SSN 987-65-4321",
                "url": "https://example.com/987-65-4321" } }] }),
        )),
        Reply::Sse(vec![
            support::chunk(json!({ "role": "assistant", "reasoning": said }), None),
            support::chunk(json!({ "content": "Hi." }), None),
            support::chunk(json!({}), Some("stop")),
            "data: [DONE]\n\n".to_owned(),
        ]),
    ])
    .await;
    let (status, body) = setup.post("/v1/chat/completions", false).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("4321"), "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer["choices"][0]["message"]["reasoning"],
        "Thinking of SSN [REDACTED]. This sentence is long enough to clear the guards."
    );
    let citation = &answer["choices"][0]["message"]["annotations"][0]["url_citation"];
    assert_eq!(citation["title"], "SSN [REDACTED]");
    assert_eq!(citation["url"], "https://example.com/[REDACTED]");

    let (status, body) = setup.post("/v1/chat/completions", true).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("4321"), "{body}");
    let reasoning: String = events(&body)
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["reasoning"].as_str())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        reasoning,
        "Thinking of SSN [REDACTED]. This sentence is long enough to clear the guards."
    );
}

#[tokio::test]
async fn annotations_and_tokens_of_a_streamed_part_are_released_only_read() {
    let mut events_in = support::streamed_message(0, "msg_1", &["See the source."]);
    let citation = json!([{ "type": "url_citation", "start_index": 0, "end_index": 3,
                            "url": "https://example.com/?ssn=987-65-4321",
                            "title": "Records of 987-65-4321" }]);
    let tokens = json!([{ "token": "987-65-4321", "logprob": -0.1, "bytes": [57] }]);
    // The part as added already carries the citation and the tokens of a secret.
    events_in[1]["part"]["annotations"] = citation.clone();
    events_in[1]["part"]["logprobs"] = tokens.clone();
    events_in.insert(
        2,
        json!({ "type": "response.output_text.annotation.added", "item_id": "msg_1",
                "output_index": 0, "content_index": 0, "annotation_index": 0,
                "annotation": citation[0] }),
    );
    let mut item = support::message_item("msg_1", "See the source.");
    item["content"][0]["annotations"] = citation.clone();
    let last = events_in.len() - 1;
    events_in[last]["item"] = item.clone();
    let part_done = events_in.len() - 2;
    events_in[part_done]["part"]["annotations"] = citation;
    let setup = Setup::start(vec![response_stream(events_in, vec![item])]).await;
    let (status, body) = setup.post("/v1/responses", true).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("4321"), "{body}");
    let events = events(&body);
    assert!(
        events.iter().all(|event| event.get("error").is_none()),
        "{body}"
    );
    let done = events
        .iter()
        .find(|event| event["type"] == "response.output_item.done")
        .expect("the item");
    assert_eq!(
        done["item"]["content"][0]["annotations"][0]["title"],
        "Records of [REDACTED]"
    );
}
