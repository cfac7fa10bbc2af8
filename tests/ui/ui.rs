//! Compile-time behaviour of the macros, pinned with trybuild: `<macro>/pass/*.rs` must
//! compile, `<macro>/fail/*.rs` must fail with the `.stderr` next to them.
//! Refresh the snapshots with `TRYBUILD=overwrite cargo test -p portcullis-ui-tests`.
//!
//! trybuild builds its project once; the tests of the three macros take turns with it. The
//! project depends on the facade with the `macros` feature only, so the compiler's "the following
//! other types implement trait" lists in the snapshots name the engine's and the DSL's policy
//! types, whatever features the rest of the workspace is built with.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// trybuild compiles the cases as a crate of its own, in `<target>/tests/trybuild/<package>`,
/// so `CARGO_MANIFEST_DIR` (which `dsl_policy!` resolves rule files against) is that directory
/// while the cases run. The rule files are copied there: this package's `rules/` and the
/// examples' `examples/rules/`, so a case reads `dsl_policy!(input, "rules/x.json")` as a user
/// would.
fn copy_rule_files_into_the_trybuild_project() {
    let target = trybuild_target_dir();
    let project = target
        .join("tests")
        .join("trybuild")
        .join(env!("CARGO_PKG_NAME"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (source, copy) in [
        ("rules", "rules"),
        ("../../examples/rules", "examples/rules"),
    ] {
        let destination = project.join(copy);
        std::fs::create_dir_all(&destination).expect("the trybuild project directory");
        for entry in std::fs::read_dir(root.join(source)).expect("a rules directory") {
            let path = entry.expect("a directory entry").path();
            // Rules only: a folder of rules (for an example's manifest) is not a case here.
            if path.is_dir() {
                continue;
            }
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

/// The target directory trybuild builds its project in: `CARGO_TARGET_DIR` when it is set (as
/// `cargo metadata` reports it to trybuild), else the one holding `CARGO_TARGET_TMPDIR` (which
/// is inside the build directory, so not the target directory when the two are apart).
fn trybuild_target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)
        && dir.is_absolute()
    {
        return dir;
    }
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// The cases of one macro; a test each, so a failure names the macro in the test summary.
fn check(macro_name: &str) {
    // Once for all tests: none may rewrite a rule file while another one compiles.
    static COPY: std::sync::Once = std::sync::Once::new();
    COPY.call_once(copy_rule_files_into_the_trybuild_project);
    let cases = trybuild::TestCases::new();
    cases.pass(format!("{macro_name}/pass/*.rs"));
    cases.compile_fail(format!("{macro_name}/fail/*.rs"));
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
