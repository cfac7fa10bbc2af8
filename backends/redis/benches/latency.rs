//! What the Redis session store adds per evaluation on loopback: p50 and p99 of a
//! 10-allow-policy engine's evaluations with the store, and without one, against a
//! `redis-server` this benchmark starts on 127.0.0.1 (no persistence).
//!
//! `cargo bench -p portcullis-redis --bench latency`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use portcullis_engine::{
    BoxError, InputContext, Message, Metadata, Policy, PolicyDecision, PolicyEngine, PolicySet,
    async_trait,
};
use portcullis_redis::RedisSessionStore;

struct AllowAll(String);

#[async_trait]
impl Policy<InputContext> for AllowAll {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        std::hint::black_box(context);
        Ok(PolicyDecision::allow())
    }
}

fn set() -> PolicySet {
    let mut set = PolicySet::builder();
    for at in 0..10 {
        set = set.input(AllowAll(format!("allow_{at}")));
    }
    set.build()
}

async fn percentiles(
    engine: &PolicyEngine,
    context: &InputContext,
    runs: usize,
) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs / 10 {
        let _ = engine.evaluate_input(context).await;
    }
    for _ in 0..runs {
        let started = Instant::now();
        let ok = engine.evaluate_input(context).await.is_ok();
        times.push(started.elapsed());
        assert!(ok);
    }
    times.sort();
    (times[runs / 2], times[runs * 99 / 100])
}

fn main() {
    // `cargo test --benches` runs benchmarks with `--bench` absent: do nothing then.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = match Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            eprintln!("skipped: cannot start redis-server: {error}");
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = format!("redis://127.0.0.1:{port}/0");
        let store = {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match RedisSessionStore::builder(&url).connect().await {
                    Ok(store) => break store,
                    Err(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(error) => panic!("{error}"),
                }
            }
        };
        let context = InputContext::new(
            vec![Message::user("What is the weather in Paris tomorrow?")],
            Metadata::new("agent-1", "session-1"),
        );
        let runs = 20_000;
        let plain = PolicyEngine::builder().policy_set(set()).build();
        let kept = PolicyEngine::builder()
            .policy_set(set())
            .sessions(store)
            .build();
        let (p50, p99) = percentiles(&plain, &context, runs).await;
        let (s50, s99) = percentiles(&kept, &context, runs).await;
        println!("{runs} evaluations, 10 allow policies, Redis on loopback");
        println!("  without a store: p50 {p50:?}  p99 {p99:?}");
        println!("  with Redis:      p50 {s50:?}  p99 {s99:?}");
        println!(
            "  added:           p50 {:?}  p99 {:?}",
            s50.saturating_sub(p50),
            s99.saturating_sub(p99)
        );
    });
    let _ = server.kill();
    let _ = server.wait();
}
