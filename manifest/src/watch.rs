//! Reloading a manifest into a running engine when its files change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use portcullis_engine::PolicyEngine;

use crate::{CodeRegistry, Diagnostic, Manifest, ManifestErrors, PolicySource};

/// How a reload went.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// The new set is in use.
    Reloaded {
        /// The new set's warnings.
        warnings: Vec<Diagnostic>,
    },
    /// The manifest or a file it names has errors: the set in use stays.
    Failed(ManifestErrors),
}

impl ReloadOutcome {
    /// Whether the new set is in use.
    pub fn is_reloaded(&self) -> bool {
        matches!(self, ReloadOutcome::Reloaded { .. })
    }
}

/// Watches the files of a manifest (the manifest, its rules, rule folders, bundles and
/// policy-set files) by polling their modification times, and reloads the manifest into an
/// engine when one changes. A reload that fails keeps the set in use; every reload's outcome
/// goes to a callback. Polling works the same everywhere, needs no thread per file, and
/// notices a change within one interval.
///
/// The watcher stops when dropped (or with [`stop`](ManifestWatcher::stop)).
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use portcullis_engine::PolicyEngine;
/// use portcullis_manifest::{CodeRegistry, Manifest, ManifestWatcher, ReloadOutcome};
///
/// let registry = CodeRegistry::new();
/// let loaded = Manifest::load("portcullis.yaml", &registry).expect("a valid manifest");
/// let files = loaded.files().to_vec();
/// let engine = Arc::new(PolicyEngine::builder().policy_set(loaded.into_policy_set()).build());
/// let watcher = ManifestWatcher::builder("portcullis.yaml", engine.clone())
///     .registry(registry)
///     .interval(Duration::from_secs(1))
///     .files(files)
///     .on_reload(|outcome: &ReloadOutcome| match outcome {
///         ReloadOutcome::Reloaded { .. } => eprintln!("policies reloaded"),
///         ReloadOutcome::Failed(errors) => eprintln!("reload failed, keeping the old set: {errors}"),
///     })
///     .spawn();
/// # drop(watcher);
/// ```
#[derive(Debug)]
pub struct ManifestWatcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Configures a [`ManifestWatcher`].
#[must_use]
pub struct ManifestWatcherBuilder {
    path: PathBuf,
    engine: Arc<PolicyEngine>,
    registry: CodeRegistry,
    interval: Duration,
    files: Vec<PathBuf>,
    on_reload: Box<dyn Fn(&ReloadOutcome) + Send>,
}

impl ManifestWatcherBuilder {
    /// The code policies the manifest may name (default: none).
    pub fn registry(mut self, registry: CodeRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// How often the files are looked at (default: one second).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The files of the set in use ([`LoadedManifest::files`](crate::LoadedManifest::files)):
    /// without them only the manifest is watched until the first reload.
    pub fn files(mut self, files: Vec<PathBuf>) -> Self {
        self.files = files;
        self
    }

    /// Called after every reload with its outcome.
    pub fn on_reload(mut self, callback: impl Fn(&ReloadOutcome) + Send + 'static) -> Self {
        self.on_reload = Box::new(callback);
        self
    }

    /// Starts watching, on a thread of its own.
    pub fn spawn(self) -> ManifestWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("portcullis-manifest-watcher".to_owned())
                .spawn(move || self.run(&stop))
                .ok()
        };
        ManifestWatcher { stop, thread }
    }

    fn run(self, stop: &AtomicBool) {
        let mut files = self.files.clone();
        if !files.contains(&self.path) {
            files.insert(0, self.path.clone());
        }
        let mut seen = stamps(&files);
        while !stop.load(Ordering::Acquire) {
            std::thread::park_timeout(self.interval);
            if stop.load(Ordering::Acquire) {
                break;
            }
            let now = stamps(&files);
            if now == seen {
                continue;
            }
            // A file being written may be seen half-written (empty, even): reload once the
            // files have stayed the same for a moment.
            std::thread::sleep(self.interval.min(Duration::from_millis(50)));
            if stamps(&files) != now {
                continue;
            }
            let (outcome, watched) = reload_files(&self.path, &self.registry, &self.engine);
            files = watched;
            // Stamps taken after the reload: a change made during it is seen next time.
            seen = stamps(&files);
            (self.on_reload)(&outcome);
        }
    }
}

impl ManifestWatcher {
    /// A watcher of the manifest at `path` that swaps reloaded sets into `engine`.
    pub fn builder(path: impl AsRef<Path>, engine: Arc<PolicyEngine>) -> ManifestWatcherBuilder {
        ManifestWatcherBuilder {
            path: path.as_ref().to_owned(),
            engine,
            registry: CodeRegistry::new(),
            interval: Duration::from_secs(1),
            files: Vec::new(),
            on_reload: Box::new(|_| {}),
        }
    }

    /// Stops watching and waits for the watcher's thread to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for ManifestWatcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Loads the manifest at `path` and, when it loads, swaps its set into `engine`; when it does
/// not, the engine keeps its set. For a reload on demand (a signal, an admin request).
pub fn reload(path: &Path, registry: &CodeRegistry, engine: &PolicyEngine) -> ReloadOutcome {
    reload_files(path, registry, engine).0
}

/// Reloads, and says which files to watch from now on.
fn reload_files(
    path: &Path,
    registry: &CodeRegistry,
    engine: &PolicyEngine,
) -> (ReloadOutcome, Vec<PathBuf>) {
    match Manifest::load(path, registry) {
        Ok(loaded) => {
            let (set, _, warnings, files) = loaded.into_parts();
            engine.replace_policy_set(set);
            (ReloadOutcome::Reloaded { warnings }, files)
        }
        Err(errors) => {
            // Watch what the manifest names, so that fixing a file it names reloads.
            let mut files = vec![path.to_owned()];
            if let Ok((manifest, _)) = Manifest::read(path) {
                files.extend(named_files(&manifest));
            }
            (ReloadOutcome::Failed(errors), files)
        }
    }
}

/// The files and folders a manifest names (without opening them).
fn named_files(manifest: &Manifest) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in manifest
        .input
        .iter()
        .chain(&manifest.tool_call)
        .chain(&manifest.output)
    {
        match &entry.source {
            PolicySource::Dsl { path } => {
                files.push(path.clone());
                if let Ok(read) = std::fs::read_dir(path) {
                    files.extend(read.filter_map(Result::ok).map(|item| item.path()));
                }
            }
            PolicySource::Rego { path, .. } => files.push(path.clone()),
            _ => {}
        }
    }
    files.extend(manifest.include.iter().map(|include| include.path.clone()));
    files
}

type Stamp = Option<(SystemTime, u64)>;

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|file| {
            let metadata = std::fs::metadata(file).ok()?;
            Some((metadata.modified().ok()?, metadata.len()))
        })
        .collect()
}
