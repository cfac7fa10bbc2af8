//! Compile-time behaviour of the macros, pinned with trybuild: `tests/ui/<macro>/pass/*.rs`
//! must compile, `tests/ui/<macro>/fail/*.rs` must fail with the `.stderr` next to them.
//! Refresh the snapshots with `TRYBUILD=overwrite cargo test --test ui`.
//!
//! trybuild builds its project once; the tests of the three macros take turns with it.
//!
//! The compiler's "the following other types implement trait" lists in the snapshots name every
//! policy type the enabled features bring, so the snapshots are those of the whole feature set,
//! the one the README's test command (`--all-features`) builds; with fewer features the cases are
//! skipped rather than compared against a different list.
#![cfg(all(
    feature = "macros",
    feature = "rego",
    feature = "rego-rest",
    feature = "http",
    feature = "otel",
    feature = "observability",
    feature = "openai",
    feature = "rig"
))]

use std::path::{Path, PathBuf};

/// trybuild compiles the cases as a crate of its own, in `<target>/tests/trybuild/portcullis`,
/// so `CARGO_MANIFEST_DIR` (which `dsl_policy!` resolves rule files against) is that directory
/// while the cases run. The rule files are copied there, to the same relative paths they have
/// here, so a case reads `dsl_policy!(input, "tests/ui/rules/x.json")` as a user would.
fn copy_rule_files_into_the_trybuild_project() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"));
    let project = target
        .join("tests")
        .join("trybuild")
        .join(env!("CARGO_PKG_NAME"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["tests/ui/rules", "examples/rules"] {
        let destination = project.join(dir);
        std::fs::create_dir_all(&destination).expect("the trybuild project directory");
        for entry in std::fs::read_dir(root.join(dir)).expect("a rules directory") {
            let path = entry.expect("a directory entry").path();
            if let Some(name) = path.file_name() {
                let copy = destination.join(name);
                // Only rewrite changed files, so unchanged cases are not rebuilt.
                let source = std::fs::read(&path).expect("a readable rule file");
                if std::fs::read(&copy).ok().as_deref() != Some(source.as_slice()) {
                    std::fs::write(&copy, source).expect("a copied rule file");
                }
            }
        }
    }
}

/// The cases of one macro; a test each, so a failure names the macro in the test summary.
fn check(macro_name: &str) {
    // Once for all tests: none may rewrite a rule file while another one compiles.
    static COPY: std::sync::Once = std::sync::Once::new();
    COPY.call_once(copy_rule_files_into_the_trybuild_project);
    let cases = trybuild::TestCases::new();
    cases.pass(format!("tests/ui/{macro_name}/pass/*.rs"));
    cases.compile_fail(format!("tests/ui/{macro_name}/fail/*.rs"));
}

#[test]
fn ui_policy_fn() {
    check("policy_fn");
}

#[test]
fn ui_policy_set() {
    check("policy_set");
}

#[test]
fn ui_dsl_policy() {
    check("dsl_policy");
}
