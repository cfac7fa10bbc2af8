//! Shared helpers of the integration tests: where the OPA-built fixtures are, and a hand-written
//! OPA-ABI module for the limit and trap tests.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

/// The fixtures folder: `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures` beside the workspace.
/// Panics with a message saying where it looked when the folder is missing.
pub fn fixtures() -> PathBuf {
    let (dir, how) = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => (PathBuf::from(dir), "from PORTCULLIS_OPA_FIXTURES"),
        None => {
            let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
            (
                workspace.join("../shared/fixtures"),
                "../shared/fixtures beside the workspace root",
            )
        }
    };
    assert!(
        dir.join("rego-wasm").is_dir() && dir.join("opa-wasm-extra").is_dir(),
        "the OPA WebAssembly fixtures are missing: looked in {} ({how}); \
         set PORTCULLIS_OPA_FIXTURES to the folder holding rego-wasm/ and opa-wasm-extra/",
        dir.display()
    );
    dir
}

/// A fixture file, checked to exist.
pub fn fixture(relative: &str) -> PathBuf {
    let path = fixtures().join(relative);
    assert!(path.is_file(), "fixture {} is missing", path.display());
    path
}

/// The fixture bundle at `relative`, opened once per test binary and kept open: opening it
/// again (through `RegoBundle::open` or a policy's `new`) then reuses the compiled module instead
/// of compiling it once more, which matters in unoptimized test builds.
pub fn open(relative: &str) -> portcullis_rego::RegoBundle {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static OPENED: OnceLock<Mutex<HashMap<String, portcullis_rego::RegoBundle>>> = OnceLock::new();
    let path = fixture(relative);
    let mut opened = OPENED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    opened
        .entry(relative.to_owned())
        .or_insert_with(|| {
            portcullis_rego::RegoBundle::open(&path)
                .unwrap_or_else(|error| panic!("fixture {} does not open: {error}", path.display()))
        })
        .clone()
}

/// Entrypoints of [`test_module`], by id.
pub const ENTRYPOINTS: &str = r#"{"test/ok":0,"test/loop":1,"test/grow":2,"test/trap":3,"test/abort":4,"test/sprintf":5,"test/undefined":6,"test/recurse":7,"test/indirect":8,"test/tail":9}"#;

/// A small module that follows the OPA WebAssembly ABI 1.2 (bump allocator, values are their JSON
/// text) whose entrypoints misbehave on purpose: `test/loop` spins forever, `test/grow` allocates
/// until memory runs out (then calls `opa_abort` as OPA's allocator does), `test/trap` executes
/// `unreachable`, `test/abort` calls `opa_abort`, `test/sprintf` calls the host's `sprintf`
/// (`"%s-%d"` on `["x", 5]`), `test/undefined` returns `[]`, `test/ok` returns `true`.
/// Three more spin without a loop: `test/recurse` makes 2^60 nested calls, `test/indirect` calls
/// back and forth through the table and `test/tail` calls itself, both as tail calls (the stack
/// never overflows).
/// `builtins` is the module's `builtins()` map; `extra_import` goes among the imports.
pub fn test_module(builtins: &str, extra_import: &str) -> Vec<u8> {
    let escape = |json: &str| json.replace('"', "\\\"");
    let text = WAT
        .replace("BUILTINS", &escape(builtins))
        .replace("ENTRYPOINTS", &escape(ENTRYPOINTS))
        .replace(";;EXTRA_IMPORT", extra_import);
    wat::parse_str(&text).expect("the test module is valid WAT")
}

const WAT: &str = r#"
(module
  (import "env" "memory" (memory 2))
  (import "env" "opa_abort" (func $abort (param i32)))
  (import "env" "opa_builtin2" (func $builtin2 (param i32 i32 i32 i32) (result i32)))
  ;;EXTRA_IMPORT
  (global $heap (mut i32) (i32.const 4096))
  (global (export "opa_wasm_abi_version") i32 (i32.const 1))
  (global (export "opa_wasm_abi_minor_version") i32 (i32.const 2))
  (data (i32.const 16) "BUILTINS\00")
  (data (i32.const 256) "ENTRYPOINTS\00")
  (data (i32.const 512) "opa_malloc: failed\00")
  (data (i32.const 544) "[{\"result\":\00")
  (data (i32.const 576) "[{\"result\":true}]\00")
  (data (i32.const 608) "[]\00")
  (data (i32.const 640) "var assignment conflict\00")
  (data (i32.const 1024) "\"%s-%d\"\00")
  (data (i32.const 1056) "[\"x\",5]\00")
  (func $malloc (export "opa_malloc") (param $size i32) (result i32)
    (local $p i32) (local $end i32)
    (local.set $p (global.get $heap))
    (local.set $end (i32.add (local.get $p) (i32.add (local.get $size) (i32.const 1))))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (local.get $end) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1))
          (then (call $abort (i32.const 512)) (unreachable)))
        (br $grow)))
    (global.set $heap (local.get $end))
    (local.get $p))
  (func (export "opa_free") (param i32))
  (func (export "opa_json_parse") (param $addr i32) (param $len i32) (result i32)
    (i32.store8 (i32.add (local.get $addr) (local.get $len)) (i32.const 0))
    (local.get $addr))
  (func (export "opa_json_dump") (param i32) (result i32) (local.get 0))
  (func (export "opa_heap_ptr_get") (result i32) (global.get $heap))
  (func (export "opa_heap_ptr_set") (param i32) (global.set $heap (local.get 0)))
  (func (export "opa_eval_ctx_new") (result i32) (i32.const 0))
  (func (export "opa_eval_ctx_set_input") (param i32 i32))
  (func (export "opa_eval_ctx_set_data") (param i32 i32))
  (func (export "opa_eval_ctx_set_entrypoint") (param i32 i32))
  (func (export "opa_eval_ctx_get_result") (param i32) (result i32) (i32.const 576))
  (func (export "eval") (param i32) (result i32) (i32.const 0))
  (func (export "builtins") (result i32) (i32.const 16))
  (func (export "entrypoints") (result i32) (i32.const 256))
  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))
  (type $void (func))
  (table 2 funcref)
  (elem (i32.const 0) $ping $pong)
  (func $split (param $depth i32)
    (if (local.get $depth)
      (then
        (call $split (i32.sub (local.get $depth) (i32.const 1)))
        (call $split (i32.sub (local.get $depth) (i32.const 1))))))
  (func $ping (return_call_indirect (type $void) (i32.const 1)))
  (func $pong (return_call_indirect (type $void) (i32.const 0)))
  (func $again (return_call $again))
  (func (export "opa_eval")
    (param $reserved i32) (param $entrypoint i32) (param $data i32) (param $input i32)
    (param $len i32) (param $heap i32) (param $format i32) (result i32)
    (local $r i32) (local $n i32) (local $out i32)
    (global.set $heap (local.get $heap))
    (if (i32.eq (local.get $entrypoint) (i32.const 1)) (then (loop $spin (br $spin))))
    (if (i32.eq (local.get $entrypoint) (i32.const 2))
      (then (loop $eat (drop (call $malloc (i32.const 1048576))) (br $eat))))
    (if (i32.eq (local.get $entrypoint) (i32.const 3)) (then (unreachable)))
    (if (i32.eq (local.get $entrypoint) (i32.const 4)) (then (call $abort (i32.const 640)) (unreachable)))
    (if (i32.eq (local.get $entrypoint) (i32.const 6)) (then (return (i32.const 608))))
    (if (i32.eq (local.get $entrypoint) (i32.const 7)) (then (call $split (i32.const 60))))
    (if (i32.eq (local.get $entrypoint) (i32.const 8)) (then (call_indirect (type $void) (i32.const 0))))
    (if (i32.eq (local.get $entrypoint) (i32.const 9)) (then (call $again)))
    (if (i32.eq (local.get $entrypoint) (i32.const 5))
      (then
        (local.set $r (call $builtin2 (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 1056)))
        (local.set $n (call $strlen (local.get $r)))
        (local.set $out (call $malloc (i32.add (local.get $n) (i32.const 16))))
        (memory.copy (local.get $out) (i32.const 544) (i32.const 11))
        (memory.copy (i32.add (local.get $out) (i32.const 11)) (local.get $r) (local.get $n))
        (i32.store16 (i32.add (i32.add (local.get $out) (i32.const 11)) (local.get $n)) (i32.const 0x5d7d))
        (i32.store8 (i32.add (i32.add (local.get $out) (i32.const 13)) (local.get $n)) (i32.const 0))
        (return (local.get $out))))
    (i32.const 576))
)
"#;

/// A module in the style of [`test_module`] whose entrypoint `test/call` calls the host builtin
/// `name` once with `args` (each the JSON text of one operand) and returns its value, or
/// undefined when the builtin answers undefined, and whose `test/loop` calls it again and
/// again, forever (freeing each answer, so only the time limit stops it). An argument equal to
/// [`INPUT`] is the evaluation's input instead (for long operands: a module's own data is
/// copied in when it is set up, under the time limit).
pub fn call_module(name: &str, args: &[String]) -> Vec<u8> {
    let escape = |bytes: &[u8]| -> String {
        let mut out = String::with_capacity(bytes.len());
        for &b in bytes {
            if b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\{b:02x}"));
            }
        }
        out
    };
    let mut data = String::new();
    let mut addresses = Vec::new();
    let mut next = 1 << 16;
    for arg in args {
        if arg == INPUT {
            addresses.push(None);
            continue;
        }
        data.push_str(&format!(
            "  (data (i32.const {next}) \"{}\\00\")\n",
            escape(arg.as_bytes())
        ));
        addresses.push(Some(next));
        next += arg.len() + 1;
    }
    let heap = next.next_multiple_of(16);
    let pages = (heap >> 16) + 2;
    let call: String = addresses
        .iter()
        .map(|addr| match addr {
            Some(addr) => format!(" (i32.const {addr})"),
            None => " (local.get $input)".to_owned(),
        })
        .collect();
    let arity = args.len();
    let params = "i32 ".repeat(arity + 2);
    let builtins = format!(r#"{{\"{name}\":0}}"#);
    let text = format!(
        r#"
(module
  (import "env" "memory" (memory {pages}))
  (import "env" "opa_abort" (func $abort (param i32)))
  (import "env" "opa_builtin{arity}" (func $builtin (param {params}) (result i32)))
  (global $heap (mut i32) (i32.const {heap}))
  (global (export "opa_wasm_abi_version") i32 (i32.const 1))
  (global (export "opa_wasm_abi_minor_version") i32 (i32.const 2))
  (data (i32.const 16) "{builtins}\00")
  (data (i32.const 256) "{{\"test/call\":0,\"test/loop\":1}}\00")
  (data (i32.const 512) "opa_malloc: failed\00")
  (data (i32.const 544) "[{{\"result\":\00")
  (data (i32.const 576) "[{{\"result\":true}}]\00")
  (data (i32.const 608) "[]\00")
{data}
  (func $malloc (export "opa_malloc") (param $size i32) (result i32)
    (local $p i32) (local $end i32)
    (local.set $p (global.get $heap))
    (local.set $end (i32.add (local.get $p) (i32.add (local.get $size) (i32.const 1))))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (local.get $end) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1))
          (then (call $abort (i32.const 512)) (unreachable)))
        (br $grow)))
    (global.set $heap (local.get $end))
    (local.get $p))
  (func (export "opa_free") (param i32))
  (func (export "opa_json_parse") (param $addr i32) (param $len i32) (result i32)
    (i32.store8 (i32.add (local.get $addr) (local.get $len)) (i32.const 0))
    (local.get $addr))
  (func (export "opa_json_dump") (param i32) (result i32) (local.get 0))
  (func (export "opa_heap_ptr_get") (result i32) (global.get $heap))
  (func (export "opa_heap_ptr_set") (param i32) (global.set $heap (local.get 0)))
  (func (export "opa_eval_ctx_new") (result i32) (i32.const 0))
  (func (export "opa_eval_ctx_set_input") (param i32 i32))
  (func (export "opa_eval_ctx_set_data") (param i32 i32))
  (func (export "opa_eval_ctx_set_entrypoint") (param i32 i32))
  (func (export "opa_eval_ctx_get_result") (param i32) (result i32) (i32.const 576))
  (func (export "eval") (param i32) (result i32) (i32.const 0))
  (func (export "builtins") (result i32) (i32.const 16))
  (func (export "entrypoints") (result i32) (i32.const 256))
  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))
  (func (export "opa_eval")
    (param $reserved i32) (param $entrypoint i32) (param $data i32) (param $input i32)
    (param $len i32) (param $heap i32) (param $format i32) (result i32)
    (local $r i32) (local $n i32) (local $out i32)
    (i32.store8 (local.get $heap) (i32.const 0))
    (global.set $heap (i32.add (local.get $heap) (i32.const 1)))
    (if (i32.eq (local.get $entrypoint) (i32.const 1))
      (then
        (local.set $out (global.get $heap))
        (loop $again
          (drop (call $builtin (i32.const 0) (i32.const 0){call}))
          (global.set $heap (local.get $out))
          (br $again))))
    (local.set $r (call $builtin (i32.const 0) (i32.const 0){call}))
    (if (i32.eqz (local.get $r)) (then (return (i32.const 608))))
    (local.set $n (call $strlen (local.get $r)))
    (local.set $out (call $malloc (i32.add (local.get $n) (i32.const 16))))
    (memory.copy (local.get $out) (i32.const 544) (i32.const 11))
    (memory.copy (i32.add (local.get $out) (i32.const 11)) (local.get $r) (local.get $n))
    (i32.store16 (i32.add (i32.add (local.get $out) (i32.const 11)) (local.get $n)) (i32.const 0x5d7d))
    (i32.store8 (i32.add (i32.add (local.get $out) (i32.const 13)) (local.get $n)) (i32.const 0))
    (local.get $out))
)
"#
    );
    wat::parse_str(&text).expect("the call module is valid WAT")
}

/// In the arguments of [`call_module`]: the evaluation's input.
pub const INPUT: &str = "<input>";

/// A module in the style of [`test_module`] whose entrypoints (`entrypoints[i]` has id `i`)
/// each evaluate to a constant: the JSON text `documents[i]`.
pub fn document_module(entrypoints: &[&str], documents: &[&str]) -> Vec<u8> {
    let escape = |json: &str| json.replace('\\', "\\\\").replace('"', "\\\"");
    let names: Vec<String> = entrypoints
        .iter()
        .enumerate()
        .map(|(id, name)| format!("\"{name}\":{id}"))
        .collect();
    let mut data = String::new();
    let mut answers = String::new();
    let mut next = 4096;
    for (id, document) in documents.iter().enumerate() {
        let result = format!(r#"[{{"result":{document}}}]"#);
        data.push_str(&format!(
            "  (data (i32.const {next}) \"{}\\00\")\n",
            escape(&result)
        ));
        answers.push_str(&format!(
            "    (if (i32.eq (local.get $entrypoint) (i32.const {id})) (then (return (i32.const {next}))))\n"
        ));
        next += result.len() + 1;
    }
    let heap = next.next_multiple_of(16);
    let text = format!(
        r#"
(module
  (import "env" "memory" (memory 2))
  (import "env" "opa_abort" (func $abort (param i32)))
  (global $heap (mut i32) (i32.const {heap}))
  (global (export "opa_wasm_abi_version") i32 (i32.const 1))
  (global (export "opa_wasm_abi_minor_version") i32 (i32.const 2))
  (data (i32.const 16) "{{}}\00")
  (data (i32.const 32) "{{{}}}\00")
  (data (i32.const 2048) "[]\00")
{data}
  (func $malloc (export "opa_malloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (local.get $p) (i32.add (local.get $size) (i32.const 1))))
    (local.get $p))
  (func (export "opa_free") (param i32))
  (func (export "opa_json_parse") (param $addr i32) (param $len i32) (result i32)
    (i32.store8 (i32.add (local.get $addr) (local.get $len)) (i32.const 0))
    (local.get $addr))
  (func (export "opa_json_dump") (param i32) (result i32) (local.get 0))
  (func (export "opa_heap_ptr_get") (result i32) (global.get $heap))
  (func (export "opa_heap_ptr_set") (param i32) (global.set $heap (local.get 0)))
  (func (export "opa_eval_ctx_new") (result i32) (i32.const 0))
  (func (export "opa_eval_ctx_set_input") (param i32 i32))
  (func (export "opa_eval_ctx_set_data") (param i32 i32))
  (func (export "opa_eval_ctx_set_entrypoint") (param i32 i32))
  (func (export "opa_eval_ctx_get_result") (param i32) (result i32) (i32.const 2048))
  (func (export "eval") (param i32) (result i32) (i32.const 0))
  (func (export "builtins") (result i32) (i32.const 16))
  (func (export "entrypoints") (result i32) (i32.const 32))
  (func (export "opa_eval")
    (param $reserved i32) (param $entrypoint i32) (param $data i32) (param $input i32)
    (param $len i32) (param $heap i32) (param $format i32) (result i32)
{answers}    (i32.const 2048))
)
"#,
        escape(&names.join(","))
    );
    wat::parse_str(&text).expect("the document module is valid WAT")
}
