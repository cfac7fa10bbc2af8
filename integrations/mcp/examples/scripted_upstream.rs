//! The scripted MCP server of the crate's tests, served on stdio: the upstream the tests
//! start as a child process behind the guard.
//!
//! ```text
//! cargo run -p portcullis-mcp --example scripted_upstream
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/upstream.rs"]
mod upstream;

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let running = upstream::Upstream::default()
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}
