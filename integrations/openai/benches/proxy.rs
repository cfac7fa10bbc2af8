//! What the OpenAI-compatible proxy adds, against the same upstream asked directly, on
//! loopback: the latency of a whole chat completion (p50 and p99), and the time to the first
//! released byte of answer text in a stream.
//!
//! ```text
//! cargo bench -p portcullis-openai --features proxy --bench proxy
//! ```
//!
//! The upstream is a small HTTP server on 127.0.0.1 that answers at once (a whole completion,
//! or a stream of 20 text chunks); the proxy guards with the test policy set (two input, two
//! tool-call, two output policies, one of them a streamed redaction with a hold-back). Direct
//! and proxied requests alternate in batches, so both sides see the same machine; the figures
//! are the percentiles of each side and their difference. `PROXY_BENCH_REQUESTS` sets the
//! number of requests per side (default 4000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use portcullis_engine::PolicyEngine;
use portcullis_openai::proxy::OpenAIProxy;
use serde_json::{Value, json};
use tokio::net::TcpListener;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn completion() -> Bytes {
    Bytes::from(
        json!({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 1,
            "model": "bench-model",
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": "Here is a short, harmless answer of about one sentence." },
                "finish_reason": "stop"
            }],
            "usage": { "prompt_tokens": 12, "completion_tokens": 12, "total_tokens": 24 }
        })
        .to_string(),
    )
}

fn stream_events() -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Option<&str>| {
        let chunk = json!({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
            "model": "bench-model",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }]
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for index in 0..20 {
        events.push(chunk(json!({"content": format!("word{index} ")}), None));
    }
    events.push(chunk(json!({}), Some("stop")));
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

async fn answer(request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let streaming = serde_json::from_slice::<Value>(&body).is_ok_and(|body| body["stream"] == true);
    let response = if streaming {
        let frames = stream_events()
            .into_iter()
            .map(|event| Ok::<_, Infallible>(Frame::data(event)));
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
                frames,
            ))))
    } else {
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(completion()).boxed())
    };
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())))
}

async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer))
                    .await;
            });
        }
    });
    address
}

async fn proxy(upstream: SocketAddr) -> SocketAddr {
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(portcullis_testing::agent::policy_set())
            .build(),
    );
    let proxy = OpenAIProxy::new(engine, &format!("http://{upstream}")).expect("a valid upstream");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(proxy.serve(listener));
    address
}

fn request_body(stream: bool) -> String {
    json!({
        "model": "bench-model",
        "stream": stream,
        "messages": [
            { "role": "system", "content": "You are a helpful assistant." },
            { "role": "user", "content": "Say something short and harmless." }
        ]
    })
    .to_string()
}

/// One whole completion; its latency.
async fn whole(client: &reqwest::Client, address: SocketAddr) -> Duration {
    let started = Instant::now();
    let response = client
        .post(format!("http://{address}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(request_body(false))
        .send()
        .await
        .expect("an answer");
    let body = response.bytes().await.expect("a body");
    let elapsed = started.elapsed();
    assert!(body.len() > 100, "{}", String::from_utf8_lossy(&body));
    elapsed
}

/// One streamed completion; the time to the first byte of answer text, and to the end.
async fn streamed(client: &reqwest::Client, address: SocketAddr) -> (Duration, Duration) {
    let started = Instant::now();
    let response = client
        .post(format!("http://{address}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(request_body(true))
        .send()
        .await
        .expect("an answer");
    let mut body = response.bytes_stream();
    let mut first = None;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("a chunk");
        if first.is_none() && chunk.windows(4).any(|window| window == b"word") {
            first = Some(started.elapsed());
        }
    }
    (first.expect("answer text"), started.elapsed())
}

fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn report(name: &str, direct: &mut [Duration], proxied: &mut [Duration]) {
    for (label, fraction) in [("p50", 0.5), ("p99", 0.99)] {
        let direct = percentile(direct, fraction);
        let proxied = percentile(proxied, fraction);
        println!(
            "{name:<34} {label}: direct {:>8.1} µs, through the proxy {:>8.1} µs, added {:>8.1} µs",
            micros(direct),
            micros(proxied),
            micros(proxied) - micros(direct)
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` from a harness-wide run is ignored.
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let requests: usize = std::env::var("PROXY_BENCH_REQUESTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(4000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let upstream = upstream().await;
        let proxy = proxy(upstream).await;
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .expect("a client");
        // Warm up both paths (connections, the engine's first stream plan).
        for _ in 0..200 {
            whole(&client, upstream).await;
            whole(&client, proxy).await;
            streamed(&client, upstream).await;
            streamed(&client, proxy).await;
        }
        let batch = 50;
        let mut direct = Vec::with_capacity(requests);
        let mut proxied = Vec::with_capacity(requests);
        while direct.len() < requests {
            for _ in 0..batch {
                direct.push(whole(&client, upstream).await);
            }
            for _ in 0..batch {
                proxied.push(whole(&client, proxy).await);
            }
        }
        report("whole chat completion", &mut direct, &mut proxied);

        let streams = (requests / 4).max(100);
        let (mut direct_first, mut proxied_first) = (Vec::new(), Vec::new());
        let (mut direct_end, mut proxied_end) = (Vec::new(), Vec::new());
        while direct_first.len() < streams {
            for _ in 0..batch {
                let (first, end) = streamed(&client, upstream).await;
                direct_first.push(first);
                direct_end.push(end);
            }
            for _ in 0..batch {
                let (first, end) = streamed(&client, proxy).await;
                proxied_first.push(first);
                proxied_end.push(end);
            }
        }
        report(
            "stream: first byte of answer text",
            &mut direct_first,
            &mut proxied_first,
        );
        report("stream: whole answer", &mut direct_end, &mut proxied_end);
    });
}
