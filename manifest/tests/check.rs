//! `Manifest::check`: the problems `load` reports, without compiling bundles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{NO_SSN, Scratch};
use portcullis_manifest::{CodeRegistry, Manifest};

fn messages(errors: &portcullis_manifest::ManifestErrors) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn check_reports_what_load_reports() {
    let scratch = Scratch::new("check");
    scratch.write("rules/no_ssn.json", NO_SSN);
    scratch.write(
        "rules/typo.json",
        r#"{ "condition": { "field": "messages.0.contnet", "contains": ["x"] }, "action": "deny" }"#,
    );
    let clean = scratch.write("clean.yaml", "input:\n  - dsl: rules/no_ssn.json\n");
    assert_eq!(
        Manifest::check(&clean, &CodeRegistry::new()).unwrap(),
        Manifest::load(&clean, &CodeRegistry::new())
            .unwrap()
            .warnings()
    );
    let broken = scratch.write(
        "broken.yaml",
        "input:\n  - dsl: rules/typo.json\n  - code: nothing\n  - dsl: rules/missing.json\n",
    );
    let checked = Manifest::check(&broken, &CodeRegistry::new()).unwrap_err();
    let loaded = Manifest::load(&broken, &CodeRegistry::new()).unwrap_err();
    assert_eq!(messages(&checked), messages(&loaded));
    assert_eq!(checked.errors().len(), 3, "{checked}");
}

#[cfg(feature = "rego")]
#[test]
fn bundles_are_checked_without_being_compiled() {
    let fixtures = std::env::var_os("PORTCULLIS_OPA_FIXTURES").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/fixtures/rego-wasm")
        },
        |dir| std::path::PathBuf::from(dir).join("rego-wasm"),
    );
    let bundle = fixtures.join("no-ssn-input.tar.gz");
    assert!(bundle.is_file(), "missing fixture {}", bundle.display());
    let scratch = Scratch::new("check-rego");
    scratch.write("junk.tar.gz", "not a bundle");
    let clean = scratch.write(
        "clean.yaml",
        &format!("input:\n  - rego: {}\n", bundle.display()),
    );
    assert_eq!(
        Manifest::check(&clean, &CodeRegistry::new()).unwrap(),
        Vec::new()
    );
    let broken = scratch.write(
        "broken.yaml",
        &format!(
            "input:\n  - rego: {}\n    entrypoint: aps/input/nope\n  - rego: junk.tar.gz\n",
            bundle.display()
        ),
    );
    let checked = Manifest::check(&broken, &CodeRegistry::new()).unwrap_err();
    let loaded = Manifest::load(&broken, &CodeRegistry::new()).unwrap_err();
    assert_eq!(messages(&checked), messages(&loaded));
    let checked = messages(&checked);
    assert_eq!(checked.len(), 2, "{checked:#?}");
    assert!(
        checked[0].contains("broken.yaml:2:5: error: the bundle")
            && checked[0].contains("has no entrypoint \"aps/input/nope\""),
        "{checked:#?}"
    );
    assert!(
        checked[1].contains("broken.yaml:4:5: error: the bundle")
            && checked[1].contains("junk.tar.gz cannot be used"),
        "{checked:#?}"
    );
}
