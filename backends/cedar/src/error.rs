//! What can go wrong: a policy set that does not load ([`CedarError`], made of
//! [`CedarProblem`]s with their place), and an evaluation that fails ([`CedarEvaluationError`]).

use std::fmt;

/// Which of a Cedar policy's three texts a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CedarSource {
    /// The policies (`.cedar`).
    Policies,
    /// The schema (`.cedarschema`, or Cedar's JSON schema format).
    Schema,
    /// The entities (Cedar's JSON entity format).
    Entities,
}

impl CedarSource {
    /// The text's name in messages: `policies`, `schema` or `entities`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CedarSource::Policies => "policies",
            CedarSource::Schema => "schema",
            CedarSource::Entities => "entities",
        }
    }
}

impl fmt::Display for CedarSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem (or warning) of a Cedar policy set, at its place in the text it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CedarProblem {
    /// The text the problem is in.
    pub source: CedarSource,
    /// Line and column (both from 1, the column counted in characters), when Cedar gives a
    /// place.
    pub position: Option<(usize, usize)>,
    /// What is wrong, in Cedar's words.
    pub message: String,
    /// How to fix it, when Cedar (or this crate) knows.
    pub help: Option<String>,
}

impl CedarProblem {
    pub(crate) fn new(
        source: CedarSource,
        position: Option<(usize, usize)>,
        message: impl Into<String>,
    ) -> Self {
        CedarProblem {
            source,
            position,
            message: message.into(),
            help: None,
        }
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl fmt::Display for CedarProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => write!(f, "{}:{line}:{column}: {}", self.source, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

/// A Cedar policy that cannot be built: every problem of its policies, schema and entities,
/// each at its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CedarError {
    problems: Vec<CedarProblem>,
    warnings: Vec<CedarProblem>,
}

impl CedarError {
    pub(crate) fn new(problems: Vec<CedarProblem>, warnings: Vec<CedarProblem>) -> Self {
        CedarError { problems, warnings }
    }

    /// The problems, in the order of the texts (policies, schema, entities) and of their
    /// places; never empty.
    pub fn problems(&self) -> &[CedarProblem] {
        &self.problems
    }

    /// The warnings found on the way (Cedar's validation warnings among them).
    pub fn warnings(&self) -> &[CedarProblem] {
        &self.warnings
    }
}

impl fmt::Display for CedarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the Cedar policy set cannot be used: ")?;
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CedarError {}

/// An evaluation that produced no decision: the policy set's `on_error` decides what the
/// call does.
#[derive(Debug)]
#[non_exhaustive]
pub enum CedarEvaluationError {
    /// The context cannot be made a Cedar record (the cause says why).
    Context(Box<cedar_policy::ContextCreationError>),
    /// The request does not fit the schema (a context attribute of the wrong type, a required
    /// attribute missing, an entity type the action does not apply to).
    Request(Box<cedar_policy::RequestValidationError>),
    /// Cedar policies failed while evaluating (an attribute that does not exist, a type
    /// error, an overflow), and no forbid decided the request regardless.
    Policies(Vec<String>),
}

impl fmt::Display for CedarEvaluationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CedarEvaluationError::Context(_) => {
                f.write_str("the context cannot be made a Cedar record")
            }
            CedarEvaluationError::Request(_) => {
                f.write_str("the Cedar request does not fit the schema")
            }
            CedarEvaluationError::Policies(errors) => {
                write!(f, "Cedar policies failed: {}", errors.join("; "))
            }
        }
    }
}

impl std::error::Error for CedarEvaluationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CedarEvaluationError::Context(error) => Some(&**error),
            CedarEvaluationError::Request(error) => Some(&**error),
            CedarEvaluationError::Policies(_) => None,
        }
    }
}

/// Line and column (from 1; the column in characters) of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Every diagnostic of a Cedar error (the error and those it relates), each at the start of
/// its first label in `text`.
pub(crate) fn diagnostics(
    error: &dyn miette::Diagnostic,
    source: CedarSource,
    text: &str,
    out: &mut Vec<CedarProblem>,
) {
    out.push(problem(error, source, text));
    if let Some(related) = error.related() {
        for other in related {
            out.push(problem(other, source, text));
        }
    }
}

fn problem(error: &dyn miette::Diagnostic, source: CedarSource, text: &str) -> CedarProblem {
    let position = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| line_column(text, label.offset()));
    CedarProblem {
        source,
        position,
        message: with_causes(error),
        help: error.help().map(|help| help.to_string()),
    }
}

/// An error's message followed by those of its causes that it does not already say: Cedar's
/// own messages often keep the part worth reading in a cause ("unexpected token `)`").
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        cause = next.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_lines_and_characters() {
        let text = "ab\ncé d\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 1));
        // `d` is the fourth character of line 2, after a two-byte `é`.
        assert_eq!(line_column(text, 7), (2, 4));
        assert_eq!(line_column(text, 1000), (3, 1));
    }
}
