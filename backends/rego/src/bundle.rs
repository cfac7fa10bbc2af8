//! [`RegoBundle`]: an opened OPA WebAssembly bundle, ready to evaluate.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{RegoError, RegoEvaluationError};
use crate::input::InputJson;
use crate::runtime::{CompiledModule, InPlace, Limits, ModuleError, Pool, compile_cached};

/// The default time limit of one evaluation.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_millis(100);

/// The default memory limit of one instance's linear memory (64 MiB).
pub const DEFAULT_MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// The largest file a bundle may unpack to (a guard against decompression bombs).
const MAX_ENTRY_SIZE: u64 = 512 * 1024 * 1024;

/// The most a whole bundle may decompress to, skipped entries included.
const MAX_BUNDLE_SIZE: u64 = 1024 * 1024 * 1024;

/// The most entries a bundle may hold.
const MAX_ENTRIES: usize = 10_000;

/// The deepest folder a `data.json` may sit in (`/a/b/.../data.json`): the data document it makes
/// is that deep before its own nesting.
const MAX_DATA_DEPTH: usize = 64;

/// An OPA policy compiled to WebAssembly (`opa build -t wasm`), compiled once and ready to
/// evaluate any of its entrypoints on any JSON input.
///
/// Opening reads the file, compiles the module, checks that it is an OPA module whose builtins
/// this host provides, and sets up a first instance with the data document. Evaluation never
/// reads a file: it takes an idle instance from the bundle's pool (making one when all are busy),
/// evaluates, and puts the instance back, reset to the heap just above its data document (a
/// module that caches compiled regular expressions keeps them, and some garbage, for a while:
/// see the crate documentation).
///
/// Cloning is cheap and clones share the pool. Every evaluation runs under a time limit
/// ([`DEFAULT_TIME_LIMIT`]) and a memory limit ([`DEFAULT_MEMORY_LIMIT`]); see
/// [`with_time_limit`](Self::with_time_limit) and [`with_memory_limit`](Self::with_memory_limit).
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use portcullis_rego::RegoBundle;
/// use serde_json::json;
///
/// let bundle = RegoBundle::open("policies/tools.tar.gz")?;
/// println!("entrypoints: {:?}", bundle.entrypoints());
/// let result = bundle
///     .evaluate("aps/tool_call/decision", &json!({"tool_name": "web_search"}))
///     .await?;
/// assert_eq!(result, Some(json!({"decision": "allow"})));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RegoBundle {
    inner: Arc<BundleInner>,
}

struct BundleInner {
    module: Arc<CompiledModule>,
    path: Option<PathBuf>,
    data: Value,
    data_json: Vec<u8>,
    limits: Limits,
    pool: Pool,
}

impl fmt::Debug for RegoBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegoBundle")
            .field("path", &self.inner.path)
            .field("abi_version", &self.abi_version())
            .field("entrypoints", &self.entrypoints())
            .field("time_limit", &self.inner.limits.time)
            .field("memory_limit", &self.inner.limits.memory)
            .finish_non_exhaustive()
    }
}

impl RegoBundle {
    /// Opens a bundle (`.tar.gz` with `/policy.wasm` and optionally `/data.json`) or a bare
    /// `.wasm` module (its data document is `{}`).
    ///
    /// The kind is taken from the file's first bytes; a file named `*.tar.gz`, `*.tgz` or `*.gz`
    /// must be gzip.
    ///
    /// # Errors
    /// The file cannot be read, is not a gzip tar archive or a WebAssembly module, has no
    /// `/policy.wasm`, bad data, is not an OPA module, or needs builtins this host lacks.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, RegoError> {
        let path = path.as_ref();
        let bytes = read_bundle_file(path)?;
        Self::load(&bytes, Some(path.to_owned()))
    }

    /// Like [`open`](Self::open), from the bytes of a bundle or of a module.
    ///
    /// # Errors
    /// As for [`open`](Self::open), without the file errors.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RegoError> {
        Self::load(bytes, None)
    }

    fn load(bytes: &[u8], path: Option<PathBuf>) -> Result<Self, RegoError> {
        let (wasm, data) = unpack(bytes, &path)?;
        let module = compile_cached(&wasm).map_err(|error| module_error(error, &path))?;
        let limits = Limits {
            time: DEFAULT_TIME_LIMIT,
            memory: DEFAULT_MEMORY_LIMIT,
        };
        Self::build(module, path, data, limits)
    }

    /// Checks a bundle as [`open`](Self::open) does, without compiling its module: the archive,
    /// the data document, the module's validity, its imports, ABI version, entrypoints and
    /// builtins. Milliseconds where opening takes the time of a native compile; for tools that
    /// check bundles before they are used (`portcullis check`).
    ///
    /// Entrypoints and builtins are read from the module's code as OPA's compiler writes it;
    /// for a module whose code has another shape, checking compiles it (as opening would).
    ///
    /// # Errors
    /// Those of [`open`](Self::open), but for a data document too large for the memory limit
    /// (found when the first instance is made, which checking does not do).
    pub fn check(path: impl AsRef<Path>) -> Result<CheckedBundle, RegoError> {
        let path = path.as_ref();
        let bytes = read_bundle_file(path)?;
        Self::check_loaded(&bytes, Some(path.to_owned()))
    }

    /// Like [`check`](Self::check), from the bytes of a bundle or of a module.
    ///
    /// # Errors
    /// As for [`check`](Self::check), without the file errors.
    pub fn check_bytes(bytes: &[u8]) -> Result<CheckedBundle, RegoError> {
        Self::check_loaded(bytes, None)
    }

    fn check_loaded(bytes: &[u8], path: Option<PathBuf>) -> Result<CheckedBundle, RegoError> {
        let (wasm, data) = unpack(bytes, &path)?;
        if !data.is_object() {
            return Err(RegoError::Data {
                path,
                message: "the data document must be a JSON object".to_owned(),
            });
        }
        match crate::validate::read(&wasm).map_err(|error| module_error(error, &path))? {
            Some(info) => Ok(CheckedBundle {
                entrypoints: info.entrypoints,
                abi_version: (info.abi.0.unsigned_abs(), info.abi.1.unsigned_abs()),
                host_builtins: info.builtins,
                compiled: false,
            }),
            None => {
                let bundle = Self::load(bytes, path)?;
                Ok(CheckedBundle {
                    entrypoints: bundle.entrypoints(),
                    abi_version: bundle.abi_version(),
                    host_builtins: bundle.host_builtins(),
                    compiled: true,
                })
            }
        }
    }

    fn build(
        module: Arc<CompiledModule>,
        path: Option<PathBuf>,
        data: Value,
        limits: Limits,
    ) -> Result<Self, RegoError> {
        if !data.is_object() {
            return Err(RegoError::Data {
                path,
                message: "the data document must be a JSON object".to_owned(),
            });
        }
        let data_json = serde_json::to_vec(&data).map_err(|error| RegoError::Data {
            path: path.clone(),
            message: error.to_string(),
        })?;
        let first = module
            .instance(&data_json, limits)
            .map_err(|message| RegoError::Instantiate { message })?;
        Ok(Self {
            inner: Arc::new(BundleInner {
                module,
                path,
                data,
                data_json,
                limits,
                pool: Pool::new(first),
            }),
        })
    }

    fn rebuild(&self, data: Value, limits: Limits) -> Result<Self, RegoError> {
        Self::build(
            Arc::clone(&self.inner.module),
            self.inner.path.clone(),
            data,
            limits,
        )
    }

    /// A bundle with the same compiled module and `data` as its data document (the bundle's own
    /// `data.json` is replaced, not merged). The module is not compiled again; the new bundle has
    /// its own pool of instances.
    ///
    /// # Errors
    /// `data` is not an object, or does not fit in the memory limit.
    pub fn with_data(&self, data: Value) -> Result<Self, RegoError> {
        self.rebuild(data, self.inner.limits)
    }

    /// A bundle like this one whose evaluations stop with
    /// [`RegoEvaluationError::TimeLimit`] after `limit` (granularity: about a millisecond).
    ///
    /// # Errors
    /// Setting up the first instance failed.
    pub fn with_time_limit(&self, limit: Duration) -> Result<Self, RegoError> {
        self.rebuild(
            self.inner.data.clone(),
            Limits {
                time: limit,
                ..self.inner.limits
            },
        )
    }

    /// A bundle like this one whose instances may not grow their memory beyond `bytes`; an
    /// evaluation that needs more fails with [`RegoEvaluationError::MemoryLimit`].
    ///
    /// # Errors
    /// The module's initial memory or the data document does not fit in `bytes`.
    pub fn with_memory_limit(&self, bytes: usize) -> Result<Self, RegoError> {
        self.rebuild(
            self.inner.data.clone(),
            Limits {
                memory: bytes,
                ..self.inner.limits
            },
        )
    }

    /// The module's entrypoints (for example `aps/input/decision`), sorted.
    pub fn entrypoints(&self) -> Vec<String> {
        self.inner
            .module
            .info
            .entrypoints
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The module's OPA WebAssembly ABI version, `(major, minor)`: `(1, 2)` and later have the
    /// single-call `opa_eval` path, earlier ones are evaluated through `opa_eval_ctx_*`.
    pub fn abi_version(&self) -> (u32, u32) {
        let (major, minor) = self.inner.module.info.abi;
        (major.unsigned_abs(), minor.unsigned_abs())
    }

    /// The builtins the module calls on the host, by Rego name.
    pub fn host_builtins(&self) -> Vec<String> {
        self.inner
            .module
            .info
            .builtins
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The data document evaluations see as `data`.
    pub fn data(&self) -> &Value {
        &self.inner.data
    }

    /// The file the bundle was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The time limit of one evaluation.
    pub fn time_limit(&self) -> Duration {
        self.inner.limits.time
    }

    /// The memory limit of one instance, in bytes.
    pub fn memory_limit(&self) -> usize {
        self.inner.limits.memory
    }

    /// How many instances are idle in the pool right now (for monitoring and tests).
    pub fn idle_instances(&self) -> usize {
        self.inner.pool.idle()
    }

    /// Evaluates `entrypoint` on `input`: `Some(value)` is the entrypoint's value, `None` means it
    /// is undefined for this input.
    ///
    /// The evaluation runs on the calling task (it is CPU work of microseconds, bounded by the time
    /// limit) and never reads a file.
    ///
    /// # Errors
    /// An unknown entrypoint, the time or memory limit, a guest trap or `opa_abort` (with the
    /// guest's message), or a failing host builtin.
    pub async fn evaluate(
        &self,
        entrypoint: &str,
        input: &Value,
    ) -> Result<Option<Value>, RegoEvaluationError> {
        self.evaluate_blocking(entrypoint, input)
    }

    /// [`evaluate`](Self::evaluate) without `async`, for synchronous callers; it does not block on
    /// anything but the evaluation itself.
    ///
    /// # Errors
    /// As for [`evaluate`](Self::evaluate).
    pub fn evaluate_blocking(
        &self,
        entrypoint: &str,
        input: &Value,
    ) -> Result<Option<Value>, RegoEvaluationError> {
        let id = self.entrypoint_id(entrypoint)?;
        self.evaluate_raw(id, input, |bytes| {
            let results: Vec<ResultEntry> = serde_json::from_slice(bytes).map_err(|error| {
                RegoEvaluationError::Result(format!(
                    "{error} in {}",
                    String::from_utf8_lossy(bytes)
                ))
            })?;
            Ok(results.into_iter().next().and_then(|entry| entry.result))
        })
    }

    /// The id of an entrypoint.
    pub(crate) fn entrypoint_id(&self, entrypoint: &str) -> Result<i32, RegoEvaluationError> {
        let entrypoints = &self.inner.module.info.entrypoints;
        match entrypoints.binary_search_by(|(name, _)| name.as_str().cmp(entrypoint)) {
            Ok(index) => Ok(entrypoints[index].1),
            // A module without an `entrypoints()` export has the one entrypoint 0.
            Err(_) if entrypoints.is_empty() => Ok(0),
            Err(_) => Err(RegoEvaluationError::UnknownEntrypoint {
                entrypoint: entrypoint.to_owned(),
                available: self.entrypoints(),
            }),
        }
    }

    /// Evaluates entrypoint `id` on `input` and hands the raw JSON result set to `read`.
    pub(crate) fn evaluate_raw<R>(
        &self,
        id: i32,
        input: &impl InputJson,
        read: impl FnOnce(&[u8]) -> Result<R, RegoEvaluationError>,
    ) -> Result<R, RegoEvaluationError> {
        self.evaluate_read(id, input, |_| None, read)
    }

    /// Evaluates entrypoint `id` on `input` and reads the result set in place in the guest's
    /// memory with `in_place`; when that cannot read it (`None`), hands its JSON to `read`.
    pub(crate) fn evaluate_read<R>(
        &self,
        id: i32,
        input: &impl InputJson,
        in_place: impl FnOnce(InPlace<'_>) -> Option<R>,
        read: impl FnOnce(&[u8]) -> Result<R, RegoEvaluationError>,
    ) -> Result<R, RegoEvaluationError> {
        let inner = &*self.inner;
        inner.pool.with_instance(
            || inner.module.instance(&inner.data_json, inner.limits),
            |instance| instance.evaluate(id, input, inner.limits, in_place, read),
        )
    }
}

/// One entry of a result set: `{"result": <value>}`.
#[derive(serde::Deserialize)]
struct ResultEntry {
    result: Option<Value>,
}

/// The bytes of a bundle file; a file named `*.gz` or `*.tgz` must be gzip.
fn read_bundle_file(path: &Path) -> Result<Vec<u8>, RegoError> {
    let bytes = std::fs::read(path).map_err(|source| RegoError::Read {
        path: path.to_owned(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if (name.ends_with(".gz") || name.ends_with(".tgz")) && !is_gzip(&bytes) {
        return Err(RegoError::Archive {
            path: Some(path.to_owned()),
            message: "not gzip-compressed".to_owned(),
        });
    }
    Ok(bytes)
}

fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

struct BundleContents {
    wasm: Vec<u8>,
    data: Value,
}

/// Reads `/policy.wasm` and the data files (`/data.json` and `/<path>/data.json`, merged at
/// `<path>`) of a gzip tar bundle.
///
/// Entry names are taken as paths from the bundle root (`/policy.wasm`, `./policy.wasm` and
/// `policy.wasm` are the same file). A name with a `..` segment, a file the bundle holds twice,
/// more than [`MAX_ENTRIES`] entries, or more than [`MAX_BUNDLE_SIZE`] bytes in all is an error;
/// links, folders and other non-file entries are skipped.
fn read_bundle(bytes: &[u8], path: &Option<PathBuf>) -> Result<BundleContents, RegoError> {
    let archive_error = |message: String| RegoError::Archive {
        path: path.clone(),
        message,
    };
    let decoder = LimitedReader {
        inner: flate2::read::GzDecoder::new(bytes),
        left: MAX_BUNDLE_SIZE,
    };
    let mut archive = tar::Archive::new(decoder);
    let mut wasm = None;
    let mut data = Value::Object(Map::new());
    let mut names = Vec::new();
    let mut read_files = std::collections::HashSet::new();
    let entries = archive
        .entries()
        .map_err(|error| archive_error(error.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|error| archive_error(error.to_string()))?;
        if names.len() >= MAX_ENTRIES {
            return Err(archive_error(format!(
                "the bundle holds more than {MAX_ENTRIES} entries"
            )));
        }
        let raw_name = entry
            .path()
            .map_err(|error| archive_error(error.to_string()))?
            .to_string_lossy()
            .into_owned();
        let name = normalize_entry_name(&raw_name).map_err(&archive_error)?;
        let kind = entry.header().entry_type();
        if !kind.is_file() {
            if !kind.is_dir() {
                names.push(format!("/{name} (not a regular file, skipped)"));
            }
            continue;
        }
        names.push(format!("/{name}"));
        let is_wasm = name == "policy.wasm";
        let is_data = name == "data.json" || name.ends_with("/data.json");
        if !(is_wasm || is_data) {
            continue;
        }
        if !read_files.insert(name.clone()) {
            return Err(archive_error(format!(
                "/{name} appears more than once in the bundle"
            )));
        }
        let read = |entry: tar::Entry<'_, _>| -> Result<Vec<u8>, RegoError> {
            let mut contents = Vec::new();
            entry
                .take(MAX_ENTRY_SIZE + 1)
                .read_to_end(&mut contents)
                .map_err(|error| archive_error(format!("/{name}: {error}")))?;
            if contents.len() as u64 > MAX_ENTRY_SIZE {
                return Err(archive_error(format!(
                    "/{name} is larger than {MAX_ENTRY_SIZE} bytes"
                )));
            }
            Ok(contents)
        };
        if is_wasm {
            wasm = Some(read(entry)?);
        } else {
            let prefix: Vec<&str> = name
                .trim_end_matches("data.json")
                .split('/')
                .filter(|s| !s.is_empty())
                .collect();
            if prefix.len() > MAX_DATA_DEPTH {
                return Err(RegoError::Data {
                    path: path.clone(),
                    message: format!("/{name} is nested more than {MAX_DATA_DEPTH} folders deep"),
                });
            }
            let contents = read(entry)?;
            let value: Value =
                serde_json::from_slice(&contents).map_err(|error| RegoError::Data {
                    path: path.clone(),
                    message: format!("/{name}: {error}"),
                })?;
            merge_at(&mut data, &prefix, value).map_err(|message| RegoError::Data {
                path: path.clone(),
                message: format!("/{name}: {message}"),
            })?;
        }
    }
    match wasm {
        Some(wasm) => Ok(BundleContents { wasm, data }),
        None => Err(RegoError::NoPolicyWasm {
            path: path.clone(),
            entries: names,
        }),
    }
}

/// An entry's name as a path from the bundle root, without leading `/` or `./` and without empty
/// or `.` segments; a `..` segment or a NUL character is an error.
fn normalize_entry_name(raw: &str) -> Result<String, String> {
    if raw.contains('\0') {
        return Err(format!("entry {raw:?} has a NUL character in its name"));
    }
    let mut segments = Vec::new();
    for segment in raw.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                return Err(format!(
                    "entry {raw:?} has a `..` segment: bundle entries must stay inside the bundle"
                ));
            }
            segment => segments.push(segment),
        }
    }
    Ok(segments.join("/"))
}

/// A reader that fails, with a clear message, once more than `left` bytes have been read.
struct LimitedReader<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        match self.left.checked_sub(read as u64) {
            Some(left) => {
                self.left = left;
                Ok(read)
            }
            None => Err(std::io::Error::other(format!(
                "the bundle decompresses to more than {MAX_BUNDLE_SIZE} bytes"
            ))),
        }
    }
}

/// Puts `value` at `prefix` inside `data`, merging objects.
fn merge_at(data: &mut Value, prefix: &[&str], value: Value) -> Result<(), String> {
    let mut target = data;
    for segment in prefix {
        let Value::Object(map) = target else {
            return Err(format!("conflicts with a non-object value at {segment}"));
        };
        target = map
            .entry((*segment).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    match (target, value) {
        (Value::Object(existing), Value::Object(incoming)) => {
            for (key, item) in incoming {
                existing.insert(key, item);
            }
            Ok(())
        }
        (target, value) if prefix.is_empty() => {
            if !value.is_object() {
                return Err("the root data document must be an object".to_owned());
            }
            *target = value;
            Ok(())
        }
        (target, value) => {
            *target = value;
            Ok(())
        }
    }
}

/// The module and the data document of a bundle, or of a bare module (data `{}`).
fn unpack(bytes: &[u8], path: &Option<PathBuf>) -> Result<(Vec<u8>, Value), RegoError> {
    let (wasm, data) = if is_gzip(bytes) {
        let contents = read_bundle(bytes, path)?;
        if !contents.wasm.starts_with(b"\0asm") {
            return Err(RegoError::NotWasm { path: path.clone() });
        }
        (contents.wasm, contents.data)
    } else if bytes.starts_with(b"\0asm") {
        (bytes.to_vec(), Value::Object(Map::new()))
    } else {
        return Err(RegoError::NotWasm { path: path.clone() });
    };
    Ok((wasm, data))
}

/// A module's problem as the bundle's error.
fn module_error(error: ModuleError, path: &Option<PathBuf>) -> RegoError {
    match error {
        ModuleError::Compile(message) => RegoError::Compile {
            path: path.clone(),
            message,
        },
        ModuleError::NotOpa(message) => RegoError::NotOpaModule {
            path: path.clone(),
            message,
        },
        ModuleError::MissingBuiltins(builtins) => RegoError::MissingBuiltins {
            path: path.clone(),
            builtins,
        },
        ModuleError::Setup(message) => RegoError::Instantiate { message },
    }
}

/// What [`RegoBundle::check`] found in a bundle that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedBundle {
    entrypoints: Vec<String>,
    abi_version: (u32, u32),
    host_builtins: Vec<String>,
    compiled: bool,
}

impl CheckedBundle {
    /// The module's entrypoints, sorted (as [`RegoBundle::entrypoints`]).
    pub fn entrypoints(&self) -> &[String] {
        &self.entrypoints
    }

    /// The module's OPA WebAssembly ABI version (as [`RegoBundle::abi_version`]).
    pub fn abi_version(&self) -> (u32, u32) {
        self.abi_version
    }

    /// The builtins the module calls on the host, by Rego name.
    pub fn host_builtins(&self) -> &[String] {
        &self.host_builtins
    }

    /// Whether checking had to compile the module (its code was not the shape OPA's compiler
    /// writes).
    pub fn compiled(&self) -> bool {
        self.compiled
    }

    /// The entrypoint a policy of this bundle would use: `named` when it exists, else the
    /// only entrypoint, else the one ending in `/decision` (as the policy types choose).
    ///
    /// # Errors
    /// [`RegoError::Entrypoint`] when `named` does not exist, or none can be chosen.
    pub fn decision_entrypoint(&self, named: Option<&str>) -> Result<String, RegoError> {
        match named {
            Some(name) if self.entrypoints.iter().any(|e| e == name) => Ok(name.to_owned()),
            Some(name) => Err(RegoError::Entrypoint {
                message: format!("the bundle has no entrypoint {name:?}"),
                available: self.entrypoints.clone(),
            }),
            None => choose_entrypoint_in(self.entrypoints.clone()),
        }
    }
}

/// The entrypoint a policy uses when none is named, among `entrypoints`: the only one, else
/// the one ending in `/decision`.
pub(crate) fn choose_entrypoint_in(entrypoints: Vec<String>) -> Result<String, RegoError> {
    if let [only] = entrypoints.as_slice() {
        return Ok(only.clone());
    }
    let decisions: Vec<&String> = entrypoints
        .iter()
        .filter(|name| name.ends_with("/decision"))
        .collect();
    match decisions.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(RegoError::Entrypoint {
            message: "cannot choose an entrypoint: the bundle has several and none ends in /decision; name one".to_owned(),
            available: entrypoints,
        }),
        _ => Err(RegoError::Entrypoint {
            message: "cannot choose an entrypoint: several end in /decision; name one".to_owned(),
            available: entrypoints,
        }),
    }
}
