//! Processes and folders a test makes and removes: [`Scratch`], a temporary folder gone on drop,
//! and [`Process`], a started binary killed on drop whose standard error is read line by line.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A folder under the system's temporary folder, new for each call, removed with what it holds
/// when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new empty folder whose name starts with `portcullis-<name>-`.
    ///
    /// # Panics
    /// When the folder cannot be made.
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "portcullis-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        #[allow(clippy::expect_used)]
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        Scratch(dir)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `relative` in the folder (its parent folders made first), and
    /// returns the file's path.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.0.join(relative);
        #[allow(clippy::expect_used)]
        {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("the parent folder");
            }
            std::fs::write(&path, contents).expect("the file is written");
        }
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A started process, killed and waited for when dropped; its standard error is read on a
/// thread of its own, each line echoed to the test's standard error and kept for
/// [`log`](Process::log).
#[derive(Debug)]
pub struct Process {
    child: Child,
    log: mpsc::Receiver<String>,
}

impl Process {
    /// Starts `command` (standard output discarded) and reads its standard error, for at most
    /// 60 s, until a line holds `marker`; returns the process and the first word after the
    /// marker (up to white space or a quote, which ends a JSON log line's message).
    ///
    /// # Panics
    /// When the command does not start, or ends or takes 60 s without printing `marker`: the
    /// message shows what it printed.
    pub fn start(mut command: Command, marker: &str) -> (Process, String) {
        #[allow(clippy::expect_used)]
        let mut child = command
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let stderr = child.stderr.take();
        let (sender, log) = mpsc::channel();
        // From here the child is killed when the process is dropped, even if it never starts.
        let process = Process { child, log };
        if let Some(stderr) = stderr {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    let _ = sender.send(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let Ok(line) = process
                .log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                #[allow(clippy::panic)]
                {
                    panic!(
                        "the process never printed {marker:?}; it printed:\n{}",
                        seen.join("\n")
                    );
                }
            };
            if let Some(at) = line.find(marker) {
                let word = line[at + marker.len()..]
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                return (process, word);
            }
            seen.push(line);
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The lines it printed to standard error since the last call (after the start marker).
    pub fn log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }

    /// Waits for it to end, and returns its exit status.
    ///
    /// # Errors
    /// When waiting fails.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
