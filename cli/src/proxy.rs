//! `portcullis proxy openai` and `portcullis proxy mcp`: guard an agent without changing its
//! code, by pointing it at a proxy that applies the manifest's policies.
//!
//! Exit status: 0 after a clean stop (Ctrl-C, SIGTERM, or the MCP client closing stdio),
//! 1 when the manifest or an argument is wrong, 5 when the proxy cannot start or fails (the
//! address is taken, the MCP upstream cannot be started or does not initialize).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use portcullis::PolicyEngine;
use portcullis::manifest::{AuditExport, CodeRegistry, Manifest, ManifestWatcher, ReloadOutcome};
use portcullis_mcp::{
    Draining, GuardedListener, GuardedServer, JsonRpcLines, ListenerOptions, MCP_PATH, ToolGuard,
    UpstreamRelay, check_exposure,
};
use portcullis_openai::ToolDenial;
use portcullis_openai::proxy::{self, OpenAIProxy, SessionSource};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use tokio::net::TcpListener;

use crate::{reload, render};

/// The exit status of a proxy that could not start or failed while serving.
const FAILED: u8 = 5;

/// The proxies.
#[derive(Debug, Subcommand)]
pub(crate) enum ProxyCommand {
    /// An OpenAI-compatible HTTP server in front of a model API.
    ///
    /// Point the agent's base URL at it (`http://ADDR/v1`). `POST …/chat/completions` and
    /// `POST …/responses`, streamed or not, go through the input, tool-call and output
    /// policies; a denial is a 403 OpenAI-shaped error (`"type": "policy_denied"`, `"code"`:
    /// the policy id). Every other path answers 404 unless listed with --pass-through.
    /// Paths are decoded and normalised once; an ambiguous one is refused (400), and so is a
    /// body with a key given twice, or one that refers to state the upstream keeps (unless
    /// --allow-server-state). Clients authenticate with --token-env; without it the proxy
    /// listens on loopback only (unless --allow-unauthenticated). Reloads the manifest when
    /// one of its files changes and on SIGHUP; SIGTERM stops accepting and lets the requests
    /// and streams in flight finish (up to --drain-timeout). Prints `portcullis: proxy
    /// openai listening on http://ADDR` on standard error once it listens.
    Openai(OpenAIArgs),
    /// A Model Context Protocol server in front of another.
    ///
    /// The upstream is a command started as a child process on stdio (after `--`), or a
    /// streamable HTTP server (--upstream). The client side is this process's stdio, or
    /// streamable HTTP at `http://ADDR/mcp` with --listen (clients authenticate with
    /// --token-env; beyond loopback a token is required unless --allow-unauthenticated).
    /// `tools/call` goes through the tool-call policies (an escalation is asked of the
    /// person through MCP elicitation when the client supports it); tool results (text and
    /// `structuredContent`), `resources/read` and `prompts/get` results through the output
    /// policies; `tools/list` hides the tools the policies refuse. A request whose params
    /// do not parse never reaches the upstream, and methods MCP does not define are refused
    /// unless listed with --pass-through-method. The manifest reloads on change and SIGHUP;
    /// SIGTERM lets the requests in flight finish.
    Mcp(McpArgs),
}

/// What a denial in a model's answer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnDenial {
    /// Put a refusal in the answer (in place of the denied call or text).
    Refuse,
    /// Fail the request with the denial (a 403 error, or an error event ending a stream).
    Error,
}

/// `portcullis proxy openai`.
#[derive(Debug, Args)]
pub(crate) struct OpenAIArgs {
    /// The manifest.
    manifest: std::path::PathBuf,
    /// The model API: an origin, optionally with a path prefix (`https://api.openai.com`);
    /// the request's path is appended unchanged.
    #[arg(long, value_name = "URL")]
    upstream: String,
    /// The address to listen on (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// Forward requests under this path unguarded (repeatable): `/v1/models`.
    #[arg(long = "pass-through", value_name = "PATH")]
    pass_through: Vec<String>,
    /// What a denied tool call in an answer does.
    #[arg(long, value_enum, default_value_t = OnDenial::Refuse)]
    on_tool_denial: OnDenial,
    /// What a whole answer whose text is denied does: a 403 error, or a refusal in place
    /// of its text (a denied stream always ends with an error event).
    #[arg(long, value_enum, default_value_t = OnDenial::Error)]
    on_answer_denial: OnDenial,
    /// The agent id of requests whose `metadata` names none.
    #[arg(long, default_value = "openai-proxy")]
    agent_id: String,
    /// The session id of requests whose `metadata` names none.
    #[arg(long, default_value = "default")]
    session_id: String,
    /// How long the upstream may keep a request waiting: for its headers, a whole answer,
    /// and between two chunks of a stream (`500ms`, `30s`, `10m`).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    timeout: Duration,
    /// The largest request body, whole answer or stream event, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = proxy::DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// Require `Authorization: Bearer <token>` of clients (401 otherwise), the token read
    /// from this environment variable; the client's header is never sent upstream.
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// Send `Authorization: Bearer <key>` upstream in place of the client's `Authorization`
    /// and `api-key` headers, the key read from this environment variable.
    #[arg(long, value_name = "VAR")]
    upstream_key_env: Option<String>,
    /// Listen beyond loopback without --token-env: anyone who reaches the address is a
    /// client.
    #[arg(long)]
    allow_unauthenticated: bool,
    /// Without --token-env: a host name clients may name in `Host` besides the loopback ones
    /// (repeatable); requests naming another host are refused (403).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Forward requests that refer to state the upstream keeps and the policies cannot read
    /// (`previous_response_id`, `conversation`, a stored `prompt`, `item_reference` items);
    /// refused with 400 otherwise.
    #[arg(long)]
    allow_server_state: bool,
    /// Where a request's session comes from: `body` (its `metadata.session_id`: any client
    /// names any session), `token` (the client's --token-env token: one session per token),
    /// or `header:NAME` (a header a trusted front sets to the client's identity; 401
    /// without it).
    #[arg(long, value_name = "SOURCE", default_value = "body", value_parser = parse_session_source)]
    session_from: SessionSource,
    /// How long a client may take to send a request's head.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_read_timeout: Duration,
    /// How long a client may take to send a guarded request's body (408 after).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    body_read_timeout: Duration,
    /// How many client connections are served at once (more wait to be accepted).
    #[arg(long, value_name = "N", default_value_t = proxy::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// How many guarded streams run at once (429 beyond).
    #[arg(long, value_name = "N", default_value_t = proxy::DEFAULT_MAX_STREAMS)]
    max_streams: usize,
    /// How many bytes all guarded streams running at once may read from the upstream (a
    /// stream's bytes count until it ends); a stream that would pass it ends with an error
    /// event.
    #[arg(long, value_name = "BYTES", default_value_t = proxy::DEFAULT_MAX_STREAM_BYTES)]
    max_stream_bytes: usize,
    /// How long SIGTERM waits for the requests and streams in flight before it cuts them.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// How often the manifest's files are looked at for changes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    watch_interval: Duration,
}

/// `portcullis proxy mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The manifest. It is reloaded when one of its files changes and on SIGHUP; a reload
    /// that fails keeps the set in use.
    manifest: PathBuf,
    /// The upstream MCP server's streamable HTTP endpoint (`https://host/mcp`), instead of a
    /// command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream: Option<String>,
    /// Serve clients on streamable HTTP at `http://ADDR/mcp` instead of stdio. Each client
    /// gets an upstream session of its own (with a command upstream: a process of its own).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// With --listen: a host name clients may use besides the loopback ones (repeatable).
    #[arg(long = "allow-host", value_name = "HOST", requires = "listen")]
    allow_hosts: Vec<String>,
    /// With --listen: clients must send `Authorization: Bearer <token>`, the token being the
    /// value of this environment variable.
    #[arg(long, value_name = "VAR", requires = "listen")]
    token_env: Option<String>,
    /// With --listen: serve clients beyond loopback without a token (refused otherwise).
    #[arg(long, requires = "listen")]
    allow_unauthenticated: bool,
    /// With --listen: the most client connections open at once.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "listen")]
    max_connections: usize,
    /// With --listen: how long a client may take to send a request's head, and its body.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, requires = "listen")]
    read_timeout: Duration,
    /// With --listen: the most clients holding an upstream session at once; one more is
    /// refused when it initializes, until a session ends.
    #[arg(long, value_name = "N", default_value_t = portcullis_mcp::DEFAULT_MAX_SESSIONS, requires = "listen")]
    max_sessions: usize,
    /// With --listen: the largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4 * 1024 * 1024, requires = "listen")]
    max_body_bytes: usize,
    /// How long SIGTERM (or Ctrl-C) waits for the requests in flight to be answered; new ones
    /// are refused meanwhile.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Pass requests and notifications of this method, one MCP does not define, to the
    /// upstream unchecked (repeatable). Other unknown methods are refused.
    #[arg(long = "pass-through-method", value_name = "NAME")]
    pass_through_methods: Vec<String>,
    /// How often the manifest's files are looked at for changes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    watch_interval: Duration,
    /// The `metadata.agent_id` of every context.
    #[arg(long, default_value = "mcp-client")]
    agent_id: String,
    /// The `metadata.session_id` of every context.
    #[arg(long, default_value = "default")]
    session_id: String,
    /// The upstream MCP server to start, with its arguments, on stdio.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs a proxy until it is stopped.
pub(crate) fn run(command: ProxyCommand) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return FAILED;
        }
    };
    let code = runtime.block_on(async {
        let manifest = match &command {
            ProxyCommand::Openai(args) => &args.manifest,
            ProxyCommand::Mcp(args) => &args.manifest,
        };
        let Some((engine, export, files)) = engine(manifest).await else {
            return 1;
        };
        let code = match command {
            ProxyCommand::Openai(args) => openai(engine, files, args).await,
            ProxyCommand::Mcp(args) => mcp(engine, files, args).await,
        };
        // The audit records still buffered for the span exporter go out before the exit.
        if let Err(error) = export.shutdown().await {
            eprintln!("warning: {error}");
        }
        code
    });
    // The upstream child process and open sessions must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The engine the manifest describes (its policy set, sessions, approvals and audit sinks),
/// the handle of its span export and the files to watch for a reload, or `None` after
/// printing why it does not load. Its approvals are for actions
/// ([`ApprovalScope::Action`](portcullis::ApprovalScope::Action)): the model's retry of an
/// escalated call comes with a new call id and other words around it, and a person's grant
/// covers the tool, its arguments, the agent and the session.
async fn engine(manifest: &Path) -> Option<(Arc<PolicyEngine>, AuditExport, Vec<PathBuf>)> {
    let loaded = match Manifest::load(manifest, &CodeRegistry::new()) {
        Ok(loaded) => loaded,
        Err(errors) => {
            render::print_load_errors(&errors);
            return None;
        }
    };
    for warning in loaded.warnings() {
        eprint!("{}", render::human(warning, false));
    }
    let export = loaded.audit_export();
    let files = loaded.files().to_vec();
    match loaded.into_engine_builder().await {
        Ok(builder) => Some((
            Arc::new(
                builder
                    .approval_scope(portcullis::ApprovalScope::Action)
                    .build(),
            ),
            export,
            files,
        )),
        Err(errors) => {
            render::print_load_errors(&errors);
            None
        }
    }
}

/// A secret read from the environment variable an option names; an error naming the option
/// when it is unset or empty.
fn secret(option: &str, variable: Option<&String>) -> Result<Option<String>, String> {
    let Some(variable) = variable else {
        return Ok(None);
    };
    match std::env::var(variable) {
        Ok(secret) if !secret.is_empty() => Ok(Some(secret)),
        _ => Err(format!(
            "the environment variable {variable} ({option}) is not set"
        )),
    }
}

/// The proxy `args` describe; an error message when an argument is wrong.
fn openai_proxy(engine: Arc<PolicyEngine>, args: &OpenAIArgs) -> Result<OpenAIProxy, String> {
    let token = secret("--token-env", args.token_env.as_ref())?;
    let upstream_key = secret("--upstream-key-env", args.upstream_key_env.as_ref())?;
    if token.is_none() && !args.listen.ip().is_loopback() && !args.allow_unauthenticated {
        return Err(format!(
            "--listen {} reaches beyond this machine, and no --token-env is set: anyone who reaches it could use the proxy; set --token-env, or pass --allow-unauthenticated",
            args.listen
        ));
    }
    if args.session_from == SessionSource::Token && token.is_none() {
        return Err("--session-from token needs --token-env".to_owned());
    }
    let mut proxy = OpenAIProxy::new(engine, &args.upstream)
        .map_err(|error| format!("--upstream: {error}"))?
        .agent_id(&args.agent_id)
        .session_id(&args.session_id)
        .session_from(args.session_from.clone())
        .on_tool_denial(match args.on_tool_denial {
            OnDenial::Refuse => ToolDenial::Refuse,
            OnDenial::Error => ToolDenial::Fail,
        })
        .refuse_denied_answers(args.on_answer_denial == OnDenial::Refuse)
        .allow_server_state(args.allow_server_state)
        .timeout(args.timeout)
        .max_body_bytes(args.max_body_bytes)
        .header_read_timeout(args.header_read_timeout)
        .body_read_timeout(args.body_read_timeout)
        .max_connections(args.max_connections)
        .max_streams(args.max_streams)
        .max_stream_bytes(args.max_stream_bytes)
        .drain_timeout(args.drain_timeout);
    if let Some(token) = token {
        proxy = proxy.client_token(token);
    }
    if let Some(key) = upstream_key {
        proxy = proxy
            .upstream_key(&key)
            .map_err(|error| format!("--upstream-key-env: {error}"))?;
    }
    for path in &args.pass_through {
        proxy = proxy.pass_through(path);
    }
    for host in &args.allow_hosts {
        proxy = proxy.allow_host(host);
    }
    Ok(proxy)
}

async fn openai(engine: Arc<PolicyEngine>, files: Vec<PathBuf>, args: OpenAIArgs) -> u8 {
    let proxy = match openai_proxy(Arc::clone(&engine), &args) {
        Ok(proxy) => proxy,
        Err(error) => {
            eprintln!("error: {error}");
            return 1;
        }
    };
    let listener = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}: {error}", args.listen);
            return FAILED;
        }
    };
    let watcher = reload_on_change(&args.manifest, &engine, files, args.watch_interval);
    let address = listener.local_addr().unwrap_or(args.listen);
    eprintln!(
        "portcullis: proxy openai listening on http://{address} (upstream {})",
        args.upstream
    );
    let served = proxy.serve_until(listener, stopped()).await;
    watcher.stop();
    match served {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: the proxy failed: {error}");
            FAILED
        }
    }
}

/// Where the MCP proxy's upstream is.
#[derive(Debug, Clone)]
enum McpUpstream {
    /// A streamable HTTP endpoint.
    Http(String),
    /// A command started on stdio, with its arguments.
    Command(String, Vec<String>),
}

impl McpUpstream {
    /// Connects to it, relaying its notifications through `relay`.
    async fn connect(
        self,
        relay: UpstreamRelay,
    ) -> Result<RunningService<RoleClient, UpstreamRelay>, portcullis::BoxError> {
        match self {
            McpUpstream::Http(url) => {
                let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
                Ok(relay.serve(transport).await?)
            }
            McpUpstream::Command(program, arguments) => {
                let mut command = tokio::process::Command::new(program);
                command.args(arguments);
                let transport = rmcp::transport::TokioChildProcess::new(command)?;
                Ok(relay.serve(transport).await?)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            McpUpstream::Http(url) => format!("at {url}"),
            McpUpstream::Command(program, _) => format!("{program:?}"),
        }
    }
}

async fn mcp(engine: Arc<PolicyEngine>, files: Vec<PathBuf>, args: McpArgs) -> u8 {
    let guard = ToolGuard::new(Arc::clone(&engine))
        .agent_id(args.agent_id.clone())
        .session_id(args.session_id.clone());
    let upstream = match (&args.upstream, args.command.split_first()) {
        (Some(url), _) => McpUpstream::Http(url.clone()),
        (None, Some((program, arguments))) => {
            McpUpstream::Command(program.clone(), arguments.to_vec())
        }
        (None, None) => {
            eprintln!(
                "error: name the upstream MCP server: `-- <command> [args..]` (stdio) or --upstream <url> (streamable HTTP)"
            );
            return 1;
        }
    };
    let options = match args.listen.map(|address| listener_options(address, &args)) {
        Some(Err(message)) => {
            eprintln!("error: {message}");
            return 1;
        }
        Some(Ok(options)) => Some(options),
        None => None,
    };
    // The upstream must answer before the proxy serves anyone.
    let relay = UpstreamRelay::default();
    let running = match upstream.clone().connect(relay.clone()).await {
        Ok(running) => running,
        Err(error) => {
            eprintln!(
                "error: the upstream MCP server {} did not initialize: {error}",
                upstream.describe()
            );
            return FAILED;
        }
    };
    let reloads = reload_on_change(&args.manifest, &engine, files, args.watch_interval);
    let code = match (args.listen, options) {
        (Some(address), Some(options)) => {
            // Each client has an upstream session of its own: the probe is not shared.
            drop(running);
            let guarded =
                GuardedServer::per_session(guard, move |relay| upstream.clone().connect(relay))
                    .max_sessions(args.max_sessions);
            let guarded = pass_through(guarded, &args.pass_through_methods);
            serve_http(guarded, address, args.allow_hosts, options).await
        }
        _ => {
            let guarded = GuardedServer::from_running(running, guard).relay(relay);
            serve_stdio(
                pass_through(guarded, &args.pass_through_methods),
                args.drain_timeout,
            )
            .await
        }
    };
    drop(reloads);
    code
}

fn pass_through(mut guarded: GuardedServer, methods: &[String]) -> GuardedServer {
    for method in methods {
        guarded = guarded.pass_through_method(method.clone());
    }
    guarded
}

/// The limits and token of the HTTP listener on `address`, or why it must not start.
fn listener_options(address: SocketAddr, args: &McpArgs) -> Result<ListenerOptions, String> {
    let mut options = ListenerOptions::new()
        .max_connections(args.max_connections)
        .header_read_timeout(args.read_timeout)
        .body_read_timeout(args.read_timeout)
        .max_body_bytes(args.max_body_bytes)
        .drain_timeout(args.drain_timeout);
    if let Some(variable) = &args.token_env {
        match std::env::var(variable) {
            Ok(token) if !token.is_empty() => options = options.bearer_token(token),
            _ => {
                return Err(format!(
                    "the environment variable {variable} (`--token-env`) is not set"
                ));
            }
        }
    }
    check_exposure(address, &options, args.allow_unauthenticated)?;
    Ok(options)
}

/// Reloads the manifest into `engine` when one of its files changes (looked at every
/// `interval`) and on SIGHUP; a reload that fails keeps the set in use, and each outcome is a
/// line on standard error. Watching the files stops when the returned watcher is stopped or
/// dropped, the SIGHUP task with the runtime.
fn reload_on_change(
    manifest: &Path,
    engine: &Arc<PolicyEngine>,
    files: Vec<PathBuf>,
    interval: Duration,
) -> ManifestWatcher {
    let report: reload::Report = Arc::new(|outcome: &ReloadOutcome| match outcome {
        ReloadOutcome::Reloaded { warnings } => {
            // Among them, the sections a reload does not apply (`sessions`, `audit`,
            // `approvals`): said, so that a change waiting for a restart is not missed.
            for warning in warnings {
                eprint!("{}", render::human(warning, false));
            }
            eprintln!("portcullis: policy set reloaded");
        }
        ReloadOutcome::Failed(errors) => {
            eprintln!("portcullis: reload failed, the set in use stays: {errors}");
        }
    });
    let registry = CodeRegistry::new();
    #[cfg(unix)]
    reload::on_hangup(
        manifest.to_owned(),
        registry.clone(),
        Arc::clone(engine),
        Arc::clone(&report),
    );
    reload::watch(manifest, engine, registry, interval, files, report)
}

/// Serves the client on this process's stdio until it closes it, or until the process is
/// stopped: then new requests are refused, and those in flight answered (for up to
/// `drain_timeout`) before the proxy exits.
async fn serve_stdio(guarded: GuardedServer, drain_timeout: Duration) -> u8 {
    let server = Draining::new(guarded);
    let drain = server.drain();
    // rmcp's framing, and an answer with its id to any request it cannot read.
    let running = match server.serve(JsonRpcLines::stdio()).await {
        Ok(running) => running,
        Err(error) => {
            eprintln!("error: the MCP client did not initialize: {error}");
            return FAILED;
        }
    };
    let cancel = running.cancellation_token();
    let ended = running.waiting();
    tokio::pin!(ended);
    let stopping = async {
        stopped().await;
        drain.finish(drain_timeout).await
    };
    let ended = tokio::select! {
        ended = &mut ended => ended,
        cut = stopping => {
            if cut > 0 {
                eprintln!("portcullis: {cut} request(s) still in flight after --drain-timeout: cut");
            }
            // The answers given meanwhile are written out before the session ends.
            cancel.cancel();
            ended.await
        }
    };
    match ended {
        Ok(_) => 0,
        Err(error) => {
            eprintln!("error: the MCP session failed: {error}");
            FAILED
        }
    }
}

/// Serves clients on streamable HTTP at `/mcp` until the process is stopped; then lets the
/// requests in flight finish.
async fn serve_http(
    guarded: GuardedServer,
    address: SocketAddr,
    allow_hosts: Vec<String>,
    options: ListenerOptions,
) -> u8 {
    let mut config = StreamableHttpServerConfig::default();
    config.allowed_hosts.extend(allow_hosts);
    let listener = match TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {address}: {error}");
            return FAILED;
        }
    };
    let bound = listener.local_addr().unwrap_or(address);
    eprintln!("portcullis: proxy mcp listening on http://{bound}{MCP_PATH}");
    match GuardedListener::new(guarded, config, options)
        .serve_until(listener, stopped())
        .await
    {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: the proxy failed: {error}");
            FAILED
        }
    }
}

/// Completes on Ctrl-C or SIGTERM.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `--session-from`: `body`, `token` or `header:NAME`.
fn parse_session_source(text: &str) -> Result<SessionSource, String> {
    match text {
        "body" => Ok(SessionSource::Request),
        "token" => Ok(SessionSource::Token),
        _ => match text.strip_prefix("header:") {
            Some(name) => http::HeaderName::try_from(name)
                .map(SessionSource::Header)
                .map_err(|_| format!("{name:?} is not a header name")),
            None => Err("one of `body`, `token`, `header:NAME`".to_owned()),
        },
    }
}

/// A time-out as the manifest writes durations (`500ms`, `30s`, `10m`, `1m30s`); not zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = portcullis::manifest::parse_duration(text)?;
    if duration.is_zero() {
        return Err("a time-out of zero would refuse every request".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_outs_parse_as_manifest_durations_and_are_not_zero() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "ms", "10 parsecs", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
