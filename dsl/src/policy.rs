//! The runtime policies: a rule file read, checked and compiled once, at construction.

use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use portcullis_engine::{
    BoxError, InputContext, InterceptionPoint, OutputContext, Policy, PolicyContext,
    PolicyDecision, PolicyMode, StreamingRule, ToolCallContext,
};

use crate::check::{CheckedRule, Problems, Warning, check_source};
use crate::eval::CompiledRule;

/// Why a DSL policy could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum DslError {
    /// The id cannot name a rule file: it is empty, has a path separator or `..`.
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The rule file could not be read (it does not exist, for example).
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The rule file is a link (or sits under one) that leads outside the rule directory.
    OutsideDirectory {
        /// The file named by the id.
        path: PathBuf,
        /// Where it really is.
        resolved: PathBuf,
        /// The rule directory, resolved.
        dir: PathBuf,
    },
    /// The rule is invalid: bad JSON, or it breaks the rules of the DSL. Holds every problem.
    Invalid(Problems),
    /// A rule checked for one point was given to a policy of another.
    WrongPoint {
        /// The point the rule was checked for.
        checked_for: InterceptionPoint,
        /// The point of the policy.
        policy: InterceptionPoint,
    },
}

impl DslError {
    /// The problems of an invalid rule.
    pub fn problems(&self) -> Option<&Problems> {
        match self {
            DslError::Invalid(problems) => Some(problems),
            _ => None,
        }
    }
}

impl fmt::Display for DslError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DslError::InvalidId { id, problem } => {
                write!(f, "invalid DSL policy id {id:?}: {problem}")
            }
            DslError::Read { path, .. } => {
                write!(f, "cannot read the rule file {}", path.display())
            }
            DslError::OutsideDirectory {
                path,
                resolved,
                dir,
            } => write!(
                f,
                "the rule file {} resolves to {}, outside the rule directory {}",
                path.display(),
                resolved.display(),
                dir.display()
            ),
            DslError::Invalid(problems) => {
                let count = problems.len();
                let noun = if count == 1 { "problem" } else { "problems" };
                write!(f, "invalid rule ({count} {noun}):\n{problems}")
            }
            DslError::WrongPoint {
                checked_for,
                policy,
            } => write!(
                f,
                "the rule was checked for the {checked_for} point; it cannot be used at the {policy} point"
            ),
        }
    }
}

/// The I/O error of [`DslError::Read`] is its source. The problems of an invalid rule are the
/// error's own message (see [`DslError::problems`]), not a cause.
impl std::error::Error for DslError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DslError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Checks that `id` can name a rule file in a directory: not empty, no path separator
/// (`/` or `\`), no `..`, and no leading `.`.
pub fn validate_id(id: &str) -> Result<(), DslError> {
    let problem = if id.is_empty() {
        Some("it is empty")
    } else if id.contains(['/', '\\']) {
        Some("it contains a path separator; the id is the file name without `.json`")
    } else if id.contains("..") {
        Some("it contains `..`")
    } else if id.starts_with('.') {
        Some("it starts with `.`")
    } else if id.contains('\0') {
        Some("it contains a NUL character")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(DslError::InvalidId {
            id: id.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Reads and checks `<dir>/<id>.json` for `point`.
///
/// The id is checked with [`validate_id`], and the file must really be inside `dir`: a symbolic
/// link that leads outside it is refused ([`DslError::OutsideDirectory`]); one that stays inside
/// (an alias for another rule file) is followed.
pub fn load(id: &str, dir: &Path, point: InterceptionPoint) -> Result<CheckedRule, DslError> {
    validate_id(id)?;
    let path = dir.join(format!("{id}.json"));
    let read_error = |source| DslError::Read {
        path: path.clone(),
        source,
    };
    let resolved_dir = std::fs::canonicalize(dir).map_err(read_error)?;
    let resolved = std::fs::canonicalize(&path).map_err(read_error)?;
    if !resolved.starts_with(&resolved_dir) {
        return Err(DslError::OutsideDirectory {
            path,
            resolved,
            dir: resolved_dir,
        });
    }
    let source = std::fs::read_to_string(&resolved).map_err(|source| DslError::Read {
        path: path.clone(),
        source,
    })?;
    check_source(&source, &path.display().to_string(), point).map_err(DslError::Invalid)
}

/// A policy of the point of `C` from a JSON rule file, read, checked and compiled once, at
/// construction. [`DslInputPolicy`], [`DslToolCallPolicy`] and [`DslOutputPolicy`] name it at
/// each point.
///
/// ```
/// use portcullis_dsl::DslInputPolicy;
/// use portcullis_engine::{InputContext, Message, Metadata, Policy, PolicyDecision};
///
/// let dir = std::env::temp_dir().join(format!("portcullis-dsl-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("no_secrets.json"), r#"{
///     "condition": { "field": "messages.*.content", "contains": ["password", "api key"] },
///     "action": "deny",
///     "reason": "secrets must not reach the model"
/// }"#).unwrap();
///
/// let policy = DslInputPolicy::new("no_secrets", &dir).unwrap();
/// assert_eq!(policy.id(), "no_secrets");
/// let context = InputContext::new(
///     vec![Message::user("hello"), Message::user("my PASSWORD is hunter2")],
///     Metadata::new("agent", "session"),
/// );
/// assert_eq!(policy.decide(&context), PolicyDecision::deny("secrets must not reach the model"));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// A rule is checked for the point it is loaded at:
///
/// ```
/// use portcullis_dsl::{DslOutputPolicy, DslToolCallPolicy};
/// use portcullis_engine::{Message, Metadata, PolicyDecision, ToolCallContext};
///
/// let policy = DslToolCallPolicy::from_source(
///     "approved_tools",
///     r#"{ "condition": { "field": "tool_name", "not_in": ["search"] }, "action": "deny" }"#,
///     "approved_tools.json",
/// ).unwrap();
/// let call = |tool: &str| ToolCallContext::new(
///     tool, Default::default(), Message::assistant(""), Metadata::new("agent", "session"));
/// assert!(policy.decide(&call("shell")).is_deny());
/// assert_eq!(policy.decide(&call("search")), PolicyDecision::allow());
///
/// let error = DslOutputPolicy::from_source(
///     "bad",
///     r#"{ "condition": { "field": "tool_name", "equals": "shell" }, "action": "deny" }"#,
///     "bad.json",
/// ).unwrap_err();
/// assert!(error.to_string().contains("\"tool_name\" is a field of tool-call rules"));
/// ```
///
/// At the output point, the rule's streaming form (when it has one: `deny` on
/// `response.content` containing ASCII needles, and `always`-`redact` with `replace`
/// redactions of `response.content`) is the policy's [`streaming`](Policy::streaming), so the
/// streaming guard runs it incrementally as the answer arrives.
#[derive(Debug, Clone)]
pub struct DslPolicy<C> {
    id: String,
    mode: PolicyMode,
    rule: CheckedRule,
    compiled: CompiledRule,
    point: PhantomData<fn(&C)>,
}

/// An input policy from a JSON rule file (see [`DslPolicy`]).
pub type DslInputPolicy = DslPolicy<InputContext>;

/// A tool-call policy from a JSON rule file (see [`DslPolicy`]).
pub type DslToolCallPolicy = DslPolicy<ToolCallContext>;

/// An output policy from a JSON rule file (see [`DslPolicy`]).
pub type DslOutputPolicy = DslPolicy<OutputContext>;

impl<C: PolicyContext> DslPolicy<C> {
    /// Reads `<dir>/<id>.json`, checks it for this point and compiles it. The file is not read
    /// again: evaluation never touches the file system.
    ///
    /// Fails when the id is empty or has a path separator or `..`, when the file cannot be
    /// read, or when the rule is invalid (with every problem). A rule that is valid but has
    /// warnings loads; they are kept ([`warnings`](Self::warnings)).
    pub fn new(id: impl Into<String>, dir: impl AsRef<Path>) -> Result<Self, DslError> {
        let id = id.into();
        let rule = load(&id, dir.as_ref(), C::POINT)?;
        Self::from_checked(id, rule)
    }

    /// [`new`](Self::new), loading strictly: a rule with warnings (see
    /// [`warnings`](Self::warnings)) is refused, every warning reported as an error.
    pub fn new_strict(id: impl Into<String>, dir: impl AsRef<Path>) -> Result<Self, DslError> {
        let id = id.into();
        let rule = load(&id, dir.as_ref(), C::POINT)?
            .deny_warnings()
            .map_err(DslError::Invalid)?;
        Self::from_checked(id, rule)
    }

    /// A policy with the given id from rule source text (`origin` names it in messages).
    pub fn from_source(
        id: impl Into<String>,
        source: &str,
        origin: &str,
    ) -> Result<Self, DslError> {
        let rule = check_source(source, origin, C::POINT).map_err(DslError::Invalid)?;
        Self::from_checked(id, rule)
    }

    /// [`from_source`](Self::from_source), loading strictly: a rule with warnings is refused,
    /// every warning reported as an error.
    pub fn from_source_strict(
        id: impl Into<String>,
        source: &str,
        origin: &str,
    ) -> Result<Self, DslError> {
        let rule = check_source(source, origin, C::POINT)
            .and_then(CheckedRule::deny_warnings)
            .map_err(DslError::Invalid)?;
        Self::from_checked(id, rule)
    }

    /// A policy from a rule checked for this point (its warnings are kept; call
    /// [`CheckedRule::deny_warnings`] first to refuse them).
    pub fn from_checked(id: impl Into<String>, rule: CheckedRule) -> Result<Self, DslError> {
        if rule.point() != C::POINT {
            return Err(DslError::WrongPoint {
                checked_for: rule.point(),
                policy: C::POINT,
            });
        }
        Ok(DslPolicy {
            id: id.into(),
            mode: rule.mode(),
            compiled: CompiledRule::new(&rule),
            rule,
            point: PhantomData,
        })
    }

    /// Whether the rule's decisions are enforced or only monitored (`"mode"` in the rule; the
    /// same as the policy trait's `mode()`).
    pub fn mode(&self) -> PolicyMode {
        self.mode
    }

    /// The checked rule.
    pub fn rule(&self) -> &CheckedRule {
        &self.rule
    }

    /// What the checker found beyond the schema without refusing the rule (a condition that
    /// can never hold, a change that breaks the context when applied, ...), each with the
    /// file, where in the rule, and what to do. Empty for a clean rule. See
    /// [`CheckedRule::warnings`].
    pub fn warnings(&self) -> &[Warning] {
        self.rule.warnings()
    }

    /// Decides on `context` (what [`evaluate`](Policy::evaluate) returns, without the `async`
    /// and the `Result`: a DSL rule cannot fail).
    pub fn decide(&self, context: &C) -> PolicyDecision {
        self.compiled.evaluate(context)
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for DslPolicy<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        Ok(self.compiled.evaluate(context))
    }

    fn mode(&self) -> PolicyMode {
        self.mode
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        match C::POINT {
            InterceptionPoint::Output => crate::stream::streaming_form(&self.rule),
            InterceptionPoint::Input | InterceptionPoint::ToolCall => None,
        }
    }
}
