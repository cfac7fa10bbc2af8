//! Broken bundles and modules are construction errors that say what is wrong and where.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use portcullis_rego::{RegoBundle, RegoError, RegoInputPolicy, RegoToolCallPolicy};

/// A fresh scratch folder for this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portcullis-rego-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// Writes a `.tar.gz` holding `files` (name, contents). The `tar` writer only takes relative
/// names, so a leading `/` is dropped (the real OPA bundles of the fixtures have absolute ones).
fn write_bundle(path: &Path, files: &[(&str, &[u8])]) {
    let file = std::fs::File::create(path).expect("create");
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut archive = tar::Builder::new(encoder);
    for (name, contents) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        archive
            .append_data(&mut header, name.trim_start_matches('/'), *contents)
            .expect("append");
    }
    archive
        .into_inner()
        .expect("tar")
        .finish()
        .expect("gzip")
        .flush()
        .expect("flush");
}

fn open_error(path: &Path) -> RegoError {
    RegoBundle::open(path).expect_err("must not open")
}

#[test]
fn a_missing_file_names_the_path() {
    let path = scratch("missing").join("nope.tar.gz");
    let error = open_error(&path);
    assert!(matches!(error, RegoError::Read { .. }), "{error:?}");
    assert!(error.to_string().contains("nope.tar.gz"), "{error}");
    let error = RegoInputPolicy::new("p", &path).expect_err("same through a policy");
    assert!(matches!(error, RegoError::Read { .. }), "{error:?}");
}

#[test]
fn a_bundle_that_is_not_gzip() {
    let path = scratch("not-gzip").join("bundle.tar.gz");
    std::fs::write(&path, "package aps.input\n").expect("write");
    let error = open_error(&path);
    assert!(matches!(error, RegoError::Archive { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("bundle.tar.gz") && message.contains("gzip"),
        "{message}"
    );
}

#[test]
fn gzip_that_is_not_a_tar_archive() {
    let path = scratch("not-tar").join("bundle.tar.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&[7u8; 1500]).expect("gzip");
    std::fs::write(&path, encoder.finish().expect("gzip")).expect("write");
    let error = open_error(&path);
    assert!(
        matches!(
            error,
            RegoError::Archive { .. } | RegoError::NoPolicyWasm { .. }
        ),
        "{error:?}"
    );
}

#[test]
fn a_bundle_without_policy_wasm_lists_what_it_holds() {
    let path = scratch("no-wasm").join("bundle.tar.gz");
    write_bundle(
        &path,
        &[
            ("data.json", b"{}"),
            ("policy.rego", b"package x\nallow := true\n"),
        ],
    );
    let error = open_error(&path);
    match &error {
        RegoError::NoPolicyWasm { entries, .. } => {
            assert_eq!(
                entries,
                &["/data.json".to_owned(), "/policy.rego".to_owned()]
            );
        }
        other => panic!("expected NoPolicyWasm, got {other:?}"),
    }
    assert!(error.to_string().contains("opa build -t wasm"), "{error}");
}

#[test]
fn a_file_that_is_not_wasm() {
    let dir = scratch("not-wasm");
    let path = dir.join("policy.wasm");
    std::fs::write(&path, "not a module").expect("write");
    let error = open_error(&path);
    assert!(matches!(error, RegoError::NotWasm { .. }), "{error:?}");
    assert!(error.to_string().contains("policy.wasm"), "{error}");

    // The wasm header but no valid module behind it.
    std::fs::write(&path, b"\0asm\x01\0\0\0\x05garbage").expect("write");
    let error = open_error(&path);
    assert!(matches!(error, RegoError::Compile { .. }), "{error:?}");

    // Inside a bundle too.
    let bundle = dir.join("bundle.tar.gz");
    write_bundle(&bundle, &[("/policy.wasm", b"hello")]);
    assert!(matches!(open_error(&bundle), RegoError::NotWasm { .. }));
}

#[test]
fn wrong_imports_are_refused() {
    let path = scratch("imports").join("policy.wasm");
    // A module importing its memory from elsewhere than env.
    let wasm = wat::parse_str(r#"(module (import "js" "mem" (memory 1)))"#).expect("wat");
    std::fs::write(&path, wasm).expect("write");
    let error = open_error(&path);
    assert!(matches!(error, RegoError::NotOpaModule { .. }), "{error:?}");
    assert!(error.to_string().contains("js.mem"), "{error}");

    // opa_builtin1 with the wrong signature.
    let wasm = wat::parse_str(
        r#"(module (import "env" "memory" (memory 1)) (import "env" "opa_builtin1" (func (param i32))))"#,
    )
    .expect("wat");
    let error = RegoBundle::from_bytes(&wasm).expect_err("bad signature");
    assert!(error.to_string().contains("opa_builtin1"), "{error}");

    // No memory import at all.
    let wasm = wat::parse_str(r#"(module (memory (export "memory") 1))"#).expect("wat");
    let error = RegoBundle::from_bytes(&wasm).expect_err("no env.memory");
    assert!(error.to_string().contains("env.memory"), "{error}");
}

#[test]
fn bad_data_in_a_bundle() {
    let dir = scratch("bad-data");
    let wasm = common::test_module("{}", "");
    let path = dir.join("bundle.tar.gz");
    write_bundle(
        &path,
        &[("/policy.wasm", &wasm), ("/data.json", b"{not json")],
    );
    let error = open_error(&path);
    assert!(matches!(error, RegoError::Data { .. }), "{error:?}");
    assert!(error.to_string().contains("/data.json"), "{error}");

    // Nested data files land at their folder's path.
    write_bundle(
        &path,
        &[
            ("/policy.wasm", &wasm),
            ("/data.json", br#"{"a": 1}"#),
            ("/roles/admins/data.json", br#"["ann"]"#),
        ],
    );
    let bundle = RegoBundle::open(&path).expect("opens");
    assert_eq!(
        bundle.data(),
        &serde_json::json!({"a": 1, "roles": {"admins": ["ann"]}})
    );

    // Replacing the data document with something that is not an object.
    let error = bundle
        .with_data(serde_json::json!([1, 2]))
        .expect_err("not an object");
    assert!(matches!(error, RegoError::Data { .. }), "{error:?}");
}

#[test]
fn a_bundle_whose_entrypoints_are_ambiguous() {
    // The test module has ten entrypoints and none ends in /decision.
    let bundle = RegoBundle::from_bytes(&common::test_module("{}", "")).expect("opens");
    let error = RegoToolCallPolicy::from_bundle("p", bundle.clone()).expect_err("ambiguous");
    match &error {
        RegoError::Entrypoint { available, .. } => assert_eq!(available.len(), 10),
        other => panic!("expected an entrypoint error, got {other:?}"),
    }
    assert!(error.to_string().contains("test/ok"), "{error}");
    assert!(RegoToolCallPolicy::from_bundle_entrypoint("p", bundle, "test/ok").is_ok());
}
