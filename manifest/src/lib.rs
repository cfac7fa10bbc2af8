//! Policy sets as files: a YAML manifest that people who write policies, not Rust, own.
//!
//! ```yaml
//! on_error: deny                  # deny (default) | allow
//! input:                          # the policies of a point, in order
//!   - dsl: rules/no_ssn.json      # a JSON rule; id: the file stem
//!   - dsl: rules/input/           # a folder: every *.json in it, sorted by name
//!   - rego: bundles/pii.tar.gz    # an OPA WebAssembly bundle; id: the file name without .tar.gz/.wasm
//!     entrypoint: aps/input/decision
//!   - rego: https://bundles.example.com/pii.tar.gz   # a bundle from any HTTP server or bucket,
//!     id: pii-remote                # polled with If-None-Match (default id: the file name)
//!     poll: 30s                     # how often (default 1m)
//!     verify: release               # the key under `keys` that must have signed it (optional)
//!     scope: write                  # the scope its signature must carry (optional)
//!     bearer_token_env: BUNDLE_TOKEN  # a token for the bundle server (optional)
//!   - rego_server: http://localhost:8181    # a policy server speaking the OPA REST API
//!     package: portcullis/input
//!     id: pii
//!   - cedar: policies/tools.cedar           # Cedar policies (feature `cedar`); id: the file stem
//!     schema: policies/agent.cedarschema    # optional: policies and requests are validated
//!     entities: policies/entities.json      # optional: agents, groups, tools (Cedar's JSON)
//!   - http: https://policy.internal         # a remote /engine/evaluate endpoint
//!     id: pii-remote
//!     bearer_token_env: POLICY_TOKEN        # secrets come from the environment, never the file
//!     timeout: 500ms
//!   - code: no_shouting           # registered by name from Rust (CodeRegistry)
//!     monitor: true               # any entry: monitor, deadline
//!     deadline: 50ms
//! tool_call: []
//! tool_result: []                 # what tools returned, before the model reads it
//! output: []
//! include:                        # policy-set files (APS policy-set schema)
//!   - aps/policies.json
//! settings:                       # per point: concurrent, monitor, policy_deadline, call_deadline;
//!   input: { concurrent: true, call_deadline: 300ms }   # output also stream_batch, stream_checkpoint
//! audit:                         # where audit records go (any combination)
//!   jsonl: logs/audit.jsonl       # one audit record per line (made 0600)
//!   on_failure: deny              # a call whose record cannot be written fails (default: allow)
//!   otlp: http://localhost:4318   # spans over OTLP/HTTP to a collector (feature `otel`)
//! sessions: { store: memory, ttl: 24h }   # or redis://host:port/db, rediss:// for TLS
//!                                         # (feature `redis`), with `password_env: VAR`;
//!                                         # memory also takes `capacity: 100000`
//! approvals: { timeout: 5m }              # how long an approval resolver is waited for
//! keys:                           # keys that verify bundle signatures (OPA's .signatures.json)
//!   release: { algorithm: RS256, file: keys/release.pub.pem }   # RS256 | ES256: PEM public key
//!   shared: { algorithm: HS256, secret_env: BUNDLE_SECRET }     # HS256: secret from the environment
//! ```
//!
//! Relative paths are relative to the manifest's folder. Values are never interpolated
//! (`${VAR}` is an error): secrets come from the environment through the `*_env` keys.
//! An empty file is an error, not a set without policies (a file caught half-written would
//! otherwise allow everything): write `{}` for that.
//!
//! [`Manifest::load`] reads the manifest, opens everything it names and builds a
//! [`PolicySet`](portcullis_engine::PolicySet). Every problem of every file is reported at
//! once ([`ManifestErrors`]), each with its file, line and column, and a suggestion for a
//! misspelled key. Durations are written `500ms`, `30s`, `5m`, `24h`.
//!
//! Entries of an `include` file go to the points of their `applies_to` (the specification's
//! three, `input`, `tool_call` and `output`, when absent: `tool_result` only when named), after the points' own policies; a `tool_call` entry with `tools` decides only for
//! those tools and allows any other without evaluating. Their ids are
//! `<file stem>#<index>`, the index counted from 0 in file order.
//!
//! [`LoadedManifest::into_engine_builder`] goes one step further: an engine builder with the
//! set and everything else the manifest configures (the session store, the approval time-out,
//! the audit sinks), each opened there; one that cannot be opened is an error with its place
//! in the manifest. [`AuditExport`] flushes and shuts down the span export on exit.
//!
//! ```no_run
//! # async fn run() {
//! use portcullis_manifest::{CodeRegistry, Manifest};
//!
//! let loaded = match Manifest::load("portcullis.yaml", &CodeRegistry::new()) {
//!     Ok(loaded) => loaded,
//!     Err(errors) => {
//!         for diagnostic in errors.iter() {
//!             eprintln!("{diagnostic}");
//!         }
//!         std::process::exit(1);
//!     }
//! };
//! let export = loaded.audit_export();
//! let engine = match loaded.into_engine_builder().await {
//!     Ok(builder) => builder.build(),
//!     Err(errors) => {
//!         eprintln!("{errors}");
//!         std::process::exit(1);
//!     }
//! };
//! // ... evaluate ...
//! drop(engine);
//! if let Err(error) = export.shutdown().await {
//!     eprintln!("{error}");
//! }
//! # }
//! ```
//!
//! An application that builds its engine itself takes the set alone with
//! [`LoadedManifest::into_policy_set`].
//!
//! [`ManifestWatcher`] reloads a manifest when one of its files changes and swaps the new set
//! into a running engine; a reload that fails keeps the set in use.
//!
//! **Bundles from URLs** (feature `rego`). A `rego:` entry that is an `http://` or `https://`
//! URL is fetched from any HTTP server or object store when the manifest loads, and kept with
//! its `ETag`; [`ManifestWatcher`] asks the URL again every `poll` interval with
//! `If-None-Match`. A `304` keeps the bundle in use; a new bundle is verified and opened before
//! it replaces the old one, and a bundle that fails (an error status, garbage, a bad
//! signature) is a failed reload that keeps the set in use.
//!
//! **Signed bundles**, in OPA's format: a `.signatures.json` file in the bundle,
//! `{"signatures": ["<JWT>"]}`, whose token's payload lists every other file of the bundle,
//! `{"files": [{"name": "data.json", "hash": "<hex>", "algorithm": "SHA-256"}, ..], "scope"?: ..}`.
//! With `verify: <key>` a bundle is accepted only when the token's signature verifies with that
//! key of `keys` (its `alg` must be the key's algorithm: RS256 or ES256 with a PEM public key or
//! certificate `file`, HS256 with a secret from `secret_env`), its `scope` is the entry's
//! `scope` (when one is set), its `files` are exactly the bundle's files but
//! `.signatures.json`, and every file has its listed hash (SHA-256, SHA-384 or SHA-512; JSON
//! files, `.manifest` included, hashed in canonical form: no whitespace, object keys sorted).
//! A bundle without `.signatures.json` under `verify`, or with one and no `verify`, is refused.
//!
//! Backends beyond the JSON rules come with the features `rego`, `rego-rest`, `http` and `cedar`; a
//! manifest naming one this build lacks gets a load error that names the feature. Sessions in
//! Redis need the feature `redis`, span export the feature `otel`: without them the manifest
//! loads with a warning and [`LoadedManifest::into_engine_builder`] refuses it.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod assemble;
mod audit;
mod build;
#[cfg(feature = "cedar")]
mod cedar;
mod diagnostic;
mod model;
#[cfg(feature = "otel")]
mod otlp;
mod reader;
mod remote;
mod signing;
mod watch;
pub mod yaml;

pub use assemble::{AuditExport, AuditExportError};
pub use audit::{
    AUDIT_QUEUE_BYTES, AUDIT_QUEUE_RECORDS, AuditFailure, JsonlAuditLog, audit_write_failures,
};
pub use build::{CodeRegistry, LoadedManifest, bundle_id};
#[cfg(feature = "cedar")]
pub use cedar::cedar_file_diagnostics;
pub use diagnostic::{Diagnostic, ManifestErrors, Severity};
pub use model::{
    ApprovalSettings, ApprovalStore, AuditSettings, Include, Manifest, PointOptions, PolicyEntry,
    PolicySource, SessionSettings, SessionStore, Settings,
};
pub use portcullis_engine::duration::parse_duration;
pub use signing::{BundleKey, KeySource, SigningAlgorithm};
pub use watch::{ManifestWatcher, ManifestWatcherBuilder, ReloadOutcome, reload};
pub use yaml::Position;

/// Turns a DSL rule's problems into diagnostics with line and column, for tools that check
/// rule files on their own (the checker names a JSON path; the rule's text says where it is).
pub fn rule_diagnostics(
    path: &std::path::Path,
    source: &str,
    problems: &portcullis_dsl::Problems,
) -> Vec<Diagnostic> {
    let mut report = diagnostic::Report::default();
    build::rule_problems(&mut report, path, source, problems);
    report.diagnostics
}

/// Turns the warnings of a DSL rule that loads into diagnostics with line and column, as
/// [`rule_diagnostics`] does for a rule's problems.
pub fn rule_warning_diagnostics(
    path: &std::path::Path,
    source: &str,
    warnings: &[portcullis_dsl::Warning],
) -> Vec<Diagnostic> {
    let mut report = diagnostic::Report::default();
    build::rule_findings(&mut report, path, source, warnings, Severity::Warning);
    report.diagnostics
}
