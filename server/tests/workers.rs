//! The service on worker threads ([`ServeOptions::workers`]): connections spread over the
//! threads, the cap on open connections held for all of them, and a stop that lets requests
//! in flight finish.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Slow, input, post};
use portcullis_engine::{
    BoxError, InputContext, Policy, PolicyDecision, PolicyEngine, PolicySet, async_trait,
};
use portcullis_server::{DecisionService, ServeOptions, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Allows, and notes the name of the thread that evaluated it.
struct Threads(Arc<Mutex<BTreeSet<String>>>);

#[async_trait]
impl Policy<InputContext> for Threads {
    fn id(&self) -> &str {
        "threads"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        self.0.lock().unwrap().insert(name);
        Ok(PolicyDecision::allow())
    }
}

/// `set` served on a free port of 127.0.0.1 with `options`: the address, the sender that
/// stops the service, and the task that ends with what [`serve`] returned.
async fn start(
    set: PolicySet,
    options: ServeOptions,
) -> (
    String,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let service = DecisionService::builder().build(PolicyEngine::builder().policy_set(set));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, options, async {
        let _ = stopped.await;
    }));
    (address, stop, task)
}

/// Reads one whole answer from `stream` (its head, then a body of `Content-Length` bytes),
/// or what came of it within `wait`.
async fn read_answer(stream: &mut TcpStream, wait: Duration) -> String {
    let mut answer = Vec::new();
    let read = async {
        let mut buffer = [0; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .and_then(|length| length.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if answer.len() >= end + 4 + length {
                    return;
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            }
        }
    };
    let _ = tokio::time::timeout(wait, read).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `request` on `stream` and reads its answer, as [`read_answer`] does.
async fn exchange(stream: &mut TcpStream, request: &str, wait: Duration) -> String {
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request is written");
    read_answer(stream, wait).await
}

/// A keep-alive request for `/healthz`.
const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// A keep-alive evaluation of `content` at input.
fn evaluation(content: &str) -> String {
    let body = input(content).to_string();
    format!(
        "POST /v1/evaluate/input HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Connections held open go to the thread with the fewest, so both threads serve some; every
/// request is evaluated on a worker thread, none on the caller's runtime, and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_spread_over_the_threads_and_all_are_answered() {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let set = PolicySet::builder()
        .input(Threads(Arc::clone(&seen)))
        .build();
    let (address, stop, task) = start(set, ServeOptions::new().workers(2)).await;

    let mut held = Vec::new();
    for _ in 0..6 {
        let mut stream = TcpStream::connect(&address).await.expect("a connection");
        // Answered, so handed to a thread before the next one connects.
        let answer = exchange(&mut stream, HEALTHZ, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        held.push(stream);
    }
    for round in 0..3 {
        for stream in &mut held {
            let request = evaluation(&format!("round {round}"));
            let answer = exchange(stream, &request, Duration::from_secs(10)).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
            assert!(answer.contains(r#""outcome":"allowed""#), "{answer:?}");
        }
    }

    let seen = seen.lock().unwrap().clone();
    let workers = ["portcullis-worker-0", "portcullis-worker-1"].map(str::to_owned);
    assert_eq!(seen, BTreeSet::from(workers), "the threads that evaluated");
    drop(held);
    let _ = stop.send(());
    task.await.expect("the serving task").expect("a clean stop");
}

/// Without workers, connections are tasks of the runtime `serve` runs on.
#[tokio::test(flavor = "current_thread")]
async fn without_workers_the_callers_runtime_serves() {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let set = PolicySet::builder()
        .input(Threads(Arc::clone(&seen)))
        .build();
    let caller = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_owned();
    let (address, stop, task) = start(set, ServeOptions::new()).await;

    let mut stream = TcpStream::connect(&address).await.expect("a connection");
    let answer = exchange(&mut stream, &evaluation("hello"), Duration::from_secs(10)).await;
    assert!(answer.contains(r#""outcome":"allowed""#), "{answer:?}");
    assert_eq!(seen.lock().unwrap().clone(), BTreeSet::from([caller]));

    drop(stream);
    let _ = stop.send(());
    task.await.expect("the serving task").expect("a clean stop");
}

/// With a cap of one open connection, the others wait, unanswered, until the one before them
/// closes; each is then answered on its worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_on_open_connections_holds_with_workers() {
    let options = ServeOptions::new().workers(2).max_connections(1);
    let (address, stop, task) = start(common::policies(), options).await;

    let mut first = TcpStream::connect(&address).await.expect("a connection");
    let answer = exchange(&mut first, HEALTHZ, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(&address).await.expect("a connection");
        let answer = exchange(&mut stream, HEALTHZ, Duration::from_millis(300)).await;
        assert_eq!(answer, "", "answered over the cap");
        waiting.push(stream);
    }

    // Each closes once answered, which frees the place for the next.
    drop(first);
    let readers: Vec<_> = waiting
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move { read_answer(&mut stream, Duration::from_secs(20)).await })
        })
        .collect();
    for reader in readers {
        let answer = reader.await.expect("the reader ran");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    }

    let _ = stop.send(());
    task.await.expect("the serving task").expect("a clean stop");
}

/// A stop lets the request under way on a worker thread finish with its answer; then the
/// service no longer listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_requests_in_flight_finish() {
    let set = PolicySet::builder()
        .input(Slow(Duration::from_millis(500)))
        .build();
    let (address, stop, task) = start(set, ServeOptions::new().workers(2)).await;
    let request = tokio::spawn({
        let url = format!("http://{address}/v1/evaluate/input");
        async move { post(&url, &input("hello")).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;

    let _ = stop.send(());
    let (status, outcome) = request.await.expect("the client ran");
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "allowed", "{outcome}");
    task.await.expect("the serving task").expect("a clean stop");
    assert!(
        TcpStream::connect(&address).await.is_err(),
        "still listening after the stop"
    );
}
