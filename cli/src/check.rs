//! `portcullis check`.

use std::path::{Path, PathBuf};

use portcullis::InterceptionPoint;
use portcullis::manifest::{CodeRegistry, Diagnostic, Manifest, Severity};
use serde_json::json;

use crate::Format;
use crate::render;

pub(crate) fn run(paths: &[PathBuf], deny_warnings: bool, format: Format) -> u8 {
    let mut diagnostics = Vec::new();
    let mut checked = 0usize;
    for path in paths {
        check_path(path, true, &mut diagnostics, &mut checked);
    }
    let errors: Vec<&Diagnostic> = diagnostics
        .iter()
        .filter(|d| d.severity() == Severity::Error)
        .collect();
    let warnings: Vec<&Diagnostic> = diagnostics
        .iter()
        .filter(|d| d.severity() == Severity::Warning)
        .collect();
    let failed = !errors.is_empty() || (deny_warnings && !warnings.is_empty());
    match format {
        Format::Json => {
            let document = json!({
                "ok": !failed,
                "checked": checked,
                "errors": errors.iter().map(|d| render::json(d)).collect::<Vec<_>>(),
                "warnings": warnings.iter().map(|d| render::json(d)).collect::<Vec<_>>(),
            });
            println!("{document:#}");
        }
        Format::Human | Format::Junit => {
            let colour = render::colours();
            for diagnostic in errors.iter().chain(&warnings) {
                print!("{}", render::human(diagnostic, colour));
            }
            println!(
                "{checked} checked: {} {}, {} {}",
                errors.len(),
                plural(errors.len(), "error", "errors"),
                warnings.len(),
                plural(warnings.len(), "warning", "warnings"),
            );
        }
    }
    u8::from(failed)
}

fn plural(count: usize, one: &'static str, many: &'static str) -> &'static str {
    if count == 1 { one } else { many }
}

fn check_path(path: &Path, named: bool, out: &mut Vec<Diagnostic>, checked: &mut usize) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
            Ok(read) => read.filter_map(Result::ok).map(|e| e.path()).collect(),
            Err(error) => {
                out.push(Diagnostic::error(
                    path,
                    None,
                    format!("cannot read the folder: {error}"),
                ));
                return;
            }
        };
        entries.sort();
        let before = *checked;
        for entry in entries {
            if entry.is_dir() || kind(&entry).is_some() {
                check_path(&entry, false, out, checked);
            }
        }
        if named && *checked == before {
            out.push(Diagnostic::warning(
                path,
                None,
                "nothing to check here (no *.yaml, *.json, *.tar.gz, *.wasm or *.cedar)",
            ));
        }
        return;
    }
    match kind(path) {
        Some(Kind::Manifest) if !named && is_test_file(path) => {
            // Test cases found in a folder are not manifests: `portcullis test` reads them.
        }
        Some(Kind::Manifest) => {
            *checked += 1;
            // Checked, not loaded: bundles are validated without compiling their WebAssembly.
            match Manifest::check(path, &CodeRegistry::new()) {
                Ok(warnings) => out.extend(warnings),
                Err(errors) => out.extend(errors.iter().cloned()),
            }
        }
        Some(Kind::Json) => {
            *checked += 1;
            check_json(path, out);
        }
        Some(Kind::Bundle) => {
            *checked += 1;
            check_bundle(path, out);
        }
        Some(Kind::Cedar) => {
            *checked += 1;
            check_cedar(path, out);
        }
        None if !path.exists() => {
            out.push(Diagnostic::error(path, None, "no such file or folder"));
        }
        None => out.push(
            Diagnostic::error(path, None, "cannot tell what this file is")
                .with_help("check takes manifests (*.yaml, *.yml), rules (*.json), bundles (*.tar.gz, *.wasm) and Cedar policies (*.cedar)"),
        ),
    }
}

/// Whether a YAML file is a test file (a map with `tests`).
fn is_test_file(path: &Path) -> bool {
    match portcullis::manifest::yaml::read(path) {
        Ok((_, root)) => match &root.value {
            portcullis::manifest::yaml::NodeValue::Map(entries) => {
                entries.iter().any(|(key, _)| key.as_str() == Some("tests"))
            }
            _ => false,
        },
        Err(_) => false,
    }
}

enum Kind {
    Manifest,
    Json,
    Bundle,
    Cedar,
}

fn kind(path: &Path) -> Option<Kind> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with(".yaml") || name.ends_with(".yml") {
        Some(Kind::Manifest)
    } else if name.ends_with(".json") {
        Some(Kind::Json)
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") || name.ends_with(".wasm") {
        Some(Kind::Bundle)
    } else if name.ends_with(".cedar") {
        Some(Kind::Cedar)
    } else {
        None
    }
}

/// A JSON file: a policy-set file (it has `aps_version`), or a rule, checked for every point;
/// its problems are those of the point it fits best.
fn check_json(path: &Path, out: &mut Vec<Diagnostic>) {
    let source = match portcullis::manifest::yaml::read_text(path) {
        Ok(source) => source,
        Err(message) => {
            out.push(Diagnostic::error(path, None, message));
            return;
        }
    };
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&source)
        && map.contains_key("aps_version")
    {
        // A policy-set file: check it as a manifest that includes it.
        check_policy_set(path, out);
        return;
    }
    let mut best: Option<Vec<Diagnostic>> = None;
    let mut loads: Option<Vec<Diagnostic>> = None;
    for point in InterceptionPoint::ALL {
        match portcullis::dsl::check_source(&source, &path.display().to_string(), point) {
            Ok(rule) => {
                // The rule loads at this point: its warnings are what is left to say (those
                // of the point with the fewest, when it loads at several).
                let found =
                    portcullis::manifest::rule_warning_diagnostics(path, &source, rule.warnings());
                if loads.as_ref().is_none_or(|loads| found.len() < loads.len()) {
                    loads = Some(found);
                }
            }
            Err(problems) => {
                let found = portcullis::manifest::rule_diagnostics(path, &source, &problems);
                if best.as_ref().is_none_or(|best| found.len() < best.len()) {
                    best = Some(found);
                }
            }
        }
    }
    match loads {
        Some(warnings) => out.extend(warnings),
        None => out.extend(best.unwrap_or_default()),
    }
}

fn check_policy_set(path: &Path, out: &mut Vec<Diagnostic>) {
    let scratch = std::env::temp_dir().join(format!(
        "portcullis-check-{}-{}.yaml",
        std::process::id(),
        out.len()
    ));
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let text = serde_json::json!({ "include": [absolute] }).to_string();
    if let Err(error) = std::fs::write(&scratch, text) {
        out.push(Diagnostic::error(
            path,
            None,
            format!("cannot check: {error}"),
        ));
        return;
    }
    let result = Manifest::check(&scratch, &CodeRegistry::new());
    let _ = std::fs::remove_file(&scratch);
    if let Err(errors) = result {
        out.extend(errors.iter().filter(|d| d.file() != scratch).cloned());
        // A problem reported against the stand-in manifest is about the file itself.
        for diagnostic in errors.iter().filter(|d| d.file() == scratch) {
            out.push(Diagnostic::error(path, None, diagnostic.message()));
        }
    }
}

#[cfg(feature = "rego")]
fn check_bundle(path: &Path, out: &mut Vec<Diagnostic>) {
    // Checked without compiling the module: what opening it for evaluation would refuse.
    match portcullis::rego::RegoBundle::check(path) {
        Ok(bundle) => {
            if bundle.entrypoints().is_empty() {
                out.push(Diagnostic::error(
                    path,
                    None,
                    "the bundle has no entrypoint",
                ));
            }
        }
        Err(error) => out.push(Diagnostic::error(
            path,
            None,
            format!("the bundle cannot be used: {error}"),
        )),
    }
}

#[cfg(not(feature = "rego"))]
fn check_bundle(path: &Path, out: &mut Vec<Diagnostic>) {
    out.push(
        Diagnostic::error(path, None, "this build cannot open Rego bundles")
            .with_help("build the command with the `rego` feature"),
    );
}

/// A Cedar policy file on its own: Cedar's parse errors and the `@decision` annotations, at
/// their line and column (a manifest's `cedar:` entry checks it with its schema and entities).
#[cfg(feature = "cedar")]
fn check_cedar(path: &Path, out: &mut Vec<Diagnostic>) {
    out.extend(portcullis::manifest::cedar_file_diagnostics(path));
}

#[cfg(not(feature = "cedar"))]
fn check_cedar(path: &Path, out: &mut Vec<Diagnostic>) {
    out.push(
        Diagnostic::error(path, None, "this build cannot check Cedar policies")
            .with_help("build with the `cedar` feature"),
    );
}
