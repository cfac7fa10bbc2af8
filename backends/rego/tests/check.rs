//! `RegoBundle::check`: what opening finds (entrypoints, ABI version, builtins, refusals),
//! found without compiling the module.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use portcullis_rego::{RegoBundle, RegoError};

/// Every OPA-built fixture: checking reads the same entrypoints, ABI version and builtins
/// as compiling and running the module does, and does not compile it.
#[test]
fn checking_opa_bundles_agrees_with_opening_them_without_compiling() {
    for relative in [
        "rego-wasm/no-ssn-input.tar.gz",
        "rego-wasm/approved-tools.tar.gz",
        "rego-wasm/no-blocked-domain-output.tar.gz",
        "opa-wasm-extra/test-p/policy.wasm",
        "opa-wasm-extra/example-allow/policy.wasm",
        "opa-wasm-extra/authz-allow/bundle.tar.gz",
    ] {
        let checked = RegoBundle::check(common::fixture(relative))
            .unwrap_or_else(|error| panic!("{relative}: {error}"));
        assert!(!checked.compiled(), "{relative}: checking compiled it");
        let opened = common::open(relative);
        assert_eq!(checked.entrypoints(), opened.entrypoints(), "{relative}");
        assert_eq!(checked.abi_version(), opened.abi_version(), "{relative}");
        assert_eq!(
            checked.host_builtins(),
            opened.host_builtins(),
            "{relative}"
        );
        assert!(!checked.entrypoints().is_empty(), "{relative}");
    }
}

#[test]
fn the_decision_entrypoint_is_chosen_as_the_policies_choose_it() {
    let checked = RegoBundle::check(common::fixture("rego-wasm/no-ssn-input.tar.gz")).unwrap();
    assert_eq!(
        checked.decision_entrypoint(None).unwrap(),
        "aps/input/decision"
    );
    assert_eq!(
        checked
            .decision_entrypoint(Some("aps/input/decision"))
            .unwrap(),
        "aps/input/decision"
    );
    match checked.decision_entrypoint(Some("aps/input/nope")) {
        Err(RegoError::Entrypoint { available, .. }) => {
            assert_eq!(available, ["aps/input/decision"]);
        }
        other => panic!("expected an entrypoint error, got {other:?}"),
    }
}

/// A module of another shape (its `builtins()` parses JSON text) is checked by compiling it:
/// the same answers as opening, refusals included.
#[test]
fn a_module_of_another_shape_is_compiled_to_be_checked() {
    let module = common::test_module(r#"{"sprintf": 0}"#, "");
    let checked = RegoBundle::check_bytes(&module).unwrap();
    assert!(checked.compiled());
    let opened = RegoBundle::from_bytes(&module).unwrap();
    assert_eq!(checked.entrypoints(), opened.entrypoints());
    assert_eq!(checked.host_builtins(), ["sprintf"]);

    let module = common::test_module(r#"{"no.such.builtin": 0}"#, "");
    assert!(matches!(
        RegoBundle::check_bytes(&module),
        Err(RegoError::MissingBuiltins { builtins, .. }) if builtins == ["no.such.builtin"]
    ));
}

/// A module in the shape OPA's compiler writes, with the given entrypoints, builtins and ABI
/// version (its other functions do nothing: it is only ever checked).
fn opa_shaped(entrypoints: &[&str], builtins: &[&str], abi: i32) -> Vec<u8> {
    let mut data = String::new();
    let mut address = 1024;
    let mut object = |names: &[&str]| {
        let mut body = String::from("(local $o i32) (local.set $o (call $object))\n");
        for (id, name) in names.iter().enumerate() {
            data.push_str(&format!("(data (i32.const {address}) \"{name}\\00\")\n"));
            body.push_str(&format!(
                "(call $insert (local.get $o) (call $string (i32.const {address})) (call $number (i64.const {id})))\n"
            ));
            address += name.len() + 1;
        }
        body.push_str("(local.get $o)");
        body
    };
    let entrypoints = object(entrypoints);
    let builtins = object(builtins);
    let text = format!(
        r#"(module
  (import "env" "memory" (memory 2))
  (import "env" "opa_abort" (func (param i32)))
  (import "env" "opa_builtin0" (func (param i32 i32) (result i32)))
  (func $object (result i32) (i32.const 0))
  (func $string (param i32) (result i32) (local.get 0))
  (func $number (param i64) (result i32) (i32.wrap_i64 (local.get 0)))
  (func $insert (param i32 i32 i32))
  (func $one (param i32) (result i32) (i32.const 0))
  (func $two (param i32 i32) (result i32) (i32.const 0))
  (func $none (result i32) (i32.const 0))
  (func $set (param i32))
  (func $entrypoints (result i32) {entrypoints})
  (func $builtins (result i32) {builtins})
  (global (export "opa_wasm_abi_version") i32 (i32.const {abi}))
  (global (export "opa_wasm_abi_minor_version") i32 (i32.const 3))
  (export "opa_malloc" (func $one))
  (export "opa_json_parse" (func $two))
  (export "opa_json_dump" (func $one))
  (export "opa_heap_ptr_get" (func $none))
  (export "opa_heap_ptr_set" (func $set))
  (export "opa_eval_ctx_new" (func $none))
  (export "opa_eval_ctx_set_input" (func $two))
  (export "opa_eval_ctx_set_data" (func $two))
  (export "opa_eval_ctx_get_result" (func $one))
  (export "eval" (func $one))
  (export "builtins" (func $builtins))
  (export "entrypoints" (func $entrypoints))
  {data})"#
    );
    wat::parse_str(&text).expect("valid WAT")
}

#[test]
fn entrypoints_builtins_and_refusals_are_read_from_the_code() {
    let module = opa_shaped(&["b/decision", "a/allow"], &["sprintf", "time.now_ns"], 1);
    let checked = RegoBundle::check_bytes(&module).unwrap();
    assert!(!checked.compiled());
    assert_eq!(checked.entrypoints(), ["a/allow", "b/decision"]);
    assert_eq!(checked.host_builtins(), ["sprintf", "time.now_ns"]);
    assert_eq!(checked.abi_version(), (1, 3));
    assert_eq!(checked.decision_entrypoint(None).unwrap(), "b/decision");

    let module = opa_shaped(&["a/decision"], &["http.send", "sprintf"], 1);
    match RegoBundle::check_bytes(&module) {
        Err(RegoError::MissingBuiltins { builtins, .. }) => assert_eq!(builtins, ["http.send"]),
        other => panic!("expected missing builtins, got {other:?}"),
    }

    let module = opa_shaped(&["a/decision"], &[], 2);
    match RegoBundle::check_bytes(&module) {
        Err(RegoError::NotOpaModule { message, .. }) => {
            assert!(message.contains("unsupported ABI version 2.3"), "{message}");
        }
        other => panic!("expected an ABI refusal, got {other:?}"),
    }

    // Not valid WebAssembly: a compile error, as opening gives.
    let mut broken = opa_shaped(&["a/decision"], &[], 1);
    broken.truncate(broken.len() - 3);
    assert!(matches!(
        RegoBundle::check_bytes(&broken),
        Err(RegoError::Compile { .. })
    ));
    assert!(matches!(
        RegoBundle::from_bytes(&broken),
        Err(RegoError::Compile { .. })
    ));
    // Not WebAssembly at all.
    assert!(matches!(
        RegoBundle::check_bytes(b"hello"),
        Err(RegoError::NotWasm { .. })
    ));
}

#[test]
fn imports_outside_the_abi_are_refused() {
    let module = common::test_module(
        r#"{}"#,
        r#"(import "env" "launch_missiles" (func (param i32)))"#,
    );
    let checked = RegoBundle::check_bytes(&module);
    let opened = RegoBundle::from_bytes(&module);
    assert!(
        matches!(checked, Err(RegoError::NotOpaModule { .. })),
        "{checked:?}"
    );
    assert!(
        matches!(opened, Err(RegoError::NotOpaModule { .. })),
        "{opened:?}"
    );
}
