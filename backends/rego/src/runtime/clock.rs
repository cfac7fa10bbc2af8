//! The clock of the time limit: the process-wide wasmtime engine, and a thread that advances a
//! tick in a shared page every instance imports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use wasmtime::{Config, Engine, Instance, MemoryType, Module, SharedMemory, Store};

use crate::meter;

/// How often the clock advances: the granularity of the time limit.
pub(super) const TICK: Duration = Duration::from_millis(1);

/// The process-wide wasmtime engine and the clock of the time limit.
pub(super) struct Runtime {
    pub(super) engine: Engine,
    pub(super) clock: SharedMemory,
    /// The clock's current tick, as the host reads it (the guest reads the shared memory).
    pub(super) now: Arc<AtomicU64>,
}

/// The process-wide runtime, made on first use: the engine, and the clock with its thread.
///
/// The engine has no epoch interruption or fuel: the time limit is checked by the modules
/// themselves (see [`crate::meter`]), against a clock in a shared memory of one page. Shared
/// memories are enabled for that page only: [`meter::instrument`] refuses modules that define
/// one, and [`check_imports`] refuses a shared `env.memory`.
pub(super) fn runtime() -> Result<&'static Runtime, String> {
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
pub(super) fn start_clock(
    engine: &Engine,
    clock: &SharedMemory,
    now: Arc<AtomicU64>,
) -> Result<(), String> {
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
pub(super) fn clock_module() -> Vec<u8> {
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
pub(super) fn now() -> u64 {
    runtime().map_or(0, |runtime| runtime.now.load(Ordering::Relaxed))
}
