//! Deadlines that work on any async runtime.
//!
//! One background thread (`portcullis-timer`, started by the first deadline that has to wait)
//! keeps a heap of pending deadlines and wakes each waiting task when its deadline passes.
//! Evaluations without a deadline never touch it.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Resolves once `deadline` has passed.
pub(crate) struct Sleep {
    deadline: Instant,
    shared: Option<Arc<SleepShared>>,
}

struct SleepShared {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Sleep {
    pub(crate) fn until(deadline: Instant) -> Self {
        Sleep {
            deadline,
            shared: None,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        match &self.shared {
            Some(shared) => {
                if shared.fired.load(AtomicOrdering::Acquire) {
                    return Poll::Ready(());
                }
                if let Ok(mut waker) = shared.waker.lock() {
                    match &mut *waker {
                        Some(current) if current.will_wake(cx.waker()) => {}
                        slot => *slot = Some(cx.waker().clone()),
                    }
                }
                Poll::Pending
            }
            None => {
                let shared = Arc::new(SleepShared {
                    fired: AtomicBool::new(false),
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                timer().register(self.deadline, &shared);
                self.shared = Some(shared);
                Poll::Pending
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared
            && !shared.fired.load(AtomicOrdering::Acquire)
        {
            timer().cancelled.fetch_add(1, AtomicOrdering::Relaxed);
        }
    }
}

struct Pending {
    at: Instant,
    sequence: u64,
    sleep: Weak<SleepShared>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.sequence).cmp(&(other.at, other.sequence))
    }
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<Pending>>,
    sequence: u64,
    running: bool,
}

struct Timer {
    state: Mutex<TimerState>,
    wake_up: Condvar,
    /// Sleeps dropped before they fired; their entries are swept out once they are many.
    cancelled: AtomicUsize,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    TIMER.get_or_init(|| Timer {
        state: Mutex::new(TimerState::default()),
        wake_up: Condvar::new(),
        cancelled: AtomicUsize::new(0),
    })
}

/// Entries kept before cancelled ones are swept out.
const SWEEP_THRESHOLD: usize = 1024;

impl Timer {
    fn register(&'static self, at: Instant, sleep: &Arc<SleepShared>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let cancelled = self.cancelled.load(AtomicOrdering::Relaxed);
        if cancelled > SWEEP_THRESHOLD && cancelled * 2 > state.heap.len() {
            state
                .heap
                .retain(|Reverse(pending)| pending.sleep.strong_count() > 0);
            self.cancelled.store(0, AtomicOrdering::Relaxed);
        }
        state.sequence += 1;
        let sequence = state.sequence;
        let earliest = state.heap.peek().is_none_or(|Reverse(first)| at < first.at);
        state.heap.push(Reverse(Pending {
            at,
            sequence,
            sleep: Arc::downgrade(sleep),
        }));
        if !state.running {
            let started = std::thread::Builder::new()
                .name("portcullis-timer".into())
                .spawn(move || self.run());
            // Without the thread a sleep still ends when its task is polled after the
            // deadline; it just is not woken for it.
            state.running = started.is_ok();
        } else if earliest {
            self.wake_up.notify_one();
        }
    }

    fn run(&self) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        loop {
            let now = Instant::now();
            while let Some(Reverse(first)) = state.heap.peek()
                && first.at <= now
            {
                let Some(Reverse(due)) = state.heap.pop() else {
                    break;
                };
                if let Some(sleep) = due.sleep.upgrade() {
                    sleep.fired.store(true, AtomicOrdering::Release);
                    let waker = sleep.waker.lock().ok().and_then(|mut slot| slot.take());
                    if let Some(waker) = waker {
                        waker.wake();
                    }
                }
            }
            let next = state.heap.peek().map(|Reverse(first)| first.at);
            state = match next {
                Some(at) => match self
                    .wake_up
                    .wait_timeout(state, at.saturating_duration_since(now))
                {
                    Ok((state, _)) => state,
                    Err(_) => return,
                },
                None => match self.wake_up.wait(state) {
                    Ok(state) => state,
                    Err(_) => return,
                },
            };
        }
    }
}

/// Runs `future` until `deadline`; `None` if the deadline came first (the future is dropped).
pub(crate) async fn until<F: Future>(deadline: Instant, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut sleep = Sleep::until(deadline);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(value) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(value));
        }
        match Pin::new(&mut sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn sleeps_end_in_deadline_order() {
        let start = Instant::now();
        let (a, b) = tokio::join!(
            Sleep::until(start + Duration::from_millis(30)),
            Sleep::until(start + Duration::from_millis(10)),
        );
        let _ = (a, b);
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn until_returns_the_value_or_none() {
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(until(soon, async { 7 }).await, Some(7));
        let never = std::future::pending::<()>();
        assert_eq!(
            until(Instant::now() + Duration::from_millis(20), never).await,
            None
        );
    }

    #[test]
    fn works_without_an_async_runtime() {
        // A minimal executor: block the thread until woken.
        struct ThreadWaker(std::thread::Thread);
        impl std::task::Wake for ThreadWaker {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let start = Instant::now();
        let mut sleep = Sleep::until(start + Duration::from_millis(15));
        while Pin::new(&mut sleep).poll(&mut cx).is_pending() {
            std::thread::park();
        }
        assert!(start.elapsed() >= Duration::from_millis(15));
    }

    #[tokio::test]
    async fn many_cancelled_sleeps_are_swept() {
        for _ in 0..3 * SWEEP_THRESHOLD {
            let far = Instant::now() + Duration::from_secs(3600);
            let _ = until(far, async {}).await;
            // Register, then drop before firing.
            let mut sleep = Sleep::until(far);
            let waker = Waker::noop();
            let _ = Pin::new(&mut sleep).poll(&mut Context::from_waker(waker));
        }
        let pending = timer().state.lock().map(|s| s.heap.len()).unwrap_or(0);
        assert!(pending <= 2 * SWEEP_THRESHOLD + 2, "{pending} entries kept");
    }
}
