//! The WebAssembly sandbox: a module gets the OPA ABI imports and the builtins listed here, and
//! nothing else. A module that imports anything more (WASI file, clock or socket calls, an
//! unknown host function, a table or a global) is refused when the bundle is opened, with an
//! error naming the import; a module that calls a builtin outside the list is refused too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use portcullis_rego::{HOST_BUILTINS, RegoBundle, RegoError};

/// Every builtin the host offers to a module. Adding one is a security decision: it must be a
/// pure function of its arguments (or, for `time.now_ns`, read the clock once per evaluation).
const CHOSEN_BUILTINS: &[&str] = &[
    "base64url.encode_no_pad",
    "crypto.hmac.equal",
    "crypto.hmac.md5",
    "crypto.hmac.sha1",
    "crypto.hmac.sha256",
    "crypto.hmac.sha512",
    "crypto.md5",
    "crypto.sha1",
    "crypto.sha256",
    "glob.quote_meta",
    "hex.decode",
    "hex.encode",
    "indexof_n",
    "io.jwt.decode",
    "io.jwt.verify_es256",
    "io.jwt.verify_hs256",
    "io.jwt.verify_hs384",
    "io.jwt.verify_hs512",
    "io.jwt.verify_rs256",
    "json.is_valid",
    "json.match_schema",
    "json.patch",
    "json.verify_schema",
    "net.cidr_expand",
    "net.cidr_is_valid",
    "net.cidr_merge",
    "numbers.range_step",
    "opa.runtime",
    "regex.find_all_string_submatch_n",
    "regex.find_n",
    "regex.globs_match",
    "regex.is_valid",
    "regex.match",
    "regex.replace",
    "regex.split",
    "regex.template_match",
    "semver.compare",
    "semver.is_valid",
    "sprintf",
    "strings.any_prefix_match",
    "strings.any_suffix_match",
    "strings.count",
    "strings.render_template",
    "strings.reverse",
    "time.add_date",
    "time.clock",
    "time.date",
    "time.diff",
    "time.format",
    "time.now_ns",
    "time.parse_duration_ns",
    "time.parse_ns",
    "time.parse_rfc3339_ns",
    "time.weekday",
    "trace",
    "units.parse",
    "units.parse_bytes",
    "urlquery.decode",
    "urlquery.decode_object",
    "urlquery.encode",
    "urlquery.encode_object",
    "uuid.parse",
    "yaml.is_valid",
    "yaml.marshal",
    "yaml.unmarshal",
];

#[test]
fn the_host_offers_exactly_the_chosen_builtins() {
    let mut offered: Vec<&str> = HOST_BUILTINS.to_vec();
    offered.sort_unstable();
    assert_eq!(offered, CHOSEN_BUILTINS);
    // And each one is really linked: a module asking for it opens.
    for name in CHOSEN_BUILTINS {
        let wasm = common::test_module(&format!(r#"{{"{name}":0}}"#), "");
        let bundle = RegoBundle::from_bytes(&wasm).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(bundle.host_builtins(), [*name]);
    }
}

#[test]
fn builtins_with_io_or_randomness_are_refused() {
    for name in [
        "http.send",
        "net.lookup_ip_addr",
        "opa.runtime.env",
        "rand.intn",
        "uuid.rfc4122",
        "crypto.x509.parse_and_verify_certificates",
        "io.jwt.decode_verify",
        "trace.file",
    ] {
        let wasm = common::test_module(&format!(r#"{{"{name}":0,"sprintf":1}}"#), "");
        let error = RegoBundle::from_bytes(&wasm).expect_err(name);
        match &error {
            RegoError::MissingBuiltins { builtins, .. } => assert_eq!(builtins, &[name]),
            other => panic!("{name}: expected MissingBuiltins, got {other:?}"),
        }
        assert!(error.to_string().contains(name), "{error}");
    }
}

#[test]
fn imports_beyond_the_opa_abi_are_refused() {
    let imports = [
        // WASI: files, clocks, sockets, environment, processes.
        (
            r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.fd_write",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "path_open" (func (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.path_open",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))"#,
            "wasi_snapshot_preview1.clock_time_get",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "sock_accept" (func (param i32 i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.sock_accept",
        ),
        (
            r#"(import "wasi_snapshot_preview1" "environ_get" (func (param i32 i32) (result i32)))"#,
            "wasi_snapshot_preview1.environ_get",
        ),
        (
            r#"(import "wasi_unstable" "proc_exit" (func (param i32)))"#,
            "wasi_unstable.proc_exit",
        ),
        (
            r#"(import "wasi:sockets/tcp" "connect" (func (param i32) (result i32)))"#,
            "wasi:sockets/tcp.connect",
        ),
        // Unknown functions in the OPA namespace.
        (
            r#"(import "env" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
            "env.fd_write",
        ),
        (
            r#"(import "env" "clock_time_get" (func (param i32 i64 i32) (result i32)))"#,
            "env.clock_time_get",
        ),
        (
            r#"(import "env" "system" (func (param i32) (result i32)))"#,
            "env.system",
        ),
        (
            r#"(import "env" "opa_builtin5" (func (param i32 i32 i32 i32 i32 i32 i32) (result i32)))"#,
            "env.opa_builtin5",
        ),
        (
            r#"(import "env" "opa_builtin" (func (param i32 i32) (result i32)))"#,
            "env.opa_builtin",
        ),
        // Other kinds of imports.
        (r#"(import "env" "table" (table 1 funcref))"#, "env.table"),
        (
            r#"(import "env" "stack_pointer" (global i32))"#,
            "env.stack_pointer",
        ),
    ];
    for (import, name) in imports {
        let wasm = common::test_module("{}", import);
        let error = RegoBundle::from_bytes(&wasm).expect_err(name);
        assert!(
            matches!(error, RegoError::NotOpaModule { .. }),
            "{name}: expected NotOpaModule, got {error:?}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("unexpected import {name}")),
            "{name}: {error}"
        );
    }
}

#[test]
fn opa_imports_with_other_types_are_refused() {
    let imports = [
        r#"(import "env" "opa_abort" (func (param i64)))"#,
        r#"(import "env" "opa_println" (func (param i32) (result i32)))"#,
        r#"(import "env" "opa_builtin0" (func (param i32 i32) (result i64)))"#,
    ];
    for import in imports {
        // `test_module` already imports env.opa_abort correctly; a second, differently typed
        // import of the same name is an import of its own and is checked on its own.
        let wasm = common::test_module("{}", import);
        let error = RegoBundle::from_bytes(&wasm).expect_err(import);
        assert!(
            matches!(error, RegoError::NotOpaModule { .. }),
            "{import}: {error:?}"
        );
        assert!(
            error.to_string().contains("wrong type"),
            "{import}: {error}"
        );
    }
}

#[test]
fn a_module_with_only_the_abi_imports_opens() {
    // The control for the tests above: the same module without the extra import opens, and so
    // does one that also imports opa_println and every builtin arity.
    RegoBundle::from_bytes(&common::test_module("{}", "")).expect("the base module opens");
    let all_arities = r#"
        (import "env" "opa_println" (func (param i32)))
        (import "env" "opa_builtin0" (func (param i32 i32) (result i32)))
        (import "env" "opa_builtin1" (func (param i32 i32 i32) (result i32)))
        (import "env" "opa_builtin3" (func (param i32 i32 i32 i32 i32) (result i32)))
        (import "env" "opa_builtin4" (func (param i32 i32 i32 i32 i32 i32) (result i32)))"#;
    RegoBundle::from_bytes(&common::test_module("{}", all_arities)).expect("all ABI imports");
}
