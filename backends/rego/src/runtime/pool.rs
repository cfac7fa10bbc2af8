//! The pool of instances of one bundle.

use std::sync::Mutex;

use super::*;
use crate::error::RegoEvaluationError;

/// The instances of one bundle.
///
/// Each thread has a home slot (threads are numbered as they first evaluate); an evaluation
/// locks its thread's slot with `try_lock`, or the next free one, and evaluates on the instance
/// kept there, making one (or taking a spare) when the slot is empty. A thread thus keeps reusing
/// the same instance and the same cache lines, and two threads never wait for each other while a
/// slot is free. When every slot is busy (more threads than slots), the evaluation takes a spare
/// instance, or makes one, and leaves it among the spares afterwards.
pub(crate) struct Pool {
    slots: Box<[Slot]>,
    spares: Mutex<Vec<PooledInstance>>,
    max_spares: usize,
}

/// One slot, on a cache line of its own.
#[repr(align(128))]
pub(super) struct Slot(Mutex<Option<PooledInstance>>);

pub(super) fn home_slot() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    HOME.with(|home| *home)
}

impl Pool {
    pub(crate) fn new(first: PooledInstance) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        // A power of two, so that a thread finds its slot with a mask.
        let slots = (0..parallelism.saturating_mul(2).max(4).next_power_of_two())
            .map(|_| Slot(Mutex::new(None)))
            .collect();
        Self {
            slots,
            spares: Mutex::new(vec![first]),
            max_spares: parallelism.saturating_mul(2).max(4),
        }
    }

    fn spare(&self) -> Option<PooledInstance> {
        self.spares.lock().ok().and_then(|mut spares| spares.pop())
    }

    /// Runs `evaluate` on an instance of this pool (`make` builds one when none is idle).
    pub(crate) fn with_instance<R>(
        &self,
        make: impl FnOnce() -> Result<PooledInstance, String>,
        evaluate: impl FnOnce(&mut PooledInstance) -> Result<R, RegoEvaluationError>,
    ) -> Result<R, RegoEvaluationError> {
        let count = self.slots.len();
        let mask = count - 1;
        let home = home_slot();
        for offset in 0..count {
            let Ok(mut slot) = self.slots[(home + offset) & mask].0.try_lock() else {
                continue;
            };
            // The instance stays in its slot (it is large: moving it out and back costs).
            let instance = match &mut *slot {
                Some(instance) => instance,
                empty => {
                    let instance = match self.spare() {
                        Some(instance) => instance,
                        None => make().map_err(RegoEvaluationError::Setup)?,
                    };
                    empty.insert(instance)
                }
            };
            let result = evaluate(instance);
            if !instance.is_reusable() {
                *slot = None;
            }
            return result;
        }
        let mut instance = match self.spare() {
            Some(instance) => instance,
            None => make().map_err(RegoEvaluationError::Setup)?,
        };
        let result = evaluate(&mut instance);
        if instance.is_reusable()
            && let Ok(mut spares) = self.spares.lock()
            && spares.len() < self.max_spares
        {
            spares.push(instance);
        }
        result
    }

    /// How many instances are idle right now.
    pub(crate) fn idle(&self) -> usize {
        let in_slots = self
            .slots
            .iter()
            .filter(|slot| slot.0.try_lock().is_ok_and(|instance| instance.is_some()))
            .count();
        in_slots + self.spares.lock().map_or(0, |spares| spares.len())
    }
}
