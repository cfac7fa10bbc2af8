//! Reloading a manifest into a running engine when its files change.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use portcullis_engine::PolicyEngine;

use crate::{CodeRegistry, Diagnostic, Manifest, ManifestErrors, PolicySource};

/// How a reload went.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// The new set is in use.
    Reloaded {
        /// The new set's warnings, and one for each engine section (`sessions`, `audit`,
        /// `approvals`) that changed and that the reload did not apply (see [`reload`]).
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
/// Bundles from URLs (`rego: https://...`) are asked for every `poll` interval of their entry,
/// with the `ETag` of the bundle in use in `If-None-Match`; a new bundle that verifies and opens
/// reloads the manifest, one that does not (or an error of the server) is a failed reload that
/// keeps the bundle in use. URLs fail or succeed each on its own: when one URL of a round has
/// a new bundle and another fails, the new bundle goes in (the failing URL's entry keeps its
/// last good bundle), and the callback hears of both, the reload first and then the failure.
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
        let mut remotes = Remotes::of(&self.path);
        while !stop.load(Ordering::Acquire) {
            std::thread::park_timeout(remotes.wait(self.interval));
            if stop.load(Ordering::Acquire) {
                break;
            }
            let now = stamps(&files);
            if now == seen {
                let RemotePoll { updated, failed } = remotes.poll();
                if updated {
                    // What changed and loaded goes in, whatever another URL of the round
                    // did: a failing URL's entry keeps its last good bundle (from the cache).
                    let (outcome, watched) = reload_files(&self.path, &self.registry, &self.engine);
                    seen = stamps_after_reload(&files, &now, &watched);
                    files = watched;
                    remotes = remotes.renewed(&self.path);
                    (self.on_reload)(&outcome);
                }
                if let Some(errors) = failed {
                    (self.on_reload)(&ReloadOutcome::Failed(errors));
                }
                continue;
            }
            // A file being written may be seen half-written (empty, even): reload once the
            // files have stayed the same for a moment.
            std::thread::sleep(self.interval.min(Duration::from_millis(50)));
            if stamps(&files) != now {
                continue;
            }
            let (outcome, watched) = reload_files(&self.path, &self.registry, &self.engine);
            seen = stamps_after_reload(&files, &now, &watched);
            files = watched;
            remotes = remotes.renewed(&self.path);
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
///
/// Reloads (this function's and every watcher's) run one at a time, each reading the files
/// and swapping its set in before the next starts: the newest files always win.
///
/// Only the policy set is swapped. When an engine of this process was assembled from this
/// manifest ([`LoadedManifest::into_engine_builder`](crate::LoadedManifest::into_engine_builder))
/// and the manifest's `sessions`, `audit` or `approvals` section differs now, the outcome has
/// a warning naming the section: the engine keeps the one it started with until a restart.
pub fn reload(path: &Path, registry: &CodeRegistry, engine: &PolicyEngine) -> ReloadOutcome {
    reload_files(path, registry, engine).0
}

/// One reload at a time in the process. A reload reads the files and swaps its set in under
/// this lock, so the reload that read the files last swaps last: two reloads that cross (a
/// `SIGHUP` and the watcher, a slow bundle fetch and a quick file change) never leave the
/// older set in force.
static RELOADING: Mutex<()> = Mutex::new(());

/// Reloads, and says which files to watch from now on.
fn reload_files(
    path: &Path,
    registry: &CodeRegistry,
    engine: &PolicyEngine,
) -> (ReloadOutcome, Vec<PathBuf>) {
    let _one_at_a_time = RELOADING.lock().unwrap_or_else(PoisonError::into_inner);
    match Manifest::load(path, registry) {
        Ok(loaded) => {
            let (set, manifest, mut warnings, files) = loaded.into_parts();
            engine.replace_policy_set(set);
            warnings.extend(unapplied_changes(&manifest));
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

/// The `sessions` section as it configures a store: store, TTL, capacity, password variable.
type SessionSection = (
    crate::SessionStore,
    Option<Duration>,
    Option<usize>,
    Option<String>,
);

/// The sections a reload does not apply, as an engine was assembled with them
/// ([`LoadedManifest::into_engine_builder`](crate::LoadedManifest::into_engine_builder)): the
/// session store, the audit sinks and the approval time-out belong to the engine, which a
/// reload keeps; only the policy set is swapped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EngineSections {
    sessions: Option<SessionSection>,
    audit: (Option<PathBuf>, Option<String>, crate::AuditFailure),
    approvals: Option<(crate::ApprovalStore, Option<Duration>, Option<String>)>,
}

impl EngineSections {
    fn of(manifest: &Manifest) -> EngineSections {
        EngineSections {
            sessions: manifest.sessions.as_ref().map(|sessions| {
                (
                    sessions.store.clone(),
                    sessions.ttl,
                    sessions.capacity,
                    sessions.password_env.clone(),
                )
            }),
            audit: (
                manifest.audit.jsonl.clone(),
                manifest.audit.otlp.clone(),
                manifest.audit.on_failure,
            ),
            approvals: manifest.approvals.as_ref().map(|approvals| {
                (
                    approvals.store.clone(),
                    approvals.timeout,
                    approvals.password_env.clone(),
                )
            }),
        }
    }
}

/// The engine sections of each manifest (by path) as an engine of this process was last
/// assembled from it.
fn assembled() -> &'static std::sync::Mutex<std::collections::HashMap<PathBuf, EngineSections>> {
    static ASSEMBLED: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<PathBuf, EngineSections>>,
    > = std::sync::OnceLock::new();
    ASSEMBLED.get_or_init(Default::default)
}

fn path_key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// Notes the engine sections an engine is being assembled with.
pub(crate) fn note_assembled(manifest: &Manifest) {
    let sections = EngineSections::of(manifest);
    assembled()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(path_key(&manifest.path), sections);
}

/// A warning for each engine section of a reloaded `manifest` that differs from what its
/// engine was assembled with: the reload swapped the policies, not these.
fn unapplied_changes(manifest: &Manifest) -> Vec<Diagnostic> {
    let assembled = assembled()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&path_key(&manifest.path))
        .cloned();
    let Some(assembled) = assembled else {
        // No engine of this process was assembled from the manifest's sections.
        return Vec::new();
    };
    let now = EngineSections::of(manifest);
    let mut warnings = Vec::new();
    let mut changed = |section: &str, position| {
        warnings.push(
            Diagnostic::warning(
                &manifest.path,
                position,
                format!(
                    "`{section}` changed, and a reload does not apply it: the engine keeps the \
                     `{section}` it started with until a restart"
                ),
            )
            .with_help("restart the process to apply it"),
        );
    };
    if now.sessions != assembled.sessions {
        changed("sessions", manifest.sessions.as_ref().map(|s| s.position));
    }
    if now.audit != assembled.audit {
        let position = manifest
            .audit
            .jsonl_position
            .or(manifest.audit.otlp_position);
        changed("audit", position);
    }
    if now.approvals != assembled.approvals {
        changed("approvals", manifest.approvals.as_ref().map(|a| a.position));
    }
    warnings
}

/// The files and folders a manifest names (without opening them).
fn named_files(manifest: &Manifest) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in manifest
        .input
        .iter()
        .chain(&manifest.tool_call)
        .chain(&manifest.tool_result)
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
            PolicySource::Cedar {
                path,
                schema,
                entities,
            } => files.extend(std::iter::once(path).chain(schema).chain(entities).cloned()),
            _ => {}
        }
    }
    files.extend(manifest.include.iter().map(|include| include.path.clone()));
    files
}

type Stamp = Option<(SystemTime, u64)>;

/// What the watcher holds as seen after a reload of `watched`: their stamps now, or none at
/// all when one of the files read (`before`, stamped `stamped` just before the reload) changed
/// while the reload ran, so that the next look reloads again. Stamps taken after the reload
/// alone would take a change made during it for one already loaded, and miss it for good.
///
/// A file the reload named for the first time (a rule of a manifest that was broken until
/// now) had no stamp before it: it is held as unseen, so the next look reloads once more
/// and a change made to it during this reload is not lost.
fn stamps_after_reload(before: &[PathBuf], stamped: &[Stamp], watched: &[PathBuf]) -> Vec<Stamp> {
    if stamps(before) != stamped {
        return Vec::new();
    }
    let now = stamps(watched);
    watched
        .iter()
        .zip(now)
        .map(|(file, stamp)| if before.contains(file) { stamp } else { None })
        .collect()
}

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|file| {
            let metadata = std::fs::metadata(file).ok()?;
            Some((metadata.modified().ok()?, metadata.len()))
        })
        .collect()
}

/// The bundle URLs of the manifest, each with when it is asked next.
struct Remotes {
    manifest: Option<Manifest>,
    due: Vec<(usize, Instant)>,
}

/// What polling the due bundle URLs came to: whether a URL has a new bundle (verified,
/// opened and cached), and the URLs that failed, each keeping its bundle in use.
struct RemotePoll {
    updated: bool,
    failed: Option<ManifestErrors>,
}

impl Remotes {
    /// The URL entries of the manifest at `path` (none when it cannot be read).
    fn of(path: &Path) -> Remotes {
        let manifest = Manifest::read(path).ok().map(|(manifest, _)| manifest);
        let now = Instant::now();
        let due = manifest
            .as_ref()
            .map(|manifest| {
                url_entries(manifest)
                    .enumerate()
                    .map(|(index, (poll, _))| (index, now + poll))
                    .collect()
            })
            .unwrap_or_default();
        Remotes { manifest, due }
    }

    /// The entries of a reloaded manifest; the times of URLs polled before are kept.
    fn renewed(self, path: &Path) -> Remotes {
        let mut renewed = Remotes::of(path);
        if renewed.due.len() == self.due.len() {
            renewed.due = self.due;
        }
        renewed
    }

    /// How long to sleep: the watch interval, or less when a URL is due sooner.
    fn wait(&self, interval: Duration) -> Duration {
        let now = Instant::now();
        self.due
            .iter()
            .map(|(_, at)| at.saturating_duration_since(now))
            .fold(interval, Duration::min)
    }

    /// Polls the URLs that are due.
    fn poll(&mut self) -> RemotePoll {
        let Some(manifest) = &self.manifest else {
            return RemotePoll {
                updated: false,
                failed: None,
            };
        };
        let now = Instant::now();
        let entries: Vec<_> = url_entries(manifest).collect();
        let mut updated = false;
        let mut errors = Vec::new();
        for (index, at) in &mut self.due {
            if *at > now {
                continue;
            }
            let Some((poll, entry)) = entries.get(*index) else {
                continue;
            };
            *at = now + *poll;
            match refresh(manifest, entry) {
                Ok(changed) => updated |= changed,
                Err(message) => errors.push(Diagnostic::error(
                    &manifest.path,
                    Some(entry.position),
                    format!("{message}; the bundle in use stays"),
                )),
            }
        }
        RemotePoll {
            updated,
            failed: (!errors.is_empty()).then(|| ManifestErrors::new(errors, Vec::new())),
        }
    }
}

/// Fetches the bundle of a `rego: <URL>` entry again: whether it changed, or why it could not
/// be fetched or opened.
#[cfg(feature = "rego")]
fn refresh(manifest: &Manifest, entry: &crate::PolicyEntry) -> Result<bool, String> {
    match crate::remote::refresh(manifest, &entry.source) {
        crate::remote::Refresh::Unchanged => Ok(false),
        crate::remote::Refresh::Updated => Ok(true),
        crate::remote::Refresh::Failed(message) => Err(message),
    }
}

/// Without the `rego` feature no bundle is fetched from a URL (a manifest naming one does not
/// load), so there is nothing to fetch again.
#[cfg(not(feature = "rego"))]
fn refresh(_: &Manifest, _: &crate::PolicyEntry) -> Result<bool, String> {
    Ok(false)
}

/// The `rego: <URL>` entries of a manifest, with their poll intervals.
fn url_entries(manifest: &Manifest) -> impl Iterator<Item = (Duration, &crate::PolicyEntry)> {
    manifest
        .input
        .iter()
        .chain(&manifest.tool_call)
        .chain(&manifest.tool_result)
        .chain(&manifest.output)
        .filter_map(|entry| match &entry.source {
            PolicySource::RegoUrl { poll, .. } => Some((*poll, entry)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::{stamps, stamps_after_reload};

    #[test]
    fn a_file_changed_while_a_reload_ran_is_reloaded_again() {
        let dir =
            std::env::temp_dir().join(format!("portcullis-watch-stamps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let file = dir.join("rule.json");
        std::fs::write(&file, "{}").expect("written");
        let files = vec![file.clone()];
        let before = stamps(&files);
        // Unchanged during the reload: the stamps of what was read.
        assert_eq!(stamps_after_reload(&files, &before, &files), before);
        // Written during the reload (another length): nothing counts as seen, so the next
        // look reloads.
        std::fs::write(&file, "{ \"changed\": true }").expect("written");
        let after = stamps_after_reload(&files, &before, &files);
        assert!(after.is_empty());
        assert_ne!(after, stamps(&files));
        // A file named for the first time by the reload: unseen, whatever it holds now.
        let rule = dir.join("new-rule.json");
        std::fs::write(&rule, "{}").expect("written");
        let grown = vec![file.clone(), rule.clone()];
        let stamped = stamps(&files);
        let after = stamps_after_reload(&files, &stamped, &grown);
        assert_eq!(after.len(), 2);
        assert_eq!(after[0], stamped[0]);
        assert_eq!(after[1], None);
        assert_ne!(after, stamps(&grown));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
