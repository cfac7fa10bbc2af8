//! A compiled module: its imports checked, what it says about itself (ABI version, entrypoints,
//! builtins), a cache of modules by content, and how to make an instance of it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use serde_json::Value;
use wasmtime::{
    Caller, Extern, ExternType, Func, Global, Instance, Memory, MemoryType, Module, Store,
    TypedFunc, Val, ValType,
};

use super::image::{self, Image};
use super::*;
use crate::builtins::{BuiltinContext, HostBuiltin};
use crate::meter;

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
pub(super) const BUILTIN_CACHE_FUNCTION: &str = "opa_builtin_cache_get";

/// How much garbage an instance with builtin caches may keep above its post-data heap between
/// evaluations, at most: 1 MiB, or a sixteenth of the memory limit when that is less.
pub(super) fn kept_heap_limit(limits: Limits) -> usize {
    (limits.memory / 16).min(1 << 20)
}

/// Compiled modules by content, so that opening the same bundle again (one bundle serving an
/// input, a tool-call and an output policy, say) compiles it once. Only weak references: a module
/// no bundle uses any more is freed.
pub(super) type ModuleCache = HashMap<u64, Vec<Weak<CompiledModule>>>;

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
    pub(super) wasm: Box<[u8]>,
    pub(super) module: Module,
    /// Whether the rewrite added the evaluation entry (see [`crate::entry`]).
    pub(super) entry: bool,
    /// What the module's guest has confirmed about reading its results from memory.
    pub(super) walker: Arc<Walker>,
    /// Whether the host may build inputs as the guest's values (see [`probe_images`]).
    pub(super) images: bool,
    /// Whether the host answers the module's `regex.match` calls it can (see
    /// [`probe_regex`]).
    pub(super) regex: bool,
    pub(super) imports: Vec<ImportKind>,
    pub(super) builtin_table: Arc<[Option<&'static HostBuiltin>]>,
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
        let mut entry = false;
        let mut regex = false;
        let module = match meter::rewrite(wasm) {
            Ok(Some(metered)) => {
                entry = metered.entry;
                regex = metered.regex;
                Module::new(engine, &metered.wasm).map_err(|error| {
                    Module::validate(engine, wasm).map_or_else(compile_error, |()| {
                        ModuleError::Compile(format!(
                            "the module with its time limit does not compile: {error:#}"
                        ))
                    })
                })?
            }
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
            entry,
            walker: Arc::default(),
            images: false,
            regex,
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
        let funcs = GuestFuncs::new(&mut store, &instance, abi.1, compiled.entry)
            .map_err(ModuleError::NotOpa)?;
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
        compiled.images = compiled.entry && probe_images(&mut store, &instance, &funcs, memory);
        compiled.regex = compiled.regex && probe_regex(&mut store, &funcs, memory);
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
                host_regex: self.regex,
                regexes: super::regex_match::Regexes::default(),
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
                        if id == meter::REGEX_BUILTIN_ID {
                            return super::instance::host_match(caller, a, b);
                        }
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
        let funcs = GuestFuncs::new(&mut store, &instance, self.info.abi.1, self.entry)?;
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
            walker: Arc::clone(&self.walker),
            image: self.images.then(Image::new),
            input: Vec::new(),
            output: Vec::new(),
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

pub(super) fn read_abi(store: &mut Store<StoreState>, instance: &Instance) -> (i32, i32) {
    let mut global = |name: &str| {
        instance
            .get_global(&mut *store, name)
            .and_then(|global| global.get(&mut *store).i32())
    };
    let major = global("opa_wasm_abi_version").unwrap_or(1);
    let minor = global("opa_wasm_abi_minor_version").unwrap_or(0);
    (major, minor)
}

/// Whether the host may build this module's inputs as its values ([`Image`]): the guest's
/// allocator lays out blocks as the image does, and the probe JSON parsed by the guest and built
/// by the host dumps the same, byte for byte. Leaves the heap where it found it.
fn probe_images(
    store: &mut Store<StoreState>,
    instance: &Instance,
    funcs: &GuestFuncs,
    memory: Memory,
) -> bool {
    let parse = instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, "opa_value_parse")
        .unwrap_or_else(|_| funcs.json_parse.clone());
    let Ok(heap) = funcs.heap_ptr_get.call(&mut *store, ()) else {
        return false;
    };
    let mut probe = || -> wasmtime::Result<bool> {
        let Ok(base) = u32::try_from(heap) else {
            return Ok(false);
        };
        // The allocator: blocks one after another, each a header and its size class.
        funcs.heap_ptr_set.call(&mut *store, heap)?;
        let mut expected = base;
        for size in [1, 20, 100, 7] {
            let addr = funcs.malloc.call(&mut *store, size)?;
            let class = image::class(u32::try_from(size).unwrap_or(u32::MAX));
            let data = memory.data(&*store);
            let header = |offset: u32| -> Option<u32> {
                let at = usize::try_from(u32::try_from(addr).ok()?.checked_sub(image::HEADER)?)
                    .ok()?
                    + offset as usize;
                Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
            };
            if u32::try_from(addr).ok() != Some(expected + image::HEADER)
                || header(0) != Some(class)
                || header(4) != Some(0)
                || header(8) != Some(0)
            {
                return Ok(false);
            }
            expected += image::HEADER + class;
        }
        // The probe, parsed by the guest.
        let json = Image::probe_json();
        let len = i32::try_from(json.len())?;
        funcs.heap_ptr_set.call(&mut *store, heap)?;
        write_at(&mut *store, memory, base, &json)?;
        funcs.heap_ptr_set.call(&mut *store, heap + len)?;
        let parsed = parse.call(&mut *store, (heap, len))?;
        if parsed == 0 {
            return Ok(false);
        }
        let dumped = funcs.json_dump.call(&mut *store, parsed)?;
        let guest = c_str(memory.data(&*store), dumped)
            .map_err(wasmtime::Error::msg)?
            .to_vec();
        // The probe, built by the host.
        let mut image = Image::new();
        let (Some(root), Some(end)) = (image.build(&json, base), image.end()) else {
            return Ok(false);
        };
        funcs.heap_ptr_set.call(&mut *store, heap)?;
        write_at(&mut *store, memory, base, &image.bytes)?;
        funcs.heap_ptr_set.call(&mut *store, i32::try_from(end)?)?;
        let dumped = funcs.json_dump.call(&mut *store, i32::try_from(root)?)?;
        let host = c_str(memory.data(&*store), dumped).map_err(wasmtime::Error::msg)?;
        Ok(host == guest.as_slice())
    };
    let same = probe().unwrap_or(false);
    funcs.heap_ptr_set.call(&mut *store, heap).is_ok() && same
}

/// `(pattern, text, matches)`: what [`probe_regex`] asks the module and the host. Each is one of
/// the places where RE2 and the `regex` crate read a pattern differently unless the host
/// writes RE2's meaning out.
const REGEX_PROBES: [(&str, &str, bool); 10] = [
    (
        r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
        "my SSN is 123-45-6789.",
        true,
    ),
    (r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b", "x123-45-6789", false),
    // ASCII word boundaries: `é` is not a word character for RE2.
    (r"\bé", "xé", true),
    (r"\d+\s\w", "é 12 a", true),
    (r"\d", "\u{0663}", false),
    // RE2's `\s` leaves out the vertical tab.
    (r"^a\S$", "a\u{b}", true),
    (r"(?i)k", "\u{212A}", true),
    (r"a.c", "a\nc", false),
    (r"(?s)a.c", "a\nc", true),
    (r"(?m)^b$", "a\nb", true),
];

/// Whether the module's own `regex.match` and the host's answer alike on [`REGEX_PROBES`] (and
/// the host answered them all). Leaves the heap where it found it.
fn probe_regex(store: &mut Store<StoreState>, funcs: &GuestFuncs, memory: Memory) -> bool {
    let Some(matcher) = funcs.regex_match.clone() else {
        return false;
    };
    let Ok(heap) = funcs.heap_ptr_get.call(&mut *store, ()) else {
        return false;
    };
    let mut probe = || -> wasmtime::Result<bool> {
        for (pattern, text, expected) in REGEX_PROBES {
            let pattern = load_json(&mut *store, funcs, memory, &serde_json::to_vec(pattern)?)?;
            let text = load_json(&mut *store, funcs, memory, &serde_json::to_vec(text)?)?;
            let mut answers = [None, None];
            for (answer, host) in answers.iter_mut().zip([false, true]) {
                store.data_mut().host_regex = host;
                let before = store.data().regexes.decided();
                let value = matcher.call(&mut *store, (pattern, text))?;
                if host && store.data().regexes.decided() == before {
                    return Ok(false);
                }
                *answer = Some(if value == 0 {
                    Value::Null
                } else {
                    dump_value(&mut *store, funcs, memory, value)?
                });
            }
            if answers[0] != answers[1] || answers[1] != Some(Value::Bool(expected)) {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let same = probe().unwrap_or(false);
    store.data_mut().host_regex = same;
    store.data_mut().regexes = super::regex_match::Regexes::default();
    funcs.heap_ptr_set.call(&mut *store, heap).is_ok() && same
}
