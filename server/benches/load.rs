//! Load benchmark of the decision service: `POST /v1/evaluate/input` on a set of three DSL
//! rules under 64 keep-alive connections, side by side with a bare hyper handler answering a
//! fixed JSON body over the same client, in alternating rounds; then a run with a hot reload
//! every second.
//!
//! ```text
//! cargo bench -p portcullis-server --bench load -- [--seconds 3] [--rounds 3] [--connections 64]
//! ```
//!
//! Prints requests/s, p50 and p99 of each side (medians of the rounds' throughputs,
//! percentiles over every request), their throughput ratio, and the errors of each run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use portcullis_dsl::DslInputPolicy;
use portcullis_engine::{PolicyEngine, PolicySet};
use portcullis_server::{DecisionService, Limits, ServeOptions, serve};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

const FIXED: &str = r#"{"outcome":"allowed","decisions":[{"policy_id":"a","decision":"allow"}]}"#;

fn three_rules() -> PolicySet {
    let rule = |id: &str, value: serde_json::Value| {
        DslInputPolicy::from_source(id, &value.to_string(), id).expect("a valid rule")
    };
    PolicySet::builder()
        .input(rule(
            "no_secrets",
            json!({"condition": {"field": "messages.0.content", "contains": ["secret", "password"]}, "action": "deny", "reason": "no secrets"}),
        ))
        .input(rule(
            "mask_cards",
            json!({"condition": {"field": "messages.0.content", "contains": ["card"]}, "action": "redact",
                   "redactions": [{"field": "messages.0.content", "strategy": "replace", "pattern": "[0-9]{4}"}]}),
        ))
        .input(rule(
            "short_only",
            json!({"condition": {"field": "messages.length", "greater_than": 20}, "action": "deny", "reason": "too long"}),
        ))
        .build()
}

fn body() -> Bytes {
    Bytes::from(
        json!({
            "messages": [{"role": "user", "content": "what is the weather like in Paris today?"}],
            "metadata": {"agent_id": "bench", "session_id": "s1", "timestamp": "2026-01-01T00:00:00Z"},
        })
        .to_string(),
    )
}

/// A bare hyper server answering `FIXED` to everything.
async fn bare_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let _ = request.into_body().collect().await;
                    let mut response =
                        Response::new(Full::new(Bytes::from_static(FIXED.as_bytes())));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[derive(Default)]
struct Run {
    latencies: Vec<Duration>,
    errors: usize,
    elapsed: Duration,
}

impl Run {
    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// `connections` keep-alive connections posting `body` to `path` for `seconds`.
async fn load(addr: SocketAddr, path: &'static str, connections: usize, seconds: f64) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            let Ok(stream) = TcpStream::connect(addr).await else {
                run.errors += 1;
                return run;
            };
            let _ = stream.set_nodelay(true);
            let Ok((mut sender, connection)) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
            else {
                run.errors += 1;
                return run;
            };
            tokio::spawn(connection);
            let payload = body();
            while !stop.load(Ordering::Relaxed) {
                let request = Request::post(path)
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Full::new(payload.clone()))
                    .expect("a request");
                let started = Instant::now();
                let answer = match sender.send_request(request).await {
                    Ok(response) => {
                        let ok = response.status() == 200;
                        let read = response.into_body().collect().await.is_ok();
                        ok && read
                    }
                    Err(_) => false,
                };
                if answer {
                    run.latencies.push(started.elapsed());
                } else {
                    run.errors += 1;
                    if sender.ready().await.is_err() {
                        break;
                    }
                }
            }
            run
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Run::default();
    for task in tasks {
        if let Ok(run) = task.await {
            total.latencies.extend(run.latencies);
            total.errors += run.errors;
        }
    }
    total.elapsed = started.elapsed();
    total
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

struct Side {
    rates: Vec<f64>,
    latencies: Vec<Duration>,
    errors: usize,
}

impl Side {
    fn new() -> Self {
        Side {
            rates: Vec::new(),
            latencies: Vec::new(),
            errors: 0,
        }
    }

    fn add(&mut self, run: Run) {
        self.rates.push(run.throughput());
        self.errors += run.errors;
        self.latencies.extend(run.latencies);
    }

    fn report(&mut self, name: &str) -> f64 {
        self.latencies.sort();
        let rate = median(&mut self.rates);
        println!(
            "{name:<28} {rate:>10.0} req/s   p50 {:>7.3} ms   p99 {:>7.3} ms   errors {}",
            percentile(&self.latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&self.latencies, 0.99).as_secs_f64() * 1e3,
            self.errors
        );
        rate
    }
}

fn argument(name: &str, default: f64) -> f64 {
    let arguments: Vec<String> = std::env::args().collect();
    arguments
        .iter()
        .position(|argument| argument == name)
        .and_then(|at| arguments.get(at + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seconds = argument("--seconds", 3.0);
    let rounds = argument("--rounds", 3.0) as usize;
    let connections = argument("--connections", 64.0) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let service = DecisionService::builder()
            .limits(Limits::new().max_concurrent(1024))
            .build(PolicyEngine::builder().policy_set(three_rules()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let portcullis = listener.local_addr().expect("an address");
        tokio::spawn(serve(
            listener,
            service.clone(),
            ServeOptions::new(),
            std::future::pending(),
        ));
        let bare = bare_server().await;

        // Warm both up.
        load(portcullis, "/v1/evaluate/input", connections, 0.5).await;
        load(bare, "/", connections, 0.5).await;

        println!(
            "{connections} keep-alive connections, {rounds} rounds of {seconds} s per side, alternating"
        );
        let (mut served, mut fixed) = (Side::new(), Side::new());
        for _ in 0..rounds {
            served.add(load(portcullis, "/v1/evaluate/input", connections, seconds).await);
            fixed.add(load(bare, "/", connections, seconds).await);
        }
        let ours = served.report("portcullis /v1/evaluate/input");
        let theirs = fixed.report("bare hyper, fixed JSON");
        println!("throughput ratio: {:.2}x", ours / theirs.max(1.0));

        // Hot reload every second while under load.
        let reloading = Arc::new(AtomicBool::new(true));
        let reloader = {
            let (service, reloading) = (service.clone(), Arc::clone(&reloading));
            std::thread::spawn(move || {
                let mut reloads = 0;
                while reloading.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    service.replace_policy_set(three_rules());
                    reloads += 1;
                }
                reloads
            })
        };
        let mut reloaded = Side::new();
        reloaded.add(load(portcullis, "/v1/evaluate/input", connections, seconds * rounds as f64).await);
        reloading.store(false, Ordering::Relaxed);
        let reloads = reloader.join().unwrap_or(0);
        reloaded.report("portcullis, reload every 1 s");
        println!("reloads during the run: {reloads}; failed requests: {}", reloaded.errors);
    });
}
