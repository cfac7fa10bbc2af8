//! The OPA WebAssembly ABI on wasmtime: one compiled module, instances of it set up with the data
//! document, a pool of those instances, and the time and memory limits.
//!
//! The ABI (see OPA's "WebAssembly" documentation): the module imports `env.memory`,
//! `env.opa_abort`, `env.opa_println` and `env.opa_builtin0..4`, and exports a small allocator
//! (`opa_malloc`, `opa_heap_ptr_get/set`), JSON codecs (`opa_json_parse`, `opa_json_dump`), the maps
//! `builtins()` and `entrypoints()`, the evaluation context (`opa_eval_ctx_*`, `eval`) and, from ABI
//! 1.2, the one-call fast path `opa_eval`.
//!
//! An instance keeps its data document at the bottom of its heap; the heap pointer just above it is
//! the instance's "post-data heap". Every evaluation starts from there (the fast path writes the
//! input there and hands `opa_eval` the pointer; the slow path calls `opa_heap_ptr_set`), so an
//! instance that finished an evaluation is as good as new and goes back to the pool. The one
//! exception is a module whose builtins cache compiled patterns: resetting the heap clears those
//! caches, so it is reset only once the garbage passes a bound (see [`PooledInstance::run`]). An
//! instance whose evaluation failed (trap, abort, limit) is dropped instead.
//!
//! A module with the exports it needs gets an evaluation entry of its own when it is compiled
//! ([`crate::entry`]): one call evaluates. Its input is then laid out by the host as the guest's
//! own values above the post-data heap ([`image`], once a probe showed the module's layout is
//! the one the host writes), and its result set is read by the host from guest memory
//! ([`result`]), neither going through the guest's JSON codecs.

mod clock;
pub(crate) mod image;
mod instance;
mod module;
mod pool;
mod regex_match;
mod result;
#[cfg(test)]
mod tests;

use std::time::Duration;

#[cfg(test)]
pub(crate) use clock::clock_memory;
pub(crate) use clock::engine;
use clock::runtime;
use clock::{TICK, now};
pub(crate) use instance::PooledInstance;
use instance::*;
pub(crate) use module::{CompiledModule, ModuleError, compile_cached};
pub(crate) use pool::Pool;
pub(crate) use result::InPlace;
use result::{Reading, Walker};

/// The limits an evaluation runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) time: Duration,
    pub(crate) memory: usize,
}

impl Limits {
    /// The tick of the clock by which an evaluation starting now must be over.
    fn deadline(&self) -> u64 {
        now().saturating_add(self.ticks())
    }

    fn ticks(&self) -> u64 {
        // One extra tick: the first may be almost over when the evaluation starts.
        let ticks = self
            .time
            .as_nanos()
            .div_ceil(TICK.as_nanos())
            .saturating_add(1);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}
