//! The model → a policy set: opens every file and backend the manifest names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use portcullis_dsl::{DslPolicy, Problems};
#[cfg(any(feature = "rego", feature = "rego-rest", feature = "http"))]
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    BoxError, ByPoint, InputContext, InputPolicy, InterceptionPoint, OutputContext, OutputPolicy,
    PointMap, Policy, PolicyContext, PolicyDecision, PolicyExt, PolicyMode, PolicySet,
    PolicySetBuilder, ToolCallContext, ToolCallPolicy, ToolResultContext, ToolResultPolicy,
};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, Report, Severity, closest};
use crate::model::{Manifest, POINT_NAMES, PolicyEntry, PolicySource};
use crate::reader::Reader;
use crate::yaml::{self, Node, NodeValue, Position};

/// Policies written in Rust, registered by name so that a manifest can name them
/// (`- code: no_shouting`).
///
/// ```
/// use portcullis_engine::{async_trait, BoxError, InputContext, Policy, PolicyDecision};
/// use portcullis_manifest::CodeRegistry;
///
/// struct NoShouting;
///
/// #[async_trait]
/// impl Policy<InputContext> for NoShouting {
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
    points: ByPoint<Registered>,
}

/// The [`PointMap`] of a registry: each point's code policies by name.
struct Registered;

impl PointMap for Registered {
    type Of<C: PolicyContext> = BTreeMap<String, Arc<dyn Policy<C>>>;
}

impl std::fmt::Debug for CodeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeRegistry")
            .field("input", &self.names::<InputContext>())
            .field("tool_call", &self.names::<ToolCallContext>())
            .field("tool_result", &self.names::<ToolResultContext>())
            .field("output", &self.names::<OutputContext>())
            .finish()
    }
}

impl CodeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        CodeRegistry::default()
    }

    /// Registers a policy of the point of `C` under `name` (a later registration of the name
    /// at that point replaces it).
    pub fn policy<C: PolicyContext>(
        mut self,
        name: impl Into<String>,
        policy: impl Policy<C> + 'static,
    ) -> Self {
        self.points
            .get_mut::<C>()
            .insert(name.into(), Arc::new(policy));
        self
    }

    /// Registers an input policy under `name` (a later registration of the name replaces it).
    pub fn input(self, name: impl Into<String>, policy: impl InputPolicy + 'static) -> Self {
        self.policy::<InputContext>(name, policy)
    }

    /// Registers a tool-call policy under `name`.
    pub fn tool_call(self, name: impl Into<String>, policy: impl ToolCallPolicy + 'static) -> Self {
        self.policy::<ToolCallContext>(name, policy)
    }

    /// Registers a tool-result policy under `name`.
    pub fn tool_result(
        self,
        name: impl Into<String>,
        policy: impl ToolResultPolicy + 'static,
    ) -> Self {
        self.policy::<ToolResultContext>(name, policy)
    }

    /// Registers an output policy under `name`.
    pub fn output(self, name: impl Into<String>, policy: impl OutputPolicy + 'static) -> Self {
        self.policy::<OutputContext>(name, policy)
    }

    /// Whether a policy of any point is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        InterceptionPoint::ALL
            .into_iter()
            .any(|point| self.names_at(point).contains(&name))
    }

    /// The names registered at the point of `C`.
    fn names<C: PolicyContext>(&self) -> Vec<&str> {
        self.points.get::<C>().keys().map(String::as_str).collect()
    }

    /// The names registered at `point`.
    fn names_at(&self, point: InterceptionPoint) -> Vec<&str> {
        match point {
            InterceptionPoint::Input => self.names::<InputContext>(),
            InterceptionPoint::ToolCall => self.names::<ToolCallContext>(),
            InterceptionPoint::ToolResult => self.names::<ToolResultContext>(),
            InterceptionPoint::Output => self.names::<OutputContext>(),
        }
    }

    fn get<C: PolicyContext>(&self, name: &str) -> Option<Box<dyn Policy<C>>> {
        let policy = self.points.get::<C>().get(name)?;
        Some(Box::new(Arc::clone(policy)))
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
            #[cfg(feature = "rego")]
            mode,
            report: &mut report,
            files: vec![self.path.clone()],
            points: Points::default(),
        };
        builder.point::<InputContext>();
        builder.point::<ToolCallContext>();
        builder.point::<ToolResultContext>();
        builder.point::<OutputContext>();
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
        unsupported_sections(&self, builder.report);
        let Builder { files, points, .. } = builder;
        if report.has_errors() {
            let (errors, warnings) = report.split();
            return Err(crate::ManifestErrors::new(errors, warnings));
        }
        let set = match mode {
            Mode::Load => self.assemble(points),
            Mode::Check => PolicySet::default(),
        };
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
        fn add<C: PolicyContext>(
            builder: PolicySetBuilder,
            policies: Vec<Box<dyn Policy<C>>>,
        ) -> PolicySetBuilder {
            policies.into_iter().fold(builder, PolicySetBuilder::policy)
        }
        let mut builder = PolicySet::builder().on_error(self.on_error);
        builder = add(builder, points.input);
        builder = add(builder, points.tool_call);
        builder = add(builder, points.tool_result);
        builder = add(builder, points.output);
        for point in InterceptionPoint::ALL {
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

/// Runs `policy` as its manifest entry says: in monitor mode (`monitor: true`), with its own
/// deadline (`deadline:`).
fn wrap<C: PolicyContext>(
    mut policy: Box<dyn Policy<C>>,
    monitor: bool,
    deadline: Option<std::time::Duration>,
) -> Box<dyn Policy<C>> {
    if monitor && policy.mode() != PolicyMode::Monitor {
        policy = Box::new(policy.monitored());
    }
    if let Some(deadline) = deadline {
        policy = Box::new(policy.with_deadline(deadline));
    }
    policy
}

/// The [`PointMap`] of the policies built: each point's, in the manifest's order.
struct Lists;

impl PointMap for Lists {
    type Of<C: PolicyContext> = Vec<Box<dyn Policy<C>>>;
}

type Points = ByPoint<Lists>;

/// What building is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A policy set to evaluate with: everything opened and compiled.
    Load,
    /// Problems only: bundles are checked without compiling them, and no set is assembled
    /// (it would lack their policies).
    Check,
}

struct Builder<'m> {
    manifest: &'m Manifest,
    registry: &'m CodeRegistry,
    /// Only Rego bundles are built differently for a check.
    #[cfg(feature = "rego")]
    mode: Mode,
    report: &'m mut Report,
    files: Vec<PathBuf>,
    points: Points,
}

impl Builder<'_> {
    fn error(&mut self, position: Position, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(&self.manifest.path, Some(position), message)
    }

    /// Builds the entries of the point of `C`.
    fn point<C: PolicyContext>(&mut self) {
        for entry in self.manifest.entries(C::POINT) {
            self.entry::<C>(entry);
        }
    }

    fn push<C: PolicyContext>(&mut self, policy: Box<dyn Policy<C>>) {
        self.points.get_mut::<C>().push(policy);
    }

    fn entry<C: PolicyContext>(&mut self, entry: &PolicyEntry) {
        let point = C::POINT;
        let built = match &entry.source {
            PolicySource::Dsl { path } => {
                self.dsl::<C>(path, entry);
                return;
            }
            PolicySource::Rego { path, entrypoint } => {
                self.files.push(path.clone());
                self.rego::<C>(path, entrypoint.as_deref(), entry.position)
            }
            PolicySource::RegoUrl { .. } => {
                match crate::remote::build::<C>(self.manifest, &entry.source) {
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
                self.rego_server::<C>(url, package, id, entry.position)
            }
            PolicySource::Cedar {
                path,
                schema,
                entities,
            } => {
                self.files
                    .extend(std::iter::once(path).chain(schema).chain(entities).cloned());
                self.cedar::<C>(path, schema.as_deref(), entities.as_deref(), entry.position)
            }
            PolicySource::Http {
                url,
                id,
                bearer_token_env,
                timeout,
            } => self.http::<C>(
                url,
                id,
                bearer_token_env.as_deref(),
                *timeout,
                entry.position,
            ),
            PolicySource::Code { name } => match self.registry.get::<C>(name) {
                Some(built) => Some(built),
                None => {
                    let names = self.registry.names::<C>();
                    let elsewhere = InterceptionPoint::ALL.into_iter().find(|other| {
                        *other != point && self.registry.names_at(*other).contains(&name.as_str())
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
            self.push(wrap(built, entry.monitor, entry.deadline));
        }
    }

    fn dsl<C: PolicyContext>(&mut self, path: &Path, entry: &PolicyEntry) {
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
                if let Some(built) = load_rule::<C>(self.report, &rule) {
                    self.push(wrap(built, entry.monitor, entry.deadline));
                }
            }
        } else if path.is_file() {
            if let Some(built) = load_rule::<C>(self.report, path) {
                self.push(wrap(built, entry.monitor, entry.deadline));
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

    #[cfg(feature = "rego")]
    fn rego<C: PolicyContext>(
        &mut self,
        path: &Path,
        entrypoint: Option<&str>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        use portcullis_rego::RegoPolicy;
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
        let opened = match entrypoint {
            Some(entrypoint) => RegoPolicy::<C>::with_entrypoint(id, path, entrypoint),
            None => RegoPolicy::<C>::new(id, path),
        };
        self.opened(opened, position, || {
            format!("the bundle {} cannot be used", path.display())
        })
    }

    #[cfg(not(feature = "rego"))]
    fn rego<C: PolicyContext>(
        &mut self,
        _: &Path,
        _: Option<&str>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        self.unsupported(position, "rego", "rego")
    }

    #[cfg(feature = "rego-rest")]
    fn rego_server<C: PolicyContext>(
        &mut self,
        url: &str,
        package: &str,
        id: &str,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        use portcullis_rego::server::{RegoServerClientOptions, RegoServerPolicy};
        let options = RegoServerClientOptions::new(url);
        let opened = RegoServerPolicy::<C>::new(id, options, package);
        self.opened(opened, position, || {
            format!("the policy server entry `{id}` is invalid")
        })
    }

    #[cfg(not(feature = "rego-rest"))]
    fn rego_server<C: PolicyContext>(
        &mut self,
        _: &str,
        _: &str,
        _: &str,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        self.unsupported(position, "rego_server", "rego-rest")
    }

    #[cfg(feature = "http")]
    fn http<C: PolicyContext>(
        &mut self,
        url: &str,
        id: &str,
        bearer_token_env: Option<&str>,
        timeout: Option<std::time::Duration>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        use portcullis_http::{HttpClientOptions, HttpPolicy};
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
        let opened = HttpPolicy::<C>::new(id, options);
        self.opened(opened, position, || {
            format!("the http entry `{id}` is invalid")
        })
    }

    /// The policy a backend opened, boxed; or none, and an error at `position` that says what
    /// could not be used (`failed`) and why.
    #[cfg(any(feature = "rego", feature = "rego-rest", feature = "http"))]
    fn opened<C: PolicyContext, E: std::error::Error + 'static>(
        &mut self,
        opened: Result<impl Policy<C> + 'static, E>,
        position: Position,
        failed: impl FnOnce() -> String,
    ) -> Option<Box<dyn Policy<C>>> {
        match opened {
            Ok(policy) => Some(Box::new(policy)),
            Err(error) => {
                let message = format!("{}: {}", failed(), error_chain(&error));
                let diagnostic = self.error(position, message);
                self.report.push(diagnostic);
                None
            }
        }
    }

    #[cfg(not(feature = "http"))]
    fn http<C: PolicyContext>(
        &mut self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: Option<std::time::Duration>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        self.unsupported(position, "http", "http")
    }

    #[cfg(feature = "cedar")]
    fn cedar<C: PolicyContext>(
        &mut self,
        path: &Path,
        schema: Option<&Path>,
        entities: Option<&Path>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        let files = crate::cedar::CedarFiles {
            policies: path,
            schema,
            entities,
        };
        crate::cedar::load::<C>(self.report, &self.manifest.path, position, &files)
    }

    #[cfg(not(feature = "cedar"))]
    fn cedar<C: PolicyContext>(
        &mut self,
        _: &Path,
        _: Option<&Path>,
        _: Option<&Path>,
        position: Position,
    ) -> Option<Box<dyn Policy<C>>> {
        self.unsupported(position, "cedar", "cedar")
    }

    /// Reports that this build lacks the feature that loads `kind` policies: no policy.
    #[cfg(not(all(
        feature = "rego",
        feature = "rego-rest",
        feature = "http",
        feature = "cedar"
    )))]
    fn unsupported<T>(&mut self, position: Position, kind: &str, feature: &str) -> Option<T> {
        let diagnostic = self
            .error(
                position,
                format!("this build cannot load `{kind}` policies"),
            )
            .with_help(format!("build with the `{feature}` feature"));
        self.report.push(diagnostic);
        None
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
                let points = &mut self.points;
                let added = match point {
                    InterceptionPoint::Input => {
                        push_checked::<InputContext>(points, id.clone(), checked, tools)
                    }
                    InterceptionPoint::ToolCall => {
                        push_checked::<ToolCallContext>(points, id.clone(), checked, tools)
                    }
                    InterceptionPoint::ToolResult => {
                        push_checked::<ToolResultContext>(points, id.clone(), checked, tools)
                    }
                    InterceptionPoint::Output => {
                        push_checked::<OutputContext>(points, id.clone(), checked, tools)
                    }
                };
                if let Err(error) = added {
                    reader.push(Diagnostic::error(
                        path,
                        Some(item.position),
                        error.to_string(),
                    ));
                }
            }
        }
    }
}

/// The points an entry of a policy-set file applies to, with the tools of its `tool_call`
/// scope. Without `applies_to`, the three points of the specification's policy sets: the
/// `tool_result` extension is reached only when `applies_to` names it.
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
                    let named = name.as_str().and_then(|text| {
                        InterceptionPoint::from_name(text).map(|point| (text, point))
                    });
                    match named {
                        Some((text, point)) => {
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
                                .and_then(|text| closest(text, &POINT_NAMES))
                                .map(|suggestion| format!("did you mean `{suggestion}`?"));
                            let diagnostic = reader
                                .error(
                                    name.position,
                                    "`applies_to` lists points: input, tool_call, tool_result, output",
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

/// Adds the rule of a policy-set file checked for the point of `C`, scoped to `tools` when
/// it names them.
fn push_checked<C: PolicyContext>(
    points: &mut Points,
    id: String,
    checked: portcullis_dsl::CheckedRule,
    tools: Option<Vec<String>>,
) -> Result<(), portcullis_dsl::DslError> {
    let policy = DslPolicy::<C>::from_checked(id, checked)?;
    let policy: Box<dyn Policy<C>> = match tools {
        Some(tools) => Box::new(ToolScoped { policy, tools }),
        None => Box::new(policy),
    };
    points.get_mut::<C>().push(policy);
    Ok(())
}

/// A policy of a policy-set file that names its tools: for a call of any other tool it allows
/// without evaluating (only tool-call contexts name a tool).
struct ToolScoped<C> {
    policy: DslPolicy<C>,
    tools: Vec<String>,
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for ToolScoped<C> {
    fn id(&self) -> &str {
        self.policy.id()
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        match context.tool_name() {
            Some(tool) if !self.tools.iter().any(|named| named == tool) => {
                Ok(PolicyDecision::allow())
            }
            _ => Ok(self.policy.decide(context)),
        }
    }

    fn mode(&self) -> PolicyMode {
        self.policy.mode()
    }
}

/// Reads, checks and compiles one DSL rule file for the point of `C`; its problems go to
/// `report` with line and column.
fn load_rule<C: PolicyContext>(report: &mut Report, path: &Path) -> Option<Box<dyn Policy<C>>> {
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
    match DslPolicy::<C>::from_source(id, &source, &origin) {
        Ok(policy) => {
            // A rule that loads may still carry warnings: they go into the report with their
            // place.
            rule_findings(report, path, &source, policy.warnings(), Severity::Warning);
            Some(Box::new(policy))
        }
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

/// The warnings of sections this build cannot apply: what
/// [`LoadedManifest::into_engine_builder`] will refuse, said when the manifest is loaded.
pub(crate) fn unsupported_sections(manifest: &Manifest, report: &mut Report) {
    #[cfg(not(feature = "redis"))]
    {
        if let Some(sessions) = &manifest.sessions
            && let crate::model::SessionStore::Redis(_) = sessions.store
        {
            report.push(
                Diagnostic::warning(
                    &manifest.path,
                    Some(sessions.position),
                    "this build cannot keep sessions in Redis: an engine cannot be built from this manifest",
                )
                .with_help("build with the `redis` feature"),
            );
        }
        if let Some(approvals) = &manifest.approvals
            && let crate::model::ApprovalStore::Redis(_) = approvals.store
        {
            report.push(
                Diagnostic::warning(
                    &manifest.path,
                    Some(approvals.position),
                    "this build cannot keep approvals in Redis: an engine cannot be built from this manifest",
                )
                .with_help("build with the `redis` feature"),
            );
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        if manifest.audit.otlp.is_some() {
            report.push(
                Diagnostic::warning(
                    &manifest.path,
                    manifest.audit.otlp_position,
                    "this build cannot export spans over OTLP: an engine cannot be built from this manifest",
                )
                .with_help("build with the `otel` feature"),
            );
        }
    }
    let _ = (manifest, report);
}
