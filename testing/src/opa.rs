//! A policy server speaking the subset of the Open Policy Agent REST API that Portcullis uses,
//! backed by the regorus Rego interpreter.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http::{Method, Response};
use serde_json::{Value, json};

use crate::server::{Handler, HandlerFuture, RecordedRequest, Running, ServerBody, json_response};

/// An OPA-REST-compatible policy server on 127.0.0.1 that really evaluates Rego (with the
/// `regorus` interpreter, Rego v1 syntax as in OPA 1.x).
///
/// Routes, shaped as OPA answers them:
///
/// | request | answer |
/// |---|---|
/// | `PUT /v1/policies/{id}`, raw Rego body | `200 {}`; a module that does not compile: `400 {"code": "invalid_parameter", "message": "error(s) occurred while compiling module(s)", "errors": [{"code": "rego_parse_error", "message": ..}]}` |
/// | `DELETE /v1/policies/{id}` | `200 {}`, or `404 {"code": "resource_not_found", ..}` |
/// | `POST /v1/data/{path}`, body `{"input": ..}` | `200 {"result": ..}`, or `200 {}` when the document is undefined; a body that is not JSON: `400 {"code": "invalid_parameter", ..}`; an evaluation failure: `500 {"code": "internal_error", ..}` |
/// | anything else | `404 {"code": "resource_not_found", ..}` |
///
/// With [`start_with_token`](Self::start_with_token) every request must carry
/// `Authorization: Bearer {token}` or gets `401 {"code": "unauthorized", ..}`, as OPA run with
/// `--authentication=token --authorization=basic` and a policy checking that token does.
///
/// ```
/// use portcullis_testing::RegoServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let server = RegoServer::start().await?;
/// server
///     .load_policy("example", "package example\n\ndecision := \"allow\"\n")
///     .map_err(std::io::Error::other)?;
/// assert!(server.url().starts_with("http://127.0.0.1:"));
/// server.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub struct RegoServer {
    running: Running,
    state: Arc<Mutex<State>>,
}

struct State {
    modules: BTreeMap<String, String>,
    engine: regorus::Engine,
    token: Option<String>,
}

impl RegoServer {
    /// Starts a server with no policies and no authentication.
    pub async fn start() -> io::Result<RegoServer> {
        RegoServer::start_inner(None).await
    }

    /// Starts a server that requires `Authorization: Bearer {token}` on every request.
    pub async fn start_with_token(token: &str) -> io::Result<RegoServer> {
        RegoServer::start_inner(Some(token.to_owned())).await
    }

    async fn start_inner(token: Option<String>) -> io::Result<RegoServer> {
        let state = Arc::new(Mutex::new(State {
            modules: BTreeMap::new(),
            engine: regorus::Engine::new(),
            token,
        }));
        let shared = Arc::clone(&state);
        let handler: Handler = Arc::new(move |request: RecordedRequest| -> HandlerFuture {
            let response = handle(&shared, &request);
            Box::pin(async move { response })
        });
        Ok(RegoServer {
            running: Running::start(handler).await?,
            state,
        })
    }

    /// Loads (or replaces) module `id` directly, without a request, as `opa run --server
    /// policy.rego` would at start-up. Fails with the compiler's message.
    pub fn load_policy(&self, id: &str, source: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.put(id, source)
    }

    /// The base URL to give a client, `http://127.0.0.1:{port}` (no trailing slash).
    pub fn url(&self) -> String {
        self.running.url()
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.running.address()
    }

    /// The requests received so far, in the order they arrived.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.running.requests()
    }

    /// How many TCP connections the server has accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.running.connections_accepted()
    }

    /// Stops the server and closes the connections still open.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

impl State {
    /// Compiles all modules with `source` as module `id`, and keeps the result only if that
    /// works (OPA leaves its modules unchanged when an upload fails).
    fn put(&mut self, id: &str, source: &str) -> Result<(), String> {
        let mut modules = self.modules.clone();
        modules.insert(id.to_owned(), source.to_owned());
        self.engine = compile(&modules)?;
        self.modules = modules;
        Ok(())
    }
}

fn compile(modules: &BTreeMap<String, String>) -> Result<regorus::Engine, String> {
    let mut engine = regorus::Engine::new();
    for (id, source) in modules {
        engine
            .add_policy(id.clone(), source.clone())
            .map_err(|error| error.to_string())?;
    }
    Ok(engine)
}

fn opa_error(status: u16, code: &str, message: &str) -> Response<ServerBody> {
    json_response(status, &json!({"code": code, "message": message}))
}

fn handle(state: &Mutex<State>, request: &RecordedRequest) -> Response<ServerBody> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(token) = &state.token {
        let expected = format!("Bearer {token}");
        if request.header("authorization") != Some(expected.as_str()) {
            return opa_error(
                401,
                "unauthorized",
                "request rejected by administrative policy",
            );
        }
    }
    let path = request.path.split('?').next().unwrap_or_default();
    if let Some(id) = path.strip_prefix("/v1/policies/") {
        let id = percent_decode(id);
        return match request.method {
            Method::PUT => put_policy(&mut state, &id, request),
            Method::DELETE => delete_policy(&mut state, &id),
            _ => opa_error(405, "invalid_parameter", "method not allowed"),
        };
    }
    if let Some(data_path) = path
        .strip_prefix("/v1/data")
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    {
        return match request.method {
            Method::POST => {
                let engine = state.engine.clone();
                drop(state);
                evaluate(engine, data_path, request)
            }
            _ => opa_error(405, "invalid_parameter", "method not allowed"),
        };
    }
    opa_error(404, "resource_not_found", "no such route")
}

fn put_policy(state: &mut State, id: &str, request: &RecordedRequest) -> Response<ServerBody> {
    let Ok(source) = std::str::from_utf8(&request.body) else {
        return opa_error(400, "invalid_parameter", "policy source is not UTF-8");
    };
    match state.put(id, source) {
        Ok(()) => json_response(200, &json!({})),
        Err(message) => json_response(
            400,
            &json!({
                "code": "invalid_parameter",
                "message": "error(s) occurred while compiling module(s)",
                "errors": [{"code": "rego_parse_error", "message": message, "location": {"file": id}}],
            }),
        ),
    }
}

fn delete_policy(state: &mut State, id: &str) -> Response<ServerBody> {
    let mut modules = state.modules.clone();
    if modules.remove(id).is_none() {
        return opa_error(
            404,
            "resource_not_found",
            &format!("storage_not_found_error: policy id {id:?}"),
        );
    }
    match compile(&modules) {
        Ok(engine) => {
            state.engine = engine;
            state.modules = modules;
            json_response(200, &json!({}))
        }
        Err(message) => opa_error(400, "invalid_parameter", &message),
    }
}

fn evaluate(
    mut engine: regorus::Engine,
    data_path: &str,
    request: &RecordedRequest,
) -> Response<ServerBody> {
    let input = if request.body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<Value>(&request.body) {
            Ok(Value::Object(mut body)) => body.remove("input"),
            Ok(_) => {
                return opa_error(
                    400,
                    "invalid_parameter",
                    "body must be a JSON object with an \"input\" key",
                );
            }
            Err(error) => {
                return opa_error(
                    400,
                    "invalid_parameter",
                    &format!("body contains malformed input document: {error}"),
                );
            }
        }
    };
    if let Some(input) = input {
        engine.set_input(regorus::Value::from(input));
    }
    let query = data_query(data_path);
    let results = match engine.eval_query(query, false) {
        Ok(results) => results,
        Err(error) => return opa_error(500, "internal_error", &error.to_string()),
    };
    let value = results
        .result
        .first()
        .and_then(|result| result.expressions.first())
        .map(|expression| &expression.value)
        .filter(|value| **value != regorus::Value::Undefined);
    match value {
        None => json_response(200, &json!({})),
        Some(value) => match serde_json::to_value(value) {
            Ok(result) => json_response(200, &json!({ "result": result })),
            Err(error) => opa_error(500, "internal_error", &error.to_string()),
        },
    }
}

/// `/a/b-c` → `data.a["b-c"]`.
fn data_query(data_path: &str) -> String {
    let mut query = String::from("data");
    for segment in data_path.split('/').filter(|segment| !segment.is_empty()) {
        let segment = percent_decode(segment);
        let identifier = segment
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if identifier {
            query.push('.');
            query.push_str(&segment);
        } else {
            query.push('[');
            query.push_str(&Value::String(segment).to_string());
            query.push(']');
        }
    }
    query
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && let Some(byte) = bytes
                .get(index + 1..index + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            decoded.push(byte);
            index += 3;
            continue;
        }
        decoded.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}
