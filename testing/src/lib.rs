//! Test servers for Portcullis, on 127.0.0.1: real HTTP, real sockets, started and stopped by
//! the tests that use them. Not published; a dev-dependency of the remote backends, their
//! benchmarks and the workspace's scenario tests.
//!
//! - [`EvaluateServer`]: the remote decision endpoint the `http` backend calls (`POST /engine/evaluate`),
//!   answering what a test scripts per request ([`Reply`]): a decision, a delay, any status and
//!   body, or a fault (stall before headers, trickled body, connection reset mid-body, oversized
//!   or endless body, redirect loop, wrong content type).
//! - [`RegoServer`]: the subset of the Open Policy Agent REST API the `rego-rest` backend uses
//!   (`PUT /v1/policies/{id}`, `POST /v1/data/{path}`, OPA's error bodies), evaluating Rego for
//!   real with the `regorus` interpreter.
//!
//! - [`agent`]: the policies the framework integrations' tests (async-openai, rig) guard an
//!   agent with, so both are held to the same rules.
//! - [`redis::RedisServer`]: a real `redis-server` on a free port, for the session store's
//!   tests.
//! - [`process`]: scratch folders and started binaries, removed and killed on drop.
//! - [`load`]: slow clients ([`load::SlowRequest`]) and a process's resident memory
//!   ([`load::PeakResident`]), for the listeners' load tests.
//!
//! Both servers bind a free port, record every request they receive ([`RecordedRequest`]: method,
//! path, headers, body) and count the TCP connections they accept, so a test can assert what a
//! client sent and how many connections it opened. They run on the tokio runtime that starts
//! them and stop when shut down or dropped.
//!
//! ```
//! use portcullis_testing::{EvaluateServer, Reply};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! // A decision endpoint that answers after 20 ms, as a benchmark of deadlines needs.
//! let server = EvaluateServer::replying(
//!     Reply::json(serde_json::json!({"decision": "allow"})).after(Duration::from_millis(20)),
//! )
//! .await?;
//! println!("POST {}/engine/evaluate", server.url());
//! assert!(server.requests().is_empty());
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

pub mod agent;
mod evaluate;
pub mod load;
mod opa;
pub mod process;
pub mod redis;
mod server;

pub use evaluate::{EvaluateServer, Reply};
pub use opa::RegoServer;
pub use server::RecordedRequest;

/// Whether the official `openai` Python package is installed, for the tests that drive a
/// proxy with it: a test without it is skipped (with a line on standard error saying so),
/// unless `PORTCULLIS_REQUIRE_PYTHON_OPENAI` is set (to anything but `0`), which makes a
/// missing package fail it (the test command sets it).
///
/// # Panics
/// When the package is missing and `PORTCULLIS_REQUIRE_PYTHON_OPENAI` is set.
pub fn python_openai_installed() -> bool {
    let installed = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        skip(
            "PORTCULLIS_REQUIRE_PYTHON_OPENAI",
            "the openai Python package is not installed (pip install openai)",
        );
    }
    installed
}

/// Says that a test cannot run because of `why` (a tool or package missing): a line on
/// standard error, and the test returns early, passing; unless the environment variable
/// `required_by` is set to anything but `0` (the test command sets them), which fails it
/// instead, so that a suite that must run every test cannot pass without running one.
///
/// # Panics
/// When `required_by` is set.
pub fn skip(required_by: &str, why: &str) {
    let required =
        std::env::var_os(required_by).is_some_and(|value| !value.is_empty() && value != "0");
    #[allow(clippy::panic)]
    if required {
        panic!("{why}, and {required_by} requires this test to run");
    }
    eprintln!("skipped: {why}");
}

/// Reads `lines` (a child process's output, line by line) for at most `within`, until each of
/// `texts` was in one of them; returns the lines read.
///
/// # Panics
/// When `within` passes (or the output ends) before every text was seen: the message lists
/// the texts and the lines read.
pub fn wait_for_lines(
    lines: &std::sync::mpsc::Receiver<String>,
    texts: &[&str],
    within: std::time::Duration,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    let mut read: Vec<String> = Vec::new();
    while !texts
        .iter()
        .all(|text| read.iter().any(|line| line.contains(text)))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => read.push(line),
            #[allow(clippy::panic)]
            Err(_) => panic!("never printed all of {texts:?}; printed: {read:#?}"),
        }
    }
    read
}
