//! Stage 2: the rule file, read and checked by the runtime DSL's checker.

use std::path::{Path, PathBuf};

use portcullis_dsl::{CheckedRule, check_source, validate_id};

use super::parse::Invocation;
use crate::diagnostics::Errors;

/// A rule file that was read and checked.
pub struct LoadedRule {
    /// The checked rule.
    pub rule: CheckedRule,
    /// The policy id: the file stem.
    pub id: String,
    /// The file, absolute, for `include_str!`.
    pub file: PathBuf,
}

/// The crate being compiled, from `CARGO_MANIFEST_DIR` (set by Cargo for every compilation).
pub(crate) fn manifest_dir() -> Option<PathBuf> {
    std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from)
}

/// Reads and checks the rule named by `invocation`, relative to `manifest_dir`. On failure
/// every problem is in `errors`, and the error value is the file when it could be read (so
/// the expansion can still track it).
pub(crate) fn load(
    invocation: &Invocation,
    manifest_dir: Option<&Path>,
    errors: &mut Errors,
) -> Result<LoadedRule, Option<PathBuf>> {
    let written = invocation.path.value();
    let literal = &invocation.path;
    let Some(manifest_dir) = manifest_dir else {
        errors.spanned(
            literal,
            format!(
                "{written}: cannot find the rule file: `CARGO_MANIFEST_DIR` is not set \
                 (build with Cargo, which sets it)"
            ),
        );
        return Err(None);
    };
    let file = manifest_dir.join(&written);

    let id = file_stem(&file);
    let id = match id {
        Some(id) => match validate_id(&id) {
            Ok(()) => Some(id),
            Err(error) => {
                errors.spanned(
                    literal,
                    format!("{written}: the file stem is the policy id, and {error}"),
                );
                None
            }
        },
        None => {
            errors.spanned(
                literal,
                format!(
                    "{written}: the file stem is the policy id, and this path has none \
                     (name a file like \"rules/no_ssn.json\")"
                ),
            );
            None
        }
    };

    let source = match std::fs::read_to_string(&file) {
        Ok(source) => source,
        Err(error) => {
            errors.spanned(
                literal,
                format!(
                    "{written}: cannot read the rule file ({error}); the path is relative to \
                     the directory of the crate's Cargo.toml (`CARGO_MANIFEST_DIR`)"
                ),
            );
            return Err(None);
        }
    };

    let checked = check_source(&source, &written, invocation.point);
    match (checked, id) {
        (Ok(rule), Some(id)) => Ok(LoadedRule { rule, id, file }),
        (Ok(_), None) => Err(Some(file)),
        (Err(problems), _) => {
            for problem in problems.iter() {
                errors.spanned(literal, problem);
            }
            Err(Some(file))
        }
    }
}

fn file_stem(file: &Path) -> Option<String> {
    file.file_stem()
        .and_then(|stem| stem.to_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(tokens: proc_macro2::TokenStream) -> Invocation {
        syn::parse2(tokens).expect("a valid invocation")
    }

    fn messages(errors: &Errors) -> String {
        errors.to_compile_errors().to_string()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "portcullis-macros-core-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("rules")).expect("a temporary directory");
        dir
    }

    #[test]
    fn a_valid_rule_is_loaded_with_its_stem_as_id() {
        let dir = temp_dir("valid");
        std::fs::write(
            dir.join("rules/approved.json"),
            r#"{ "condition": { "field": "tool_name", "not_in": ["search"] }, "action": "deny" }"#,
        )
        .expect("a rule file");
        let mut errors = Errors::default();
        let loaded = load(
            &invocation(quote::quote!(tool_call, "rules/approved.json")),
            Some(&dir),
            &mut errors,
        );
        let loaded = loaded.expect("the rule is valid");
        assert_eq!(loaded.id, "approved");
        assert_eq!(loaded.file, dir.join("rules/approved.json"));
        assert!(errors.is_empty());
    }

    #[test]
    fn every_problem_becomes_an_error_naming_the_file() {
        let dir = temp_dir("problems");
        std::fs::write(
            dir.join("rules/bad.json"),
            r#"{ "condition": { "field": "tool_name", "contians": ["rm"] } }"#,
        )
        .expect("a rule file");
        let mut errors = Errors::default();
        let loaded = load(
            &invocation(quote::quote!(input, "rules/bad.json")),
            Some(&dir),
            &mut errors,
        );
        assert_eq!(loaded.err(), Some(Some(dir.join("rules/bad.json"))));
        assert!(errors.len() >= 2, "{}", messages(&errors));
        assert!(messages(&errors).contains("rules/bad.json"));
    }

    #[test]
    fn a_missing_file_says_where_it_was_looked_for() {
        let dir = temp_dir("missing");
        let mut errors = Errors::default();
        let loaded = load(
            &invocation(quote::quote!(output, "rules/nope.json")),
            Some(&dir),
            &mut errors,
        );
        assert_eq!(loaded.err(), Some(None));
        let text = messages(&errors);
        assert!(
            text.contains("rules/nope.json: cannot read the rule file"),
            "{text}"
        );
    }
}
