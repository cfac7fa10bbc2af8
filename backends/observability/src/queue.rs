//! The hand-off between the evaluation path and the span worker.
//!
//! The evaluation path pushes a copy of the record under a briefly held lock and wakes the
//! worker only once per batch: waking a sleeping thread costs a system call, more than the
//! rest of the hand-off. The worker creates the spans (ids, sampling, the SDK's span data)
//! and gives them to the batch processor.

use std::sync::{Condvar, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry_sdk::trace::SdkTracer;
use portcullis_otel::DecisionSpan;

/// How many records can wait for the worker before new ones are dropped.
pub(crate) const CAPACITY: usize = 8192;
/// How many waiting records wake the worker.
const BATCH: usize = 256;
/// How long the worker sleeps when few records come.
const INTERVAL: Duration = Duration::from_millis(500);

#[derive(Default)]
struct State {
    spans: Vec<DecisionSpan>,
    /// Flushes waiting for the worker to have handled every earlier record.
    syncs: Vec<mpsc::Sender<()>>,
    /// Records dropped on a full queue since the last [`SpanQueue::take_dropped`].
    dropped: u64,
    wake_pending: bool,
    closed: bool,
}

pub(crate) struct SpanQueue {
    state: Mutex<State>,
    wake: Condvar,
}

impl SpanQueue {
    pub(crate) fn new() -> Self {
        SpanQueue {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent whatever panicked while holding it.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Queues a span; never waits for the worker.
    pub(crate) fn push(&self, span: DecisionSpan) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if state.spans.len() >= CAPACITY {
            state.dropped += 1;
            return;
        }
        state.spans.push(span);
        if state.spans.len() >= BATCH && !state.wake_pending {
            state.wake_pending = true;
            drop(state);
            self.wake.notify_one();
        }
    }

    /// A receiver that answers once the worker has handed every record queued so far to the
    /// batch processor (or is disconnected if the worker is gone).
    pub(crate) fn sync(&self) -> mpsc::Receiver<()> {
        let (done, synced) = mpsc::channel();
        let mut state = self.lock();
        if !state.closed {
            state.syncs.push(done);
        }
        drop(state);
        self.wake.notify_one();
        synced
    }

    /// The number of records dropped since the last call.
    pub(crate) fn take_dropped(&self) -> u64 {
        std::mem::take(&mut self.lock().dropped)
    }

    /// Stops taking records; the worker handles those queued and stops.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// The worker's loop: until closed, takes what is queued and creates the spans.
    pub(crate) fn run(&self, tracer: &SdkTracer) {
        loop {
            let (spans, syncs, closed) = {
                let mut state = self.lock();
                while state.spans.len() < BATCH && state.syncs.is_empty() && !state.closed {
                    let (next, wait) = self
                        .wake
                        .wait_timeout(state, INTERVAL)
                        .unwrap_or_else(|poison| poison.into_inner());
                    state = next;
                    if wait.timed_out() {
                        break;
                    }
                }
                state.wake_pending = false;
                (
                    std::mem::take(&mut state.spans),
                    std::mem::take(&mut state.syncs),
                    state.closed,
                )
            };
            for span in spans {
                span.emit(tracer);
            }
            for done in syncs {
                let _ = done.send(());
            }
            if closed {
                return;
            }
        }
    }
}

/// Starts the worker thread.
pub(crate) fn spawn_worker(
    queue: std::sync::Arc<SpanQueue>,
    tracer: SdkTracer,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("portcullis-observability".into())
        .spawn(move || queue.run(&tracer))
}
