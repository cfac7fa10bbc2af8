//! The host's side of the guest's values, against the guest itself on a real OPA module: an
//! input built by the host ([`Image`]) dumps as the guest's parse of the same JSON, and a value
//! read by the host ([`Walker`]) reads as the guest's dump of it.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::image::Image;
use super::*;

fn fixture_wasm(bundle: &str) -> Vec<u8> {
    let dir = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let path = dir.join(bundle);
    let file = std::fs::File::open(&path)
        .unwrap_or_else(|error| panic!("fixture {}: {error}", path.display()));
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().expect("a tar archive") {
        let mut entry = entry.expect("an entry");
        let name = entry.path().expect("a path").to_string_lossy().into_owned();
        if name.trim_start_matches('/') == "policy.wasm" {
            let mut wasm = Vec::new();
            entry.read_to_end(&mut wasm).expect("readable");
            return wasm;
        }
    }
    panic!("{bundle} has no policy.wasm");
}

/// The fixture's module, compiled once per test binary.
fn module(bundle: &'static str) -> Arc<CompiledModule> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MODULES: OnceLock<Mutex<HashMap<&'static str, Arc<CompiledModule>>>> = OnceLock::new();
    let mut modules = MODULES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let module = modules.entry(bundle).or_insert_with(|| {
        compile_cached(&fixture_wasm(bundle)).unwrap_or_else(|_| panic!("{bundle}"))
    });
    assert!(module.entry, "{bundle} gets the evaluation entry");
    Arc::clone(module)
}

fn instance(module: &CompiledModule) -> PooledInstance {
    let limits = Limits {
        time: Duration::from_secs(10),
        memory: 64 << 20,
    };
    module.instance(b"{}", limits).expect("an instance")
}

/// The guest's JSON of the value at `addr`.
fn guest_dump(instance: &mut PooledInstance, addr: i32) -> Vec<u8> {
    let dumped = instance
        .funcs
        .json_dump
        .call(&mut instance.store, addr)
        .expect("dumps");
    c_str(instance.memory.data(&instance.store), dumped)
        .expect("a string")
        .to_vec()
}

/// `json` parsed by the guest (from the post-data heap), and the guest's dump of it.
fn guest_parse(instance: &mut PooledInstance, json: &[u8]) -> (i32, Vec<u8>) {
    let heap = instance.heap_ptr;
    let len = i32::try_from(json.len()).expect("small");
    instance
        .funcs
        .heap_ptr_set
        .call(&mut instance.store, heap)
        .expect("resets");
    write_at(
        &mut instance.store,
        instance.memory,
        u32::try_from(heap).expect("positive"),
        json,
    )
    .expect("writes");
    instance
        .funcs
        .heap_ptr_set
        .call(&mut instance.store, heap + len)
        .expect("sets");
    let value = instance
        .funcs
        .json_parse
        .call(&mut instance.store, (heap, len))
        .expect("parses");
    assert_ne!(
        value,
        0,
        "the guest parses {}",
        String::from_utf8_lossy(json)
    );
    let dump = guest_dump(instance, value);
    (value, dump)
}

/// `json` built by the host as guest values (at the post-data heap), and the guest's dump of it.
fn host_build(instance: &mut PooledInstance, json: &[u8]) -> Option<Vec<u8>> {
    let heap = instance.heap_ptr;
    let base = u32::try_from(heap).expect("positive");
    let mut image = Image::new();
    let root = image.build(json, base)?;
    let end = image.end().expect("fits");
    write_at(&mut instance.store, instance.memory, base, &image.bytes).expect("writes");
    instance
        .funcs
        .heap_ptr_set
        .call(&mut instance.store, i32::try_from(end).expect("fits"))
        .expect("sets");
    Some(guest_dump(instance, i32::try_from(root).expect("fits")))
}

fn check(instance: &mut PooledInstance, value: &Value) {
    let mut json = Vec::new();
    crate::input::InputJson::write_json(value, &mut json);
    let (parsed, guest) = guest_parse(instance, &json);
    // The host reads the guest's value as the guest dumps it.
    let walker = Walker::default();
    let mut read = Vec::new();
    let address = u32::try_from(parsed).expect("positive");
    match walker.read(instance.memory.data(&instance.store), address, &mut read) {
        Reading::Trusted | Reading::Unconfirmed(_) => assert_eq!(
            String::from_utf8_lossy(&read),
            String::from_utf8_lossy(&guest),
            "read from memory"
        ),
        Reading::Guest => panic!("the walk gave up on {value}"),
    }
    // The host's image of the JSON is the guest's parse of it, to the byte.
    let built = host_build(instance, &json).expect("the image takes the host's JSON");
    assert_eq!(
        String::from_utf8_lossy(&built),
        String::from_utf8_lossy(&guest),
        "built by the host"
    );
}

#[test]
fn the_fixture_modules_take_images() {
    for bundle in [
        "rego-wasm/approved-tools.tar.gz",
        "rego-wasm/no-ssn-input.tar.gz",
    ] {
        assert!(module(bundle).images, "{bundle}: the probe passes");
    }
}

#[test]
fn images_and_reads_match_the_guest() {
    let module = module("rego-wasm/approved-tools.tar.gz");
    let mut instance = instance(&module);
    for value in [
        json!(null),
        json!([]),
        json!({}),
        json!({"tool_name": "web_search", "arguments": {"query": "rust"}, "n": [1, -2, 3.5, 1e300]}),
        json!({"é": 1, "e": 2, "z": 3, "ø": [true, false, null], "": ""}),
        json!("tab\t\"quoted\"\\ \u{1} \u{7f} ☃ 😀"),
        Value::Object((0..50).map(|i| (format!("key{i}"), json!(i))).collect()),
    ] {
        check(&mut instance, &value);
    }
}

#[test]
fn deep_inputs_are_left_to_the_guest() {
    let mut json = String::new();
    for _ in 0..100 {
        json.push('[');
    }
    for _ in 0..100 {
        json.push(']');
    }
    assert_eq!(Image::new().build(json.as_bytes(), 1024), None);
    assert!(Image::new().build(br#"{"a":1,"a":2}"#, 1024).is_none());
    assert!(Image::new().build(br#"[1,2]"#, 1024).is_some());
}

#[test]
fn a_relocated_image_is_the_image_built_in_place() {
    let json = br#"{"messages":[{"role":"user","content":"hi \u00e9"}],"n":[1,2.5],"e":{},"a":[]}"#;
    let mut moved = Image::new();
    let root = moved.build(json, 0).expect("builds");
    let base = 70_000;
    let moved_root = moved.relocate(root, base).expect("moves");
    let mut direct = Image::new();
    let direct_root = direct.build(json, base).expect("builds");
    assert_eq!(moved_root, direct_root);
    assert_eq!(moved.bytes, direct.bytes);
    assert_eq!(moved.end(), direct.end());
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 12, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..14)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn any_value_built_or_read_by_the_host_is_the_guests(value in value()) {
        let module = module("rego-wasm/approved-tools.tar.gz");
        let mut instance = instance(&module);
        check(&mut instance, &value);
    }
}
