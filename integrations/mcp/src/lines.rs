//! The guard's side of a line-delimited JSON-RPC stream (stdio, a pipe, a socket), which
//! answers every request it cannot read.
//!
//! rmcp's own stream transport reads each line into its message types; a request whose JSON
//! does not fit them (`"params": "x"`, `"params": [1]`) is answered with an error that carries
//! no id, which no client can match to its request: the client waits for an answer forever.
//! [`JsonRpcLines`] reads the same lines, and answers such a request with an error carrying
//! its id. Nothing it cannot read goes further: the guard, and so the upstream, never sees it.

use std::future::Future;
use std::io;
use std::pin::Pin;

use rmcp::ErrorData;
use rmcp::model::RequestId;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

/// The longest line [`JsonRpcLines`] reads by default: 16 MiB, rmcp's own default. A longer
/// line is dropped as it arrives (never held whole).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// An answer being written, kept across calls of `receive` (which may be cancelled).
type Answering = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// A server transport over a stream of JSON-RPC messages, one per line: what
/// `portcullis proxy mcp` serves its stdio client with.
///
/// It reads and writes what rmcp's stream transport does, with one difference: a request
/// whose JSON is well formed but does not fit an MCP message (its `params` not an object,
/// its shape unknown) is answered at once with a JSON-RPC error carrying the request's id
/// (`-32602` invalid params when its `params` is not an object, `-32600` invalid request
/// otherwise), where rmcp answers without an id. It is never handed on. A notification that
/// does not fit has no answer and is dropped; a line that is not JSON has no id to answer
/// and is skipped; a line longer than the limit is dropped as it arrives.
///
/// ```no_run
/// # async fn run(guarded: portcullis_mcp::GuardedServer) -> Result<(), Box<dyn std::error::Error>> {
/// use portcullis_mcp::JsonRpcLines;
/// use portcullis_mcp::rmcp::ServiceExt;
///
/// let running = guarded.serve(JsonRpcLines::stdio()).await?;
/// running.waiting().await?;
/// # Ok(()) }
/// ```
pub struct JsonRpcLines<R, W: AsyncWrite> {
    read: BufReader<R>,
    /// The line being read (kept across cancelled reads).
    line: Vec<u8>,
    /// The current line is over the limit: the rest of it is skipped.
    discarding: bool,
    max_line_bytes: usize,
    /// rmcp's writer: every message, answers included, is written whole by it.
    write: AsyncRwTransport<RoleServer, tokio::io::Empty, W>,
    /// The answer to an unreadable request, until it is written.
    answering: Option<Answering>,
}

impl<R, W: AsyncWrite> std::fmt::Debug for JsonRpcLines<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRpcLines")
            .field("max_line_bytes", &self.max_line_bytes)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "transport-io")]
impl JsonRpcLines<tokio::io::Stdin, tokio::io::Stdout> {
    /// This process's standard input and output (feature `transport-io`).
    pub fn stdio() -> Self {
        JsonRpcLines::new(tokio::io::stdin(), tokio::io::stdout())
    }
}

impl<R, W> JsonRpcLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Messages read from `read` and written to `write`, one per line.
    pub fn new(read: R, write: W) -> Self {
        JsonRpcLines {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            write: AsyncRwTransport::new(tokio::io::empty(), write),
            answering: None,
        }
    }

    /// The longest line read (default [`DEFAULT_MAX_LINE_BYTES`]); a longer one is dropped.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Reads the next whole line into `self.line`, within the limit: `Ok(true)` when one is
    /// there, `Ok(false)` at the end of the stream. Cancelling it loses nothing: what was
    /// read stays in `self.line` and the next call goes on from there.
    async fn next_line(&mut self) -> io::Result<bool> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(false);
            }
            let end = available.iter().position(|&byte| byte == b'\n');
            let taken = end.map_or(available.len(), |at| at + 1);
            if !self.discarding {
                let piece = &available[..end.unwrap_or(taken)];
                if self.line.len() + piece.len() > self.max_line_bytes {
                    self.discarding = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(piece);
                }
            }
            self.read.consume(taken);
            if end.is_some() {
                if std::mem::take(&mut self.discarding) {
                    continue;
                }
                return Ok(true);
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for JsonRpcLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        self.write.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            // The last answer is written before another line is read: a client that sends
            // unreadable requests without reading the answers is not answered without bound.
            if let Some(answering) = &mut self.answering {
                let written = answering.await;
                self.answering = None;
                written.ok()?;
            }
            if !self.next_line().await.ok()? {
                return None;
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\r").unwrap_or(&line);
            let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
                Ok(message) => return Some(message),
                Err(error) if error.is_data() => {
                    if let Some((id, answer)) = unreadable(text, &error) {
                        let answer = TxJsonRpcMessage::<RoleServer>::error(answer, id);
                        self.answering = Some(Box::pin(self.write.send(answer)));
                    }
                }
                // Not JSON: there is no id to answer (and answering noise can start an
                // exchange of errors with a peer that echoes): skipped, as rmcp does.
                Err(_) => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        if let Some(answering) = self.answering.take() {
            let _ = answering.await;
        }
        self.write.close().await
    }
}

/// The answer to a well-formed JSON message that is not an MCP message (`error` says why):
/// for a request, an error and its id; an error without an id for anything else but a
/// notification, which is never answered.
fn unreadable(text: &[u8], error: &serde_json::Error) -> Option<(Option<RequestId>, ErrorData)> {
    let message = match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(message)) => message,
        _ => {
            let answer = ErrorData::invalid_request("a JSON-RPC message is an object", None);
            return Some((None, answer));
        }
    };
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id");
    if method.is_some() && id.is_none() {
        // A notification is never answered.
        return None;
    }
    // Only a request's id is answered: the id of a response the client sent is one of the
    // guard's own requests, and an error with it would read as the client's answer.
    let id = id
        .filter(|_| method.is_some())
        .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
    let answer = match (method, message.get("params")) {
        (Some(method), Some(params)) if !params.is_object() => ErrorData::invalid_params(
            format!("{method}: `params` must be an object; the request was not forwarded"),
            None,
        ),
        _ => ErrorData::invalid_request(
            format!("not a request MCP defines ({error}); it was not forwarded"),
            None,
        ),
    };
    Some((id, answer))
}

/// The answer to `body` (one JSON-RPC message) when it is a request, with an id, that fits no
/// MCP message: an error carrying its id. `None` when it fits, is not JSON, or has no id to
/// answer.
#[cfg(feature = "listener")]
pub(crate) fn answer_unreadable_request(body: &[u8]) -> Option<TxJsonRpcMessage<RoleServer>> {
    let error = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body).err()?;
    if !error.is_data() {
        return None;
    }
    let (id, answer) = unreadable(body, &error)?;
    Some(TxJsonRpcMessage::<RoleServer>::error(answer, Some(id?)))
}
