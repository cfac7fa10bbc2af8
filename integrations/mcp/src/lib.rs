//! Portcullis for the [Model Context Protocol][mcp], on [rmcp], the official Rust SDK:
//! every tool call an MCP client makes goes through a [`PolicyEngine`]'s tool-call
//! policies, and every tool result through its tool-result policies (its output policies,
//! for a set written before the `tool_result` point existed).
//!
//! Two forms share one implementation ([`ToolGuard`]):
//!
//! - [`GuardedServer`]: an MCP server (an rmcp [`ServerHandler`]) in front of an upstream
//!   MCP server reached through an rmcp client connection (a child process on stdio,
//!   streamable HTTP, any transport). Any MCP client pointed at it is guarded; served on
//!   stdio or streamable HTTP ([`GuardedServer::streamable_http_service`]), it is what
//!   `portcullis proxy mcp` runs.
//! - [`GuardedClient`]: for Rust agents that use an rmcp client themselves, the same checks
//!   on `call_tool` and `list_tools`.
//!
//! # What is checked
//!
//! | MCP | Policies | Effect |
//! |---|---|---|
//! | `tools/call` request | tool call: `tool_name`, `arguments` (`{}` when absent), `calling_message` an assistant message describing the call, `metadata.mcp_method = "tools/call"` | a redaction or transformation rewrites the arguments sent upstream; a denial answers a tool result with `isError: true` and the reason, and the upstream is never called |
//! | `tools/list` result | tool call, per tool: its name, empty arguments, `metadata.mcp_method = "tools/list"` | a tool whose check is denied (or fails) is hidden |
//! | `tools/call` result | output: `response.content` is the result's text blocks and embedded text resources, then `structuredContent` as JSON text, joined by newlines; `metadata.mcp_method = "tools/call"`, `metadata.tool_name` | redactions and transformations are applied to every text block, every embedded text resource and every string of `structuredContent`; a denial (one that matches only `structuredContent` too) replaces the result with `isError: true` and the reason |
//! | `resources/read` result | output: `response.content` is the text contents joined by newlines; `metadata.mcp_method` and `metadata.tool_name` `"resources/read"`, `metadata.arguments` the request's params | redactions and transformations reach every text content; a denial is a JSON-RPC error ([`DENIAL_ERROR_CODE`]) |
//! | `prompts/get` result | output: `response.content` is the messages' text (text blocks, embedded text resources) joined by newlines; `metadata.mcp_method` and `metadata.tool_name` `"prompts/get"`, `metadata.arguments` the request's params | as `resources/read` |
//!
//! The table names the output point; with `tool_result` policies in the set (SPEC §18),
//! results go there instead: a [`ToolResultContext`](portcullis_engine::ToolResultContext)
//! whose `tool_name` and `arguments` are those of the call the result answers
//! (`"resources/read"` or `"prompts/get"` and the request's params for those methods),
//! `content` the same text, `structured` the `structuredContent`, `is_error` the result's
//! `isError`. Changes to `content` are applied as the table says; changes to paths inside
//! `structured` apply to `structuredContent`. A set without `tool_result` policies keeps the
//! output route, so adding the point takes no protection away. The set is read at each
//! call, so a reload that adds the first tool-result policy moves results there.
//!
//! Every context carries `metadata.agent_id` and `metadata.session_id` as configured
//! ([`ToolGuard::agent_id`], [`ToolGuard::session_id`]) and `metadata.framework = "mcp"`.
//!
//! A policy that cannot be evaluated (with `on_error: deny`) refuses like a denial: the
//! guard fails closed. A refused call or result is an ordinary tool result, so the model
//! reads why; its `_meta` carries the policy ([`DENIAL_META_KEY`]) and [`denial`] reads it
//! back.
//!
//! Policies are checked on every call, whatever `tools/list` said: an upstream that lists a
//! tool it does not have, or hides one a client calls anyway, gets no call past the
//! policies.
//!
//! The output policies see text (text blocks and embedded text resources): image, audio,
//! embedded blob resources and resource links pass as they are. Their changes are applied block by block, so a result keeps its blocks; when the
//! blocks so changed would not join into the text the policies cleared (a pattern that
//! spans two blocks, a mask of the whole text), the text blocks are replaced by one block
//! holding the cleared text.
//!
//! Other requests MCP defines (lists, completion, subscriptions, logging level) pass through
//! unchanged, and so do requests for more input (`InputRequired`) that an upstream sends
//! back to the client. A request of a method MCP defines whose params do not parse (a
//! `tools/call` whose `arguments` is a string) is refused with an invalid-params error and
//! never reaches the upstream; methods MCP does not define are refused unless
//! [`GuardedServer::pass_through_method`] lists them. Tasks, whose results would arrive past
//! the output policies, are refused. The upstream's notifications (lists changed, resources
//! updated, log messages) reach the client when its connection is made with an
//! [`UpstreamRelay`] ([`GuardedServer::per_session`] makes one connection per client, so
//! each client hears only its own); the requests it makes of the client (sampling,
//! elicitation, roots) are not relayed.
//!
//! # Approvals
//!
//! A policy may escalate a tool call (`escalate`): the engine then lets it proceed only with
//! a person's approval of that exact action (a recorded grant, or the engine's resolver).
//! When neither answers, [`GuardedServer`] asks the person at the MCP client through
//! elicitation, if the client declared it: a form asking to approve the call, with its tool
//! and arguments and the policy's reason. Approved, a single-use grant is recorded and the
//! call proceeds; declined or cancelled, the call is refused like a denial by the escalating
//! policy. Without elicitation, and in [`GuardedClient`], the call is refused with a result
//! that carries the approval request ([`approval_request`]); the application records a grant
//! for its digest (`engine.approvals().grant(..)`) and the same call then proceeds. An
//! escalated tool *result* is withheld: nobody can approve it before the client reads it.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_engine::{PolicyEngine, PolicySet};
//! use portcullis_mcp::{GuardedServer, ToolGuard};
//! use rmcp::ServiceExt;
//!
//! let engine = PolicyEngine::builder().policy_set(PolicySet::builder().build()).build();
//! // The upstream: any rmcp client connection (here a child process on stdio).
//! # let upstream_transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(tokio::io::empty(), tokio::io::sink());
//! let upstream = ().serve(upstream_transport).await?;
//! let guarded = GuardedServer::from_running(upstream, ToolGuard::new(engine).agent_id("ide-assistant"));
//! // Serve the guarded server to the real client, on stdio.
//! # let client_transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(tokio::io::empty(), tokio::io::sink());
//! let running = guarded.serve(client_transport).await?;
//! running.waiting().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Transports
//!
//! The guard works over any rmcp transport. [`GuardedServer::streamable_http_service`]
//! serves it on streamable HTTP; with the feature `listener`, `GuardedListener` serves it on
//! a TCP listener of its own, with a bearer token, bounded connections, header and body read
//! times and body size, and a graceful stop. The features `transport-io` (this process's stdio),
//! `transport-child-process` and `transport-streamable-http-client` (reqwest, without a TLS
//! stack: the application's own `rmcp` or `reqwest` dependency chooses one) turn on rmcp's
//! transports of those names for applications that let this crate choose. On a stream of
//! lines (stdio, a pipe), serve it with [`JsonRpcLines`] (`JsonRpcLines::stdio()` with
//! `transport-io`): it is rmcp's own framing, and it also answers a request whose JSON is not
//! an MCP message with an error carrying its id, so such a client is not left waiting
//! (`GuardedListener` answers such a request the same way over HTTP).
//!
//! The crate's tests run an rmcp server and an rmcp client on both sides of the guard,
//! over in-process pipes, over streamable HTTP on 127.0.0.1, and with the upstream as a
//! child process on stdio.
//!
//! [mcp]: https://modelcontextprotocol.io
//! [rmcp]: https://docs.rs/rmcp
//! [`PolicyEngine`]: portcullis_engine::PolicyEngine
//! [`ServerHandler`]: rmcp::ServerHandler

mod approval;
mod client;
mod drain;
mod guard;
mod lines;
#[cfg(feature = "listener")]
mod listener;
mod relay;
mod server;

pub use client::{DEFAULT_UPSTREAM_TIMEOUT, GuardedClient};
pub use drain::{Drain, Draining};
pub use guard::{
    APPROVAL_META_KEY, CallCheck, DENIAL_ERROR_CODE, DENIAL_META_KEY, MCP_METHOD_KEY, ToolGuard,
    approval_request, denial,
};
pub use lines::{DEFAULT_MAX_LINE_BYTES, JsonRpcLines};
#[cfg(feature = "listener")]
pub use listener::{GuardedListener, ListenerOptions, ListenerStats, MCP_PATH, check_exposure};
pub use relay::UpstreamRelay;
pub use server::{Connecting, DEFAULT_MAX_SESSIONS, GuardedServer};

/// The rmcp crate this crate was built against, for applications that want the same one.
pub use rmcp;
