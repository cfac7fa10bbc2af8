//! `cedar:` entries: Cedar policies with their schema and entities, every problem of the
//! three files reported at its line and column (feature `cedar`).

use std::path::Path;

use portcullis_cedar::{CedarPolicy, CedarProblem, CedarSource, CedarSources};
use portcullis_engine::{Policy, PolicyContext, ToolCallContext};

use crate::diagnostic::{Diagnostic, Report};
use crate::yaml::{self, Position};

/// The files of one `cedar:` entry.
pub(crate) struct CedarFiles<'a> {
    pub(crate) policies: &'a Path,
    pub(crate) schema: Option<&'a Path>,
    pub(crate) entities: Option<&'a Path>,
}

impl CedarFiles<'_> {
    fn file(&self, source: CedarSource) -> &Path {
        match source {
            CedarSource::Schema => self.schema.unwrap_or(self.policies),
            CedarSource::Entities => self.entities.unwrap_or(self.policies),
            _ => self.policies,
        }
    }
}

/// A Cedar policy's id: its file's stem (`tools` for `policies/tools.cedar`).
pub(crate) fn cedar_id(path: &Path) -> String {
    path.file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// Reads, parses and validates the files of a `cedar:` entry for the point of `C`; a file
/// that cannot be read is an error at the entry (`manifest` and `position`), every problem
/// of the files an error at its place in its file, and Cedar's warnings warnings.
pub(crate) fn load<C: PolicyContext>(
    report: &mut Report,
    manifest: &Path,
    position: Position,
    files: &CedarFiles<'_>,
) -> Option<Box<dyn Policy<C>>> {
    let mut read = |path: &Path, what: &str| match yaml::read_text(path) {
        Ok(text) => Some(text),
        Err(message) => {
            report.push(
                Diagnostic::error(
                    manifest,
                    Some(position),
                    format!("the Cedar {what} {}: {message}", path.display()),
                )
                .with_help("paths are relative to the manifest's folder"),
            );
            None
        }
    };
    let policies = read(files.policies, "policies");
    let schema = files.schema.map(|path| read(path, "schema"));
    let entities = files.entities.map(|path| read(path, "entities"));
    let (Some(policies), Some(schema), Some(entities)) = (
        policies,
        schema.map_or(Some(None), |text| text.map(Some)),
        entities.map_or(Some(None), |text| text.map(Some)),
    ) else {
        return None;
    };
    let sources = CedarSources {
        policies: &policies,
        schema: schema.as_deref(),
        entities: entities.as_deref(),
    };
    match CedarPolicy::<C>::from_sources(cedar_id(files.policies), sources) {
        Ok(policy) => {
            problems(report, files, policy.warnings(), Diagnostic::warning);
            Some(Box::new(policy))
        }
        Err(error) => {
            problems(report, files, error.problems(), Diagnostic::error);
            problems(report, files, error.warnings(), Diagnostic::warning);
            None
        }
    }
}

fn problems(
    report: &mut Report,
    files: &CedarFiles<'_>,
    found: &[CedarProblem],
    kind: fn(&Path, Option<Position>, String) -> Diagnostic,
) {
    for problem in found {
        let position = problem
            .position
            .map(|(line, column)| Position { line, column });
        let diagnostic = kind(
            files.file(problem.source),
            position,
            problem.message.clone(),
        );
        report.push(diagnostic.with_optional_help(problem.help.clone()));
    }
}

/// The diagnostics of a Cedar policy file checked on its own (no schema, no entities): its
/// parse errors and bad annotations at their line and column, and its warnings.
pub fn cedar_file_diagnostics(path: &Path) -> Vec<Diagnostic> {
    let mut report = Report::default();
    let files = CedarFiles {
        policies: path,
        schema: None,
        entities: None,
    };
    let position = Position { line: 1, column: 1 };
    // Without a schema the point plays no part: any point checks the same.
    let _ = load::<ToolCallContext>(&mut report, path, position, &files);
    report.diagnostics
}
