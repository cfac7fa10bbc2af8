//! What the checker reports: [`Problem`]s (errors, and [`Warning`]s) with their [`Location`]
//! and [`Severity`], and [`Problems`], every error of one rule.

use std::fmt;

/// Where a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// In the JSON text (syntax errors): 1-based line and column.
    Text {
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
    },
    /// At a part of the rule, as a JSON path from the rule's root (`condition.all[1].field`);
    /// empty for the rule as a whole.
    Path(String),
}

/// How serious a finding of the checker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The rule cannot be loaded: bad JSON, a shape the schema rejects, a path that cannot
    /// exist in the point's context, an invalid regular expression.
    Error,
    /// The rule loads and decides as written, but something in it is surely not meant: a
    /// condition that can never hold, a change that breaks the context when applied (an
    /// evaluation error at run time), a part the action ignores, a pattern that never matches.
    /// Strict loading ([`CheckedRule::deny_warnings`](crate::CheckedRule::deny_warnings), `DslInputPolicy::new_strict`) turns
    /// warnings into errors.
    Warning,
}

impl Severity {
    /// `"error"` or `"warning"`, as compilers print them.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding of the checker about a rule: where it is, what is wrong, what to do, and how
/// serious it is ([`severity`](Self::severity)). Errors come in [`Problems`]; warnings of a
/// rule that loads come from [`CheckedRule::warnings`](crate::CheckedRule::warnings) (and from the policies' `warnings()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    origin: String,
    location: Location,
    message: String,
    help: Option<String>,
    pub(super) severity: Severity,
    /// Where the part at `location`'s path is in the text, when the rule came as text.
    pub(super) position: Option<(usize, usize)>,
}

/// A finding that does not stop a rule from loading: a [`Problem`] whose
/// [`severity`](Problem::severity) is [`Severity::Warning`].
///
/// ```
/// use portcullis_dsl::{DslInputPolicy, Severity};
///
/// // Valid under the schema, so it loads, but a role is lower case: it can never hold.
/// let policy = DslInputPolicy::from_source(
///     "roles",
///     r#"{ "condition": { "field": "messages.0.role", "equals": "USER" }, "action": "deny" }"#,
///     "rules/roles.json",
/// )?;
/// let warning = &policy.warnings()[0];
/// assert_eq!(warning.severity(), Severity::Warning);
/// assert_eq!(warning.json_path(), Some("condition.equals"));
/// assert!(warning.message().contains("can never match"));
///
/// // Strict loading refuses it.
/// assert!(DslInputPolicy::from_source_strict(
///     "roles",
///     r#"{ "condition": { "field": "messages.0.role", "equals": "USER" }, "action": "deny" }"#,
///     "rules/roles.json",
/// ).is_err());
/// # Ok::<(), portcullis_dsl::DslError>(())
/// ```
pub type Warning = Problem;

impl Problem {
    pub(super) fn new(
        origin: &str,
        location: Location,
        message: String,
        help: Option<String>,
    ) -> Self {
        Problem {
            origin: origin.to_owned(),
            location,
            message,
            help,
            severity: Severity::Error,
            position: None,
        }
    }

    /// Whether this is an error or a warning.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// The file (or other origin) the rule came from, as given to the checker.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Where the problem is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Line and column (1-based) of the problem in the rule's text: where a JSON syntax error
    /// is, or where the part named by [`json_path`](Self::json_path) starts (its key, for an
    /// object's member). `None` when the rule was not checked from text
    /// ([`check_value`](crate::check_value), [`check_rule`](crate::check_rule)).
    pub fn line_column(&self) -> Option<(usize, usize)> {
        match self.location {
            Location::Text { line, column } => Some((line, column)),
            Location::Path(_) => self.position,
        }
    }

    /// The JSON path of the offending part (empty for the whole rule); `None` for syntax errors.
    pub fn json_path(&self) -> Option<&str> {
        match &self.location {
            Location::Path(path) => Some(path),
            Location::Text { .. } => None,
        }
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What to do about it.
    pub fn help(&self) -> Option<&str> {
        self.help.as_deref()
    }
}

/// `origin:line:column: message` for syntax errors, `origin:line:column: at path: message`
/// for a part of the rule (`origin: at path: message` when the line is not known;
/// `origin: message` for the rule as a whole), followed by `; help` when there is one.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Location::Text { line, column } => {
                write!(f, "{}:{line}:{column}: {}", self.origin, self.message)?;
            }
            Location::Path(path) if path.is_empty() => {
                write!(f, "{}: {}", self.origin, self.message)?;
            }
            Location::Path(path) => match self.position {
                Some((line, column)) => write!(
                    f,
                    "{}:{line}:{column}: at {path}: {}",
                    self.origin, self.message
                )?,
                None => write!(f, "{}: at {path}: {}", self.origin, self.message)?,
            },
        }
        if let Some(help) = &self.help {
            write!(f, "; {help}")?;
        }
        Ok(())
    }
}

/// Every error found in one rule (never empty), and the warnings found along.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    pub(super) problems: Vec<Problem>,
    pub(super) warnings: Vec<Warning>,
}

impl Problems {
    pub(super) fn errors(problems: Vec<Problem>) -> Self {
        Problems {
            problems,
            warnings: Vec::new(),
        }
    }

    /// The warnings the checker found besides the errors (what would remain once they are
    /// fixed), for tools that show everything at once.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The problems, in the order of the rule's parts.
    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.problems.iter()
    }

    /// How many there are (at least one).
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// Always `false`: there is at least one problem.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems.
    pub fn into_vec(self) -> Vec<Problem> {
        self.problems
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a Problem;
    type IntoIter = std::slice::Iter<'a, Problem>;

    fn into_iter(self) -> Self::IntoIter {
        self.problems.iter()
    }
}

/// One error per line (the warnings are not shown: see [`Problems::warnings`]).
impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, problem) in self.problems.iter().enumerate() {
            if at > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}
