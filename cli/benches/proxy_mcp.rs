//! An MCP `tools/call` round trip through the `portcullis proxy mcp` process, against the same
//! call made to the upstream directly (a bench binary: `cargo bench -p portcullis-cli --bench
//! proxy_mcp`).
//!
//! The upstream is an rmcp server on streamable HTTP at 127.0.0.1 in this process; the proxy
//! runs as its own process (`--upstream <url> --listen 127.0.0.1:0`) with the manifest of the
//! command's proxy tests; the client is rmcp on streamable HTTP. Direct and proxied calls
//! alternate in batches; `PROXY_BENCH_CALLS` sets the calls per side (default 2000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

/// An upstream with one tool, `echo`.
#[derive(Clone, Copy)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut schema = Map::new();
        schema.insert("type".to_owned(), Value::from("object"));
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Answers its text.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

async fn serve_upstream() -> String {
    let service = StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{address}/mcp")
}

/// Starts the proxy process; returns it and its endpoint URL.
fn start_proxy(upstream: &str) -> (std::process::Child, String) {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy/portcullis.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("proxy")
        .arg("mcp")
        .arg(manifest)
        .args(["--upstream", upstream, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the proxy starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split("listening on ")
                .nth(1)
                .map(|url| url.trim().to_owned())
        })
        .expect("the proxy listens");
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    (child, url)
}

fn call() -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = json!({"text": "hello from the benchmark"})
        .as_object()
        .cloned();
    params
}

fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let calls: usize = std::env::var("PROXY_BENCH_CALLS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let upstream = serve_upstream().await;
        let (mut proxy, proxy_url) = start_proxy(&upstream);
        let direct = ()
            .serve(StreamableHttpClientTransport::from_uri(upstream.as_str()))
            .await
            .expect("a direct session");
        let guarded = ()
            .serve(StreamableHttpClientTransport::from_uri(proxy_url.as_str()))
            .await
            .expect("a session through the proxy");
        for _ in 0..200 {
            direct.call_tool(call()).await.expect("a result");
            guarded.call_tool(call()).await.expect("a result");
        }
        let (mut direct_times, mut guarded_times) = (Vec::new(), Vec::new());
        while direct_times.len() < calls {
            for _ in 0..50 {
                let started = Instant::now();
                direct.call_tool(call()).await.expect("a result");
                direct_times.push(started.elapsed());
            }
            for _ in 0..50 {
                let started = Instant::now();
                let result = guarded.call_tool(call()).await.expect("a result");
                guarded_times.push(started.elapsed());
                assert_ne!(result.is_error, Some(true));
            }
        }
        for (label, fraction) in [("p50", 0.5), ("p99", 0.99)] {
            let direct = percentile(&mut direct_times, fraction);
            let guarded = percentile(&mut guarded_times, fraction);
            println!(
                "tools/call over streamable HTTP {label}: direct {:>8.1} µs, through portcullis proxy mcp {:>8.1} µs, added {:>8.1} µs",
                direct.as_secs_f64() * 1e6,
                guarded.as_secs_f64() * 1e6,
                (guarded.as_secs_f64() - direct.as_secs_f64()) * 1e6
            );
        }
        let _ = direct.cancel().await;
        let _ = guarded.cancel().await;
        let _ = proxy.kill();
        let _ = proxy.wait();
    });
}
