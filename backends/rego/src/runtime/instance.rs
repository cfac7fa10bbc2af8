//! One instance and its store: the host functions it imports (`opa_abort`, the builtins), the
//! memory limiter, and one evaluation from the post-data heap.

use std::sync::Arc;

use serde_json::Value;
use wasmtime::{Caller, Global, Instance, Memory, ResourceLimiter, Store, Trap, TypedFunc, Val};

use super::image::Image;
use super::*;
use crate::builtins::{BuiltinContext, BuiltinError, HostBuiltin};
use crate::entry::{MODE_BUILT, MODE_KEEP, MODE_KEEP_BUILT, MODE_PARSE};
use crate::error::RegoEvaluationError;
use crate::input::InputJson;
use crate::meter::REGEX_UNDECIDED;

pub(super) const WASM_PAGE: usize = 64 * 1024;

/// The module's exports used by the host.
#[derive(Clone)]
pub(super) struct GuestFuncs {
    pub(super) malloc: TypedFunc<i32, i32>,
    pub(super) json_parse: TypedFunc<(i32, i32), i32>,
    pub(super) json_dump: TypedFunc<i32, i32>,
    pub(super) heap_ptr_get: TypedFunc<(), i32>,
    pub(super) heap_ptr_set: TypedFunc<i32, ()>,
    pub(super) eval_ctx_new: TypedFunc<(), i32>,
    pub(super) eval_ctx_set_input: TypedFunc<(i32, i32), ()>,
    pub(super) eval_ctx_set_data: TypedFunc<(i32, i32), ()>,
    pub(super) eval_ctx_set_entrypoint: Option<TypedFunc<(i32, i32), ()>>,
    pub(super) eval_ctx_get_result: TypedFunc<i32, i32>,
    pub(super) eval: TypedFunc<i32, i32>,
    pub(super) opa_eval: Option<FastEval>,
    pub(super) builtins: TypedFunc<(), i32>,
    pub(super) entrypoints: Option<TypedFunc<(), i32>>,
    /// The evaluation entry the rewrite added (see [`crate::entry`]).
    pub(super) entry: Option<Entry>,
    /// The function the rewrite redirected `opa_regex_match` to (see `meter::RegexPlan`).
    pub(super) regex_match: Option<TypedFunc<(i32, i32), i32>>,
}

pub(super) type FastEval = TypedFunc<(i32, i32, i32, i32, i32, i32, i32), i32>;
/// `(entrypoint, data, input, len, heap, keep) -> (code, result, heap_end)`.
pub(super) type Entry = TypedFunc<(i32, i32, i32, i32, i32, i32), (i32, i32, i32)>;

/// The code the entry returns when the guest could not parse the input.
const UNPARSED: i32 = -1;

/// The entry's `(code, result, heap_end)` as `(result, heap_end)`, or the error its code says.
fn finish((code, result, heap_end): (i32, i32, i32)) -> wasmtime::Result<(i32, i32)> {
    match code {
        0 => Ok((result, heap_end)),
        UNPARSED => Err(wasmtime::Error::msg(
            "the guest could not parse the input's JSON",
        )),
        code => Err(wasmtime::Error::msg(format!(
            "eval returned error code {code}"
        ))),
    }
}

impl GuestFuncs {
    pub(super) fn new(
        store: &mut Store<StoreState>,
        instance: &Instance,
        minor: i32,
        entry: bool,
    ) -> Result<Self, String> {
        fn get<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
            store: &mut Store<StoreState>,
            instance: &Instance,
            name: &str,
        ) -> Result<TypedFunc<P, R>, String> {
            instance
                .get_typed_func::<P, R>(&mut *store, name)
                .map_err(|error| format!("export {name}: {error}"))
        }
        fn optional<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
            store: &mut Store<StoreState>,
            instance: &Instance,
            name: &str,
        ) -> Result<Option<TypedFunc<P, R>>, String> {
            if instance.get_export(&mut *store, name).is_none() {
                return Ok(None);
            }
            get(store, instance, name).map(Some)
        }
        let opa_eval = if minor >= 2 {
            optional(store, instance, "opa_eval")?
        } else {
            None
        };
        Ok(Self {
            malloc: get(store, instance, "opa_malloc")?,
            json_parse: get(store, instance, "opa_json_parse")?,
            json_dump: get(store, instance, "opa_json_dump")?,
            heap_ptr_get: get(store, instance, "opa_heap_ptr_get")?,
            heap_ptr_set: get(store, instance, "opa_heap_ptr_set")?,
            eval_ctx_new: get(store, instance, "opa_eval_ctx_new")?,
            eval_ctx_set_input: get(store, instance, "opa_eval_ctx_set_input")?,
            eval_ctx_set_data: get(store, instance, "opa_eval_ctx_set_data")?,
            eval_ctx_set_entrypoint: optional(store, instance, "opa_eval_ctx_set_entrypoint")?,
            eval_ctx_get_result: get(store, instance, "opa_eval_ctx_get_result")?,
            eval: get(store, instance, "eval")?,
            opa_eval,
            builtins: get(store, instance, "builtins")?,
            entrypoints: optional(store, instance, "entrypoints")?,
            regex_match: optional(store, instance, crate::meter::REGEX_EXPORT)?,
            entry: if entry {
                Some(get(store, instance, crate::entry::EXPORT)?)
            } else {
                None
            },
        })
    }
}

/// Counts linear-memory growth against the limit and remembers a refusal.
pub(super) struct MemoryLimiter {
    pub(super) limit: usize,
    pub(super) refused: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // A table element is a pointer; count it against the same budget.
        Ok(desired.saturating_mul(size_of::<usize>()) <= self.limit)
    }
}

/// The host side of one store.
pub(super) struct StoreState {
    pub(super) limiter: MemoryLimiter,
    pub(super) memory: Option<Memory>,
    pub(super) funcs: Option<GuestFuncs>,
    pub(super) builtins: Arc<[Option<&'static HostBuiltin>]>,
    /// Per-evaluation state of the builtins (`time.now_ns` is fixed for one evaluation).
    pub(super) builtin_context: BuiltinContext,
    pub(super) abort: Option<String>,
    pub(super) builtin_error: Option<(String, String)>,
    /// The guest's deadline global, and the tick it holds.
    pub(super) deadline: Option<Global>,
    pub(super) deadline_tick: u64,
    /// Set when a host builtin returned after the deadline.
    pub(super) expired: bool,
    /// Whether the host answers the module's `regex.match` calls it can (see
    /// [`super::regex_match`]), and the patterns it compiled for them.
    pub(super) host_regex: bool,
    pub(super) regexes: super::regex_match::Regexes,
}

impl StoreState {
    /// Sets the evaluation's deadline: the clock's `tick`.
    fn set_deadline(store: &mut Store<StoreState>, tick: u64) -> wasmtime::Result<()> {
        let state = store.data_mut();
        state.expired = false;
        if state.deadline_tick == tick {
            // The guest's global holds it already (only the host writes it): evaluations
            // starting within one tick of the clock share their deadline.
            return Ok(());
        }
        state.deadline_tick = tick;
        if let Some(global) = state.deadline {
            global.set(&mut *store, Val::I64(tick_value(tick)))?;
        }
        Ok(())
    }

    /// Whether the evaluation has passed its deadline.
    pub(super) fn past_deadline(&self) -> bool {
        now() >= self.deadline_tick
    }
}

/// A tick as the guest compares it (`i64.ge_u`): the same bits.
pub(super) fn tick_value(tick: u64) -> i64 {
    i64::from_ne_bytes(tick.to_ne_bytes())
}

/// Reads the NUL-terminated string at `addr`.
pub(super) fn c_str(data: &[u8], addr: i32) -> Result<&[u8], String> {
    let start = usize::try_from(addr).map_err(|_| format!("bad address {addr}"))?;
    let tail = data
        .get(start..)
        .ok_or_else(|| format!("address {addr} outside memory"))?;
    std::ffi::CStr::from_bytes_until_nul(tail)
        .map(std::ffi::CStr::to_bytes)
        .map_err(|_| "unterminated string".to_owned())
}

/// `opa_json_dump` of a guest value, parsed.
pub(super) fn dump_value(
    mut store: impl wasmtime::AsContextMut<Data = StoreState>,
    funcs: &GuestFuncs,
    memory: Memory,
    value_addr: i32,
) -> wasmtime::Result<Value> {
    let addr = funcs.json_dump.call(&mut store, value_addr)?;
    let bytes = c_str(memory.data(&store), addr).map_err(wasmtime::Error::msg)?;
    Ok(serde_json::from_slice(bytes)?)
}

/// Copies `json` into guest memory and parses it there with `opa_json_parse`.
pub(super) fn load_json(
    mut store: impl wasmtime::AsContextMut<Data = StoreState>,
    funcs: &GuestFuncs,
    memory: Memory,
    json: &[u8],
) -> wasmtime::Result<i32> {
    let len =
        i32::try_from(json.len()).map_err(|_| wasmtime::Error::msg("JSON larger than 2 GiB"))?;
    let addr = funcs.malloc.call(&mut store, len)?;
    let start = usize::try_from(addr)
        .map_err(|_| wasmtime::Error::msg("opa_malloc returned a bad address"))?;
    memory.write(&mut store, start, json)?;
    let value = funcs.json_parse.call(&mut store, (addr, len))?;
    if value == 0 {
        return Err(wasmtime::Error::msg(
            "opa_json_parse could not parse the JSON",
        ));
    }
    Ok(value)
}

pub(super) fn host_abort(mut caller: Caller<'_, StoreState>, addr: i32) -> wasmtime::Result<()> {
    let message = match caller.data().memory {
        Some(memory) => c_str(memory.data(&caller), addr)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_else(|error| format!("(unreadable message: {error})")),
        None => "(no memory)".to_owned(),
    };
    caller.data_mut().abort = Some(message.clone());
    Err(wasmtime::Error::msg(format!("opa_abort: {message}")))
}

pub(super) fn call_builtin(
    mut caller: Caller<'_, StoreState>,
    id: i32,
    args: &[i32],
) -> wasmtime::Result<i32> {
    let builtin = usize::try_from(id)
        .ok()
        .and_then(|index| caller.data().builtins.get(index).copied().flatten())
        .ok_or_else(|| {
            wasmtime::Error::msg(format!("the module called unknown builtin id {id}"))
        })?;
    let (Some(funcs), Some(memory)) = (caller.data().funcs.clone(), caller.data().memory) else {
        return Err(wasmtime::Error::msg(
            "builtin called before the instance was set up",
        ));
    };
    let mut values = Vec::with_capacity(args.len());
    for &arg in args {
        values.push(dump_value(&mut caller, &funcs, memory, arg)?);
    }
    let context = &mut caller.data_mut().builtin_context;
    context.begin_call();
    let result = (builtin.func)(&values, context);
    // A builtin can take long (a regular expression over a long text): a loop calling it
    // stops at the deadline here, not only at its next check.
    if matches!(result, Err(BuiltinError::TimeLimit)) || caller.data().past_deadline() {
        caller.data_mut().expired = true;
        return Err(wasmtime::Error::msg(format!(
            "the time limit passed during builtin {}",
            builtin.name
        )));
    }
    match result {
        Ok(value) => {
            let json = serde_json::to_vec(&value)?;
            load_json(&mut caller, &funcs, memory, &json)
        }
        // The guest reads a null value as "undefined".
        Err(BuiltinError::Undefined) => Ok(0),
        Err(BuiltinError::MemoryLimit(message)) => {
            caller.data_mut().limiter.refused = true;
            Err(wasmtime::Error::msg(format!(
                "builtin {}: {message}",
                builtin.name
            )))
        }
        Err(BuiltinError::Failed(message)) => {
            let text = format!("builtin {} failed: {message}", builtin.name);
            caller.data_mut().builtin_error = Some((builtin.name.to_owned(), message));
            Err(wasmtime::Error::msg(text))
        }
        Err(BuiltinError::TimeLimit) => Err(wasmtime::Error::msg("the time limit passed")),
    }
}

/// Copies `bytes` into guest memory at `addr`, growing the memory when they end past it.
pub(super) fn write_at(
    mut store: impl wasmtime::AsContextMut<Data = StoreState>,
    memory: Memory,
    addr: u32,
    bytes: &[u8],
) -> wasmtime::Result<()> {
    let start = usize::try_from(addr).map_err(|_| wasmtime::Error::msg("bad address"))?;
    let end = start + bytes.len();
    let size = memory.data_size(&store);
    if end > size {
        let pages = (end - size).div_ceil(WASM_PAGE);
        memory.grow(&mut store, u64::try_from(pages).unwrap_or(u64::MAX))?;
    }
    match memory.data_mut(&mut store).get_mut(start..end) {
        Some(target) => {
            target.copy_from_slice(bytes);
            Ok(())
        }
        None => Err(wasmtime::Error::msg("the input does not fit in memory")),
    }
}

/// Where an evaluation left its result set.
enum Ran {
    /// The result set's JSON, NUL-terminated.
    Json(i32),
    /// The result set as a value.
    Value(i32),
}

/// One instance, ready to evaluate: its store, the data document's address and the post-data heap.
pub(crate) struct PooledInstance {
    pub(super) store: Store<StoreState>,
    pub(super) memory: Memory,
    pub(super) funcs: GuestFuncs,
    pub(super) data_addr: i32,
    pub(super) heap_ptr: i32,
    /// Where the heap ended after the last evaluation (only tracked with `keep_heap`).
    pub(super) heap_end: i32,
    /// For a module with builtin caches: how many bytes above the post-data heap may be kept
    /// between evaluations (see [`run`](Self::run)).
    pub(super) keep_heap: Option<usize>,
    /// How the module's results may be read from its memory.
    pub(super) walker: Arc<Walker>,
    /// The input built as guest values, when the module takes that (reused between evaluations).
    pub(super) image: Option<Image>,
    /// The input's JSON, reused between evaluations.
    pub(super) input: Vec<u8>,
    /// The result set's JSON when the host reads it from memory, reused between evaluations.
    pub(super) output: Vec<u8>,
    /// Set when an evaluation trapped or aborted: the instance's state is unknown, drop it.
    pub(super) poisoned: bool,
}

impl PooledInstance {
    /// Evaluates `entrypoint` on `input`: the result set read in place by `in_place` when the
    /// host reads results from memory and `in_place` knows the shape (see
    /// [`InPlace`](super::InPlace)), otherwise its raw JSON handed to `read`.
    pub(crate) fn evaluate<R>(
        &mut self,
        entrypoint: i32,
        input: &impl InputJson,
        limits: Limits,
        in_place: impl FnOnce(InPlace<'_>) -> Option<R>,
        read: impl FnOnce(&[u8]) -> Result<R, RegoEvaluationError>,
    ) -> Result<R, RegoEvaluationError> {
        self.input.clear();
        let built = self.build_image(input);
        if built.is_none() {
            input.write_json(&mut self.input);
        }
        if i32::try_from(self.input.len()).is_err() {
            let len = self.input.len();
            self.input = Vec::new();
            return Err(RegoEvaluationError::Input(format!(
                "its JSON is {len} bytes, more than the 2 GiB a guest can take"
            )));
        }
        let deadline = limits.deadline();
        self.store
            .data_mut()
            .builtin_context
            .reset(limits.memory, deadline);
        if let Err(error) = StoreState::set_deadline(&mut self.store, deadline) {
            self.poisoned = true;
            return Err(RegoEvaluationError::Trap(format!("{error:#}")));
        }
        let ran = match self.run(entrypoint, built, input) {
            Ok(ran) => ran,
            Err(error) => {
                self.poisoned = true;
                return Err(self.classify(error, limits));
            }
        };
        let json_addr = match ran {
            Ran::Json(addr) => addr,
            Ran::Value(addr) => {
                let value = u32::from_ne_bytes(addr.to_ne_bytes());
                let memory = self.memory.data(&self.store);
                if let Some(read) = self.walker.in_place(memory, value).and_then(in_place) {
                    return Ok(read);
                }
                match self.read_result(addr) {
                    Ok(None) => return read(&self.output),
                    Ok(Some(addr)) => addr,
                    Err(error) => {
                        self.poisoned = true;
                        return Err(self.classify(error, limits));
                    }
                }
            }
        };
        let bytes =
            c_str(self.memory.data(&self.store), json_addr).map_err(RegoEvaluationError::Result)?;
        read(bytes)
    }

    /// Writes the result set at `addr` into `self.output` as JSON (`None`), or has the guest
    /// dump it when the host may not read it from memory (the address of the guest's JSON).
    fn read_result(&mut self, addr: i32) -> wasmtime::Result<Option<i32>> {
        let value = u32::from_ne_bytes(addr.to_ne_bytes());
        let reading = self
            .walker
            .read(self.memory.data(&self.store), value, &mut self.output);
        match reading {
            Reading::Trusted => Ok(None),
            Reading::Guest => Ok(Some(self.funcs.json_dump.call(&mut self.store, addr)?)),
            Reading::Unconfirmed(seen) => {
                let dumped = self.funcs.json_dump.call(&mut self.store, addr)?;
                let guest =
                    c_str(self.memory.data(&self.store), dumped).map_err(wasmtime::Error::msg)?;
                Ok(if self.walker.settle(seen, &self.output, guest) {
                    None
                } else {
                    Some(dumped)
                })
            }
        }
    }

    /// Whether the instance may go back to the pool.
    pub(crate) fn is_reusable(&self) -> bool {
        !self.poisoned
    }

    /// What the entry returned: its result, with the end of the heap noted when the heap is
    /// kept.
    fn returned(&mut self, called: (i32, i32, i32)) -> wasmtime::Result<Ran> {
        let (result, heap_end) = finish(called)?;
        if self.keep_heap.is_some() {
            self.heap_end = heap_end;
        }
        Ok(Ran::Value(result))
    }

    /// Whether the next evaluation starts from the post-data heap (see [`run`](Self::run)).
    fn resets(&self) -> bool {
        match self.keep_heap {
            Some(keep) => {
                let kept = usize::try_from(self.heap_end.wrapping_sub(self.heap_ptr))
                    .unwrap_or(usize::MAX);
                kept > keep
            }
            None => true,
        }
    }

    /// The input built straight from its value into `self.image` for where
    /// [`run`](Self::run) puts it: its root, or `None` when the module takes no images or the
    /// image does not take the input.
    ///
    /// That is the post-data heap, or when the heap is kept, the block the guest's allocator
    /// will most likely give for it: just past the heap's end (unless a free block fits).
    /// `run` checks, and builds it again where the block is when it is elsewhere.
    fn build_image(&mut self, input: &impl InputJson) -> Option<u32> {
        self.funcs.entry.as_ref()?;
        let base = if self.resets() {
            u32::try_from(self.heap_ptr).ok()?
        } else {
            u32::try_from(self.heap_end)
                .ok()?
                .checked_add(super::image::HEADER)?
        };
        let image = self.image.as_mut()?;
        image.start(base);
        input.build_image(image)
    }

    /// Runs one evaluation on `input`: the address of the result set, as a value or as JSON.
    /// `built` is the root of the input built by [`build_image`](Self::build_image), else
    /// `self.input` holds its JSON.
    ///
    /// All ways start from the data document loaded at the bottom of the heap:
    /// - with the evaluation entry the rewrite added ([`crate::entry`]), one call: the input is
    ///   laid out as guest values just above the post-data heap ([`Image`]; or its JSON is
    ///   written there and parsed by the entry), and the entry evaluates. The result set stays a
    ///   value, read from memory by the host. A module whose values the host does not lay out
    ///   and that has `opa_eval` is called through that instead, as below;
    /// - a module whose runtime caches compiled patterns (regular expressions, globs) in its
    ///   builtin caches: setting the heap pointer clears those caches (and `opa_eval` always
    ///   sets it), so the heap of such a module is kept between evaluations, and reset to the
    ///   post-data heap only once the garbage of earlier evaluations passes
    ///   [`kept_heap_limit`]. Until then a pattern is compiled once, not at every evaluation
    ///   (the caches map a pattern to its compiled form, nothing an input can change). The
    ///   garbage counts against the memory limit like everything in the instance's memory.
    ///   With the entry, the input is laid out as guest values inside a block the guest's
    ///   allocator makes for it (or its JSON written at a scratch place above the heap and
    ///   copied by the entry into such a block, to be parsed there); without, through
    ///   `opa_eval_ctx_*`;
    /// - otherwise, from ABI 1.2, `opa_eval` parses and evaluates the input written just above
    ///   the post-data heap in one call;
    /// - otherwise the `opa_eval_ctx_*` calls after resetting the heap.
    fn run(
        &mut self,
        entrypoint: i32,
        built: Option<u32>,
        input: &impl InputJson,
    ) -> wasmtime::Result<Ran> {
        let reset = self.resets();
        // A module whose values the host does not lay out keeps `opa_eval` when it has it: it
        // is what the module was built to be called with (the entry calls functions the
        // module's own `opa_eval` does not need).
        let use_entry = match (&self.funcs.entry, &self.funcs.opa_eval) {
            (Some(_), Some(_)) => self.keep_heap.is_some() || self.image.is_some(),
            (entry, _) => entry.is_some(),
        };
        if use_entry && let Some(entry) = &self.funcs.entry {
            if !reset
                && let Some(image) = &mut self.image
                && let Some(root) = built.or_else(|| image.build(&self.input, 0))
            {
                // The heap is kept: the image goes into a block of the guest's allocator.
                let size = i32::try_from(image.bytes.len())
                    .map_err(|_| wasmtime::Error::msg("the input does not fit in memory"))?;
                let block = self.funcs.malloc.call(&mut self.store, size)?;
                let base = u32::try_from(block)
                    .ok()
                    .filter(|&base| base != 0)
                    .ok_or_else(|| wasmtime::Error::msg("opa_malloc returned a bad address"))?;
                let root = if image.base() == base {
                    Some(root)
                } else if image.base() == 0 {
                    image.relocate(root, base)
                } else {
                    // The block is not where the image was built for: built again there (the
                    // same input gives an image of the same size, whatever its base).
                    image.start(base);
                    input.build_image(image)
                };
                let root = root
                    .and_then(|root| i32::try_from(root).ok())
                    .ok_or_else(|| wasmtime::Error::msg("the input does not fit in memory"))?;
                write_at(&mut self.store, self.memory, base, &image.bytes)?;
                let called = entry.call(
                    &mut self.store,
                    (entrypoint, self.data_addr, root, 0, 0, MODE_KEEP_BUILT),
                )?;
                return self.returned(called);
            }
            if reset
                && let Some(image) = &mut self.image
                && let Ok(base) = u32::try_from(self.heap_ptr)
                && let Some(root) = built.or_else(|| image.build(&self.input, base))
                && let Some(end) = image.end().and_then(|end| i32::try_from(end).ok())
                && let Ok(root) = i32::try_from(root)
            {
                write_at(&mut self.store, self.memory, base, &image.bytes)?;
                let called = entry.call(
                    &mut self.store,
                    (entrypoint, self.data_addr, root, 0, end, MODE_BUILT),
                )?;
                return self.returned(called);
            }
            if self.input.is_empty() {
                // The image was built but could not be placed: the guest parses the JSON.
                input.write_json(&mut self.input);
            }
            let len = i32::try_from(self.input.len())
                .map_err(|_| wasmtime::Error::msg("input larger than 2 GiB"))?;
            let (input_addr, heap, mode) = if reset {
                (self.heap_ptr, self.heap_ptr.wrapping_add(len), MODE_PARSE)
            } else {
                // Above anything the allocator can hand out for the copy (a block header and
                // the rounding of small blocks included), on an 8-byte boundary.
                let scratch = usize::try_from(self.heap_end)
                    .ok()
                    .and_then(|end| end.checked_add(self.input.len())?.checked_add(256))
                    .map(|at| at & !7)
                    .and_then(|at| i32::try_from(at).ok())
                    .ok_or_else(|| wasmtime::Error::msg("the input does not fit in memory"))?;
                (scratch, 0, MODE_KEEP)
            };
            let at =
                u32::try_from(input_addr).map_err(|_| wasmtime::Error::msg("bad heap pointer"))?;
            write_at(&mut self.store, self.memory, at, &self.input)?;
            let called = entry.call(
                &mut self.store,
                (entrypoint, self.data_addr, input_addr, len, heap, mode),
            )?;
            return self.returned(called);
        }
        if self.input.is_empty() {
            input.write_json(&mut self.input);
        }
        let len = i32::try_from(self.input.len())
            .map_err(|_| wasmtime::Error::msg("input larger than 2 GiB"))?;
        if self.keep_heap.is_some() {
            let result = self.run_ctx(entrypoint, reset);
            if result.is_ok() {
                self.heap_end = self.funcs.heap_ptr_get.call(&mut self.store, ())?;
            }
            return result.map(Ran::Json);
        }
        if let Some(opa_eval) = self.funcs.opa_eval.clone() {
            let input_addr = self.heap_ptr;
            self.write_input(input_addr)?;
            opa_eval
                .call(
                    &mut self.store,
                    (
                        0,
                        entrypoint,
                        self.data_addr,
                        input_addr,
                        len,
                        input_addr + len,
                        0,
                    ),
                )
                .map(Ran::Json)
        } else {
            self.run_ctx(entrypoint, true).map(Ran::Json)
        }
    }

    /// Copies `self.input` into guest memory at `addr`.
    fn write_input(&mut self, addr: i32) -> wasmtime::Result<()> {
        let addr = u32::try_from(addr).map_err(|_| wasmtime::Error::msg("bad heap pointer"))?;
        write_at(&mut self.store, self.memory, addr, &self.input)
    }

    /// An evaluation through the `opa_eval_ctx_*` calls, after resetting the heap to the
    /// post-data heap when `reset`.
    fn run_ctx(&mut self, entrypoint: i32, reset: bool) -> wasmtime::Result<i32> {
        let funcs = &self.funcs;
        if reset {
            funcs.heap_ptr_set.call(&mut self.store, self.heap_ptr)?;
        }
        let input = load_json(&mut self.store, funcs, self.memory, &self.input)?;
        let ctx = funcs.eval_ctx_new.call(&mut self.store, ())?;
        funcs
            .eval_ctx_set_input
            .call(&mut self.store, (ctx, input))?;
        funcs
            .eval_ctx_set_data
            .call(&mut self.store, (ctx, self.data_addr))?;
        if let Some(set_entrypoint) = &funcs.eval_ctx_set_entrypoint {
            set_entrypoint.call(&mut self.store, (ctx, entrypoint))?;
        }
        let code = funcs.eval.call(&mut self.store, ctx)?;
        if code != 0 {
            return Err(wasmtime::Error::msg(format!(
                "eval returned error code {code}"
            )));
        }
        let result = funcs.eval_ctx_get_result.call(&mut self.store, ctx)?;
        funcs.json_dump.call(&mut self.store, result)
    }

    fn classify(&mut self, error: wasmtime::Error, limits: Limits) -> RegoEvaluationError {
        let state = self.store.data_mut();
        let refused = state.limiter.refused;
        let memory_limit = |detail: String| RegoEvaluationError::MemoryLimit {
            limit: limits.memory,
            detail,
        };
        if let Some(message) = state.abort.take() {
            return if refused {
                memory_limit(message)
            } else {
                RegoEvaluationError::Aborted(message)
            };
        }
        if let Some((name, message)) = state.builtin_error.take() {
            return RegoEvaluationError::Builtin { name, message };
        }
        // The clock checks trap with `unreachable` once the deadline has passed.
        let unreachable = matches!(
            error.downcast_ref::<Trap>(),
            Some(Trap::UnreachableCodeReached)
        );
        if state.expired || (unreachable && state.past_deadline()) {
            return RegoEvaluationError::TimeLimit(limits.time);
        }
        if refused {
            return memory_limit(format!("{error:#}"));
        }
        RegoEvaluationError::Trap(format!("{error:#}"))
    }
}

/// The string value at `addr` in guest memory (OPA's `opa_string_t`: the type at 0, 4 or 8 for
/// an interned string (a constant of the policy), the length at 4, the address of the bytes at
/// 8), or `None` when it is not a string.
fn string(data: &[u8], addr: i32) -> Option<&[u8]> {
    let at = usize::try_from(addr).ok()?;
    let head = data.get(at..at.checked_add(12)?)?;
    if head[0] != 4 && head[0] != 8 {
        return None;
    }
    let word = |offset: usize| -> Option<usize> {
        let bytes: [u8; 4] = head.get(offset..offset + 4)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(bytes)).ok()
    };
    let (len, text) = (word(4)?, word(8)?);
    data.get(text..text.checked_add(len)?)
}

/// The host's answer to the module's `regex.match(pattern, value)`: 0 or 1, or
/// [`REGEX_UNDECIDED`] when the module decides.
pub(super) fn host_match(
    mut caller: Caller<'_, StoreState>,
    pattern: i32,
    value: i32,
) -> wasmtime::Result<i32> {
    let Some(memory) = caller.data().memory else {
        return Ok(REGEX_UNDECIDED);
    };
    let (data, state) = memory.data_and_store_mut(&mut caller);
    if !state.host_regex {
        return Ok(REGEX_UNDECIDED);
    }
    let (Some(pattern), Some(text)) = (string(data, pattern), string(data, value)) else {
        return Ok(REGEX_UNDECIDED);
    };
    let answer = state.regexes.is_match(pattern, text);
    if state.past_deadline() {
        state.expired = true;
        return Err(wasmtime::Error::msg(
            "the time limit passed during builtin regex.match",
        ));
    }
    Ok(match answer {
        Some(matched) => i32::from(matched),
        None => REGEX_UNDECIDED,
    })
}
