//! Rego policies for the Portcullis policy engine: compiled to WebAssembly by the Open Policy
//! Agent and evaluated in process on [wasmtime](https://wasmtime.dev) (feature `wasm`, the
//! default), or evaluated by a policy server speaking the Open Policy Agent REST API
//! ([`server`], feature `server`). Both read a Rego document as a decision the same way
//! ([`decision`]), so a policy decides the same in process and on a server. Without `wasm`,
//! the crate builds no WebAssembly runtime.
//!
//! The rest of this page is about the in-process backend.
//!
//! Build a bundle with `opa build -t wasm -e aps/input/decision policy.rego -o bundle.tar.gz`
//! (one `-e` per entrypoint), then:
//!
//! - [`RegoInputPolicy`], [`RegoToolCallPolicy`], [`RegoOutputPolicy`]: `::new(id, bundle_path)`
//!   makes the bundle's decision entrypoint a policy of that interception point. The context is the
//!   input; the entrypoint's value is the decision (an object such as
//!   `{"decision": "deny", "reason": "..."}`, a bare decision name, or a boolean).
//! - [`RegoBundle`]: the lower level, for any OPA module and any JSON input: open a bundle or a
//!   bare `.wasm`, list its entrypoints, replace its data document, evaluate an entrypoint to
//!   `Option<Value>` (`None` when undefined).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_engine::{EngineError, Message, Metadata, PolicyEngine, PolicySet, Role, ToolCallContext};
//! use portcullis_rego::RegoToolCallPolicy;
//!
//! # let fixtures = std::env::var("PORTCULLIS_OPA_FIXTURES").unwrap_or_else(|_| "../../../shared/fixtures".into());
//! # let bundle_path = format!("{fixtures}/rego-wasm/approved-tools.tar.gz");
//! // approved-tools.tar.gz allows web_search, read_file and summarize, and nothing else.
//! let policy = RegoToolCallPolicy::new("approved-tools", &bundle_path)?;
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().tool_call(policy).build())
//!     .build();
//!
//! let call = |tool: &str| ToolCallContext::new(
//!     tool,
//!     serde_json::Map::new(),
//!     Message::new(Role::Assistant, "calling a tool"),
//!     Metadata::new("agent-1", "session-1"),
//! );
//! assert!(engine.evaluate_tool_call(&call("web_search")).await.is_ok());
//! match engine.evaluate_tool_call(&call("delete_database")).await {
//!     Err(EngineError::Denied(denial)) => {
//!         assert_eq!(denial.reason(), Some("Tool is not in the approved list."));
//!     }
//!     other => panic!("expected a denial, got {other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! # How it runs
//! The module is compiled once, when the bundle is opened; missing host builtins, a module that is
//! not an OPA module, or a bundle without `/policy.wasm` are errors then ([`RegoError`]), never at
//! evaluation. Each bundle keeps a pool of instances whose data document is already loaded;
//! an evaluation takes an idle one (or makes one when all are busy), runs, and gives it back
//! reset to the heap just above its data. The module gets one more export when it is compiled,
//! an evaluation entry built from its own `opa_eval_ctx_*` functions, so that an evaluation is
//! one call; the host lays the input out in guest memory as the values the module's JSON parser
//! would make, and reads the result set from guest memory (a decision of the common shapes
//! straight into a `PolicyDecision`, any other result as JSON), once a probe at compile time has
//! shown the module's values are laid out as the host expects (otherwise the module's own
//! parser and JSON dump do it, as do `opa_eval` or `opa_eval_ctx_*` for a module without the
//! exports the entry needs). Modules whose runtime caches
//! compiled patterns (`regex.*` and `glob.match` compile inside the module) are the exception:
//! they go through `opa_eval_ctx_*` and keep their heap, and with it the compiled patterns,
//! between evaluations until the garbage passes 1 MiB (or a sixteenth of the memory limit), and
//! only then are reset; compiling a pattern again at every evaluation would cost most of it.
//!
//! Every evaluation is bounded: a time limit (default 100 ms) and a memory limit per instance
//! (default 64 MiB). Exceeding either, a guest trap, or `opa_abort` is a
//! [`RegoEvaluationError`] carrying the guest's message; the failed instance is dropped.
//!
//! The time limit is built into the module when it is compiled: at the start of every loop
//! iteration and at the entry of every function that can call itself (directly, through others
//! or through the table), the code compares a clock with the evaluation's deadline and traps
//! once it has passed. A process-wide thread advances the clock every millisecond, in a shared
//! memory of one page that every instance imports; the host sets the deadline before each
//! evaluation, and checks it again after every host builtin. Those are the only places code can
//! repeat, so no module runs past its limit by more than two ticks of the clock (while its
//! thread gets to run) and one pass through straight-line code. A module that defines a shared
//! memory or waits on one (`memory.atomic.wait32/64`) is refused when it is opened: a wait could
//! outlast any deadline.
//!
//! # Reading the decision
//! The entrypoint's value is read by the reader both Rego backends share
//! ([`decision`]), so a policy decides the same in process and on a policy server:
//! a decision object, a string naming the decision, a boolean (`false` denies), or the document of
//! a whole package (`opa build -e aps/input`), whose `decision` rule is completed by its sibling
//! rules (`reason`, `redactions`, …). An undefined entrypoint is an evaluation error.
//!
//! # Host builtins
//! Builtins that OPA leaves to the host are provided for the names in [`HOST_BUILTINS`], and
//! answer as OPA v1.20 does: `sprintf` is Go's formatter as OPA feeds it; the time builtins use
//! IANA zones from a built-in database and Go's layouts; regular expressions mean what they mean
//! in Go's RE2 (ASCII `\d`, `\w`, `\s`; repetition counts up to 1000); JSON patches and
//! schemas (a schema never loads anything outside itself), JWTs, hashes, HMACs, CIDRs, units
//! and UUIDs are the field's crates; `strings.render_template` runs Go's `text/template`
//! language as OPA does (numbers of the variables are Go's `json.Number`);
//! `regex.globs_match` follows OPA's intersection algorithm. A builtin without a value for its
//! operands (`uuid.parse("nope")`) leaves the expression undefined, as in OPA.
//!
//! # OPA's quirks, followed on purpose
//! A policy ported from OPA gets OPA's answers, including where OPA departs from the standards:
//! - `yaml.unmarshal` and `yaml.is_valid` read YAML 1.1, as OPA's go-yaml v2 does: plain `yes`,
//!   `no`, `on`, `off`, `y` and `n` are booleans (`"[x, y]"` gives `["x", true]`), `0123` is
//!   octal, `1_000` is a thousand, keys that are not strings become their text.
//! - `yaml.marshal` writes as go-yaml v2 does: strings YAML 1.1 would read otherwise are
//!   double-quoted (`"yes"`, `"0123"`, `"1:30"`), keys sorted with runs of digits by value,
//!   lines folded at 80 columns.
//! - `semver.is_valid` and `semver.compare` use OPA's own parser, laxer than SemVer: a leading
//!   `v` is dropped and the numbers may have leading zeros (`"01.2.3"` is valid). Where OPA never
//!   returns (comparing pre-releases such as `rc.01` and `rc.1`, equal by value but not as
//!   text), this host answers that they are equal.
//! - `net.cidr_merge` reads a bare IPv4 address as the address with its classful mask (Go's
//!   `DefaultMask`: `"10.0.0.1"` stands for `10.0.0.0/8`), and writes one that merged with
//!   nothing unmasked (`"10.0.0.1/8"`); a bare IPv6 address is an error.
//! - `strings.render_template` renders a missing key as `<undefined>` rather than failing: OPA
//!   replaces every `<no value>` of Go's output with `<undefined>`, even in the template's text.
//! - `net.cidr_contains` and `net.cidr_intersects` are not host builtins: OPA compiles them
//!   into the module, which never asks the host for them.
//!
//! A builtin runs on the host, outside the guest's memory and clock checks, so it bounds itself
//! by the evaluation's limits: it charges what it allocates against the memory limit and checks
//! the deadline while it loops. Passing either is the same [`RegoEvaluationError`] as when the
//! guest passes it (`MemoryLimit`, `TimeLimit`); no operand makes a builtin panic.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod decision;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod server;

#[cfg(feature = "wasm")]
mod builtins;
#[cfg(feature = "wasm")]
mod bundle;
#[cfg(feature = "wasm")]
mod entry;
#[cfg(feature = "wasm")]
mod error;
#[cfg(feature = "wasm")]
mod input;
#[cfg(feature = "wasm")]
mod meter;
#[cfg(feature = "wasm")]
mod policy;
#[cfg(feature = "wasm")]
mod runtime;
#[cfg(feature = "wasm")]
mod validate;

#[cfg(feature = "wasm")]
pub use builtins::HOST_BUILTINS;
#[cfg(feature = "wasm")]
pub use bundle::{CheckedBundle, DEFAULT_MEMORY_LIMIT, DEFAULT_TIME_LIMIT, RegoBundle};
#[cfg(feature = "wasm")]
pub use error::{RegoError, RegoEvaluationError};
#[cfg(feature = "wasm")]
pub use policy::{
    RegoInputPolicy, RegoOutputPolicy, RegoPolicy, RegoToolCallPolicy, RegoToolResultPolicy,
};

/// Whether the JSON Web Token `token` is signed by `key` with `algorithm`: `RS256` or `ES256`
/// with a PEM public key, a PEM certificate or a JWK (set), `HS256` with the shared secret.
/// The same checks as the `io.jwt.verify_*` builtins, for hosts that verify tokens themselves
/// (the signatures of bundles). Only the signature is checked, no claim.
///
/// # Errors
/// The algorithm is not one of those three, or the token or the key cannot be read.
#[cfg(feature = "wasm")]
pub fn verify_jwt(token: &str, algorithm: &str, key: &str) -> Result<bool, String> {
    builtins::jwt::verify_signature(token, algorithm, key)
}

#[cfg(feature = "wasm")]
const _: () = {
    const fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<RegoBundle>();
    assert_send_sync::<RegoInputPolicy>();
    assert_send_sync::<RegoToolCallPolicy>();
    assert_send_sync::<RegoOutputPolicy>();
    assert_send_sync::<RegoError>();
    assert_send_sync::<RegoEvaluationError>();
};
