//! `portcullis approvals list|grant|refuse --server <url>`: the approval routes of a running
//! decision service, from a terminal.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// How long one call to the service may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The service to talk to.
#[derive(Args, Debug)]
pub(crate) struct ServerArgs {
    /// The decision service's base URL, for example http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    server: String,
    /// The environment variable holding the service's bearer token (its --token-env).
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// Print the service's JSON answer as it is.
    #[arg(long)]
    json: bool,
}

/// What to do with the approval requests.
#[derive(Subcommand, Debug)]
pub(crate) enum ApprovalsCommand {
    /// List the approval requests the service keeps, newest first.
    List {
        /// Which: pending, granted, refused or all.
        #[arg(long, default_value = "pending")]
        status: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Let the action of a waiting request through once.
    Grant {
        /// The request's id (as `list` shows it).
        id: String,
        /// Who approves (recorded with the grant and in the audit trail).
        #[arg(long)]
        by: String,
        /// How long the grant stays valid (`30s`, `15m`, `1h`; at most 30 days).
        #[arg(long, default_value = "15m")]
        ttl: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Refuse the action of a waiting request: its retry is denied.
    Refuse {
        /// The request's id (as `list` shows it).
        id: String,
        /// Who refuses.
        #[arg(long)]
        by: String,
        /// Why (shown to the caller whose retry is denied).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub(crate) fn run(command: ApprovalsCommand) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return 1;
        }
    };
    runtime.block_on(async {
        match command {
            ApprovalsCommand::List { status, server } => {
                let path = format!("/v1/approvals?status={}", percent_encoded(&status));
                call(&server, reqwest::Method::GET, &path, None, print_list).await
            }
            ApprovalsCommand::Grant {
                id,
                by,
                ttl,
                server,
            } => {
                let path = format!("/v1/approvals/{}/grant", percent_encoded(&id));
                let body = json!({"by": by, "ttl": ttl});
                call(&server, reqwest::Method::POST, &path, Some(body), print_one).await
            }
            ApprovalsCommand::Refuse {
                id,
                by,
                reason,
                server,
            } => {
                let path = format!("/v1/approvals/{}/refuse", percent_encoded(&id));
                let body = json!({"by": by, "reason": reason});
                call(&server, reqwest::Method::POST, &path, Some(body), print_one).await
            }
        }
    })
}

/// `text` with every byte but unreserved ones percent-encoded (for a path segment or a query
/// value: an id cannot reach another route).
fn percent_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Calls the service and prints its answer (`print` for a success, the service's error
/// otherwise); the exit status.
async fn call(
    server: &ServerArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    print: fn(&Value),
) -> u8 {
    let token = match &server.token_env {
        Some(variable) => match std::env::var(variable) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => {
                eprintln!("error: the environment variable {variable} (`--token-env`) is not set");
                return 1;
            }
        },
        None => None,
    };
    let client = match reqwest::Client::builder().timeout(CALL_TIMEOUT).build() {
        Ok(client) => client,
        Err(error) => {
            eprintln!("error: cannot make an HTTP client: {error}");
            return 1;
        }
    };
    let url = format!("{}{path}", server.server.trim_end_matches('/'));
    let mut request = client.request(method, &url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            eprintln!(
                "error: the service at {} did not answer: {error}",
                server.server
            );
            return 1;
        }
    };
    let status = response.status();
    let text = match response.text().await {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error: the service's answer could not be read: {error}");
            return 1;
        }
    };
    let Ok(answer) = serde_json::from_str::<Value>(&text) else {
        eprintln!("error: the service answered {status} with something that is not JSON");
        return 1;
    };
    if !status.is_success() {
        let message = answer["error"]["message"].as_str().unwrap_or("no message");
        let code = answer["error"]["code"].as_str().unwrap_or("error");
        eprintln!("error: {code} ({status}): {message}");
        return 1;
    }
    if server.json {
        println!("{answer}");
    } else {
        print(&answer);
    }
    0
}

fn print_list(answer: &Value) {
    let empty = Vec::new();
    let approvals = answer["approvals"].as_array().unwrap_or(&empty);
    if approvals.is_empty() {
        println!("no approval requests");
    }
    for record in approvals {
        print_one(record);
    }
}

/// One record: its id and status, then what it asks, as a person reads it.
fn print_one(record: &Value) {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let list = |value: &Value| {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    println!(
        "{}  {}  {}  by {}",
        text(&record["id"]),
        text(&record["status"]),
        text(&record["interception_point"]),
        list(&record["policy_ids"])
    );
    let context = &record["context"];
    if let Some(tool) = context["tool_name"].as_str() {
        println!("  tool: {tool}");
        println!("  arguments: {}", context["arguments"]);
    }
    let reasons = list(&record["reasons"]);
    if !reasons.is_empty() {
        println!("  reasons: {reasons}");
    }
    println!(
        "  agent {} session {}, asked {}",
        text(&context["metadata"]["agent_id"]),
        text(&context["metadata"]["session_id"]),
        text(&record["requested_at"])
    );
    if let Some(by) = record["decided_by"].as_str() {
        let reason = record["reason"]
            .as_str()
            .map(|reason| format!(": {reason}"))
            .unwrap_or_default();
        println!(
            "  {} by {by} at {}{reason}",
            text(&record["status"]),
            text(&record["decided_at"])
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_cannot_reach_another_route() {
        assert_eq!(percent_encoded("apr-1a-2"), "apr-1a-2");
        assert_eq!(percent_encoded("../../metrics?x"), "..%2F..%2Fmetrics%3Fx");
    }
}
