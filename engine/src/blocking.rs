//! Running a policy's evaluation on a thread of its own, off the async executor.
//!
//! A deadline cancels a policy by dropping its future, which only works while the policy
//! yields. Code that blocks (synchronous I/O, a long computation) holds the executor's thread
//! until it returns; run on a thread of this pool instead, it leaves the executor free, and
//! the deadline drops the wait while the thread finishes on its own.
//!
//! The pool starts a thread when no thread is idle, and a thread idle for a while ends, so
//! blocked policies never queue behind one another.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

use crate::error::{PolicyPanicked, PolicyResult};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long a pool thread waits for work before it ends.
const IDLE_FOR: Duration = Duration::from_secs(10);

/// Runs `evaluate` on a pool thread, driving the future it returns there to completion; the
/// returned future resolves with its outcome (a panic becomes an error). Dropping the returned
/// future abandons the wait, not the work.
pub(crate) fn run<F, Fut>(evaluate: F) -> Pending
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = PolicyResult>,
{
    let slot = Arc::new(Slot::default());
    let filled = Arc::clone(&slot);
    pool().submit(Box::new(move || {
        let outcome = catch_unwind(AssertUnwindSafe(|| block_on(evaluate())))
            .unwrap_or_else(|panic| Err(Box::new(PolicyPanicked::from_payload(&*panic))));
        filled.fill(outcome);
    }));
    Pending { slot }
}

/// Where a pool thread leaves an outcome for the task waiting on it.
#[derive(Default)]
struct Slot {
    state: Mutex<(Option<PolicyResult>, Option<Waker>)>,
}

impl Slot {
    fn fill(&self, outcome: PolicyResult) {
        let waker = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.0 = Some(outcome);
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The outcome of an evaluation running on a pool thread.
pub(crate) struct Pending {
    slot: Arc<Slot>,
}

impl Future for Pending {
    type Output = PolicyResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PolicyResult> {
        let mut state = self
            .slot
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match state.0.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                state.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` to completion on this thread, parking it while the future waits.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    /// Threads waiting for work.
    waiting: usize,
    /// Wake-ups sent to waiting threads and not yet taken.
    notified: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState::default()),
        work: Condvar::new(),
    })
}

impl Pool {
    fn submit(&'static self, job: Job) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.jobs.push_back(job);
        if state.waiting > state.notified {
            // A waiting thread takes it.
            state.notified += 1;
            drop(state);
            self.work.notify_one();
            return;
        }
        drop(state);
        let spawned = thread::Builder::new()
            .name("portcullis-blocking".into())
            .spawn(move || self.work_loop());
        if spawned.is_err() {
            // No thread to be had: run the queue here rather than never.
            self.run_queued();
        }
    }

    /// Runs jobs until none has come for [`IDLE_FOR`].
    fn work_loop(&'static self) {
        loop {
            self.run_queued();
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if !state.jobs.is_empty() {
                continue;
            }
            state.waiting += 1;
            let (mut state, waited) = self
                .work
                .wait_timeout_while(state, IDLE_FOR, |state| state.jobs.is_empty())
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting -= 1;
            state.notified = state.notified.saturating_sub(1).min(state.waiting);
            if waited.timed_out() && state.jobs.is_empty() {
                return;
            }
        }
    }

    fn run_queued(&self) {
        loop {
            let job = self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .jobs
                .pop_front();
            match job {
                Some(job) => job(),
                None => return,
            }
        }
    }
}
