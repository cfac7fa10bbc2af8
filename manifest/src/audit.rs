//! `audit: { jsonl: <file>, on_failure: allow | deny }`: audit records appended to a file, one
//! JSON object per line, by a writer thread of the log's own.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use portcullis_engine::{AuditHandler, AuditRecord, BoxError, PolicyDecision};
use serde_json::Value;

/// Records a [`JsonlAuditLog`] holds in its queue at most, waiting for its writer thread.
pub const AUDIT_QUEUE_RECORDS: usize = 4096;

/// Bytes of records a [`JsonlAuditLog`] holds in its queue at most.
pub const AUDIT_QUEUE_BYTES: usize = 64 * 1024 * 1024;

/// Records that no [`JsonlAuditLog`] of this process could write (a failed write, or a full
/// queue), since the process started: the counter `/metrics` shows.
static WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many audit records the JSONL logs of this process failed to write since it started:
/// records whose write failed (a full disk, a removed folder) and records refused because
/// the log's queue was full. Each failure is also logged (`tracing`, target
/// `portcullis_manifest::audit`) when a log starts failing and when it recovers.
pub fn audit_write_failures() -> u64 {
    WRITE_FAILURES.load(Ordering::Relaxed)
}

/// What a [`JsonlAuditLog`] does with a call whose record it cannot write (`audit.on_failure`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditFailure {
    /// `allow` (the default): the call goes on; the record is lost, counted
    /// ([`audit_write_failures`]) and logged.
    #[default]
    Allow,
    /// `deny`: the call fails (an evaluation error of
    /// [`AUDIT_POLICY_ID`](portcullis_engine::AUDIT_POLICY_ID), whatever `on_error` says)
    /// when one of its records cannot be queued, and every call fails while the last write
    /// failed, until a write succeeds.
    Deny,
}

/// An audit handler that appends each record to a file as one line of JSON: the record's
/// fields (`policy_id`, `decision`, `interception_point`, `reason`, `context`, `timestamp`,
/// `enforced`) and, for a `redact` or `transform`, the full decision under `policy_decision`,
/// so that a replay can tell what the call forwarded.
///
/// - **Private**: a file it creates is readable and writable by its owner only (`0600` on
///   Unix): records hold prompts and tool arguments as the caller sent them, before any
///   redaction. An existing file that grants its group or others any access is set to
///   `0600` when it is opened, and when its mode cannot be changed (it is not the process's
///   own) the log is not opened. A path that is not a regular file (a pipe, a device) keeps
///   its mode: what reads it is the operator's choice.
/// - **Off the evaluation path**: [`handle`](AuditHandler::handle) turns the record into its
///   line and queues it; a writer thread of the log's own appends the lines, each with one
///   `write` call (lines never mix). The queue is bounded: [`AUDIT_QUEUE_RECORDS`] records
///   and [`AUDIT_QUEUE_BYTES`] bytes. A record that finds it full is not written.
/// - **Failures are counted and logged**: a record not written (a full queue, a failed
///   write) adds one to [`failures`](Self::failures) and to the process-wide
///   [`audit_write_failures`]; the log says when it starts failing and when it recovers.
/// - **`on_failure`** ([`AuditFailure`]): with `allow` (the default) the calls go on; with
///   `deny` a call fails when one of its records does not fit in the queue, and while the
///   last write failed every call fails (their records still queue, and the first write that
///   succeeds ends it). A write is done after its call returned: the call whose own write
///   fails has proceeded; the calls after it do not.
///
/// Dropping the log (with the engine that holds it) writes what is queued and stops the
/// thread; [`flush`](Self::flush) waits for the lines queued so far.
#[derive(Debug)]
pub struct JsonlAuditLog {
    queue: SyncSender<Queued>,
    shared: Arc<Shared>,
    on_failure: AuditFailure,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// What the writer thread is given.
enum Queued {
    Line(Vec<u8>),
    /// Answer once every line queued before is written.
    Flush(SyncSender<()>),
}

/// What the handler and its writer thread share.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    failures: AtomicU64,
    /// The last write failed (and none succeeded since).
    failing: AtomicBool,
    /// The last record found the queue full (and none was queued since): for the log's
    /// messages only, each record is refused or not on its own.
    full: AtomicBool,
    queued_bytes: AtomicUsize,
}

impl Shared {
    /// Counts one record not written, and logs when the log starts failing.
    fn lost(&self, state: &AtomicBool, why: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
        if !state.swap(true, Ordering::AcqRel) {
            tracing::error!(
                path = %self.path.display(),
                failures = self.failures.load(Ordering::Relaxed),
                "audit records are lost: {why}"
            );
        }
    }

    /// Notes that `state` is over, and logs the recovery.
    fn recovered(&self, state: &AtomicBool, what: &str) {
        if state.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                path = %self.path.display(),
                failures = self.failures.load(Ordering::Relaxed),
                "the audit log {what} again"
            );
        }
    }
}

impl JsonlAuditLog {
    /// Opens `path` for appending, creating it (`0600`) when it does not exist and
    /// setting an existing file open to others to `0600`, with
    /// `on_failure: allow`.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Self::open_with(path, AuditFailure::Allow)
    }

    /// Opens `path` for appending, creating it (`0600`) when it does not exist and
    /// setting an existing file open to others to `0600`; `on_failure`
    /// says what a record that cannot be written does to its call.
    pub fn open_with(path: impl AsRef<Path>, on_failure: AuditFailure) -> std::io::Result<Self> {
        let path = path.as_ref();
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options.open(path)?;
        #[cfg(unix)]
        keep_private(&file)?;
        let shared = Arc::new(Shared {
            path: path.to_owned(),
            failures: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            full: AtomicBool::new(false),
            queued_bytes: AtomicUsize::new(0),
        });
        let (queue, lines) = std::sync::mpsc::sync_channel(AUDIT_QUEUE_RECORDS);
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("portcullis-audit-jsonl".to_owned())
                .spawn(move || write_lines(file, &lines, &shared))?
        };
        Ok(JsonlAuditLog {
            queue,
            shared,
            on_failure,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// The line written for `record` (without the newline).
    pub fn line(record: &AuditRecord<'_>) -> String {
        let mut json = record.to_json();
        if let (Value::Object(map), Some(decision)) = (&mut json, record.policy_decision)
            && matches!(
                decision,
                PolicyDecision::Redact { .. } | PolicyDecision::Transform { .. }
            )
            && let Ok(value) = serde_json::to_value(decision)
        {
            map.insert("policy_decision".to_owned(), value);
        }
        json.to_string()
    }

    /// The file the records go to.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// What a record that cannot be written does to its call.
    pub fn on_failure(&self) -> AuditFailure {
        self.on_failure
    }

    /// How many records this log failed to write (a full queue, a failed write).
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// Waits until every line queued so far is written (or failed). It blocks the calling
    /// thread: call it from a plain thread or `spawn_blocking`, not an async task.
    pub fn flush(&self) {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if self.queue.send(Queued::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

impl AuditHandler for JsonlAuditLog {
    fn handle(&self, record: &AuditRecord<'_>) {
        let _ = self.queue_record(record);
    }

    fn try_handle(&self, record: &AuditRecord<'_>) -> Result<(), BoxError> {
        // Whether the log is failing is read before this record is queued: a call is judged
        // by the writes before it, never by a race with the writer thread over its own.
        let failing = self.shared.failing.load(Ordering::Acquire);
        let queued = self.queue_record(record);
        if self.on_failure == AuditFailure::Allow {
            return Ok(());
        }
        let path = self.shared.path.display();
        if let Err(why) = queued {
            return Err(format!(
                "the audit log {path} cannot take the record: {why} (`audit.on_failure: deny`)"
            )
            .into());
        }
        if failing {
            return Err(format!(
                "the audit log {path} cannot be written: its last write failed \
                 (`audit.on_failure: deny`)"
            )
            .into());
        }
        Ok(())
    }
}

impl JsonlAuditLog {
    /// Queues the record's line for the writer thread; a record not queued is counted.
    fn queue_record(&self, record: &AuditRecord<'_>) -> Result<(), &'static str> {
        let mut line = JsonlAuditLog::line(record).into_bytes();
        line.push(b'\n');
        let size = line.len();
        let queued = self.shared.queued_bytes.fetch_add(size, Ordering::AcqRel);
        let sent = if queued > 0 && queued.saturating_add(size) > AUDIT_QUEUE_BYTES {
            Err("its queue holds its limit of bytes")
        } else {
            match self.queue.try_send(Queued::Line(line)) {
                Ok(()) => Ok(()),
                Err(TrySendError::Full(_)) => Err("its queue holds its limit of records"),
                Err(TrySendError::Disconnected(_)) => Err("its writer thread stopped"),
            }
        };
        match sent {
            Ok(()) => self.shared.recovered(&self.shared.full, "queues records"),
            Err(why) => {
                self.shared.queued_bytes.fetch_sub(size, Ordering::AcqRel);
                self.shared.lost(&self.shared.full, &why);
            }
        }
        sent
    }
}

impl Drop for JsonlAuditLog {
    fn drop(&mut self) {
        // The writer ends once the queue is empty and every sender is gone: replace ours
        // with one of a closed channel, then wait for what is queued to be written.
        let (closed, _) = std::sync::mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.queue, closed));
        let writer = self
            .writer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// Sets a regular file that grants its group or others any access to `0600` (an error when
/// its mode cannot be changed); a pipe or a device keeps its mode.
#[cfg(unix)]
fn keep_private(file: &File) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = file.metadata()?;
    let mode = metadata.permissions().mode() & 0o777;
    if !metadata.is_file() || mode & 0o077 == 0 {
        return Ok(());
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|source| std::io::Error::new(source.kind(), OpenToOthers { mode, source }))
}

/// An existing log file that others may read, and whose mode could not be tightened.
#[cfg(unix)]
#[derive(Debug)]
struct OpenToOthers {
    mode: u32,
    source: std::io::Error,
}

#[cfg(unix)]
impl std::fmt::Display for OpenToOthers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the file grants its group or others access (mode {:04o}) and its mode cannot be \
             set to 0600 (the log holds prompts before redaction)",
            self.mode
        )
    }
}

#[cfg(unix)]
impl std::error::Error for OpenToOthers {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The writer thread: appends each line queued, until the log is dropped.
fn write_lines(mut file: File, lines: &Receiver<Queued>, shared: &Shared) {
    for queued in lines {
        match queued {
            Queued::Line(line) => {
                let written = file.write_all(&line);
                shared.queued_bytes.fetch_sub(line.len(), Ordering::AcqRel);
                match written {
                    Ok(()) => shared.recovered(&shared.failing, "writes records"),
                    Err(error) => shared.lost(&shared.failing, &error),
                }
            }
            Queued::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}
