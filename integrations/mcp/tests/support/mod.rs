//! What the tests share: the policies, the scripted upstream, and the ways to connect the
//! guard to it and a client to the guard.

#![allow(dead_code, unreachable_pub)]

#[cfg(feature = "listener")]
pub mod listener;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use portcullis_engine::{
    BoxError, Policy, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};
use portcullis_mcp::{GuardedServer, ToolGuard};
use portcullis_testing::agent::{GuardTools, NoLaunchCodes, RedactAnswerSsn, RedactToolSsn};
use rmcp::service::{RoleClient, RoleServer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use upstream::Upstream;

/// Any error of a test's set-up.
pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// Denies `send_email` to an address outside `example.com` (id `no_external_email`).
#[derive(Debug, Clone, Copy)]
pub struct NoExternalEmail;

#[async_trait]
impl Policy<ToolCallContext> for NoExternalEmail {
    fn id(&self) -> &str {
        "no_external_email"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        let to = context.arguments.get("to").and_then(Value::as_str);
        Ok(match (context.tool_name.as_str(), to) {
            ("send_email", Some(to)) if !to.ends_with("@example.com") => {
                PolicyDecision::deny("mail may only go to example.com")
            }
            _ => PolicyDecision::allow(),
        })
    }
}

/// [`RedactToolSsn`] for the calls that have a `query` argument (id `redact_tool_ssn`): the
/// shared policy fails on a call without one.
#[derive(Debug, Clone, Copy)]
pub struct RedactQuerySsn;

#[async_trait]
impl Policy<ToolCallContext> for RedactQuerySsn {
    fn id(&self) -> &str {
        "redact_tool_ssn"
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        if context.arguments.contains_key("query") {
            RedactToolSsn.evaluate(context).await
        } else {
            Ok(PolicyDecision::allow())
        }
    }
}

/// The contexts the engine evaluated, as JSON, with their interception point.
#[derive(Debug, Clone, Default)]
pub struct Audit(Arc<Mutex<Vec<(String, Value)>>>);

impl Audit {
    /// An audit handler that records each context in this log.
    pub fn recorder(&self) -> impl Fn(&portcullis_engine::AuditRecord) + Send + Sync + 'static {
        let records = self.clone();
        move |record: &portcullis_engine::AuditRecord| {
            let context = serde_json::to_value(record.context).unwrap_or(Value::Null);
            if let Ok(mut list) = records.0.lock() {
                list.push((record.interception_point.as_str().to_owned(), context));
            }
        }
    }

    /// Every context of `point` (`tool_call`, `output`), in order.
    pub fn contexts(&self, point: &str) -> Vec<Value> {
        self.0
            .lock()
            .map(|records| {
                records
                    .iter()
                    .filter(|(at, _)| at == point)
                    .map(|(_, context)| context.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The engine of the tests: the shared agent policies for tools (`guard_tools`,
/// `redact_tool_ssn` as [`RedactQuerySsn`]) and output (`no_launch_codes`,
/// `redact_answer_ssn`), and [`NoExternalEmail`]; every evaluated context is recorded in the returned [`Audit`].
pub fn engine() -> (Arc<PolicyEngine>, Audit) {
    let audit = Audit::default();
    let engine = PolicyEngine::builder()
        .policy_set(policies())
        .on_audit(audit.recorder())
        .build();
    (Arc::new(engine), audit)
}

/// The engine of [`engine`] without its record of contexts (which keeps every context: a test
/// that measures memory must not).
pub fn unrecorded_engine() -> Arc<PolicyEngine> {
    Arc::new(PolicyEngine::builder().policy_set(policies()).build())
}

/// The policies of [`engine`].
fn policies() -> PolicySet {
    PolicySet::builder()
        .tool_call(GuardTools)
        .tool_call(RedactQuerySsn)
        .tool_call(NoExternalEmail)
        .output(NoLaunchCodes)
        .output(RedactAnswerSsn)
        .build()
}

/// The guard of the tests: agent `test-agent`, session `session-1`.
pub fn tool_guard(engine: &Arc<PolicyEngine>) -> ToolGuard {
    ToolGuard::new(engine.clone())
        .agent_id("test-agent")
        .session_id("session-1")
}

/// The text blocks of a tool result, joined by newlines.
pub fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An rmcp client with no handler of its own.
pub type Client = RunningService<RoleClient, ()>;

/// Serves `server` on one end of an in-process pipe and connects a client to the other.
pub async fn connect_in_process<S: ServerHandler>(
    server: S,
) -> Result<(Client, RunningService<RoleServer, S>), TestError> {
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(server.serve(server_end));
    let client = ().serve(client_end).await?;
    let server = serving.await??;
    Ok((client, server))
}

/// The scripted upstream, the guard in front of it and a client in front of the guard,
/// all over in-process pipes.
pub struct InProcess {
    /// The scripted upstream's record of calls.
    pub upstream: Upstream,
    /// The upstream server, running.
    pub upstream_server: RunningService<RoleServer, Upstream>,
    /// The guard's connection to the upstream.
    pub upstream_client: Client,
    /// The guard, serving.
    pub guard: RunningService<RoleServer, GuardedServer>,
    /// The client in front.
    pub client: Client,
    /// What the engine evaluated.
    pub audit: Audit,
}

impl InProcess {
    /// Starts all three.
    pub async fn start() -> Result<InProcess, TestError> {
        let (engine, audit) = engine();
        let upstream = Upstream::default();
        let (upstream_client, upstream_server) = connect_in_process(upstream.clone()).await?;
        let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
        let (client, guard) = connect_in_process(guarded).await?;
        Ok(InProcess {
            upstream,
            upstream_server,
            upstream_client,
            guard,
            client,
            audit,
        })
    }
}

/// A server handler served on streamable HTTP at 127.0.0.1 on a free port.
pub struct HttpServer {
    /// Where to send MCP requests.
    pub url: String,
    /// The address it listens on.
    pub address: SocketAddr,
    accept: JoinHandle<()>,
}

impl HttpServer {
    /// Serves a clone of `handler` per session.
    pub async fn start<S: ServerHandler + Clone>(handler: S) -> Result<HttpServer, TestError> {
        HttpServer::serve(StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        ))
        .await
    }

    /// Serves the guard through [`GuardedServer::streamable_http_service`].
    pub async fn guard(guarded: GuardedServer) -> Result<HttpServer, TestError> {
        HttpServer::serve(guarded.streamable_http_service(StreamableHttpServerConfig::default()))
            .await
    }

    async fn serve<S: ServerHandler>(
        service: StreamableHttpService<S, LocalSessionManager>,
    ) -> Result<HttpServer, TestError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let service = TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(HttpServer {
            url: format!("http://{address}/mcp"),
            address,
            accept,
        })
    }

    /// A client connected to it over streamable HTTP.
    pub async fn client(&self) -> Result<Client, TestError> {
        Ok(
            ().serve(StreamableHttpClientTransport::from_uri(self.url.as_str()))
                .await?,
        )
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
