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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use serde_json::Value;
use wasmtime::{
    Caller, Config, Engine, Extern, ExternType, Func, Global, Instance, Memory, MemoryType, Module,
    ResourceLimiter, SharedMemory, Store, Trap, TypedFunc, Val, ValType,
};

use crate::builtins::{BuiltinContext, BuiltinError, HostBuiltin};
use crate::error::RegoEvaluationError;
use crate::input::InputJson;
use crate::meter;

/// How often the clock advances: the granularity of the time limit.
const TICK: Duration = Duration::from_millis(1);

const WASM_PAGE: usize = 64 * 1024;

/// The process-wide wasmtime engine and the clock of the time limit.
struct Runtime {
    engine: Engine,
    clock: SharedMemory,
    /// The clock's current tick, as the host reads it (the guest reads the shared memory).
    now: Arc<AtomicU64>,
}

/// The process-wide runtime, made on first use: the engine, and the clock with its thread.
///
/// The engine has no epoch interruption or fuel: the time limit is checked by the modules
/// themselves (see [`crate::meter`]), against a clock in a shared memory of one page. Shared
/// memories are enabled for that page only: [`meter::instrument`] refuses modules that define
/// one, and [`check_imports`] refuses a shared `env.memory`.
fn runtime() -> Result<&'static Runtime, String> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let mut config = Config::new();
            // OPA's runtime is many small C functions (value accessors, the allocator, the JSON
            // lexer): inlining them within the module saves about a tenth of the instructions of
            // an evaluation, for a longer compile.
            config.compiler_inlining(wasmtime::Inlining::Yes);
            config.wasm_threads(true);
            config.shared_memory(true);
            let engine = Engine::new(&config).map_err(|error| error.to_string())?;
            let clock = SharedMemory::new(&engine, MemoryType::shared(1, 1))
                .map_err(|error| format!("cannot make the clock: {error:#}"))?;
            let now = Arc::new(AtomicU64::new(0));
            start_clock(&engine, &clock, Arc::clone(&now))?;
            Ok(Runtime { engine, clock, now })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The process-wide wasmtime engine.
pub(crate) fn engine() -> Result<&'static Engine, String> {
    runtime().map(|runtime| &runtime.engine)
}

/// Starts the thread that advances the clock every [`TICK`]. It writes the shared memory
/// through a module of its own, one atomic store, so that no host code writes guest memory.
fn start_clock(engine: &Engine, clock: &SharedMemory, now: Arc<AtomicU64>) -> Result<(), String> {
    let module = Module::new(engine, clock_module())
        .map_err(|error| format!("cannot compile the clock: {error:#}"))?;
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, &module, &[clock.clone().into()])
        .map_err(|error| format!("cannot start the clock: {error:#}"))?;
    let set = instance
        .get_typed_func::<i64, ()>(&mut store, "set")
        .map_err(|error| format!("cannot start the clock: {error:#}"))?;
    std::thread::Builder::new()
        .name("portcullis-rego-clock".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                let tick = now.fetch_add(1, Ordering::Relaxed) + 1;
                // The store holds nothing but this call; a failure would leave the guests'
                // clock behind the host's, which the host's own checks cover.
                let _ = set.call(&mut store, i64::try_from(tick).unwrap_or(i64::MAX));
            }
        })
        .map_err(|error| format!("cannot start the clock thread: {error}"))?;
    Ok(())
}

/// `(module (import "portcullis" "clock" (memory 1 1 shared))
///   (func (export "set") (param i64) (i64.atomic.store (i32.const 0) (local.get 0))))`
fn clock_module() -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection,
        ImportSection, Instruction, MemArg, TypeSection,
    };
    let mut types = TypeSection::new();
    types.ty().function([wasm_encoder::ValType::I64], []);
    let mut imports = ImportSection::new();
    imports.import(
        meter::IMPORT_MODULE,
        meter::CLOCK,
        EntityType::Memory(wasm_encoder::MemoryType {
            minimum: 1,
            maximum: Some(1),
            memory64: false,
            shared: true,
            page_size_log2: None,
        }),
    );
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("set", ExportKind::Func, 0);
    let mut set = Function::new([]);
    set.instruction(&Instruction::I32Const(0))
        .instruction(&Instruction::LocalGet(0))
        .instruction(&Instruction::I64AtomicStore(MemArg {
            offset: 0,
            align: 3,
            memory_index: 0,
        }))
        .instruction(&Instruction::End);
    let mut code = CodeSection::new();
    code.function(&set);
    let mut module = wasm_encoder::Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&exports)
        .section(&code);
    module.finish()
}

/// The clock's shared memory, for tests that instantiate rewritten modules by hand.
#[cfg(test)]
pub(crate) fn clock_memory() -> SharedMemory {
    runtime().expect("the runtime starts").clock.clone()
}

/// The clock's current tick.
fn now() -> u64 {
    runtime().map_or(0, |runtime| runtime.now.load(Ordering::Relaxed))
}

/// What an import of the module is bound to.
#[derive(Debug, Clone)]
pub(crate) enum ImportKind {
    Memory(MemoryType),
    Abort,
    Println,
    Builtin(usize),
    /// The clock added by [`meter::instrument`].
    Clock,
    /// The deadline added by [`meter::instrument`].
    Deadline,
}

/// Checks the module's imports: only the OPA ones, with their OPA types.
pub(crate) fn check_imports(module: &Module) -> Result<Vec<ImportKind>, String> {
    let mut kinds = Vec::new();
    let mut has_memory = false;
    for import in module.imports() {
        let (module_name, name) = (import.module(), import.name());
        let wrong = || format!("unexpected import {module_name}.{name} ({:?})", import.ty());
        if module_name == meter::IMPORT_MODULE {
            // Added by the rewrite (which refuses modules importing these names themselves).
            let kind = match (name, import.ty()) {
                (meter::CLOCK, ExternType::Memory(memory)) if memory.is_shared() => {
                    ImportKind::Clock
                }
                (meter::DEADLINE, ExternType::Global(global))
                    if matches!(global.content(), ValType::I64)
                        && global.mutability() == wasmtime::Mutability::Var =>
                {
                    ImportKind::Deadline
                }
                _ => return Err(wrong()),
            };
            kinds.push(kind);
            continue;
        }
        if module_name != "env" {
            return Err(wrong());
        }
        let expect_func = |params: usize, results: usize| -> Result<(), String> {
            match import.ty() {
                ExternType::Func(func)
                    if func.params().len() == params
                        && func.results().len() == results
                        && func
                            .params()
                            .chain(func.results())
                            .all(|t| matches!(t, ValType::I32)) =>
                {
                    Ok(())
                }
                _ => Err(format!(
                    "import env.{name} has the wrong type (expected {params} i32 parameter(s) and {results} i32 result(s))"
                )),
            }
        };
        let kind = match name {
            "memory" => match import.ty() {
                ExternType::Memory(memory) if !memory.is_64() && !memory.is_shared() => {
                    has_memory = true;
                    ImportKind::Memory(memory)
                }
                _ => return Err("import env.memory is not a 32-bit unshared memory".to_owned()),
            },
            "opa_abort" => {
                expect_func(1, 0)?;
                ImportKind::Abort
            }
            "opa_println" => {
                expect_func(1, 0)?;
                ImportKind::Println
            }
            _ => match name
                .strip_prefix("opa_builtin")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(arity) if arity <= 4 => {
                    expect_func(arity + 2, 1)?;
                    ImportKind::Builtin(arity)
                }
                _ => return Err(wrong()),
            },
        };
        kinds.push(kind);
    }
    if !has_memory {
        return Err("the module does not import env.memory".to_owned());
    }
    Ok(kinds)
}

/// The module's exports used by the host.
#[derive(Clone)]
struct GuestFuncs {
    malloc: TypedFunc<i32, i32>,
    json_parse: TypedFunc<(i32, i32), i32>,
    json_dump: TypedFunc<i32, i32>,
    heap_ptr_get: TypedFunc<(), i32>,
    heap_ptr_set: TypedFunc<i32, ()>,
    eval_ctx_new: TypedFunc<(), i32>,
    eval_ctx_set_input: TypedFunc<(i32, i32), ()>,
    eval_ctx_set_data: TypedFunc<(i32, i32), ()>,
    eval_ctx_set_entrypoint: Option<TypedFunc<(i32, i32), ()>>,
    eval_ctx_get_result: TypedFunc<i32, i32>,
    eval: TypedFunc<i32, i32>,
    opa_eval: Option<FastEval>,
    builtins: TypedFunc<(), i32>,
    entrypoints: Option<TypedFunc<(), i32>>,
}

type FastEval = TypedFunc<(i32, i32, i32, i32, i32, i32, i32), i32>;

impl GuestFuncs {
    fn new(store: &mut Store<StoreState>, instance: &Instance, minor: i32) -> Result<Self, String> {
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
        })
    }
}

/// Counts linear-memory growth against the limit and remembers a refusal.
struct MemoryLimiter {
    limit: usize,
    refused: bool,
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
struct StoreState {
    limiter: MemoryLimiter,
    memory: Option<Memory>,
    funcs: Option<GuestFuncs>,
    builtins: Arc<[Option<&'static HostBuiltin>]>,
    /// Per-evaluation state of the builtins (`time.now_ns` is fixed for one evaluation).
    builtin_context: BuiltinContext,
    abort: Option<String>,
    builtin_error: Option<(String, String)>,
    /// The guest's deadline global, and the tick it holds.
    deadline: Option<Global>,
    deadline_tick: u64,
    /// Set when a host builtin returned after the deadline.
    expired: bool,
}

impl StoreState {
    /// Sets the evaluation's deadline: the clock's `tick`.
    fn set_deadline(store: &mut Store<StoreState>, tick: u64) -> wasmtime::Result<()> {
        let state = store.data_mut();
        state.deadline_tick = tick;
        state.expired = false;
        if let Some(global) = state.deadline {
            global.set(&mut *store, Val::I64(tick_value(tick)))?;
        }
        Ok(())
    }

    /// Whether the evaluation has passed its deadline.
    fn past_deadline(&self) -> bool {
        now() >= self.deadline_tick
    }
}

/// A tick as the guest compares it (`i64.ge_u`): the same bits.
fn tick_value(tick: u64) -> i64 {
    i64::from_ne_bytes(tick.to_ne_bytes())
}

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

/// What the module says about itself, read once from a first instance.
#[derive(Debug, Clone)]
pub(crate) struct ModuleInfo {
    pub(crate) abi: (i32, i32),
    /// Entrypoint names and ids, sorted by name.
    pub(crate) entrypoints: Vec<(String, i32)>,
    /// Builtin names and ids as the module lists them.
    pub(crate) builtins: Vec<(String, i32)>,
    /// Whether the module's runtime keeps builtin caches (compiled regular expressions and glob
    /// patterns) between calls: see [`PooledInstance::run`].
    pub(crate) builtin_caches: bool,
}

/// The function of OPA's runtime that reads a builtin cache; a module holding it has builtins
/// (the regular-expression and glob ones) that cache their compiled patterns.
const BUILTIN_CACHE_FUNCTION: &str = "opa_builtin_cache_get";

/// How much garbage an instance with builtin caches may keep above its post-data heap between
/// evaluations, at most: 1 MiB, or a sixteenth of the memory limit when that is less.
fn kept_heap_limit(limits: Limits) -> usize {
    (limits.memory / 16).min(1 << 20)
}

/// Compiled modules by content, so that opening the same bundle again (one bundle serving an
/// input, a tool-call and an output policy, say) compiles it once. Only weak references: a module
/// no bundle uses any more is freed.
type ModuleCache = HashMap<u64, Vec<Weak<CompiledModule>>>;

/// `module` compiled, from the cache when a live bundle already compiled the same bytes.
pub(crate) fn compile_cached(wasm: &[u8]) -> Result<Arc<CompiledModule>, ModuleError> {
    static CACHE: OnceLock<Mutex<ModuleCache>> = OnceLock::new();
    let mut hasher = std::hash::DefaultHasher::new();
    wasm.hash(&mut hasher);
    let key = hasher.finish();
    // Held while compiling: two threads opening the same module compile it once.
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let entries = cache.entry(key).or_default();
    entries.retain(|entry| entry.strong_count() > 0);
    if let Some(found) = entries
        .iter()
        .filter_map(Weak::upgrade)
        .find(|module| *module.wasm == *wasm)
    {
        return Ok(found);
    }
    let module = Arc::new(CompiledModule::new(wasm)?);
    entries.push(Arc::downgrade(&module));
    Ok(module)
}

/// A compiled module and how to instantiate it. Shared by bundles that differ only in data or limits.
pub(crate) struct CompiledModule {
    wasm: Box<[u8]>,
    module: Module,
    imports: Vec<ImportKind>,
    builtin_table: Arc<[Option<&'static HostBuiltin>]>,
    pub(crate) info: ModuleInfo,
}

impl CompiledModule {
    /// Compiles and checks `wasm`, reads the module's ABI version, entrypoints and builtins.
    /// Errors: `(is_compile_error, message)` or the missing builtins.
    pub(crate) fn new(wasm: &[u8]) -> Result<Self, ModuleError> {
        let engine = engine().map_err(ModuleError::Setup)?;
        let compile_error = |error: wasmtime::Error| ModuleError::Compile(format!("{error:#}"));
        // When the module cannot be rewritten or the rewrite does not compile, the original is
        // most likely not valid WebAssembly: wasmtime says best what is wrong with it.
        let module = match meter::instrument(wasm) {
            Ok(Some(metered)) => Module::new(engine, &metered).map_err(|error| {
                Module::validate(engine, wasm).map_or_else(compile_error, |()| {
                    ModuleError::Compile(format!(
                        "the module with its time limit does not compile: {error:#}"
                    ))
                })
            })?,
            Ok(None) => Module::new(engine, wasm).map_err(compile_error)?,
            Err(refused) => {
                Module::validate(engine, wasm).map_err(compile_error)?;
                return Err(ModuleError::NotOpa(format!(
                    "cannot give the module a time limit: {refused}"
                )));
            }
        };
        let imports = check_imports(&module).map_err(ModuleError::NotOpa)?;
        let mut compiled = Self {
            wasm: wasm.into(),
            module,
            imports,
            builtin_table: Arc::from(Vec::new()),
            info: ModuleInfo {
                abi: (0, 0),
                entrypoints: Vec::new(),
                builtins: Vec::new(),
                builtin_caches: false,
            },
        };
        let limits = Limits {
            time: Duration::from_secs(10),
            memory: 1 << 30,
        };
        let (mut store, instance) = compiled.instantiate(limits).map_err(ModuleError::Setup)?;
        let abi = read_abi(&mut store, &instance);
        if abi.0 != 1 {
            return Err(ModuleError::NotOpa(format!(
                "unsupported ABI version {}.{} (supported: 1.x)",
                abi.0, abi.1
            )));
        }
        let funcs = GuestFuncs::new(&mut store, &instance, abi.1).map_err(ModuleError::NotOpa)?;
        let memory = store
            .data()
            .memory
            .ok_or_else(|| ModuleError::Setup("no memory".to_owned()))?;
        store.data_mut().funcs = Some(funcs.clone());
        let map = |store: &mut Store<StoreState>, func: &TypedFunc<(), i32>, what: &str| {
            let addr = func
                .call(&mut *store, ())
                .map_err(|error| format!("{what}(): {error:#}"))?;
            let json = dump_value(store, &funcs, memory, addr)
                .map_err(|error| format!("{what}(): {error:#}"))?;
            let Value::Object(map) = json else {
                return Err(format!("{what}() is not an object"));
            };
            let mut pairs = Vec::with_capacity(map.len());
            for (name, id) in map {
                let id = id
                    .as_i64()
                    .and_then(|id| i32::try_from(id).ok())
                    .ok_or_else(|| format!("{what}(): id of {name} is not a number"))?;
                pairs.push((name, id));
            }
            pairs.sort();
            Ok(pairs)
        };
        let builtins = map(&mut store, &funcs.builtins, "builtins").map_err(ModuleError::NotOpa)?;
        let entrypoints = match &funcs.entrypoints {
            Some(func) => map(&mut store, func, "entrypoints").map_err(ModuleError::NotOpa)?,
            None => Vec::new(),
        };
        let mut missing = Vec::new();
        let mut table: Vec<Option<&'static HostBuiltin>> = Vec::new();
        for (name, id) in &builtins {
            match crate::builtins::lookup(name) {
                Some(builtin) => {
                    let index = usize::try_from(*id).map_err(|_| {
                        ModuleError::NotOpa(format!("builtin {name} has a negative id"))
                    })?;
                    if table.len() <= index {
                        table.resize(index + 1, None);
                    }
                    table[index] = Some(builtin);
                }
                None => missing.push(name.clone()),
            }
        }
        if !missing.is_empty() {
            return Err(ModuleError::MissingBuiltins(missing));
        }
        compiled.builtin_table = Arc::from(table);
        let builtin_caches = compiled
            .module
            .functions()
            .any(|function| function.name.as_deref() == Some(BUILTIN_CACHE_FUNCTION));
        compiled.info = ModuleInfo {
            abi,
            entrypoints,
            builtins,
            builtin_caches,
        };
        Ok(compiled)
    }

    /// A fresh instance with its own store and memory (no data loaded yet).
    fn instantiate(&self, limits: Limits) -> Result<(Store<StoreState>, Instance), String> {
        let engine = engine()?;
        let deadline_tick = limits.deadline();
        let mut store = Store::new(
            engine,
            StoreState {
                limiter: MemoryLimiter {
                    limit: limits.memory,
                    refused: false,
                },
                memory: None,
                funcs: None,
                builtins: Arc::clone(&self.builtin_table),
                builtin_context: BuiltinContext::new(limits.memory, deadline_tick, |tick| {
                    now() >= tick
                }),
                abort: None,
                builtin_error: None,
                deadline: None,
                deadline_tick,
                expired: false,
            },
        );
        store.limiter(|state| &mut state.limiter);
        let mut externs: Vec<Extern> = Vec::with_capacity(self.imports.len());
        let mut memory = None;
        for kind in &self.imports {
            let item: Extern = match kind {
                ImportKind::Memory(ty) => {
                    let created = Memory::new(&mut store, ty.clone()).map_err(|error| {
                        if store.data().limiter.refused {
                            format!(
                                "the module's initial memory exceeds the memory limit of {} bytes",
                                limits.memory
                            )
                        } else {
                            format!("cannot create the memory: {error:#}")
                        }
                    })?;
                    memory = Some(created);
                    created.into()
                }
                ImportKind::Abort => Func::wrap(&mut store, host_abort).into(),
                ImportKind::Clock => runtime()?.clock.clone().into(),
                ImportKind::Deadline => {
                    let global = Global::new(
                        &mut store,
                        wasmtime::GlobalType::new(ValType::I64, wasmtime::Mutability::Var),
                        Val::I64(tick_value(deadline_tick)),
                    )
                    .map_err(|error| format!("cannot create the deadline: {error:#}"))?;
                    store.data_mut().deadline = Some(global);
                    global.into()
                }
                ImportKind::Println => {
                    Func::wrap(&mut store, |_: Caller<'_, StoreState>, _: i32| {}).into()
                }
                ImportKind::Builtin(0) => Func::wrap(
                    &mut store,
                    |caller: Caller<'_, StoreState>, id: i32, _ctx: i32| {
                        call_builtin(caller, id, &[])
                    },
                )
                .into(),
                ImportKind::Builtin(1) => Func::wrap(
                    &mut store,
                    |caller: Caller<'_, StoreState>, id: i32, _ctx: i32, a: i32| {
                        call_builtin(caller, id, &[a])
                    },
                )
                .into(),
                ImportKind::Builtin(2) => Func::wrap(
                    &mut store,
                    |caller: Caller<'_, StoreState>, id: i32, _ctx: i32, a: i32, b: i32| {
                        call_builtin(caller, id, &[a, b])
                    },
                )
                .into(),
                ImportKind::Builtin(3) => Func::wrap(
                    &mut store,
                    |caller: Caller<'_, StoreState>, id: i32, _ctx: i32, a: i32, b: i32, c: i32| {
                        call_builtin(caller, id, &[a, b, c])
                    },
                )
                .into(),
                ImportKind::Builtin(_) => Func::wrap(
                    &mut store,
                    |caller: Caller<'_, StoreState>,
                     id: i32,
                     _ctx: i32,
                     a: i32,
                     b: i32,
                     c: i32,
                     d: i32| { call_builtin(caller, id, &[a, b, c, d]) },
                )
                .into(),
            };
            externs.push(item);
        }
        store.data_mut().memory = memory;
        let instance = Instance::new(&mut store, &self.module, &externs)
            .map_err(|error| format!("{error:#}"))?;
        Ok((store, instance))
    }

    /// A pool instance: instantiated, data document loaded, post-data heap pointer taken.
    pub(crate) fn instance(&self, data: &[u8], limits: Limits) -> Result<PooledInstance, String> {
        let (mut store, instance) = self.instantiate(limits)?;
        let funcs = GuestFuncs::new(&mut store, &instance, self.info.abi.1)?;
        let memory = store.data().memory.ok_or("no memory")?;
        store.data_mut().funcs = Some(funcs.clone());
        let data_addr = load_json(&mut store, &funcs, memory, data).map_err(|error| {
            if store.data().limiter.refused {
                format!(
                    "the data document does not fit in the memory limit of {} bytes",
                    limits.memory
                )
            } else {
                format!("cannot load the data document: {error:#}")
            }
        })?;
        let heap_ptr = funcs
            .heap_ptr_get
            .call(&mut store, ())
            .map_err(|error| format!("{error:#}"))?;
        Ok(PooledInstance {
            store,
            memory,
            funcs,
            data_addr,
            heap_ptr,
            heap_end: heap_ptr,
            keep_heap: self.info.builtin_caches.then(|| kept_heap_limit(limits)),
            input: Vec::new(),
            poisoned: false,
        })
    }
}

/// Why a module could not be compiled or set up.
#[derive(Debug)]
pub(crate) enum ModuleError {
    Compile(String),
    NotOpa(String),
    MissingBuiltins(Vec<String>),
    Setup(String),
}

fn read_abi(store: &mut Store<StoreState>, instance: &Instance) -> (i32, i32) {
    let mut global = |name: &str| {
        instance
            .get_global(&mut *store, name)
            .and_then(|global| global.get(&mut *store).i32())
    };
    let major = global("opa_wasm_abi_version").unwrap_or(1);
    let minor = global("opa_wasm_abi_minor_version").unwrap_or(0);
    (major, minor)
}

/// Reads the NUL-terminated string at `addr`.
fn c_str(data: &[u8], addr: i32) -> Result<&[u8], String> {
    let start = usize::try_from(addr).map_err(|_| format!("bad address {addr}"))?;
    let tail = data
        .get(start..)
        .ok_or_else(|| format!("address {addr} outside memory"))?;
    std::ffi::CStr::from_bytes_until_nul(tail)
        .map(std::ffi::CStr::to_bytes)
        .map_err(|_| "unterminated string".to_owned())
}

/// `opa_json_dump` of a guest value, parsed.
fn dump_value(
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
fn load_json(
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

fn host_abort(mut caller: Caller<'_, StoreState>, addr: i32) -> wasmtime::Result<()> {
    let message = match caller.data().memory {
        Some(memory) => c_str(memory.data(&caller), addr)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_else(|error| format!("(unreadable message: {error})")),
        None => "(no memory)".to_owned(),
    };
    caller.data_mut().abort = Some(message.clone());
    Err(wasmtime::Error::msg(format!("opa_abort: {message}")))
}

fn call_builtin(
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

/// One instance, ready to evaluate: its store, the data document's address and the post-data heap.
pub(crate) struct PooledInstance {
    store: Store<StoreState>,
    memory: Memory,
    funcs: GuestFuncs,
    data_addr: i32,
    heap_ptr: i32,
    /// Where the heap ended after the last evaluation (only tracked with `keep_heap`).
    heap_end: i32,
    /// For a module with builtin caches: how many bytes above the post-data heap may be kept
    /// between evaluations (see [`run`](Self::run)).
    keep_heap: Option<usize>,
    /// The input's JSON, reused between evaluations.
    input: Vec<u8>,
    /// Set when an evaluation trapped or aborted: the instance's state is unknown, drop it.
    poisoned: bool,
}

impl PooledInstance {
    /// Evaluates `entrypoint` on `input` and hands the raw JSON result set to `read`.
    pub(crate) fn evaluate<R>(
        &mut self,
        entrypoint: i32,
        input: &impl InputJson,
        limits: Limits,
        read: impl FnOnce(&[u8]) -> Result<R, RegoEvaluationError>,
    ) -> Result<R, RegoEvaluationError> {
        self.input.clear();
        input.write_json(&mut self.input);
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
        let result_addr = match self.run(entrypoint) {
            Ok(addr) => addr,
            Err(error) => {
                self.poisoned = true;
                return Err(self.classify(error, limits));
            }
        };
        let bytes = c_str(self.memory.data(&self.store), result_addr)
            .map_err(RegoEvaluationError::Result)?;
        read(bytes)
    }

    /// Whether the instance may go back to the pool.
    pub(crate) fn is_reusable(&self) -> bool {
        !self.poisoned
    }

    /// Runs one evaluation on `self.input` and returns the address of the result set's JSON.
    ///
    /// Three ways, all starting from the data document loaded at the bottom of the heap:
    /// - a module whose runtime caches compiled patterns (regular expressions, globs) in its
    ///   builtin caches: setting the heap pointer clears those caches, and `opa_eval` always sets
    ///   it, so such a module is evaluated through the `opa_eval_ctx_*` calls and its heap is
    ///   reset to the post-data heap only once the garbage of earlier evaluations passes
    ///   [`kept_heap_limit`]. Until then a pattern is compiled once, not at every evaluation
    ///   (the caches map a pattern to its compiled form, nothing an input can change). The
    ///   garbage counts against the memory limit like everything in the instance's memory;
    /// - otherwise, from ABI 1.2, the fast path: the input is written just above the post-data
    ///   heap and `opa_eval` parses and evaluates it in one call;
    /// - otherwise the `opa_eval_ctx_*` calls after resetting the heap.
    fn run(&mut self, entrypoint: i32) -> wasmtime::Result<i32> {
        let len = i32::try_from(self.input.len())
            .map_err(|_| wasmtime::Error::msg("input larger than 2 GiB"))?;
        if let Some(keep) = self.keep_heap {
            let kept =
                usize::try_from(self.heap_end.wrapping_sub(self.heap_ptr)).unwrap_or(usize::MAX);
            let reset = kept > keep;
            let result = self.run_ctx(entrypoint, reset);
            if result.is_ok() {
                self.heap_end = self.funcs.heap_ptr_get.call(&mut self.store, ())?;
            }
            return result;
        }
        if let Some(opa_eval) = &self.funcs.opa_eval {
            let input_addr = self.heap_ptr;
            let start = usize::try_from(input_addr)
                .map_err(|_| wasmtime::Error::msg("bad heap pointer"))?;
            let end = start + self.input.len();
            let size = self.memory.data_size(&self.store);
            if end > size {
                let pages = (end - size).div_ceil(WASM_PAGE);
                self.memory
                    .grow(&mut self.store, u64::try_from(pages).unwrap_or(u64::MAX))?;
            }
            match self.memory.data_mut(&mut self.store).get_mut(start..end) {
                Some(target) => target.copy_from_slice(&self.input),
                None => return Err(wasmtime::Error::msg("the input does not fit in memory")),
            }
            opa_eval.call(
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
        } else {
            self.run_ctx(entrypoint, true)
        }
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
struct Slot(Mutex<Option<PooledInstance>>);

fn home_slot() -> usize {
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
