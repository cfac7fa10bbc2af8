//! `portcullis`: check, evaluate, test and replay policy sets without writing Rust, and guard
//! agents through proxies.
//!
//! Exit status, for every subcommand: 0 success, 1 the command's own input is wrong (a bad
//! manifest, an unreadable context or test file). `eval` adds 2 denied, 3 evaluation error,
//! 4 approval required; `test` adds 2 when a case failed; `replay --fail-on-change` adds 2
//! when a call's outcome would change; `proxy` adds 5 when the proxy cannot start or fails.
//! `serve` runs until stopped and exits 0.

mod approvals;
mod check;
mod log;
mod outcome;
mod proxy;
mod reload;
mod render;
mod replay;
mod serve;
mod test;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Check, evaluate, test and replay Portcullis policy sets.
///
/// A policy set is described by a manifest (`portcullis.yaml`) that names JSON rules, Rego
/// bundles, policy servers and remote endpoints for each interception point (input,
/// tool_call, tool_result, output).
#[derive(Debug, Parser)]
#[command(name = "portcullis", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// For people, like a compiler's messages.
    Human,
    /// One JSON document, for programs.
    Json,
    /// JUnit XML (`test` only), for CI.
    Junit,
}

/// An interception point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Point {
    /// Before the request is sent to the model.
    Input,
    /// Before a tool runs.
    ToolCall,
    /// After a tool ran, before the model reads what it returned.
    ToolResult,
    /// After the model has answered.
    Output,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load and check manifests, rule files, bundles, Cedar policies and folders of them.
    ///
    /// Prints every problem as `file:line:col: error: ...` (then the warnings). A manifest's
    /// `cedar:` entries are parsed and validated against their schema and entities, with
    /// Cedar's own diagnostics at their line and column in each file. Exit status 0 when there
    /// is no error (warnings only), 1 when there is one (or a warning, with --deny-warnings).
    Check {
        /// Manifests (*.yaml, *.yml), rule files (*.json), bundles (*.tar.gz, *.wasm), Cedar
        /// policies (*.cedar) or folders holding them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Treat warnings as errors.
        #[arg(long)]
        deny_warnings: bool,
        /// Output format (human or json).
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Evaluate one context against a manifest's policy set and print the outcome as JSON.
    ///
    /// Exit status 0 allowed, 2 denied, 3 evaluation error, 4 approval required, 1 when the
    /// manifest or the context is wrong.
    Eval {
        /// The manifest.
        manifest: PathBuf,
        /// The interception point.
        #[arg(long, value_enum)]
        point: Point,
        /// The context as JSON (or YAML): a file, or `-` for standard input.
        #[arg(long)]
        context: String,
        /// Record a grant for this action digest before evaluating (repeatable).
        #[arg(long = "grant", value_name = "ACTION_DIGEST")]
        grants: Vec<String>,
        /// Output format (json; human is the same JSON, indented).
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
    },
    /// Run test cases (YAML) against a manifest's policy set.
    ///
    /// The cases of one file run in order on one engine. Prints one line per case and
    /// `N passed, N failed`. Exit status 0 all passed, 2 a case failed, 1 when the manifest
    /// or a test file is wrong.
    Test {
        /// The manifest.
        manifest: PathBuf,
        /// Test files (*.yaml, *.yml) or folders of them.
        #[arg(required = true)]
        tests: Vec<PathBuf>,
        /// Output format (human, json or junit).
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Re-evaluate the calls of an audit log against a manifest's set and report what would
    /// change.
    ///
    /// Reads the log line by line. Prints each call whose outcome would change, then
    /// `N calls, N unchanged, N changed`. Exit status 0, or 2 with --fail-on-change when a
    /// call would change.
    Replay {
        /// The manifest of the candidate set.
        manifest: PathBuf,
        /// The audit log (one audit record per line).
        log: PathBuf,
        /// Exit with status 2 when any call would change.
        #[arg(long)]
        fail_on_change: bool,
        /// Output format (human or json).
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Serve the manifest's policy set as a decision service over HTTP.
    ///
    /// Routes: POST /engine/evaluate (the remote policy protocol), POST
    /// /v1/evaluate/{input|tool_call|tool_result|output}, GET /healthz, /readyz, /metrics. Reloads when a
    /// file of the set changes and on SIGHUP (a failed reload keeps the set in use); SIGTERM
    /// stops accepting, finishes the requests in flight and exits 0. Exit status 1 when the
    /// manifest, the address or the TLS files are wrong, or when it would listen beyond
    /// loopback without a token (see --allow-unauthenticated).
    Serve {
        /// The manifest.
        manifest: PathBuf,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Require `Authorization: Bearer <token>` on evaluations and /metrics, the token read
        /// from this environment variable. Only callers with the token see reload errors in
        /// /readyz; /healthz and /readyz's status stay open to probes.
        #[arg(long, value_name = "VAR")]
        token_env: Option<String>,
        /// Listen beyond loopback without --token-env: anyone who can reach the address can
        /// ask for decisions and probe the policies. Refused without this flag.
        #[arg(long)]
        allow_unauthenticated: bool,
        /// Without --token-env: a host name callers may name in `Host` besides the loopback
        /// ones (repeatable); evaluations and /metrics naming another host, or carrying
        /// `Origin` (a web page's request), are refused (403).
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// Serve HTTPS: the PEM certificate chain (with --tls-key).
        #[arg(long, value_name = "FILE")]
        tls_cert: Option<PathBuf>,
        /// Serve HTTPS: the PEM private key (with --tls-cert).
        #[arg(long, value_name = "FILE")]
        tls_key: Option<PathBuf>,
        /// How often the set's files are looked at for changes.
        #[arg(long, default_value = "1s")]
        watch_interval: String,
        /// The largest request body accepted, in bytes (413 beyond).
        #[arg(long, default_value_t = 1024 * 1024)]
        max_body_bytes: usize,
        /// How many evaluations run at once.
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
        /// How many requests may wait for a slot (503 with Retry-After beyond).
        #[arg(long, default_value_t = 1024)]
        max_queued: usize,
        /// How long one request may take, from its head to its answer.
        #[arg(long, default_value = "10s")]
        request_deadline: String,
        /// How long a client may take to send a request's head, and its body once the
        /// request holds an evaluation slot (slow clients are cut off: 408 or a closed
        /// connection). An idle keep-alive connection is closed after this long too.
        #[arg(long, default_value = "5s")]
        read_timeout: String,
        /// How many client connections may be open at once (more wait to be accepted).
        #[arg(long, default_value_t = portcullis::server::DEFAULT_MAX_CONNECTIONS)]
        max_connections: usize,
        /// How many threads serve connections, each with its own runtime; each new connection
        /// goes to the thread with the fewest open and stays there (default: one per CPU).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        workers: Option<u16>,
        /// Log level: error, warn, info, debug or trace (logs go to standard error; at
        /// `info`, one access line per request).
        #[arg(long, default_value = "info")]
        log_level: String,
        /// Log lines as `text` (for people) or `json` (one object per line, for log
        /// pipelines). Lines are queued and written by a thread of their own: a request never
        /// waits for its log line (lines that find the queue full are dropped and counted).
        #[arg(long, value_enum, default_value_t = log::LogFormat::Text)]
        log_format: log::LogFormat,
        /// Serve the approval console at /console: the requests waiting for a person, with
        /// Approve and Refuse, and a live feed of decisions. Needs --token-env (the page
        /// signs in with the token).
        #[arg(long)]
        console: bool,
    },
    /// List, grant and refuse the approval requests of a running `portcullis serve` (its
    /// `/v1/approvals` routes). Exit status 0 when the service answered, 1 when it refused
    /// (an unknown request, one decided already, a wrong token) or could not be reached.
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCommand),
    /// Guard an agent without changing its code: an OpenAI-compatible proxy, or an MCP
    /// server in front of another.
    #[command(subcommand)]
    Proxy(proxy::ProxyCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Check { format, .. }
        | Command::Eval { format, .. }
        | Command::Replay { format, .. } => Some(*format),
        Command::Test { .. }
        | Command::Serve { .. }
        | Command::Approvals(_)
        | Command::Proxy(_) => None,
    };
    if format == Some(Format::Junit) {
        eprintln!("error: `--format junit` is for `portcullis test`; use human or json here");
        return ExitCode::from(1);
    }
    let code = match cli.command {
        Command::Check {
            paths,
            deny_warnings,
            format,
        } => check::run(&paths, deny_warnings, format),
        Command::Eval {
            manifest,
            point,
            context,
            grants,
            format,
        } => outcome::run_eval(&manifest, point, &context, &grants, format),
        Command::Test {
            manifest,
            tests,
            format,
        } => test::run(&manifest, &tests, format),
        Command::Replay {
            manifest,
            log,
            fail_on_change,
            format,
        } => replay::run(&manifest, &log, fail_on_change, format),
        Command::Serve {
            manifest,
            listen,
            token_env,
            allow_unauthenticated,
            allow_hosts,
            tls_cert,
            tls_key,
            watch_interval,
            max_body_bytes,
            max_concurrent,
            max_queued,
            request_deadline,
            read_timeout,
            max_connections,
            workers,
            log_level,
            log_format,
            console,
        } => serve::run(serve::ServeArgs {
            manifest,
            listen,
            token_env,
            allow_unauthenticated,
            allow_hosts,
            tls_cert,
            tls_key,
            watch_interval,
            max_body_bytes,
            max_concurrent,
            max_queued,
            request_deadline,
            read_timeout,
            max_connections,
            workers,
            log_level,
            log_format,
            console,
        }),
        Command::Approvals(command) => approvals::run(command),
        Command::Proxy(command) => proxy::run(command),
    };
    ExitCode::from(code)
}

/// A current-thread runtime for the evaluations of one command.
fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            std::process::exit(1);
        }
    }
}
