//! The service's log: standard error behind a queue, so that writing a request's log line
//! never blocks the request. A line is formatted on the request's thread and queued; one
//! writer thread writes the queued lines in batches. A line that finds the queue full (standard
//! error stalled: a pipe nobody reads, a full disk behind a redirect) is dropped and counted,
//! and the writer says how many were dropped once it can write again.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

mod access;
mod line;

pub(crate) use access::QueuedAccessLog;
pub(crate) use line::Line;

/// How many lines may wait for the writer thread.
const QUEUED_LINES: usize = 16 * 1024;

/// How long the end of the process waits for the queued lines to be written.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// How long the writer rests after writing a batch. Lines queued meanwhile wait for the next
/// batch, so a busy service wakes the writer a few hundred times a second, not once per
/// request: each wake-up is a context switch the requests' threads would pay for.
const BATCH_PAUSE: Duration = Duration::from_millis(2);

/// What the writer thread is sent.
enum Queued {
    /// One formatted line (or several, as the formatter wrote them).
    Line(Vec<u8>),
    /// Answer once everything queued before is written.
    Flush(SyncSender<()>),
}

/// How the log lines are formatted (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One line of text per event, for people.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, and `span` inside one), for
    /// log pipelines.
    Json,
}

/// A [`MakeWriter`] for standard error through the queue.
#[derive(Clone)]
pub(crate) struct QueuedStderr {
    queue: SyncSender<Queued>,
    dropped: Arc<AtomicU64>,
}

/// Ends the log: waits (a little) for the queued lines to be written. Hold it for the life of
/// the command.
pub(crate) struct LogGuard {
    queue: SyncSender<Queued>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        let (done, wait) = sync_channel(1);
        if self.queue.send(Queued::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(FLUSH_AT_EXIT);
        }
    }
}

impl QueuedStderr {
    /// Starts the writer thread; `None` (and the caller writes directly) when the thread
    /// cannot be started.
    pub(crate) fn start() -> Option<(QueuedStderr, LogGuard)> {
        let (queue, lines) = sync_channel(QUEUED_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("portcullis-log".to_owned())
            .spawn(move || write_lines(&lines, &counted, &mut io::stderr()))
            .ok()?;
        let guard = LogGuard {
            queue: queue.clone(),
        };
        Some((QueuedStderr { queue, dropped }, guard))
    }

    /// Queues one whole line (or several); drops it, and counts it, when the queue is full.
    fn queue(&self, line: Vec<u8>) {
        match self.queue.try_send(Queued::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for QueuedStderr {
    type Writer = QueuedLine<'a>;

    fn make_writer(&'a self) -> QueuedLine<'a> {
        QueuedLine {
            line: Vec::with_capacity(256),
            to: self,
        }
    }
}

/// One event being formatted: queued whole when the formatter is done with it.
pub(crate) struct QueuedLine<'a> {
    line: Vec<u8>,
    to: &'a QueuedStderr,
}

impl Write for QueuedLine<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine<'_> {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        self.to.queue(std::mem::take(&mut self.line));
    }
}

/// The writer thread: writes each queued line to `out`, flushing when the queue is empty;
/// says how many lines were dropped since it last could.
fn write_lines(lines: &Receiver<Queued>, dropped: &AtomicU64, out: &mut impl Write) {
    let mut buffered = io::BufWriter::with_capacity(64 * 1024, out);
    let mut told = 0;
    while let Ok(first) = lines.recv() {
        let mut next = Some(first);
        while let Some(queued) = next {
            match queued {
                Queued::Line(line) => {
                    let _ = buffered.write_all(&line);
                }
                Queued::Flush(done) => {
                    let _ = buffered.flush();
                    let _ = done.send(());
                }
            }
            next = lines.try_recv().ok();
        }
        let now = dropped.load(Ordering::Relaxed);
        if now > told {
            let _ = writeln!(
                buffered,
                "portcullis: {} log lines were dropped: standard error did not keep up",
                now - told
            );
            told = now;
        }
        let _ = buffered.flush();
        std::thread::sleep(BATCH_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of `capacity` lines with no writer thread: the lines queued are read from the
    /// receiver, and the lines dropped are counted in the counter.
    pub(super) fn unwritten(capacity: usize) -> (QueuedStderr, Receiver<Queued>, Arc<AtomicU64>) {
        let (queue, lines) = sync_channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = QueuedStderr {
            queue,
            dropped: Arc::clone(&dropped),
        };
        (writer, lines, dropped)
    }

    #[test]
    fn lines_are_written_in_order_and_a_flush_waits_for_them() {
        let (queue, lines) = sync_channel(8);
        let dropped = AtomicU64::new(0);
        for index in 0..3 {
            queue
                .send(Queued::Line(format!("line {index}\n").into_bytes()))
                .unwrap_or_default();
        }
        drop(queue);
        let mut out = Vec::new();
        write_lines(&lines, &dropped, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "line 0\nline 1\nline 2\n");
    }

    #[test]
    fn a_full_queue_drops_the_line_and_counts_it() {
        let (writer, lines, dropped) = unwritten(1);
        for text in ["kept\n", "dropped\n"] {
            let mut line = writer.make_writer();
            line.write_all(text.as_bytes()).unwrap_or_default();
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        drop(writer);
        let mut out = Vec::new();
        write_lines(&lines, &AtomicU64::new(1), &mut out);
        let written = String::from_utf8_lossy(&out);
        assert!(written.starts_with("kept\n"), "{written}");
        assert!(written.contains("1 log lines were dropped"), "{written}");
    }
}
