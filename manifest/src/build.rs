//! The model → a policy set: opens every file and backend the manifest names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use portcullis_dsl::{DslInputPolicy, DslOutputPolicy, DslToolCallPolicy, Problems};
use portcullis_engine::{
    BoxError, InputPolicy, InterceptionPoint, OutputPolicy, PolicyDecision, PolicyExt, PolicyMode,
    PolicySet, ToolCallContext, ToolCallPolicy,
};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, Report, Severity, closest};
use crate::model::{Manifest, PolicyEntry, PolicySource, Reader, point_named};
use crate::yaml::{self, Node, NodeValue, Position};

/// Policies written in Rust, registered by name so that a manifest can name them
/// (`- code: no_shouting`).
///
/// ```
/// use portcullis_engine::{async_trait, BoxError, InputContext, InputPolicy, PolicyDecision};
/// use portcullis_manifest::CodeRegistry;
///
/// struct NoShouting;
///
/// #[async_trait]
/// impl InputPolicy for NoShouting {
///     fn id(&self) -> &str { "no_shouting" }
///     async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
///         let shouting = context.messages.iter().any(|m| m.content.len() > 3 && m.content == m.content.to_uppercase());
///         Ok(if shouting { PolicyDecision::deny("no shouting") } else { PolicyDecision::allow() })
///     }
/// }
///
/// let registry = CodeRegistry::new().input("no_shouting", NoShouting);
/// assert!(registry.contains("no_shouting"));
/// ```
#[derive(Clone, Default)]
pub struct CodeRegistry {
    input: BTreeMap<String, Arc<dyn InputPolicy>>,
    tool_call: BTreeMap<String, Arc<dyn ToolCallPolicy>>,
    output: BTreeMap<String, Arc<dyn OutputPolicy>>,
}

impl std::fmt::Debug for CodeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeRegistry")
            .field("input", &self.input.keys().collect::<Vec<_>>())
            .field("tool_call", &self.tool_call.keys().collect::<Vec<_>>())
            .field("output", &self.output.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl CodeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        CodeRegistry::default()
    }

    /// Registers an input policy under `name` (a later registration of the name replaces it).
    pub fn input(mut self, name: impl Into<String>, policy: impl InputPolicy + 'static) -> Self {
        self.input.insert(name.into(), Arc::new(policy));
        self
    }

    /// Registers a tool-call policy under `name`.
    pub fn tool_call(
        mut self,
        name: impl Into<String>,
        policy: impl ToolCallPolicy + 'static,
    ) -> Self {
        self.tool_call.insert(name.into(), Arc::new(policy));
        self
    }

    /// Registers an output policy under `name`.
    pub fn output(mut self, name: impl Into<String>, policy: impl OutputPolicy + 'static) -> Self {
        self.output.insert(name.into(), Arc::new(policy));
        self
    }

    /// Whether a policy of any point is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.input.contains_key(name)
            || self.tool_call.contains_key(name)
            || self.output.contains_key(name)
    }

    fn names(&self, point: InterceptionPoint) -> Vec<&str> {
        match point {
            InterceptionPoint::Input => self.input.keys().map(String::as_str).collect(),
            InterceptionPoint::ToolCall => self.tool_call.keys().map(String::as_str).collect(),
            InterceptionPoint::Output => self.output.keys().map(String::as_str).collect(),
        }
    }

    fn get(&self, point: InterceptionPoint, name: &str) -> Option<Built> {
        match point {
            InterceptionPoint::Input => self
                .input
                .get(name)
                .map(|policy| Built::Input(Box::new(Arc::clone(policy)))),
            InterceptionPoint::ToolCall => self
                .tool_call
                .get(name)
                .map(|policy| Built::ToolCall(Box::new(Arc::clone(policy)))),
            InterceptionPoint::Output => self
                .output
                .get(name)
                .map(|policy| Built::Output(Box::new(Arc::clone(policy)))),
        }
    }
}

/// A manifest loaded: its policy set, what it was read from, and its warnings.
///
/// [`into_engine_builder`](LoadedManifest::into_engine_builder) turns it into an engine
/// builder with everything else the manifest configures (sessions, approvals, audit sinks).
#[derive(Debug)]
pub struct LoadedManifest {
    pub(crate) manifest: Manifest,
    pub(crate) set: PolicySet,
    pub(crate) warnings: Vec<Diagnostic>,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) export: crate::AuditExport,
    /// Made for trials ([`for_trials`](Self::for_trials)): its engine sections are not the
    /// manifest's.
    pub(crate) trial: bool,
}

impl LoadedManifest {
    /// The policy set.
    pub fn policy_set(&self) -> &PolicySet {
        &self.set
    }

    /// Takes the policy set (for [`PolicyEngine::builder`](portcullis_engine::PolicyEngine::builder)).
    pub fn into_policy_set(self) -> PolicySet {
        self.set
    }

    /// The manifest as written (its `audit`, `sessions` and `approvals` sections among others).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// What loaded but deserves a look (a rule's condition that can never hold, among others).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Every file and folder the set was built from, the manifest first: what a watcher
    /// watches.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The policy set, the manifest, the warnings and the files.
    pub fn into_parts(self) -> (PolicySet, Manifest, Vec<Diagnostic>, Vec<PathBuf>) {
        (self.set, self.manifest, self.warnings, self.files)
    }
}

impl Manifest {
    /// Reads and checks the manifest at `path`, then opens and checks everything it names and
    /// builds the policy set. Every problem of every file is reported at once.
    pub fn load(
        path: impl AsRef<Path>,
        registry: &CodeRegistry,
    ) -> Result<LoadedManifest, crate::ManifestErrors> {
        let path = path.as_ref();
        let mut report = Report::default();
        let manifest = match yaml::read(path) {
            Ok((_, root)) => crate::model::read_manifest(path, &root, &mut report),
            Err(error) => {
                report.push(
                    Diagnostic::error(path, error.position, error.message).with_help(
                        "a manifest is a YAML (or JSON) map; see `portcullis check --help`",
                    ),
                );
                let (errors, warnings) = report.split();
                return Err(crate::ManifestErrors::new(errors, warnings));
            }
        };
        manifest.build_with(registry, report, Mode::Load)
    }

    /// Checks the manifest at `path` and everything it names as [`load`](Self::load) does,
    /// without building a policy set: Rego bundles are checked without compiling their
    /// WebAssembly (validated, their imports, ABI version, entrypoints and builtins read), so
    /// a manifest with bundles checks in milliseconds. Returns the warnings; every problem of
    /// every file is an error, reported at once.
    pub fn check(
        path: impl AsRef<Path>,
        registry: &CodeRegistry,
    ) -> Result<Vec<Diagnostic>, crate::ManifestErrors> {
        let path = path.as_ref();
        let mut report = Report::default();
        let manifest = match yaml::read(path) {
            Ok((_, root)) => crate::model::read_manifest(path, &root, &mut report),
            Err(error) => {
                report.push(Diagnostic::error(path, error.position, error.message));
                let (errors, warnings) = report.split();
                return Err(crate::ManifestErrors::new(errors, warnings));
            }
        };
        manifest
            .build_with(registry, report, Mode::Check)
            .map(|loaded| loaded.warnings)
    }

    /// Reads and checks the manifest at `path` without opening what it names.
    pub fn read(
        path: impl AsRef<Path>,
    ) -> Result<(Manifest, Vec<Diagnostic>), crate::ManifestErrors> {
        let path = path.as_ref();
        let mut report = Report::default();
        match yaml::read(path) {
            Ok((_, root)) => {
                let manifest = crate::model::read_manifest(path, &root, &mut report);
                let (errors, warnings) = report.split();
                if errors.is_empty() {
                    Ok((manifest, warnings))
                } else {
                    Err(crate::ManifestErrors::new(errors, warnings))
                }
            }
            Err(error) => Err(crate::ManifestErrors::new(
                vec![Diagnostic::error(path, error.position, error.message)],
                Vec::new(),
            )),
        }
    }

    /// Opens everything the manifest names and builds its policy set.
    pub fn build(&self, registry: &CodeRegistry) -> Result<LoadedManifest, crate::ManifestErrors> {
        self.clone()
            .build_with(registry, Report::default(), Mode::Load)
    }

    fn build_with(
        self,
        registry: &CodeRegistry,
        mut report: Report,
        mode: Mode,
    ) -> Result<LoadedManifest, crate::ManifestErrors> {
        let mut builder = Builder {
            manifest: &self,
            registry,
            mode,
            report: &mut report,
            files: vec![self.path.clone()],
            points: Points::default(),
        };
        for point in [
            InterceptionPoint::Input,
            InterceptionPoint::ToolCall,
            InterceptionPoint::Output,
        ] {
            for entry in self.entries(point) {
                builder.entry(point, entry);
            }
        }
        for include in &self.include {
            builder.include(&include.path, include.position);
        }
        if let Some(jsonl) = &self.audit.jsonl
            && let Some(parent) = jsonl.parent()
            && !parent.as_os_str().is_empty()
            && !parent.is_dir()
        {
            let diagnostic = Diagnostic::warning(
                &self.path,
                self.audit.jsonl_position,
                format!(
                    "`audit.jsonl`: the folder {} does not exist (yet): the log cannot be opened until it does",
                    parent.display()
                ),
            );
            builder.report.push(diagnostic);
        }
        crate::assemble::unsupported_sections(&self, builder.report);
        let Builder { files, points, .. } = builder;
        if report.has_errors() {
            let (errors, warnings) = report.split();
            return Err(crate::ManifestErrors::new(errors, warnings));
        }
        let set = self.assemble(points);
        let (_, warnings) = report.split();
        Ok(LoadedManifest {
            manifest: self,
            set,
            warnings,
            files,
            export: crate::AuditExport::default(),
            trial: false,
        })
    }

    fn assemble(&self, points: Points) -> PolicySet {
        let mut builder = PolicySet::builder().on_error(self.on_error);
        for policy in points.input {
            builder = builder.input(policy);
        }
        for policy in points.tool_call {
            builder = builder.tool_call(policy);
        }
        for policy in points.output {
            builder = builder.output(policy);
        }
        for point in [
            InterceptionPoint::Input,
            InterceptionPoint::ToolCall,
            InterceptionPoint::Output,
        ] {
            let options = self.settings.point(point);
            if options.concurrent {
                builder = builder.concurrent(point);
            }
            if options.monitor {
                builder = builder.monitor(point);
            }
            if let Some(deadline) = options.policy_deadline {
                builder = builder.policy_deadline(point, deadline);
            }
            if let Some(deadline) = options.call_deadline {
                builder = builder.call_deadline(point, deadline);
            }
            if let Some(bytes) = options.stream_batch {
                builder = builder.stream_batch(bytes);
            }
            if let Some(characters) = options.stream_checkpoint {
                builder = builder.stream_checkpoint(characters);
            }
        }
        builder.build()
    }
}

/// A policy of some point.
pub(crate) enum Built {
    Input(Box<dyn InputPolicy>),
    ToolCall(Box<dyn ToolCallPolicy>),
    Output(Box<dyn OutputPolicy>),
}

impl Built {
    fn wrap(self, monitor: bool, deadline: Option<std::time::Duration>) -> Built {
        macro_rules! wrap {
            ($variant:ident, $trait:ident, $policy:expr) => {{
                let mut policy: Box<dyn $trait> = $policy;
                if monitor && policy.mode() != PolicyMode::Monitor {
                    policy = Box::new(policy.monitored());
                }
                if let Some(deadline) = deadline {
                    policy = Box::new(policy.with_deadline(deadline));
                }
                Built::$variant(policy)
            }};
        }
        match self {
            Built::Input(policy) => wrap!(Input, InputPolicy, policy),
            Built::ToolCall(policy) => wrap!(ToolCall, ToolCallPolicy, policy),
            Built::Output(policy) => wrap!(Output, OutputPolicy, policy),
        }
    }
}

#[derive(Default)]
struct Points {
    input: Vec<Box<dyn InputPolicy>>,
    tool_call: Vec<Box<dyn ToolCallPolicy>>,
    output: Vec<Box<dyn OutputPolicy>>,
}

impl Points {
    fn push(&mut self, built: Built) {
        match built {
            Built::Input(policy) => self.input.push(policy),
            Built::ToolCall(policy) => self.tool_call.push(policy),
            Built::Output(policy) => self.output.push(policy),
        }
    }
}

/// What building is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A policy set to evaluate with: everything opened and compiled.
    Load,
    /// Problems only: bundles are checked without compiling them, and the set built is not
    /// handed out (it lacks their policies).
    Check,
}

struct Builder<'m> {
    manifest: &'m Manifest,
    registry: &'m CodeRegistry,
    #[cfg_attr(not(feature = "rego"), allow(dead_code))]
    mode: Mode,
    report: &'m mut Report,
    files: Vec<PathBuf>,
    points: Points,
}

impl Builder<'_> {
    fn error(&mut self, position: Position, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(&self.manifest.path, Some(position), message)
    }

    fn entry(&mut self, point: InterceptionPoint, entry: &PolicyEntry) {
        let built = match &entry.source {
            PolicySource::Dsl { path } => {
                self.dsl(point, path, entry);
                return;
            }
            PolicySource::Rego { path, entrypoint } => {
                self.files.push(path.clone());
                self.rego(point, path, entrypoint.as_deref(), entry.position)
            }
            PolicySource::RegoUrl { .. } => {
                match crate::remote::build(self.manifest, point, &entry.source) {
                    Ok(built) => Some(built),
                    Err((message, help)) => {
                        let diagnostic =
                            self.error(entry.position, message).with_optional_help(help);
                        self.report.push(diagnostic);
                        None
                    }
                }
            }
            PolicySource::RegoServer { url, package, id } => {
                self.rego_server(point, url, package, id, entry.position)
            }
            PolicySource::Http {
                url,
                id,
                bearer_token_env,
                timeout,
            } => self.http(
                point,
                url,
                id,
                bearer_token_env.as_deref(),
                *timeout,
                entry.position,
            ),
            PolicySource::Code { name } => match self.registry.get(point, name) {
                Some(built) => Some(built),
                None => {
                    let names = self.registry.names(point);
                    let elsewhere = [
                        InterceptionPoint::Input,
                        InterceptionPoint::ToolCall,
                        InterceptionPoint::Output,
                    ]
                    .into_iter()
                    .find(|other| {
                        *other != point && self.registry.names(*other).contains(&name.as_str())
                    });
                    let help = match (elsewhere, closest(name, &names)) {
                        (Some(other), _) => Some(format!(
                            "`{name}` is registered as a {other} policy; move the entry under `{other}`"
                        )),
                        (None, Some(suggestion)) => Some(format!("did you mean `{suggestion}`?")),
                        (None, None) if names.is_empty() => Some(format!(
                            "no {point} policy is registered; register code policies with `CodeRegistry` before loading"
                        )),
                        (None, None) => {
                            Some(format!("registered {point} policies: {}", names.join(", ")))
                        }
                    };
                    let diagnostic = self
                        .error(
                            entry.position,
                            format!("no {point} code policy is registered as `{name}`"),
                        )
                        .with_optional_help(help);
                    self.report.push(diagnostic);
                    None
                }
            },
        };
        if let Some(built) = built {
            self.points.push(built.wrap(entry.monitor, entry.deadline));
        }
    }

    fn dsl(&mut self, point: InterceptionPoint, path: &Path, entry: &PolicyEntry) {
        self.files.push(path.to_owned());
        if path.is_dir() {
            let mut rules = match std::fs::read_dir(path) {
                Ok(read) => read
                    .filter_map(Result::ok)
                    .map(|item| item.path())
                    .filter(|file| {
                        file.extension().is_some_and(|ext| ext == "json") && file.is_file()
                    })
                    .collect::<Vec<_>>(),
                Err(error) => {
                    let diagnostic = self.error(
                        entry.position,
                        format!("cannot read the folder {}: {error}", path.display()),
                    );
                    self.report.push(diagnostic);
                    return;
                }
            };
            rules.sort();
            if rules.is_empty() {
                let diagnostic = Diagnostic::warning(
                    &self.manifest.path,
                    Some(entry.position),
                    format!("the folder {} has no *.json rule", path.display()),
                );
                self.report.push(diagnostic);
            }
            for rule in rules {
                self.files.push(rule.clone());
                if let Some(built) = load_rule(self.report, point, &rule) {
                    self.points.push(built.wrap(entry.monitor, entry.deadline));
                }
            }
        } else if path.is_file() {
            if let Some(built) = load_rule(self.report, point, path) {
                self.points.push(built.wrap(entry.monitor, entry.deadline));
            }
        } else {
            let diagnostic = self
                .error(
                    entry.position,
                    format!("the rule file {} does not exist", path.display()),
                )
                .with_help("paths are relative to the manifest's folder");
            self.report.push(diagnostic);
        }
    }

    #[allow(unused_variables)]
    fn rego(
        &mut self,
        point: InterceptionPoint,
        path: &Path,
        entrypoint: Option<&str>,
        position: Position,
    ) -> Option<Built> {
        #[cfg(feature = "rego")]
        {
            use portcullis_rego::{RegoInputPolicy, RegoOutputPolicy, RegoToolCallPolicy};
            if self.mode == Mode::Check {
                let checked = portcullis_rego::RegoBundle::check(path)
                    .and_then(|bundle| bundle.decision_entrypoint(entrypoint));
                if let Err(error) = checked {
                    let diagnostic = self.error(
                        position,
                        format!(
                            "the bundle {} cannot be used: {}",
                            path.display(),
                            error_chain(&error)
                        ),
                    );
                    self.report.push(diagnostic);
                }
                return None;
            }
            let id = bundle_id(path);
            macro_rules! open {
                ($policy:ident, $variant:ident) => {
                    match entrypoint {
                        Some(entrypoint) => $policy::with_entrypoint(id, path, entrypoint),
                        None => $policy::new(id, path),
                    }
                    .map(|policy| Built::$variant(Box::new(policy)))
                };
            }
            let opened = match point {
                InterceptionPoint::Input => open!(RegoInputPolicy, Input),
                InterceptionPoint::ToolCall => open!(RegoToolCallPolicy, ToolCall),
                InterceptionPoint::Output => open!(RegoOutputPolicy, Output),
            };
            match opened {
                Ok(built) => Some(built),
                Err(error) => {
                    let diagnostic = self.error(
                        position,
                        format!(
                            "the bundle {} cannot be used: {}",
                            path.display(),
                            error_chain(&error)
                        ),
                    );
                    self.report.push(diagnostic);
                    None
                }
            }
        }
        #[cfg(not(feature = "rego"))]
        {
            self.unsupported(position, "rego", "rego");
            None
        }
    }

    #[allow(unused_variables)]
    fn rego_server(
        &mut self,
        point: InterceptionPoint,
        url: &str,
        package: &str,
        id: &str,
        position: Position,
    ) -> Option<Built> {
        #[cfg(feature = "rego-rest")]
        {
            use portcullis_rego_rest::{
                RegoServerClientOptions, RegoServerInputPolicy, RegoServerOutputPolicy,
                RegoServerToolCallPolicy,
            };
            let options = RegoServerClientOptions::new(url);
            let built = match point {
                InterceptionPoint::Input => RegoServerInputPolicy::new(id, options, package)
                    .map(|policy| Built::Input(Box::new(policy))),
                InterceptionPoint::ToolCall => RegoServerToolCallPolicy::new(id, options, package)
                    .map(|policy| Built::ToolCall(Box::new(policy))),
                InterceptionPoint::Output => RegoServerOutputPolicy::new(id, options, package)
                    .map(|policy| Built::Output(Box::new(policy))),
            };
            match built {
                Ok(built) => Some(built),
                Err(error) => {
                    let diagnostic = self.error(
                        position,
                        format!(
                            "the policy server entry `{id}` is invalid: {}",
                            error_chain(&error)
                        ),
                    );
                    self.report.push(diagnostic);
                    None
                }
            }
        }
        #[cfg(not(feature = "rego-rest"))]
        {
            self.unsupported(position, "rego_server", "rego-rest");
            None
        }
    }

    #[allow(unused_variables)]
    fn http(
        &mut self,
        point: InterceptionPoint,
        url: &str,
        id: &str,
        bearer_token_env: Option<&str>,
        timeout: Option<std::time::Duration>,
        position: Position,
    ) -> Option<Built> {
        #[cfg(feature = "http")]
        {
            use portcullis_http::{
                HttpClientOptions, HttpInputPolicy, HttpOutputPolicy, HttpToolCallPolicy,
            };
            let mut options = HttpClientOptions::new(url);
            if let Some(variable) = bearer_token_env {
                match std::env::var(variable) {
                    Ok(token) if !token.is_empty() => options = options.bearer_token(token),
                    _ => {
                        let diagnostic = self
                            .error(
                                position,
                                format!("the environment variable {variable} (`bearer_token_env`) is not set"),
                            )
                            .with_help(format!("export {variable}=<token> before loading the manifest"));
                        self.report.push(diagnostic);
                        return None;
                    }
                }
            }
            if let Some(timeout) = timeout {
                options = options.timeout(timeout);
            }
            let built =
                match point {
                    InterceptionPoint::Input => HttpInputPolicy::new(id, options)
                        .map(|policy| Built::Input(Box::new(policy))),
                    InterceptionPoint::ToolCall => HttpToolCallPolicy::new(id, options)
                        .map(|policy| Built::ToolCall(Box::new(policy))),
                    InterceptionPoint::Output => HttpOutputPolicy::new(id, options)
                        .map(|policy| Built::Output(Box::new(policy))),
                };
            match built {
                Ok(built) => Some(built),
                Err(error) => {
                    let diagnostic = self.error(
                        position,
                        format!("the http entry `{id}` is invalid: {}", error_chain(&error)),
                    );
                    self.report.push(diagnostic);
                    None
                }
            }
        }
        #[cfg(not(feature = "http"))]
        {
            self.unsupported(position, "http", "http");
            None
        }
    }

    #[allow(dead_code)]
    fn unsupported(&mut self, position: Position, kind: &str, feature: &str) {
        let diagnostic = self
            .error(
                position,
                format!("this build cannot load `{kind}` policies"),
            )
            .with_help(format!("build with the `{feature}` feature"));
        self.report.push(diagnostic);
    }

    fn include(&mut self, path: &Path, position: Position) {
        self.files.push(path.to_owned());
        let (_, root) = match yaml::read(path) {
            Ok(read) => read,
            Err(error) => {
                let diagnostic = match error.position {
                    Some(at) => Diagnostic::error(path, Some(at), error.message),
                    None => self.error(
                        position,
                        format!("the policy-set file {}: {}", path.display(), error.message),
                    ),
                };
                self.report.push(diagnostic);
                return;
            }
        };
        let stem = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or("policies")
            .to_owned();
        let mut reader = Reader {
            file: path,
            report: self.report,
        };
        let Some(fields) = reader.map(&root, "a policy-set file", &["aps_version", "policies"])
        else {
            return;
        };
        let mut policies = None;
        let mut version = false;
        for (name, _, value) in fields {
            if name == "aps_version" {
                version = true;
                let valid = value.as_str().is_some_and(|text| {
                    let parts: Vec<_> = text.split('.').collect();
                    parts.len() == 3
                        && parts.iter().all(|part| {
                            !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
                        })
                });
                if !valid {
                    let diagnostic = reader.error(
                        value.position,
                        "`aps_version` must be a version such as \"0.1.0\"",
                    );
                    reader.push(diagnostic);
                }
            } else {
                policies = Some(value);
            }
        }
        if !version {
            let diagnostic = reader.error(root.position, "a policy-set file needs `aps_version`");
            reader.push(diagnostic);
        }
        let Some(policies) = policies else {
            let diagnostic = reader.error(root.position, "a policy-set file needs `policies`");
            reader.push(diagnostic);
            return;
        };
        let NodeValue::List(items) = &policies.value else {
            let diagnostic = reader.error(policies.position, "`policies` must be a list");
            reader.push(diagnostic);
            return;
        };
        for (index, item) in items.iter().enumerate() {
            let id = format!("{stem}#{index}");
            for (point, tools) in scope(&mut reader, item, index) {
                let mut rule = item.to_json();
                if let Value::Object(map) = &mut rule {
                    map.remove("applies_to");
                    map.remove("tools");
                }
                let origin = format!("{}#{index}", path.display());
                let checked = portcullis_dsl::check_value(&rule, &origin, point);
                let built = checked.map_err(|problems| {
                    for problem in problems.iter() {
                        let at = match problem.json_path() {
                            Some(json_path) => {
                                root.locate(&format!("policies[{index}].{json_path}"))
                            }
                            None => item.position,
                        };
                        reader.push(
                            Diagnostic::error(
                                path,
                                Some(at),
                                format!("policy {index}: {}", problem.message()),
                            )
                            .with_optional_help(problem.help().map(str::to_owned)),
                        );
                    }
                });
                let Ok(checked) = built else { continue };
                let built = match point {
                    InterceptionPoint::Input => DslInputPolicy::from_checked(id.clone(), checked)
                        .map(|policy| Built::Input(Box::new(policy))),
                    InterceptionPoint::ToolCall => {
                        DslToolCallPolicy::from_checked(id.clone(), checked).map(|policy| {
                            match tools {
                                Some(tools) => {
                                    Built::ToolCall(Box::new(ToolScoped { policy, tools }))
                                }
                                None => Built::ToolCall(Box::new(policy)),
                            }
                        })
                    }
                    InterceptionPoint::Output => DslOutputPolicy::from_checked(id.clone(), checked)
                        .map(|policy| Built::Output(Box::new(policy))),
                };
                match built {
                    Ok(built) => self.points.push(built),
                    Err(error) => reader.push(Diagnostic::error(
                        path,
                        Some(item.position),
                        error.to_string(),
                    )),
                }
            }
        }
    }
}

/// The points an entry of a policy-set file applies to, with the tools of its `tool_call`
/// scope.
fn scope(
    reader: &mut Reader<'_>,
    item: &Node,
    index: usize,
) -> Vec<(InterceptionPoint, Option<Vec<String>>)> {
    let NodeValue::Map(entries) = &item.value else {
        let diagnostic = reader.error(
            item.position,
            format!("policy {index} must be a map, not {}", item.kind()),
        );
        reader.push(diagnostic);
        return Vec::new();
    };
    let field = |name: &str| {
        entries
            .iter()
            .find(|(key, _)| key.as_str() == Some(name))
            .map(|(_, value)| value)
    };
    let mut points = vec![
        InterceptionPoint::Input,
        InterceptionPoint::ToolCall,
        InterceptionPoint::Output,
    ];
    if let Some(applies_to) = field("applies_to") {
        let valid = match &applies_to.value {
            NodeValue::List(names) if !names.is_empty() => {
                let mut chosen = Vec::new();
                let mut ok = true;
                for name in names {
                    match name.as_str() {
                        Some(text @ ("input" | "tool_call" | "output")) => {
                            let point = point_named(text);
                            if chosen.contains(&point) {
                                let diagnostic = reader.error(
                                    name.position,
                                    format!("`{text}` is listed twice in `applies_to`"),
                                );
                                reader.push(diagnostic);
                                ok = false;
                            }
                            chosen.push(point);
                        }
                        _ => {
                            let help = name
                                .as_str()
                                .and_then(|text| closest(text, &["input", "tool_call", "output"]))
                                .map(|suggestion| format!("did you mean `{suggestion}`?"));
                            let diagnostic = reader
                                .error(
                                    name.position,
                                    "`applies_to` lists points: input, tool_call, output",
                                )
                                .with_optional_help(help);
                            reader.push(diagnostic);
                            ok = false;
                        }
                    }
                }
                ok.then_some(chosen)
            }
            _ => {
                let diagnostic = reader.error(
                    applies_to.position,
                    "`applies_to` must be a list of at least one point",
                );
                reader.push(diagnostic);
                None
            }
        };
        match valid {
            Some(chosen) => points = chosen,
            None => return Vec::new(),
        }
    }
    let tools = match field("tools") {
        None => None,
        Some(node) => match &node.value {
            NodeValue::List(names) => {
                let mut tools = Vec::new();
                for name in names {
                    match name.as_str() {
                        Some(tool) if !tools.iter().any(|known: &String| known == tool) => {
                            tools.push(tool.to_owned());
                        }
                        Some(tool) => {
                            let diagnostic = reader.error(
                                name.position,
                                format!("`{tool}` is listed twice in `tools`"),
                            );
                            reader.push(diagnostic);
                        }
                        None => {
                            let diagnostic =
                                reader.error(name.position, "`tools` lists tool names (strings)");
                            reader.push(diagnostic);
                        }
                    }
                }
                Some(tools)
            }
            _ => {
                let diagnostic =
                    reader.error(node.position, "`tools` must be a list of tool names");
                reader.push(diagnostic);
                return Vec::new();
            }
        },
    };
    points
        .into_iter()
        .map(|point| {
            let tools = (point == InterceptionPoint::ToolCall)
                .then(|| tools.clone())
                .flatten();
            (point, tools)
        })
        .collect()
}

/// A tool-call policy of a policy-set file that names its tools: for any other tool it
/// allows without evaluating.
struct ToolScoped {
    policy: DslToolCallPolicy,
    tools: Vec<String>,
}

#[async_trait]
impl ToolCallPolicy for ToolScoped {
    fn id(&self) -> &str {
        ToolCallPolicy::id(&self.policy)
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        if self.tools.contains(&context.tool_name) {
            Ok(self.policy.decide(context))
        } else {
            Ok(PolicyDecision::allow())
        }
    }

    fn mode(&self) -> PolicyMode {
        self.policy.mode()
    }
}

/// Reads, checks and compiles one DSL rule file for `point`; its problems go to `report`
/// with line and column.
fn load_rule(report: &mut Report, point: InterceptionPoint, path: &Path) -> Option<Built> {
    let id = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default()
        .to_owned();
    let source = match yaml::read_text(path) {
        Ok(source) => source,
        Err(message) => {
            report.push(Diagnostic::error(path, None, message));
            return None;
        }
    };
    let origin = path.display().to_string();
    // A rule that loads may still carry warnings: they go into the report with their place.
    let mut warned = |warnings: &[portcullis_dsl::Warning]| {
        rule_findings(report, path, &source, warnings, Severity::Warning);
    };
    let built = match point {
        InterceptionPoint::Input => DslInputPolicy::from_source(id, &source, &origin).map(|p| {
            warned(p.warnings());
            Built::Input(Box::new(p))
        }),
        InterceptionPoint::ToolCall => {
            DslToolCallPolicy::from_source(id, &source, &origin).map(|p| {
                warned(p.warnings());
                Built::ToolCall(Box::new(p))
            })
        }
        InterceptionPoint::Output => DslOutputPolicy::from_source(id, &source, &origin).map(|p| {
            warned(p.warnings());
            Built::Output(Box::new(p))
        }),
    };
    match built {
        Ok(built) => Some(built),
        Err(error) => {
            match error.problems() {
                Some(problems) => rule_problems(report, path, &source, problems),
                None => report.push(Diagnostic::error(path, None, error.to_string())),
            }
            None
        }
    }
}

/// Turns a DSL rule's problems into diagnostics with line and column (the checker names a
/// JSON path; the rule's text says where that is).
pub(crate) fn rule_problems(report: &mut Report, path: &Path, source: &str, problems: &Problems) {
    let errors: Vec<_> = problems.iter().cloned().collect();
    rule_findings(report, path, source, &errors, Severity::Error);
    rule_findings(report, path, source, problems.warnings(), Severity::Warning);
}

/// Turns a DSL checker's findings of one rule into diagnostics of `severity`.
pub(crate) fn rule_findings(
    report: &mut Report,
    path: &Path,
    source: &str,
    findings: &[portcullis_dsl::Problem],
    severity: Severity,
) {
    if findings.is_empty() {
        return;
    }
    let tree = yaml::parse(source).ok();
    for finding in findings {
        let position = match (finding.line_column(), finding.json_path(), &tree) {
            (Some((line, column)), _, _) => Some(Position { line, column }),
            (None, Some(json_path), Some(tree)) => Some(tree.locate(json_path)),
            _ => None,
        };
        let diagnostic = match severity {
            Severity::Error => Diagnostic::error(path, position, finding.message()),
            Severity::Warning => Diagnostic::warning(path, position, finding.message()),
        };
        report.push(diagnostic.with_optional_help(finding.help().map(str::to_owned)));
    }
}

/// A bundle's policy id: its file name without `.tar.gz`, `.tgz` or `.wasm`.
pub fn bundle_id(path: &Path) -> String {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    for ending in [".tar.gz", ".tgz", ".wasm"] {
        if let Some(stem) = name.strip_suffix(ending) {
            return stem.to_owned();
        }
    }
    name.to_owned()
}

/// The error's message followed by those of its causes (each once).
#[cfg(any(feature = "rego", feature = "rego-rest", feature = "http"))]
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
