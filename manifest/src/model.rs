//! The manifest as written: every key read and checked, nothing opened yet.

use std::path::{Path, PathBuf};
use std::time::Duration;

use portcullis_engine::{InterceptionPoint, OnError};

use crate::diagnostic::{Report, closest};
use crate::reader::Reader;
use crate::yaml::{Node, NodeValue, Position};

/// A manifest as written, checked key by key (nothing it names is opened yet).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    /// The folder relative paths are resolved against (the manifest's own).
    pub base: PathBuf,
    /// `on_error`: what happens when a policy cannot be evaluated.
    pub on_error: OnError,
    /// The `input` policies, in order.
    pub input: Vec<PolicyEntry>,
    /// The `tool_call` policies, in order.
    pub tool_call: Vec<PolicyEntry>,
    /// The `tool_result` policies, in order.
    pub tool_result: Vec<PolicyEntry>,
    /// The `output` policies, in order.
    pub output: Vec<PolicyEntry>,
    /// `include`: policy-set files whose entries go after the point's own policies.
    pub include: Vec<Include>,
    /// `settings`, per point.
    pub settings: Settings,
    /// `audit`: where audit records go.
    pub audit: AuditSettings,
    /// `sessions`: where the engine keeps per-session labels and counters.
    pub sessions: Option<SessionSettings>,
    /// `approvals`: how the engine waits for approvals.
    pub approvals: Option<ApprovalSettings>,
    /// `keys`: the keys that verify the signatures of bundles, by name.
    pub keys: Vec<crate::BundleKey>,
}

impl Manifest {
    /// The entries of one point.
    pub fn entries(&self, point: InterceptionPoint) -> &[PolicyEntry] {
        match point {
            InterceptionPoint::Input => &self.input,
            InterceptionPoint::ToolCall => &self.tool_call,
            InterceptionPoint::ToolResult => &self.tool_result,
            InterceptionPoint::Output => &self.output,
        }
    }

    fn entries_mut(&mut self, point: InterceptionPoint) -> &mut Vec<PolicyEntry> {
        match point {
            InterceptionPoint::Input => &mut self.input,
            InterceptionPoint::ToolCall => &mut self.tool_call,
            InterceptionPoint::ToolResult => &mut self.tool_result,
            InterceptionPoint::Output => &mut self.output,
        }
    }
}

/// One policy of a point.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PolicyEntry {
    /// Where the policy comes from.
    pub source: PolicySource,
    /// `monitor: true`: evaluated and audited, never enforced.
    pub monitor: bool,
    /// `deadline`: how long one evaluation may take.
    pub deadline: Option<Duration>,
    /// Where the entry is in the manifest.
    pub position: Position,
}

/// Where a policy comes from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PolicySource {
    /// `dsl: <file or folder>`: a JSON rule (id: the file stem), or every `*.json` of a
    /// folder, sorted by name.
    Dsl {
        /// The file or folder, resolved against the manifest's folder.
        path: PathBuf,
    },
    /// `rego: <bundle>`: an OPA WebAssembly bundle (`.tar.gz`) or module (`.wasm`); id: the
    /// file name without those endings.
    Rego {
        /// The bundle, resolved against the manifest's folder.
        path: PathBuf,
        /// `entrypoint`, when the bundle's decision entrypoint must be named.
        entrypoint: Option<String>,
    },
    /// `rego: <http(s) URL>`: an OPA WebAssembly bundle served by a bundle server or an object
    /// store, polled with `If-None-Match` and replaced when a new one opens (and verifies).
    RegoUrl {
        /// The bundle's URL.
        url: String,
        /// `id`: the policy's id (default: the URL's file name without `.tar.gz`).
        id: String,
        /// `entrypoint`, when the bundle's decision entrypoint must be named.
        entrypoint: Option<String>,
        /// `poll`: how often the URL is asked for a new bundle (default: one minute).
        poll: Duration,
        /// `verify`: the name of the key (under `keys`) that must have signed the bundle.
        verify: Option<String>,
        /// `scope`: the scope the signature must carry.
        scope: Option<String>,
        /// `bearer_token_env`: the environment variable holding a token for the bundle server.
        bearer_token_env: Option<String>,
    },
    /// `rego_server: <url>`: a policy server speaking the OPA REST API.
    RegoServer {
        /// The server's base URL.
        url: String,
        /// `package`: the package whose `decision` is evaluated.
        package: String,
        /// `id`: the policy's id.
        id: String,
    },
    /// `http: <url>`: a remote `/engine/evaluate` endpoint.
    Http {
        /// The base URL.
        url: String,
        /// `id`: the policy's id.
        id: String,
        /// `bearer_token_env`: the environment variable holding the bearer token.
        bearer_token_env: Option<String>,
        /// `timeout`: the request time-out.
        timeout: Option<Duration>,
    },
    /// `cedar: <file>`: Cedar policies (id: the file stem), with an optional `schema` (Cedar's
    /// schema language, or its JSON format) that policies and requests are validated against
    /// and optional `entities` (Cedar's JSON entity format).
    Cedar {
        /// The policies, resolved against the manifest's folder.
        path: PathBuf,
        /// `schema`, resolved against the manifest's folder.
        schema: Option<PathBuf>,
        /// `entities`, resolved against the manifest's folder.
        entities: Option<PathBuf>,
    },
    /// `code: <name>`: a policy registered from Rust under this name.
    Code {
        /// The name it was registered under.
        name: String,
    },
}

/// One `include` entry: a policy-set file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Include {
    /// The file, resolved against the manifest's folder.
    pub path: PathBuf,
    /// Where the entry is in the manifest.
    pub position: Position,
}

/// The `settings` of every point.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Settings {
    /// `settings.input`.
    pub input: PointOptions,
    /// `settings.tool_call`.
    pub tool_call: PointOptions,
    /// `settings.tool_result`.
    pub tool_result: PointOptions,
    /// `settings.output`.
    pub output: PointOptions,
}

impl Settings {
    /// The settings of one point.
    pub fn point(&self, point: InterceptionPoint) -> &PointOptions {
        match point {
            InterceptionPoint::Input => &self.input,
            InterceptionPoint::ToolCall => &self.tool_call,
            InterceptionPoint::ToolResult => &self.tool_result,
            InterceptionPoint::Output => &self.output,
        }
    }
}

/// How one point runs (the engine's point settings, as written).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct PointOptions {
    /// `concurrent: true`: the point's policies start at once.
    pub concurrent: bool,
    /// `monitor: true`: every policy of the point runs in monitor mode.
    pub monitor: bool,
    /// `policy_deadline`: the deadline of each policy that sets none.
    pub policy_deadline: Option<Duration>,
    /// `call_deadline`: the deadline of the whole point.
    pub call_deadline: Option<Duration>,
    /// `stream_batch` (output only): bytes gathered before streaming rules run again.
    pub stream_batch: Option<usize>,
    /// `stream_checkpoint` (output only): characters between checkpoint evaluations.
    pub stream_checkpoint: Option<usize>,
}

/// The `audit` section.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct AuditSettings {
    /// `jsonl`: the file audit records are appended to, one per line.
    pub jsonl: Option<PathBuf>,
    /// Where `jsonl`'s value is in the manifest.
    pub jsonl_position: Option<Position>,
    /// `otlp`: the OTLP/HTTP endpoint of a collector (`http://host:4318`; spans are posted to
    /// its `/v1/traces`).
    pub otlp: Option<String>,
    /// Where `otlp`'s value is in the manifest.
    pub otlp_position: Option<Position>,
    /// `on_failure`: what a call whose record the `jsonl` log cannot write does: `allow`
    /// (the default) goes on, `deny` fails.
    pub on_failure: crate::AuditFailure,
}

/// The `sessions` section.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionSettings {
    /// `store`: `memory` or a `redis://` URL.
    pub store: SessionStore,
    /// `ttl`: how long a session's state is kept after its last update.
    pub ttl: Option<Duration>,
    /// `capacity` (`memory` only): the most sessions kept; the unlabelled one updated longest
    /// ago is evicted to make room (a labelled one never is: when only labelled sessions
    /// remain, a new session is refused).
    pub capacity: Option<usize>,
    /// `password_env` (Redis only): the environment variable holding the Redis password
    /// (the URL itself must not hold credentials).
    pub password_env: Option<String>,
    /// Where the `sessions` section is in the manifest (its `store` value when it has one).
    pub position: Position,
}

/// Where session state is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStore {
    /// In the process.
    Memory,
    /// In Redis, at this URL.
    Redis(String),
}

/// The `approvals` section.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ApprovalSettings {
    /// `store`: `memory` (the default) or a `redis://` URL: where pending requests, grants
    /// and refusals are kept (a Redis store is shared by every replica and proxy naming it).
    pub store: ApprovalStore,
    /// `timeout`: how long an approval is waited for (the resolver's answer, and a request
    /// nobody answered, which waits in the store this long).
    pub timeout: Option<Duration>,
    /// `password_env` (Redis only): the environment variable holding the Redis password.
    pub password_env: Option<String>,
    /// Where the `approvals` section is in the manifest.
    pub position: Position,
}

/// Where approvals are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalStore {
    /// In the process.
    Memory,
    /// In Redis, at this URL.
    Redis(String),
}

/// A section's `store`: `Some(None)` for `memory`, `Some(Some(url))` for a Redis URL without
/// credentials, `None` (reported) for anything else.
fn read_store(reader: &mut Reader<'_>, value: &Node, section: &str) -> Option<Option<String>> {
    let store = reader.string(value, &format!("`{section}.store`"))?;
    if store == "memory" {
        return Some(None);
    }
    if !(store.starts_with("redis://") || store.starts_with("rediss://")) {
        let diagnostic = reader
            .error(
                value.position,
                format!("`{section}.store` must be `memory` or a redis:// URL"),
            )
            .with_help("for example `memory` or `redis://127.0.0.1:6379/0`");
        reader.push(diagnostic);
        return None;
    }
    if url_has_credentials(&store) {
        let diagnostic = reader
            .error(
                value.position,
                format!("`{section}.store`: the Redis URL holds credentials, which do not belong in a file"),
            )
            .with_help(
                "drop `user:password@` from the URL and name the variable holding the password with `password_env`",
            );
        reader.push(diagnostic);
        return None;
    }
    Some(Some(store))
}

const TOP_KEYS: &[&str] = &[
    "on_error",
    "input",
    "tool_call",
    "tool_result",
    "output",
    "include",
    "settings",
    "audit",
    "sessions",
    "approvals",
    "keys",
];
const KIND_KEYS: &[&str] = &["dsl", "rego", "rego_server", "http", "cedar", "code"];
const ENTRY_KEYS: &[&str] = &[
    "dsl",
    "rego",
    "rego_server",
    "http",
    "cedar",
    "code",
    "schema",
    "entities",
    "entrypoint",
    "package",
    "id",
    "bearer_token_env",
    "timeout",
    "poll",
    "verify",
    "scope",
    "monitor",
    "deadline",
];

/// The names of the points, as manifest keys.
pub(crate) const POINT_NAMES: [&str; 4] = [
    InterceptionPoint::Input.as_str(),
    InterceptionPoint::ToolCall.as_str(),
    InterceptionPoint::ToolResult.as_str(),
    InterceptionPoint::Output.as_str(),
];
const SETTING_KEYS: &[&str] = &[
    "concurrent",
    "monitor",
    "policy_deadline",
    "call_deadline",
    "stream_batch",
    "stream_checkpoint",
];

/// Reads a manifest's tree into the model; every problem goes to `report`.
pub(crate) fn read_manifest(path: &Path, root: &Node, report: &mut Report) -> Manifest {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut manifest = Manifest {
        path: path.to_owned(),
        base: base.clone(),
        ..Manifest::default()
    };
    let mut reader = Reader { file: path, report };
    if root.value == NodeValue::Null {
        // An empty file is refused rather than read as a set without policies (which would
        // allow everything): a file caught between being truncated and written must never
        // replace the set in use. `{}` says "no policies" on purpose.
        let diagnostic = reader
            .error(root.position, "the manifest is empty")
            .with_help("write `{}` for a policy set without policies");
        reader.push(diagnostic);
        return manifest;
    }
    let Some(fields) = reader.map(root, "the manifest", TOP_KEYS) else {
        return manifest;
    };
    // The names under `keys`, wherever the section is: entries name them in `verify`.
    let key_names: Vec<&str> = fields
        .iter()
        .filter(|(name, _, _)| *name == "keys")
        .flat_map(|(_, _, value)| match &value.value {
            NodeValue::Map(entries) => entries.iter().filter_map(|(key, _)| key.as_str()).collect(),
            _ => Vec::new(),
        })
        .collect();
    for (name, key, value) in fields {
        match name {
            "on_error" => match value.as_str() {
                Some("deny") => manifest.on_error = OnError::Deny,
                Some("allow") => manifest.on_error = OnError::Allow,
                _ => {
                    let diagnostic = reader
                        .error(value.position, "`on_error` must be `deny` or `allow`")
                        .with_help("`deny` fails a call whose policy cannot be evaluated; `allow` skips that policy");
                    reader.push(diagnostic);
                }
            },
            "input" | "tool_call" | "tool_result" | "output" => {
                let Some(point) = InterceptionPoint::from_name(name) else {
                    continue;
                };
                let Some(items) = reader.list(value, &format!("`{name}`")) else {
                    continue;
                };
                for item in items {
                    if let Some(entry) = read_entry(&mut reader, &base, item, name, &key_names) {
                        manifest.entries_mut(point).push(entry);
                    }
                }
            }
            "include" => {
                let Some(items) = reader.list(value, "`include`") else {
                    continue;
                };
                for item in items {
                    if let Some(file) = reader.string(item, "an `include` entry") {
                        manifest.include.push(Include {
                            path: base.join(file),
                            position: item.position,
                        });
                    }
                }
            }
            "settings" => {
                let Some(points) = reader.map(value, "`settings`", &POINT_NAMES) else {
                    continue;
                };
                for (point_name, _, options) in points {
                    // `reader.map` has reported any key that is not a point's name.
                    let Some(point) = InterceptionPoint::from_name(point_name) else {
                        continue;
                    };
                    let read = read_point_options(&mut reader, options, point_name, point);
                    match point {
                        InterceptionPoint::Input => manifest.settings.input = read,
                        InterceptionPoint::ToolCall => manifest.settings.tool_call = read,
                        InterceptionPoint::ToolResult => manifest.settings.tool_result = read,
                        InterceptionPoint::Output => manifest.settings.output = read,
                    }
                }
            }
            "audit" => {
                let Some(fields) = reader.map(value, "`audit`", &["jsonl", "otlp", "on_failure"])
                else {
                    continue;
                };
                for (key, _, value) in fields {
                    match key {
                        "on_failure" => {
                            match reader.string(value, "`audit.on_failure`").as_deref() {
                                Some("allow") => {
                                    manifest.audit.on_failure = crate::AuditFailure::Allow
                                }
                                Some("deny") => {
                                    manifest.audit.on_failure = crate::AuditFailure::Deny
                                }
                                Some(_) => {
                                    let diagnostic = reader
                                    .error(value.position, "`audit.on_failure` must be `allow` or `deny`")
                                    .with_help("`deny` fails a call whose audit record cannot be written");
                                    reader.push(diagnostic);
                                }
                                None => {}
                            }
                        }
                        "jsonl" => {
                            manifest.audit.jsonl = reader
                                .string(value, "`audit.jsonl`")
                                .map(|file| base.join(file));
                            manifest.audit.jsonl_position = Some(value.position);
                        }
                        _ => {
                            if let Some(url) = reader.string(value, "`audit.otlp`") {
                                if url.starts_with("http://") || url.starts_with("https://") {
                                    manifest.audit.otlp = Some(url);
                                    manifest.audit.otlp_position = Some(value.position);
                                } else {
                                    let diagnostic = reader
                                        .error(value.position, "`audit.otlp` must be an http:// or https:// URL")
                                        .with_help("the collector's OTLP/HTTP endpoint, for example http://localhost:4318");
                                    reader.push(diagnostic);
                                }
                            }
                        }
                    }
                }
            }
            "sessions" => {
                let Some(fields) = reader.map(
                    value,
                    "`sessions`",
                    &["store", "ttl", "capacity", "password_env"],
                ) else {
                    continue;
                };
                let mut sessions = SessionSettings {
                    store: SessionStore::Memory,
                    ttl: None,
                    capacity: None,
                    password_env: None,
                    position: key.position,
                };
                let mut ok = true;
                let mut capacity_at = None;
                let mut password_at = None;
                for (field, field_key, value) in fields {
                    match field {
                        "store" => {
                            sessions.position = value.position;
                            match read_store(&mut reader, value, "sessions") {
                                Some(None) => {}
                                Some(Some(url)) => sessions.store = SessionStore::Redis(url),
                                None => ok = false,
                            }
                        }
                        "ttl" => match reader.duration(value, "`sessions.ttl`") {
                            Some(ttl) if ttl.is_zero() => {
                                let diagnostic = reader
                                    .error(value.position, "`sessions.ttl` must be longer than 0");
                                reader.push(diagnostic);
                                ok = false;
                            }
                            Some(ttl) => sessions.ttl = Some(ttl),
                            None => ok = false,
                        },
                        "password_env" => {
                            password_at = Some(field_key.position);
                            match reader.string(value, "`sessions.password_env`") {
                                Some(variable) => sessions.password_env = Some(variable),
                                None => ok = false,
                            }
                        }
                        _ => {
                            capacity_at = Some(field_key.position);
                            match reader.count(value, "`sessions.capacity`") {
                                Some(0) => {
                                    let diagnostic = reader.error(
                                        value.position,
                                        "`sessions.capacity` must be at least 1",
                                    );
                                    reader.push(diagnostic);
                                    ok = false;
                                }
                                Some(capacity) => sessions.capacity = Some(capacity),
                                None => ok = false,
                            }
                        }
                    }
                }
                if let (SessionStore::Redis(_), Some(at)) = (&sessions.store, capacity_at) {
                    let diagnostic = reader
                        .error(at, "`sessions.capacity` applies to the `memory` store only")
                        .with_help("Redis bounds its memory itself (`maxmemory`); sessions expire after `ttl`");
                    reader.push(diagnostic);
                    ok = false;
                }
                if let (SessionStore::Memory, Some(at)) = (&sessions.store, password_at) {
                    let diagnostic = reader
                        .error(at, "`sessions.password_env` applies to a Redis store only")
                        .with_help("the `memory` store needs no password");
                    reader.push(diagnostic);
                    ok = false;
                }
                if ok {
                    manifest.sessions = Some(sessions);
                }
            }
            "keys" => manifest.keys = crate::signing::read_keys(&mut reader, &base, value),
            "approvals" => {
                let Some(fields) =
                    reader.map(value, "`approvals`", &["store", "timeout", "password_env"])
                else {
                    continue;
                };
                let mut approvals = ApprovalSettings {
                    store: ApprovalStore::Memory,
                    timeout: None,
                    password_env: None,
                    position: key.position,
                };
                let mut ok = true;
                let mut password_at = None;
                for (field, field_key, value) in fields {
                    match field {
                        "store" => {
                            approvals.position = value.position;
                            match read_store(&mut reader, value, "approvals") {
                                Some(None) => {}
                                Some(Some(url)) => approvals.store = ApprovalStore::Redis(url),
                                None => ok = false,
                            }
                        }
                        "password_env" => {
                            password_at = Some(field_key.position);
                            match reader.string(value, "`approvals.password_env`") {
                                Some(variable) => approvals.password_env = Some(variable),
                                None => ok = false,
                            }
                        }
                        _ => match reader.duration(value, "`approvals.timeout`") {
                            Some(timeout) if timeout.is_zero() => {
                                let diagnostic = reader.error(
                                    value.position,
                                    "`approvals.timeout` must be longer than 0",
                                );
                                reader.push(diagnostic);
                                ok = false;
                            }
                            Some(timeout) => approvals.timeout = Some(timeout),
                            None => ok = false,
                        },
                    }
                }
                if let (ApprovalStore::Memory, Some(at)) = (&approvals.store, password_at) {
                    let diagnostic = reader
                        .error(at, "`approvals.password_env` applies to a Redis store only")
                        .with_help("the `memory` store needs no password");
                    reader.push(diagnostic);
                    ok = false;
                }
                if ok {
                    manifest.approvals = Some(approvals);
                }
            }
            _ => {}
        }
    }
    manifest
}

fn read_point_options(
    reader: &mut Reader<'_>,
    node: &Node,
    name: &str,
    point: InterceptionPoint,
) -> PointOptions {
    let mut options = PointOptions::default();
    let what = format!("`settings.{name}`");
    let Some(fields) = reader.map(node, &what, SETTING_KEYS) else {
        return options;
    };
    for (key, key_node, value) in fields {
        let what = format!("`settings.{name}.{key}`");
        match key {
            "concurrent" => options.concurrent = reader.boolean(value, &what).unwrap_or(false),
            "monitor" => options.monitor = reader.boolean(value, &what).unwrap_or(false),
            "policy_deadline" => options.policy_deadline = reader.duration(value, &what),
            "call_deadline" => options.call_deadline = reader.duration(value, &what),
            "stream_batch" | "stream_checkpoint" if point != InterceptionPoint::Output => {
                let diagnostic = reader
                    .error(
                        key_node.position,
                        format!("{what} only applies to `output`"),
                    )
                    .with_help("streaming settings belong under `settings.output`");
                reader.push(diagnostic);
            }
            "stream_batch" => options.stream_batch = reader.count(value, &what),
            _ => options.stream_checkpoint = reader.count(value, &what),
        }
    }
    options
}

fn read_entry(
    reader: &mut Reader<'_>,
    base: &Path,
    node: &Node,
    point: &str,
    manifest_keys: &[&str],
) -> Option<PolicyEntry> {
    let what = format!("a `{point}` entry");
    if let NodeValue::String(text) = &node.value {
        let diagnostic = reader
            .error(
                node.position,
                format!("{what} must be a map such as `dsl: {text}`"),
            )
            .with_help(format!(
                "each entry names its kind: {}",
                KIND_KEYS.join(", ")
            ));
        reader.push(diagnostic);
        return None;
    }
    let fields = reader.map(node, &what, ENTRY_KEYS)?;
    let kinds: Vec<_> = fields
        .iter()
        .filter(|(name, _, _)| KIND_KEYS.contains(name))
        .collect();
    let (kind, _, kind_value) = match kinds.as_slice() {
        [one] => **one,
        [] => {
            let diagnostic = reader
                .error(node.position, format!("{what} names no policy"))
                .with_help(format!("add one of: {}", KIND_KEYS.join(", ")));
            reader.push(diagnostic);
            return None;
        }
        [_, second, ..] => {
            let diagnostic = reader
                .error(
                    second.1.position,
                    format!("{what} names more than one policy"),
                )
                .with_help("write each policy as its own entry of the list");
            reader.push(diagnostic);
            return None;
        }
    };
    // Which keys go with which kind.
    let allowed: &[&str] = match kind {
        "rego" => &[
            "entrypoint",
            "id",
            "poll",
            "verify",
            "scope",
            "bearer_token_env",
        ],
        "rego_server" => &["package", "id"],
        "http" => &["id", "bearer_token_env", "timeout"],
        "cedar" => &["schema", "entities"],
        _ => &[],
    };
    let mut entry = PolicyEntry {
        source: PolicySource::Code {
            name: String::new(),
        },
        monitor: false,
        deadline: None,
        position: node.position,
    };
    let mut ok = true;
    let mut entrypoint = None;
    let mut package = None;
    let mut id = None;
    let mut bearer_token_env = None;
    let mut timeout = None;
    let mut poll = None;
    let mut verify = None;
    let mut scope = None;
    let mut schema = None;
    let mut entities = None;
    for (name, key, value) in &fields {
        match *name {
            "monitor" => entry.monitor = reader.boolean(value, "`monitor`").unwrap_or(false),
            "deadline" => entry.deadline = reader.duration(value, "`deadline`"),
            other if KIND_KEYS.contains(&other) => {}
            other if !allowed.contains(&other) => {
                let diagnostic = reader
                    .error(
                        key.position,
                        format!("`{other}` does not apply to a `{kind}` entry"),
                    )
                    .with_help(if allowed.is_empty() {
                        format!(
                            "a `{kind}` entry takes only `monitor` and `deadline` besides `{kind}`"
                        )
                    } else {
                        format!(
                            "a `{kind}` entry takes {}, `monitor` and `deadline`",
                            quoted(allowed)
                        )
                    });
                reader.push(diagnostic);
                ok = false;
            }
            "entrypoint" => entrypoint = reader.string(value, "`entrypoint`"),
            "package" => package = reader.string(value, "`package`"),
            "id" => id = reader.string(value, "`id`"),
            "bearer_token_env" => bearer_token_env = reader.string(value, "`bearer_token_env`"),
            "poll" => {
                poll = reader
                    .duration(value, "`poll`")
                    .map(|poll| (poll, key.position))
            }
            "verify" => {
                verify = reader
                    .string(value, "`verify`")
                    .map(|name| (name, value.position))
            }
            "scope" => scope = reader.string(value, "`scope`"),
            "schema" => schema = reader.string(value, "`schema`"),
            "entities" => entities = reader.string(value, "`entities`"),
            _ => timeout = reader.duration(value, "`timeout`"),
        }
    }
    let text = reader.string(kind_value, &format!("`{kind}`"))?;
    let mut required = |value: Option<String>, key: &str, reader: &mut Reader<'_>| match value {
        Some(value) => Some(value),
        None => {
            if !fields.iter().any(|(name, _, _)| *name == key) {
                let diagnostic =
                    reader.error(node.position, format!("a `{kind}` entry needs `{key}`"));
                reader.push(diagnostic);
            }
            ok = false;
            None
        }
    };
    entry.source = match kind {
        "dsl" => PolicySource::Dsl {
            path: base.join(text),
        },
        "rego" if text.starts_with("http://") || text.starts_with("https://") => {
            let bundle_id = id.unwrap_or_else(|| crate::remote::url_bundle_id(&text));
            if let Some((name, position)) = &verify
                && !manifest_keys.contains(&name.as_str())
            {
                let help = closest(name, manifest_keys)
                    .map(|suggestion| format!("did you mean `{suggestion}`?"))
                    .unwrap_or_else(|| {
                        "define the key under `keys` (before or after the points)".to_owned()
                    });
                let diagnostic = reader
                    .error(
                        *position,
                        format!("`verify` names no key: `{name}` is not under `keys`"),
                    )
                    .with_help(help);
                reader.push(diagnostic);
                ok = false;
            }
            PolicySource::RegoUrl {
                url: text,
                id: bundle_id,
                entrypoint,
                poll: poll.map_or(crate::remote::DEFAULT_POLL, |(poll, _)| poll),
                verify: verify.map(|(name, _)| name),
                scope,
                bearer_token_env,
            }
        }
        "rego" => {
            let url_only = [
                ("id", id.is_some()),
                ("poll", poll.is_some()),
                ("verify", verify.is_some()),
                ("scope", scope.is_some()),
                ("bearer_token_env", bearer_token_env.is_some()),
            ];
            for (key, given) in url_only {
                if given
                    && let Some((_, key_node, _)) = fields.iter().find(|(name, _, _)| *name == key)
                {
                    let diagnostic = reader
                        .error(
                            key_node.position,
                            format!("`{key}` applies to a bundle from a URL, not to a file"),
                        )
                        .with_help("`rego: https://...` fetches a bundle from a bundle server; a file takes only `entrypoint`");
                    reader.push(diagnostic);
                    ok = false;
                }
            }
            PolicySource::Rego {
                path: base.join(text),
                entrypoint,
            }
        }
        "rego_server" => {
            let package = required(package, "package", reader);
            let id = required(id, "id", reader);
            PolicySource::RegoServer {
                url: text,
                package: package.unwrap_or_default(),
                id: id.unwrap_or_default(),
            }
        }
        "http" => {
            let id = required(id, "id", reader);
            PolicySource::Http {
                url: text,
                id: id.unwrap_or_default(),
                bearer_token_env,
                timeout,
            }
        }
        "cedar" => PolicySource::Cedar {
            path: base.join(text),
            schema: schema.map(|file| base.join(file)),
            entities: entities.map(|file| base.join(file)),
        },
        _ => PolicySource::Code { name: text },
    };
    ok.then_some(entry)
}

fn quoted(keys: &[&str]) -> String {
    keys.iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a URL names a user or password (`scheme://user:password@host`).
fn url_has_credentials(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.contains('@')
}
