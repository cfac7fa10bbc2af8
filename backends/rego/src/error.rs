//! Errors: [`RegoError`] when a bundle or a policy is built, [`RegoEvaluationError`] when one
//! evaluation fails.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Why a bundle or a Rego policy could not be built.
///
/// Every variant says what is wrong and, where there is one, which file.
#[derive(Debug)]
#[non_exhaustive]
pub enum RegoError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bundle (`.tar.gz`) is not a gzip-compressed tar archive, or is damaged.
    Archive {
        /// The file, when the bundle came from one.
        path: Option<PathBuf>,
        /// What went wrong.
        message: String,
    },
    /// The bundle holds no `/policy.wasm`.
    NoPolicyWasm {
        /// The file, when the bundle came from one.
        path: Option<PathBuf>,
        /// The files the bundle does hold.
        entries: Vec<String>,
    },
    /// The bundle's `/data.json` is not valid JSON, or is not an object.
    Data {
        /// The file, when the bundle came from one.
        path: Option<PathBuf>,
        /// What went wrong.
        message: String,
    },
    /// The bytes are neither a gzip bundle nor a WebAssembly module.
    NotWasm {
        /// The file, when the module came from one.
        path: Option<PathBuf>,
    },
    /// The WebAssembly module does not validate or does not compile.
    Compile {
        /// The file, when the module came from one.
        path: Option<PathBuf>,
        /// The compiler's message.
        message: String,
    },
    /// The module is WebAssembly but not an OPA policy module: an import we cannot satisfy or an
    /// export OPA modules always have is missing.
    NotOpaModule {
        /// The file, when the module came from one.
        path: Option<PathBuf>,
        /// What is wrong.
        message: String,
    },
    /// The module calls builtins that this host does not provide.
    MissingBuiltins {
        /// The file, when the module came from one.
        path: Option<PathBuf>,
        /// The builtins' Rego names (for example `http.send`).
        builtins: Vec<String>,
    },
    /// The entrypoint asked for does not exist, or none could be chosen.
    Entrypoint {
        /// What is wrong.
        message: String,
        /// The entrypoints the module has.
        available: Vec<String>,
    },
    /// Setting the module up (instantiation, loading the data document) failed.
    Instantiate {
        /// What went wrong.
        message: String,
    },
}

fn at(path: &Option<PathBuf>) -> String {
    match path {
        Some(path) => format!("{}: ", path.display()),
        None => String::new(),
    }
}

impl fmt::Display for RegoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "{}: cannot read: {source}", path.display()),
            Self::Archive { path, message } => {
                write!(f, "{}not a readable .tar.gz bundle: {message}", at(path))
            }
            Self::NoPolicyWasm { path, entries } => write!(
                f,
                "{}the bundle has no /policy.wasm (it holds: {}); build it with `opa build -t wasm -e <entrypoint>`",
                at(path),
                if entries.is_empty() {
                    "nothing".to_owned()
                } else {
                    entries.join(", ")
                }
            ),
            Self::Data { path, message } => write!(f, "{}bad data document: {message}", at(path)),
            Self::NotWasm { path } => write!(
                f,
                "{}neither a .tar.gz bundle nor a WebAssembly module (no gzip or `\\0asm` header)",
                at(path)
            ),
            Self::Compile { path, message } => {
                write!(f, "{}invalid WebAssembly module: {message}", at(path))
            }
            Self::NotOpaModule { path, message } => {
                write!(f, "{}not an OPA policy module: {message}", at(path))
            }
            Self::MissingBuiltins { path, builtins } => write!(
                f,
                "{}the policy needs builtins this host does not provide: {}",
                at(path),
                builtins.join(", ")
            ),
            Self::Entrypoint { message, available } => write!(
                f,
                "{message} (entrypoints: {})",
                if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                }
            ),
            Self::Instantiate { message } => {
                write!(f, "cannot set up the policy module: {message}")
            }
        }
    }
}

impl std::error::Error for RegoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why one evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegoEvaluationError {
    /// The bundle has no such entrypoint.
    UnknownEntrypoint {
        /// The name asked for.
        entrypoint: String,
        /// The entrypoints the module has.
        available: Vec<String>,
    },
    /// The input cannot be handed to the guest: its JSON is larger than a guest can take.
    Input(String),
    /// The evaluation ran longer than the bundle's time limit.
    TimeLimit(Duration),
    /// The evaluation needed more memory than the bundle's memory limit.
    MemoryLimit {
        /// The limit in bytes.
        limit: usize,
        /// What the guest reported, if anything.
        detail: String,
    },
    /// The guest called `opa_abort` (for example a conflict between rule values or a failed
    /// allocation), with its message.
    Aborted(String),
    /// The guest trapped (for example an `unreachable` instruction or a stack overflow).
    Trap(String),
    /// A host builtin failed.
    Builtin {
        /// The builtin's Rego name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// A new instance could not be set up (all pooled ones were busy).
    Setup(String),
    /// The module returned something that is not the JSON it should be.
    Result(String),
    /// The entrypoint was undefined for this input while a decision was required.
    NoDecision {
        /// The entrypoint.
        entrypoint: String,
    },
    /// The entrypoint's value cannot be read as a decision.
    BadDecision {
        /// The entrypoint.
        entrypoint: String,
        /// Why.
        message: String,
    },
}

impl fmt::Display for RegoEvaluationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownEntrypoint {
                entrypoint,
                available,
            } => write!(
                f,
                "no entrypoint {entrypoint:?} in this bundle (entrypoints: {})",
                available.join(", ")
            ),
            Self::Input(message) => write!(f, "cannot hand the input to the policy: {message}"),
            Self::TimeLimit(limit) => {
                write!(f, "evaluation exceeded the time limit of {limit:?}")
            }
            Self::MemoryLimit { limit, detail } => {
                write!(f, "evaluation exceeded the memory limit of {limit} bytes")?;
                if !detail.is_empty() {
                    write!(f, " ({detail})")?;
                }
                Ok(())
            }
            Self::Aborted(message) => write!(f, "policy aborted: {message}"),
            Self::Trap(message) => write!(f, "policy trapped: {message}"),
            Self::Builtin { name, message } => write!(f, "builtin {name} failed: {message}"),
            Self::Setup(message) => write!(f, "cannot set up a policy instance: {message}"),
            Self::Result(message) => write!(f, "unreadable evaluation result: {message}"),
            Self::NoDecision { entrypoint } => {
                write!(
                    f,
                    "policy produced no decision ({entrypoint} is undefined for this input)"
                )
            }
            Self::BadDecision {
                entrypoint,
                message,
            } => {
                write!(f, "the value of {entrypoint} is not a decision: {message}")
            }
        }
    }
}

impl std::error::Error for RegoEvaluationError {}
