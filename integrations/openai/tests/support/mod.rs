//! A scripted OpenAI-compatible server on 127.0.0.1, for the tests and the example.
//!
//! Each request takes the next scripted reply, whatever its path; every request (method,
//! path, JSON body) is recorded so a test can check what really reached the server.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole JSON chat completion.
    Json(Value),
    /// Server-sent events: each string is sent as its own body frame, as written.
    Sse(Vec<String>),
    /// Server-sent events, then the connection breaks before the stream ends.
    SseThenDie(Vec<String>),
    /// Server-sent events, then nothing more, ever (the body stays open); the flag is set
    /// when the server stops sending because the reader went away.
    SseThenStall(Vec<String>, Arc<AtomicBool>),
    /// A body with this status and content type, as written.
    Raw(u16, &'static str, String),
    /// Wait this long, then answer with the reply.
    After(Duration, Box<Reply>),
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The URL path.
    pub path: String,
    /// The body as JSON (`null` when empty or not JSON).
    pub body: Value,
    /// The request's headers.
    pub headers: hyper::HeaderMap,
}

/// The server; it stops when dropped.
pub struct ScriptedServer {
    address: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: JoinHandle<()>,
}

impl ScriptedServer {
    /// Starts a server on a free port of 127.0.0.1 that answers with `replies`, in order.
    pub async fn start(replies: Vec<Reply>) -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local address");
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let replies = Arc::clone(&replies);
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        answer(request, Arc::clone(&replies), Arc::clone(&recorded))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ScriptedServer {
            address,
            requests,
            task,
        }
    }

    /// The base URL to give the client (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The JSON bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded()
            .into_iter()
            .map(|request| request.body)
            .collect()
    }

    /// The requests received so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    request: Request<Incoming>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
) -> Result<Response<BoxBody<Bytes, std::io::Error>>, Infallible> {
    let path = request.uri().path().to_owned();
    let method = request.method().to_string();
    let headers = request.headers().clone();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    recorded.lock().expect("requests lock").push(Recorded {
        method,
        path,
        body,
        headers,
    });
    let mut reply = replies.lock().expect("replies lock").pop_front();
    while let Some(Reply::After(delay, then)) = reply {
        tokio::time::sleep(delay).await;
        reply = Some(*then);
    }
    let response = match reply {
        Some(Reply::After(..)) => unreachable!("waited for above"),
        Some(Reply::Raw(status, content_type, body)) => Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(full(Bytes::from(body))),
        Some(Reply::SseThenDie(frames)) => {
            let frames = futures_util::stream::iter(
                frames
                    .into_iter()
                    .map(|frame| Ok::<_, std::io::Error>(Frame::data(Bytes::from(frame)))),
            );
            // The break comes a little later, once what came before is on the wire.
            let die = futures_util::stream::once(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(std::io::Error::other(
                    "the scripted server breaks the connection",
                ))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(BodyExt::boxed(StreamBody::new(
                    futures_util::StreamExt::chain(frames, die),
                )))
        }
        Some(Reply::SseThenStall(frames, released)) => {
            let frames = futures_util::stream::iter(
                frames
                    .into_iter()
                    .map(|frame| Ok::<_, std::io::Error>(Frame::data(Bytes::from(frame)))),
            );
            let stall = futures_util::stream::unfold(StallGuard(released), |guard| async move {
                std::future::pending::<()>().await;
                Some((Ok(Frame::data(Bytes::new())), guard))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(BodyExt::boxed(StreamBody::new(
                    futures_util::StreamExt::chain(frames, stall),
                )))
        }
        Some(Reply::Json(value)) => Response::builder()
            .header("content-type", "application/json")
            .body(full(Bytes::from(value.to_string()))),
        Some(Reply::Sse(frames)) => {
            let frames = frames
                .into_iter()
                .map(|frame| Ok::<_, std::io::Error>(Frame::data(Bytes::from(frame))));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
                    frames,
                ))))
        }
        None => Response::builder()
            .status(500)
            .header("content-type", "application/json")
            .body(full(Bytes::from(
                json!({"error": {"message": "no scripted reply left", "type": "test"}}).to_string(),
            ))),
    };
    Ok(response.expect("a valid response"))
}

fn full(bytes: Bytes) -> BoxBody<Bytes, std::io::Error> {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// Sets its flag when dropped: the body it belongs to is no longer read.
struct StallGuard(Arc<AtomicBool>);

impl Drop for StallGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A chat completion whose only choice says `content`.
pub fn text_completion(content: &str) -> Value {
    json!({
        "id": "chatcmpl-text",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted-model",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop"
        }],
        "usage": { "prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12 }
    })
}

/// A chat completion whose only choice calls `tools` (name, JSON arguments string).
pub fn tool_call_completion(content: Option<&str>, tools: &[(&str, &str)]) -> Value {
    let calls: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            json!({
                "id": format!("call_{index}"),
                "type": "function",
                "function": { "name": name, "arguments": arguments }
            })
        })
        .collect();
    json!({
        "id": "chatcmpl-tools",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted-model",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content, "tool_calls": calls },
            "finish_reason": "tool_calls"
        }]
    })
}

/// One SSE event carrying a chunk with `delta` and `finish_reason` for choice 0.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "scripted-model",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }]
    });
    format!("data: {chunk}\n\n")
}

/// The SSE frames of a streamed text answer, one delta per piece, then `[DONE]`.
///
/// Each event is split in two frames, so the guard has to put events back together.
pub fn streamed_text(pieces: &[&str]) -> Vec<String> {
    let mut frames = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for piece in pieces {
        let event = chunk(json!({ "content": piece }), None);
        let middle = event.len() / 2;
        let middle = (middle..event.len())
            .find(|&at| event.is_char_boundary(at))
            .unwrap_or(event.len());
        frames.push(event[..middle].to_owned());
        frames.push(event[middle..].to_owned());
    }
    frames.push(chunk(json!({}), Some("stop")));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

/// A Responses API answer (`"object": "response"`) with these `output` items.
pub fn response(output: Vec<Value>) -> Value {
    json!({
        "id": "resp_scripted",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": "scripted-model",
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": []
    })
}

/// A finished assistant message item saying `text`.
pub fn message_item(id: &str, text: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": "completed",
        "role": "assistant",
        "content": [{ "type": "output_text", "text": text, "annotations": [] }]
    })
}

/// A finished `function_call` item.
pub fn function_call_item(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{call_id}"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed"
    })
}

/// A streamed Responses API answer as the API writes it: `event: <type>` and `data` lines,
/// numbered in order. `events` are the events between `response.in_progress` and
/// `response.completed`, without `sequence_number`; `output` is the final `response.output`.
pub fn response_events(events: Vec<Value>, output: Vec<Value>) -> Vec<String> {
    let mut created = response(Vec::new());
    created["status"] = json!("in_progress");
    let mut all = vec![
        json!({ "type": "response.created", "response": created.clone() }),
        json!({ "type": "response.in_progress", "response": created }),
    ];
    all.extend(events);
    all.push(json!({ "type": "response.completed", "response": response(output) }));
    all.into_iter()
        .enumerate()
        .map(|(sequence, mut event)| {
            event["sequence_number"] = json!(sequence);
            let kind = event["type"].as_str().unwrap_or_default().to_owned();
            format!("event: {kind}\ndata: {event}\n\n")
        })
        .flat_map(|event| {
            // Each event in two frames, so the guard has to put events back together.
            let middle = (event.len() / 2..event.len())
                .find(|&at| event.is_char_boundary(at))
                .unwrap_or(event.len());
            [event[..middle].to_owned(), event[middle..].to_owned()]
        })
        .collect()
}

/// The events of a message item streamed as `pieces` of text, at `output_index`.
pub fn streamed_message(output_index: u32, id: &str, pieces: &[&str]) -> Vec<Value> {
    let text: String = pieces.concat();
    let mut added = message_item(id, "");
    added["status"] = json!("in_progress");
    added["content"] = json!([]);
    let at = |kind: &str| json!({ "type": kind, "item_id": id, "output_index": output_index, "content_index": 0 });
    let mut events = vec![
        json!({ "type": "response.output_item.added", "output_index": output_index, "item": added }),
    ];
    let mut part = at("response.content_part.added");
    part["part"] = json!({ "type": "output_text", "text": "", "annotations": [] });
    events.push(part);
    for piece in pieces {
        let mut delta = at("response.output_text.delta");
        delta["delta"] = json!(piece);
        delta["logprobs"] = json!([]);
        events.push(delta);
    }
    let mut done = at("response.output_text.done");
    done["text"] = json!(text);
    done["logprobs"] = json!([]);
    events.push(done);
    let mut part = at("response.content_part.done");
    part["part"] = json!({ "type": "output_text", "text": text, "annotations": [] });
    events.push(part);
    events.push(json!({ "type": "response.output_item.done", "output_index": output_index, "item": message_item(id, &text) }));
    events
}

/// The events of a `function_call` item whose arguments stream as `pieces`.
pub fn streamed_call(output_index: u32, call_id: &str, name: &str, pieces: &[&str]) -> Vec<Value> {
    let arguments: String = pieces.concat();
    let item_id = format!("fc_{call_id}");
    let mut added = function_call_item(call_id, name, "");
    added["status"] = json!("in_progress");
    let mut events = vec![
        json!({ "type": "response.output_item.added", "output_index": output_index, "item": added }),
    ];
    for piece in pieces {
        events.push(json!({
            "type": "response.function_call_arguments.delta",
            "item_id": item_id, "output_index": output_index, "delta": piece
        }));
    }
    events.push(json!({
        "type": "response.function_call_arguments.done",
        "item_id": item_id, "output_index": output_index, "arguments": arguments, "name": name
    }));
    events.push(json!({
        "type": "response.output_item.done",
        "output_index": output_index,
        "item": function_call_item(call_id, name, &arguments)
    }));
    events
}

/// A finished reasoning item: one `summary_text` part per `summary` entry, one
/// `reasoning_text` part per `content` entry.
pub fn reasoning_item(id: &str, summary: &[&str], content: &[&str]) -> Value {
    let summary: Vec<Value> = summary
        .iter()
        .map(|text| json!({ "type": "summary_text", "text": text }))
        .collect();
    let content: Vec<Value> = content
        .iter()
        .map(|text| json!({ "type": "reasoning_text", "text": text }))
        .collect();
    json!({
        "type": "reasoning",
        "id": id,
        "status": "completed",
        "summary": summary,
        "content": content
    })
}

/// The events of a reasoning item at `output_index` with one summary part streamed as
/// `summary` pieces and one reasoning text streamed as `reasoning` pieces, their deltas
/// interleaved (summary first), both at index 0 of their list.
pub fn streamed_reasoning(
    output_index: u32,
    id: &str,
    summary: &[&str],
    reasoning: &[&str],
) -> Vec<Value> {
    let summary_text: String = summary.concat();
    let reasoning_text: String = reasoning.concat();
    let mut added = reasoning_item(id, &[], &[]);
    added["status"] = json!("in_progress");
    let summary_at = |kind: &str| json!({ "type": kind, "item_id": id, "output_index": output_index, "summary_index": 0 });
    let content_at = |kind: &str| json!({ "type": kind, "item_id": id, "output_index": output_index, "content_index": 0 });
    let mut events = vec![
        json!({ "type": "response.output_item.added", "output_index": output_index, "item": added }),
    ];
    let mut part = summary_at("response.reasoning_summary_part.added");
    part["part"] = json!({ "type": "summary_text", "text": "" });
    events.push(part);
    let mut part = content_at("response.content_part.added");
    part["part"] = json!({ "type": "reasoning_text", "text": "" });
    events.push(part);
    for at in 0..summary.len().max(reasoning.len()) {
        if let Some(piece) = summary.get(at) {
            let mut delta = summary_at("response.reasoning_summary_text.delta");
            delta["delta"] = json!(piece);
            events.push(delta);
        }
        if let Some(piece) = reasoning.get(at) {
            let mut delta = content_at("response.reasoning_text.delta");
            delta["delta"] = json!(piece);
            events.push(delta);
        }
    }
    let mut done = summary_at("response.reasoning_summary_text.done");
    done["text"] = json!(summary_text);
    events.push(done);
    let mut part = summary_at("response.reasoning_summary_part.done");
    part["part"] = json!({ "type": "summary_text", "text": summary_text });
    events.push(part);
    let mut done = content_at("response.reasoning_text.done");
    done["text"] = json!(reasoning_text);
    events.push(done);
    let mut part = content_at("response.content_part.done");
    part["part"] = json!({ "type": "reasoning_text", "text": reasoning_text });
    events.push(part);
    events.push(json!({
        "type": "response.output_item.done",
        "output_index": output_index,
        "item": reasoning_item(id, &[&summary_text], &[&reasoning_text])
    }));
    events
}

/// A finished `local_shell_call` item asking the client to run `command`.
pub fn local_shell_call_item(call_id: &str, command: &[&str]) -> Value {
    json!({
        "type": "local_shell_call",
        "id": format!("lsh_{call_id}"),
        "call_id": call_id,
        "status": "completed",
        "action": {
            "type": "exec",
            "command": command,
            "env": {},
            "working_directory": "/srv/app",
            "timeout_ms": 10_000
        }
    })
}

/// A finished `shell_call` item asking the client to run `commands`.
pub fn shell_call_item(call_id: &str, commands: &[&str]) -> Value {
    json!({
        "type": "shell_call",
        "id": format!("sh_{call_id}"),
        "call_id": call_id,
        "status": "completed",
        "action": { "commands": commands, "timeout_ms": 10_000, "max_output_length": 4096 }
    })
}

/// A finished `apply_patch_call` item updating the file at `path` with `diff`.
pub fn apply_patch_call_item(call_id: &str, path: &str, diff: &str) -> Value {
    json!({
        "type": "apply_patch_call",
        "id": format!("apc_{call_id}"),
        "call_id": call_id,
        "status": "completed",
        "operation": { "type": "update_file", "path": path, "diff": diff }
    })
}

/// A finished `computer_call` item typing `text`.
pub fn computer_call_item(call_id: &str, text: &str) -> Value {
    json!({
        "type": "computer_call",
        "id": format!("cu_{call_id}"),
        "call_id": call_id,
        "status": "completed",
        "pending_safety_checks": [],
        "action": { "type": "type", "text": text }
    })
}

/// The events of a finished built-in tool call `item` as the API streams it at
/// `output_index`: added in progress (a shell call's commands and a patch's diff empty, then
/// streamed by their own events), done.
pub fn streamed_built_in_call(output_index: u32, item: &Value) -> Vec<Value> {
    let id = item["id"].clone();
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    let mut events = Vec::new();
    let mut middle = Vec::new();
    match item["type"].as_str() {
        Some("shell_call") => {
            added["action"]["commands"] = json!([]);
            let commands = item["action"]["commands"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (command_index, command) in commands.iter().enumerate() {
                let at = |kind: &str| json!({ "type": kind, "output_index": output_index, "command_index": command_index });
                let mut event = at("response.shell_call_command.added");
                event["command"] = json!("");
                middle.push(event);
                let text = command.as_str().unwrap_or_default();
                let half = text.len() / 2;
                for piece in [&text[..half], &text[half..]] {
                    let mut event = at("response.shell_call_command.delta");
                    event["delta"] = json!(piece);
                    middle.push(event);
                }
                let mut event = at("response.shell_call_command.done");
                event["command"] = command.clone();
                middle.push(event);
            }
        }
        Some("apply_patch_call") => {
            added["operation"]["diff"] = json!("");
            let diff = item["operation"]["diff"].as_str().unwrap_or_default();
            let half = diff.len() / 2;
            for piece in [&diff[..half], &diff[half..]] {
                middle.push(json!({
                    "type": "response.apply_patch_call_operation_diff.delta",
                    "item_id": id, "output_index": output_index, "delta": piece
                }));
            }
            middle.push(json!({
                "type": "response.apply_patch_call_operation_diff.done",
                "item_id": id, "output_index": output_index, "diff": diff
            }));
        }
        _ => {}
    }
    events.push(
        json!({ "type": "response.output_item.added", "output_index": output_index, "item": added }),
    );
    events.extend(middle);
    events.push(
        json!({ "type": "response.output_item.done", "output_index": output_index, "item": item }),
    );
    events
}

/// The agent's input and output policies (`portcullis_testing::agent`), with
/// [`GuardBuiltInTools`] as the only tool-call policy.
pub fn policies_with_built_in_tools() -> portcullis_engine::PolicySet {
    use portcullis_testing::agent::{
        NoLaunchCodes, NoPasswordRequests, RedactAnswerSsn, RedactPromptSsn,
    };
    portcullis_engine::PolicySet::builder()
        .input(NoPasswordRequests)
        .input(RedactPromptSsn)
        .tool_call(GuardBuiltInTools)
        .output(NoLaunchCodes)
        .output(RedactAnswerSsn)
        .build()
}

/// Guards the built-in tools the client runs (id `guard_built_in_tools`): denies a
/// `local_shell`, `shell` or `computer` call whose action says `rm -rf` anywhere (a command
/// split in words counts too), and moves every `apply_patch` path under `sandbox/`.
pub struct GuardBuiltInTools;

#[portcullis_engine::async_trait]
impl portcullis_engine::Policy<portcullis_engine::ToolCallContext> for GuardBuiltInTools {
    fn id(&self) -> &str {
        "guard_built_in_tools"
    }

    async fn evaluate(
        &self,
        context: &portcullis_engine::ToolCallContext,
    ) -> Result<portcullis_engine::PolicyDecision, portcullis_engine::BoxError> {
        use portcullis_engine::{PolicyDecision, TransformOperation};
        fn words(value: &Value, into: &mut Vec<String>) {
            match value {
                Value::String(text) => into.push(text.clone()),
                Value::Array(values) => values.iter().for_each(|value| words(value, into)),
                Value::Object(map) => map.values().for_each(|value| words(value, into)),
                _ => {}
            }
        }
        Ok(match context.tool_name.as_str() {
            "local_shell" | "shell" | "computer" => {
                let mut found = Vec::new();
                words(&Value::Object(context.arguments.clone()), &mut found);
                if found.join(" ").contains("rm -rf") {
                    PolicyDecision::deny("deletes recursively")
                } else {
                    PolicyDecision::allow()
                }
            }
            "apply_patch" => match context.arguments.get("path").and_then(Value::as_str) {
                Some(path) if !path.starts_with("sandbox/") => {
                    PolicyDecision::transform([TransformOperation::set(
                        "arguments.path",
                        format!("sandbox/{path}"),
                    )])
                }
                _ => PolicyDecision::allow(),
            },
            _ => PolicyDecision::allow(),
        })
    }
}
