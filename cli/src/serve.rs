//! `portcullis serve`: the manifest's policy set as a decision service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use portcullis::manifest::{
    CodeRegistry, Manifest, PolicySource, ReloadOutcome, audit_write_failures, parse_duration,
};
use portcullis::server::{DecisionService, Limits, ReloadStatus, redact_urls, serve};

use crate::log::{Line, LogFormat, LogGuard, QueuedAccessLog, QueuedStderr};
use crate::{reload, render};
use tracing_subscriber::fmt::format::JsonFields;

/// What `serve` was asked for.
pub(crate) struct ServeArgs {
    pub(crate) manifest: PathBuf,
    pub(crate) listen: String,
    pub(crate) token_env: Option<String>,
    pub(crate) allow_unauthenticated: bool,
    pub(crate) allow_hosts: Vec<String>,
    pub(crate) tls_cert: Option<PathBuf>,
    pub(crate) tls_key: Option<PathBuf>,
    pub(crate) watch_interval: String,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_concurrent: usize,
    pub(crate) max_queued: usize,
    pub(crate) request_deadline: String,
    pub(crate) read_timeout: String,
    pub(crate) max_connections: usize,
    pub(crate) workers: Option<u16>,
    pub(crate) log_level: String,
    pub(crate) log_format: LogFormat,
    pub(crate) console: bool,
}

fn fail(message: impl std::fmt::Display) -> u8 {
    eprintln!("error: {message}");
    1
}

pub(crate) fn run(args: ServeArgs) -> u8 {
    let level = match args.log_level.parse::<tracing::Level>() {
        Ok(level) => level,
        Err(_) => return fail("`--log-level` is one of error, warn, info, debug, trace"),
    };
    let mut log = init_log(level, args.log_format);
    let Ok(listen) = args.listen.parse::<SocketAddr>() else {
        return fail(format!(
            "`--listen {}` is not an address such as 127.0.0.1:8080",
            args.listen
        ));
    };
    let durations = (
        parse_duration(&args.watch_interval),
        parse_duration(&args.request_deadline),
        parse_duration(&args.read_timeout),
    );
    let (interval, deadline, read_timeout) = match durations {
        (Ok(interval), Ok(deadline), Ok(read_timeout)) => (interval, deadline, read_timeout),
        (Err(message), _, _) => return fail(format!("`--watch-interval`: {message}")),
        (_, Err(message), _) => return fail(format!("`--request-deadline`: {message}")),
        (_, _, Err(message)) => return fail(format!("`--read-timeout`: {message}")),
    };
    let token = match &args.token_env {
        Some(variable) => match std::env::var(variable) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => {
                return fail(format!(
                    "the environment variable {variable} (`--token-env`) is not set"
                ));
            }
        },
        None => None,
    };
    if args.console && token.is_none() {
        return fail(
            "`--console` needs `--token-env VAR`: the page signs in with the token, and whoever \
             reaches the console can let escalated actions through",
        );
    }
    if token.is_none() && !listen.ip().is_loopback() && !args.allow_unauthenticated {
        return fail(format!(
            "refusing to listen on {listen} without a token: anyone who can reach it could ask \
             for decisions and probe the policies. Set one with `--token-env VAR`, listen on \
             loopback (127.0.0.1, ::1), or pass `--allow-unauthenticated` to accept the risk"
        ));
    }
    if token.is_none() && !listen.ip().is_loopback() {
        tracing::warn!("listening on {listen} without a token (--allow-unauthenticated)");
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match portcullis::server::Tls::from_pem_files(cert, key) {
            Ok(tls) => Some(tls),
            Err(error) => return fail(error),
        },
        (None, None) => None,
        _ => return fail("`--tls-cert` and `--tls-key` go together"),
    };

    let registry = CodeRegistry::new();
    let manifest = match Manifest::read(&args.manifest) {
        Ok((manifest, _)) => manifest,
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };
    // Connections are served on worker threads of their own (`--workers`); this runtime
    // loads the set, accepts connections, watches for signals and runs what the set runs
    // in the background (reloads, exports).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(format!("cannot start the async runtime: {error}")),
    };
    let mut builder = DecisionService::builder()
        .limits(
            Limits::new()
                .max_body_bytes(args.max_body_bytes)
                .max_concurrent(args.max_concurrent)
                .max_queued(args.max_queued)
                .request_deadline(deadline)
                .header_read_timeout(read_timeout)
                .body_read_timeout(read_timeout),
        )
        .counter(
            "portcullis_audit_write_failures_total",
            "Audit records the JSONL audit log failed to write or had no room to queue.",
            audit_write_failures,
        );
    if let Some(token) = token {
        builder = builder.bearer_token(token);
    }
    if args.console {
        builder = builder.console();
    }
    for host in &args.allow_hosts {
        builder = builder.allow_host(host);
    }
    if let Some(access) = log.access.take() {
        builder = builder.access_log(access);
    }
    // The engine the manifest describes (sessions, approvals, audit sinks), with the service's
    // own audit handler among its sinks. A set whose bundles come from URLs may not load yet
    // (the bundle server is down): the service then starts unready, answers 503, and loads the
    // set when a poll succeeds.
    let (service, files, export) = match Manifest::load(&args.manifest, &registry) {
        Ok(loaded) => {
            for warning in loaded.warnings() {
                tracing::warn!("{warning}");
            }
            let files = loaded.files().to_vec();
            let export = loaded.audit_export();
            let engine = runtime.block_on(loaded.into_engine_builder_with_audit(builder.tap()));
            match engine {
                Ok(engine) => (
                    builder.build_on(Arc::new(engine.build())),
                    files,
                    Some(export),
                ),
                Err(errors) => {
                    render::print_load_errors(&errors);
                    return 1;
                }
            }
        }
        Err(errors) if has_bundle_urls(&manifest) => {
            // The engine is assembled from the rest of the manifest (sessions, audit sinks), so
            // that nothing but the set changes when it loads; until then evaluations are 503.
            let mut rest = manifest.clone();
            for entries in [
                &mut rest.input,
                &mut rest.tool_call,
                &mut rest.tool_result,
                &mut rest.output,
            ] {
                entries.retain(|entry| !matches!(entry.source, PolicySource::RegoUrl { .. }));
            }
            let (engine, export) = match rest.build(&registry) {
                Ok(loaded) => {
                    let export = loaded.audit_export();
                    let tap = builder.tap();
                    (
                        runtime.block_on(loaded.into_engine_builder_with_audit(tap)),
                        Some(export),
                    )
                }
                Err(rest_errors) => (Err(rest_errors), None),
            };
            let engine = match engine {
                Ok(engine) => engine.build(),
                Err(_) => {
                    render::print_load_errors(&errors);
                    return 1;
                }
            };
            tracing::error!(
                "serving 503 until the set loads: {}",
                redact_urls(&errors.to_string())
            );
            let service = builder.unloaded().build_on(Arc::new(engine));
            service.record_reload(ReloadStatus::Failed(errors.to_string()));
            (service, vec![args.manifest.clone()], export)
        }
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };

    let threads = args.workers.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    let mut options = service
        .serve_options()
        .max_connections(args.max_connections)
        .workers(threads);
    if let Some(tls) = tls {
        options = options.tls(tls);
    }
    let reported = service.clone();
    let on_reload: reload::Report = Arc::new(move |outcome| report(&reported, outcome));
    let watcher = reload::watch(
        &args.manifest,
        service.engine(),
        registry.clone(),
        interval,
        files,
        Arc::clone(&on_reload),
    );
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let scheme = if args.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(
            manifest = %args.manifest.display(),
            workers = threads,
            "serving decisions on {scheme}://{}",
            listener.local_addr()?
        );
        #[cfg(unix)]
        reload::on_hangup(
            args.manifest.clone(),
            registry,
            Arc::clone(service.engine()),
            on_reload,
        );
        if args.console {
            tracing::info!(
                "the approval console is at {scheme}://{}/console",
                listener.local_addr()?
            );
        }
        let closing = service.clone();
        let stop = async move {
            stop_signal().await;
            // Open console feeds end now rather than at the drain time-out.
            closing.close_feeds();
        };
        serve(listener, service.clone(), options, stop).await
    });
    watcher.stop();
    // The requests in flight have finished: post the spans still buffered.
    if let Some(export) = export
        && let Err(error) = runtime.block_on(export.shutdown())
    {
        tracing::warn!("the audit export could not post everything: {error}");
    }
    match served {
        Ok(()) => {
            tracing::info!("stopped");
            0
        }
        Err(error) => fail(format!("cannot serve on {listen}: {error}")),
    }
}

/// Whether the manifest names a bundle by URL.
fn has_bundle_urls(manifest: &Manifest) -> bool {
    manifest
        .input
        .iter()
        .chain(&manifest.tool_call)
        .chain(&manifest.tool_result)
        .chain(&manifest.output)
        .any(|entry| matches!(entry.source, PolicySource::RegoUrl { .. }))
}

fn report(service: &DecisionService, outcome: &ReloadOutcome) {
    match outcome {
        ReloadOutcome::Reloaded { warnings } => {
            // Among them, the sections a reload does not apply (`sessions`, `audit`,
            // `approvals`): said, so that a change waiting for a restart is not missed.
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            tracing::info!(warnings = warnings.len(), "policy set reloaded");
            service.record_reload(ReloadStatus::Reloaded);
        }
        ReloadOutcome::Failed(errors) => {
            tracing::error!(
                "reload failed, the set in use stays: {}",
                redact_urls(&errors.to_string())
            );
            service.record_reload(ReloadStatus::Failed(errors.to_string()));
        }
    }
}

/// Completes on `SIGTERM` or `SIGINT` (Ctrl-C).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("interrupted: stopping");
}

/// The log, once installed: the guard that writes what is queued when the command ends, and
/// the access log that writes the service's access lines into the same queue (`None`: they
/// are `tracing` events, as on a terminal).
struct Log {
    _guard: Option<LogGuard>,
    access: Option<QueuedAccessLog>,
}

/// Installs the log: standard error behind a queue (a request never waits for its log line),
/// at `level`, as text or JSON lines.
fn init_log(level: tracing::Level, format: LogFormat) -> Log {
    let Some((writer, guard)) = QueuedStderr::start() else {
        // No writer thread: log straight to standard error rather than not at all.
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .with_target(false)
            .init();
        return Log {
            _guard: None,
            access: None,
        };
    };
    let access = QueuedAccessLog::new(writer.clone(), format, level);
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_max_level(level);
    let access = match format {
        // On a terminal, `tracing`'s own lines, in colour, the access lines too.
        LogFormat::Text if std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
            builder.with_target(false).init();
            None
        }
        LogFormat::Text => {
            builder
                .with_ansi(false)
                .event_format(Line::new(format))
                .init();
            Some(access)
        }
        LogFormat::Json => {
            builder
                .fmt_fields(JsonFields::new())
                .event_format(Line::new(format))
                .init();
            Some(access)
        }
    };
    Log {
        _guard: Some(guard),
        access,
    }
}
