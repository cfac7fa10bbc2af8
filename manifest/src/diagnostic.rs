//! Problems found in a manifest and the files it names: where, what, and what to do.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::yaml::Position;

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The manifest cannot be loaded.
    Error,
    /// The manifest loads, but something is probably not what its author meant, or is not
    /// applied.
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One problem: the file, the line and column when known, what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    severity: Severity,
    file: PathBuf,
    position: Option<Position>,
    message: String,
    help: Option<String>,
}

impl Diagnostic {
    /// An error in `file` at `position`.
    pub fn error(file: &Path, position: Option<Position>, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.to_owned(),
            position,
            message: message.into(),
            help: None,
        }
    }

    /// A warning in `file` at `position`.
    pub fn warning(file: &Path, position: Option<Position>, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, position, message)
        }
    }

    /// Adds what to do about it.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds what to do about it, when there is something to say.
    pub fn with_optional_help(mut self, help: Option<String>) -> Self {
        self.help = help;
        self
    }

    /// Error or warning.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// The file the problem is in.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Line and column (from 1), when the problem has a place in the file.
    pub fn position(&self) -> Option<Position> {
        self.position
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

/// `file:line:col: error: message` (as compilers write it), then `help: ...` on its own line.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(position) = self.position {
            write!(f, ":{}:{}", position.line, position.column)?;
        }
        write!(f, ": {}: {}", self.severity.as_str(), self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Why a manifest could not be loaded: every error found (at least one), and the warnings
/// found on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestErrors {
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl ManifestErrors {
    pub(crate) fn new(errors: Vec<Diagnostic>, warnings: Vec<Diagnostic>) -> Self {
        ManifestErrors { errors, warnings }
    }

    /// The errors, in the order of the files (at least one).
    pub fn errors(&self) -> &[Diagnostic] {
        &self.errors
    }

    /// The warnings found while looking for errors.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Errors first, then warnings.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.errors.iter().chain(&self.warnings)
    }
}

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.errors.len();
        write!(
            f,
            "the policy set cannot be loaded ({count} {}):",
            if count == 1 { "error" } else { "errors" }
        )?;
        for error in &self.errors {
            write!(f, "\n{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestErrors {}

/// Collects diagnostics while a manifest is read.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// Adds a diagnostic, unless the same one is there already (an entry checked for several
    /// points reports a problem they share once).
    pub(crate) fn push(&mut self, diagnostic: Diagnostic) {
        if !self.diagnostics.contains(&diagnostic) {
            self.diagnostics.push(diagnostic);
        }
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|diagnostic| diagnostic.severity == Severity::Error)
    }

    pub(crate) fn split(self) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
        self.diagnostics
            .into_iter()
            .partition(|diagnostic| diagnostic.severity == Severity::Error)
    }
}

/// The closest of `candidates` to `word`, if it is close enough to be a likely misspelling.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|candidate| (edit_distance(word, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len().max(word.len()) / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance in characters, a swap of two neighbours counting as one edit (optimal
/// string alignment).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut table = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            table[i * width + j] = if i == 0 {
                j
            } else if j == 0 {
                i
            } else {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut best = (table[(i - 1) * width + j] + 1)
                    .min(table[i * width + j - 1] + 1)
                    .min(table[(i - 1) * width + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(table[(i - 2) * width + j - 2] + 1);
                }
                best
            };
        }
    }
    table[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(closest("on_eror", &["on_error", "input"]), Some("on_error"));
        assert_eq!(closest("inptu", &["input", "output"]), Some("input"));
        assert_eq!(closest("zzzzzz", &["input", "output"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
