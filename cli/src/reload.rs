//! Reloading a running engine's policy set from its manifest, when one of its files changes
//! and on `SIGHUP`: one machinery for `serve` and the proxies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis::PolicyEngine;
use portcullis::manifest::{CodeRegistry, ManifestWatcher, ReloadOutcome};

/// What a reload's outcome goes to (a log line, the service's `/readyz`).
pub(crate) type Report = Arc<dyn Fn(&ReloadOutcome) + Send + Sync>;

/// Reloads the manifest at `path` into `engine` when one of `files` changes (polled every
/// `interval`); a failed reload keeps the set in use. Watching stops when the watcher is
/// stopped or dropped.
pub(crate) fn watch(
    path: &Path,
    engine: &Arc<PolicyEngine>,
    registry: CodeRegistry,
    interval: Duration,
    files: Vec<PathBuf>,
    report: Report,
) -> ManifestWatcher {
    ManifestWatcher::builder(path, Arc::clone(engine))
        .registry(registry)
        .interval(interval)
        .files(files)
        .on_reload(move |outcome: &ReloadOutcome| report(outcome))
        .spawn()
}

/// Reloads the manifest at `path` into `engine` on each `SIGHUP`, for as long as the
/// runtime this is called in runs.
#[cfg(unix)]
pub(crate) fn on_hangup(
    path: PathBuf,
    registry: CodeRegistry,
    engine: Arc<PolicyEngine>,
    report: Report,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: reload by changing the files");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading");
            let (path, registry, engine) = (path.clone(), registry.clone(), Arc::clone(&engine));
            // On a plain thread: the loader may fetch bundles with a blocking client.
            let (sender, receiver) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let _ = sender.send(portcullis::manifest::reload(&path, &registry, &engine));
            });
            if let Ok(outcome) = receiver.await {
                report(&outcome);
            }
        }
    });
}
