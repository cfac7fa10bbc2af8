//! An MCP `tools/call` round trip through the guard against the same call made directly,
//! with rmcp on both sides: over in-process pipes and over streamable HTTP on 127.0.0.1.
//!
//! ```text
//! cargo bench -p portcullis-mcp --bench round_trip
//! ```
//!
//! `send_email` is allowed and its result passes unchanged; `read_file` answers with an SSN
//! that the output policies redact. The guard runs the test policies of the crate (three
//! tool-call policies, two output policies).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_mcp::GuardedServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient};
use serde_json::json;
use support::upstream::Upstream;
use support::{Client, HttpServer, TestError, connect_in_process, engine, tool_guard};

fn call(name: &'static str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name);
    let arguments = match name {
        "send_email" => json!({"to": "ann@example.com", "body": "hello"}),
        _ => json!({"path": "/hr/jane"}),
    };
    if let serde_json::Value::Object(arguments) = arguments {
        params.arguments = Some(arguments);
    }
    params
}

/// Keeps every running part of one set-up alive.
struct Setup {
    direct: Client,
    guarded: Client,
    _keep: Vec<Box<dyn std::any::Any + Send>>,
}

async fn in_process() -> Result<Setup, TestError> {
    let (engine, _audit) = engine();
    let (direct, direct_server) = connect_in_process(Upstream::default()).await?;
    let (upstream_client, upstream_server) = connect_in_process(Upstream::default()).await?;
    let guard = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
    let (guarded, guard_server) = connect_in_process(guard).await?;
    Ok(Setup {
        direct,
        guarded,
        _keep: vec![
            Box::new(direct_server),
            Box::new(upstream_server),
            Box::new(upstream_client),
            Box::new(guard_server),
        ],
    })
}

async fn over_http() -> Result<Setup, TestError> {
    let (engine, _audit) = engine();
    let upstream = HttpServer::start(Upstream::default()).await?;
    let direct = upstream.client().await?;
    let upstream_client = upstream.client().await?;
    let guard = HttpServer::guard(GuardedServer::new(
        upstream_client.peer().clone(),
        tool_guard(&engine),
    ))
    .await?;
    let guarded = guard.client().await?;
    Ok(Setup {
        direct,
        guarded,
        _keep: vec![
            Box::new(upstream),
            Box::new(upstream_client),
            Box::new(guard),
        ],
    })
}

fn bench_round_trips(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    transport: &str,
    setup: &Setup,
) {
    let mut group = c.benchmark_group(format!("mcp_tools_call/{transport}"));
    for tool in ["send_email", "read_file"] {
        for (route, peer) in [
            ("direct", setup.direct.peer()),
            ("guarded", setup.guarded.peer()),
        ] {
            let peer: Peer<RoleClient> = peer.clone();
            group.bench_function(format!("{tool}/{route}"), |b| {
                b.to_async(runtime).iter(|| {
                    let peer = peer.clone();
                    async move {
                        let result = peer.call_tool(call(tool)).await;
                        black_box(result.ok())
                    }
                });
            });
        }
    }
    group.finish();
}

fn round_trips(c: &mut Criterion) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("no tokio runtime: {error}"),
    };
    for (transport, setup) in [
        ("in_process", runtime.block_on(in_process())),
        ("http", runtime.block_on(over_http())),
    ] {
        match setup {
            Ok(setup) => {
                bench_round_trips(c, &runtime, transport, &setup);
                runtime.block_on(async move { drop(setup) });
            }
            Err(error) => panic!("the {transport} set-up failed: {error}"),
        }
    }
}

criterion_group!(benches, round_trips);
criterion_main!(benches);
