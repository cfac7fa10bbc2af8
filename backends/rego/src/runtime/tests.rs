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

fn limits() -> Limits {
    Limits {
        time: Duration::from_secs(10),
        memory: 64 << 20,
    }
}

fn instance(module: &CompiledModule) -> PooledInstance {
    module.instance(b"{}", limits()).expect("an instance")
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

/// A result set read in place is the decision its JSON reads as; the common shapes are read in
/// place once the guest has confirmed their kinds, and none before.
#[test]
fn decisions_read_in_place_are_the_decisions_of_their_json() {
    use crate::policy::{decision_in_place, read_decision};
    let module = module("rego-wasm/approved-tools.tar.gz");
    let mut instance = instance(&module);
    let common = [
        r#"[{"result":{"decision":"allow"}}]"#,
        r#"[{"result":{"decision":"deny"}}]"#,
        r#"[{"result":{"decision":"deny","reason":"Tool is not in the approved list."}}]"#,
        r#"[{"result":{"reason":"r \"q\" ☃","policy_id":"other","decision":"deny"}}]"#,
        r#"[{"result":true}]"#,
        r#"[{"result":false}]"#,
        r#"[{"result":"allow"}]"#,
    ];
    let others = [
        r#"[]"#,
        r#"[{"result":{"decision":"allow"}},{"result":{"decision":"deny"}}]"#,
        r#"[{"result":{"decision":"allow","audit":true}}]"#,
        r#"[{"result":{"decision":"allow","reason":"x"}}]"#,
        r#"[{"result":{"decision":"deny","reason":null}}]"#,
        r#"[{"result":{"decision":"deny","reason":7}}]"#,
        r#"[{"result":{"decision":"deny","message":"x"}}]"#,
        r#"[{"result":{"decision":"escalate","reason":"x"}}]"#,
        r#"[{"result":{"decision":"maybe"}}]"#,
        r#"[{"result":{"reason":"no decision"}}]"#,
        r#"[{"result":"deny"}]"#,
        r#"[{"result":1}]"#,
        r#"[{"result":null}]"#,
        r#"[{"other":true}]"#,
        r#"[{"result":true,"other":true}]"#,
        r#"{"result":true}"#,
    ];
    let walker = Walker::default();
    for (json, read_in_place) in common
        .iter()
        .map(|json| (json, true))
        .chain(others.iter().map(|json| (json, false)))
    {
        let (parsed, guest) = guest_parse(&mut instance, json.as_bytes());
        let address = u32::try_from(parsed).expect("positive");
        let memory = instance.memory.data(&instance.store);
        let before = walker
            .in_place(memory, address)
            .and_then(|set| decision_in_place("x/decision", set));
        // Confirmed by the guest as an evaluation's result would be.
        let mut read = Vec::new();
        if let Reading::Unconfirmed(seen) = walker.read(memory, address, &mut read) {
            assert!(walker.settle(seen, &read, &guest), "{json}");
            assert!(
                before.is_none(),
                "{json} read in place before it was confirmed"
            );
        }
        let in_place = walker
            .in_place(memory, address)
            .and_then(|set| decision_in_place("x/decision", set));
        assert_eq!(in_place.is_some(), read_in_place, "{json} read in place");
        if let Some(decision) = in_place {
            assert_eq!(
                Ok(decision),
                read_decision("x/decision", json.as_bytes()),
                "{json}"
            );
        }
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

/// Values of the size the image tests need (deeper and wider than the input writer's).
fn value() -> impl Strategy<Value = Value> {
    crate::input::tests::json_values(4, 48, 12)
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

const SSN: &str = "rego-wasm/no-ssn-input.tar.gz";

/// `regex.match(pattern, text)` through the module's redirected function: the host's answer
/// when `host`, else the module's own RE2's. `None` when undefined.
fn guest_regex_match(
    instance: &mut PooledInstance,
    pattern: &str,
    text: &str,
    host: bool,
) -> Option<bool> {
    let matcher = instance
        .funcs
        .regex_match
        .clone()
        .expect("the redirected regex.match is exported");
    let heap = instance.heap_ptr;
    instance
        .funcs
        .heap_ptr_set
        .call(&mut instance.store, heap)
        .expect("sets");
    let memory = instance.memory;
    let funcs = instance.funcs.clone();
    let pattern = load_json(
        &mut instance.store,
        &funcs,
        memory,
        &serde_json::to_vec(pattern).expect("JSON"),
    )
    .expect("parses");
    let text = load_json(
        &mut instance.store,
        &funcs,
        memory,
        &serde_json::to_vec(text).expect("JSON"),
    )
    .expect("parses");
    instance.store.data_mut().host_regex = host;
    let value = matcher
        .call(&mut instance.store, (pattern, text))
        .expect("matches");
    instance.store.data_mut().host_regex = true;
    if value == 0 {
        return None;
    }
    match dump_value(&mut instance.store, &funcs, memory, value).expect("dumps") {
        Value::Bool(matched) => Some(matched),
        other => panic!("regex.match gave {other}"),
    }
}

#[test]
fn the_regex_module_answers_regex_match_on_the_host() {
    let module = module(SSN);
    assert!(
        module.regex,
        "the module's regex.match goes to the host first"
    );
    let mut instance = instance(&module);
    let input = json!({"messages": [{"role": "user", "content": "my SSN is 123-45-6789"}]});
    let entrypoint = 0;
    let before = instance.store.data().regexes.decided();
    let result = instance
        .evaluate(
            entrypoint,
            &input,
            limits(),
            |_| None,
            |json| Ok(serde_json::from_slice::<Value>(json).expect("JSON")),
        )
        .expect("evaluates");
    assert_eq!(result[0]["result"]["decision"], "deny");
    assert_eq!(instance.store.data().regexes.decided(), before + 1);
}

/// The host and the module's RE2 answer alike, on patterns of the subset the host takes and on
/// patterns it leaves to the module.
#[test]
fn regex_match_answers_as_the_modules_re2() {
    let module = module(SSN);
    let mut instance = instance(&module);
    let cases = [
        (r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b", "call 555-12-3456 now"),
        (r"\bé", "xé"),
        (r"\Bé", "xé"),
        (r"^\w+$", "abc_123"),
        (r"^\w+$", "abcé"),
        (r"\s", "\u{b}"),
        (r"[\s]", "\u{b}"),
        (r"[\d\W]", "é"),
        (r"(?i)STRASSE", "strasse"),
        (r"(?i)[k-l]", "\u{212A}"),
        (r"a{2,3}b", "aaab"),
        (r"(?U)a+?", "a"),
        (r"(?P<year>\d{4})-(?:\d\d)", "2024-05"),
        // Left to the module: a Unicode class, a syntax only the `regex` crate reads.
        (r"\pL", "é"),
        (r"[a&&b]", "&"),
        (r"a{,2}", "a{,2}"),
        (r"\<a", "a"),
        // Not a valid RE2 pattern: undefined.
        (r"(", "("),
        (r"a**", "a"),
    ];
    for (index, (pattern, text)) in cases.into_iter().enumerate() {
        let guest = guest_regex_match(&mut instance, pattern, text, false);
        let before = instance.store.data().regexes.decided();
        let host = guest_regex_match(&mut instance, pattern, text, true);
        assert_eq!(host, guest, "{pattern:?} on {text:?}");
        let decided = instance.store.data().regexes.decided() > before;
        assert_eq!(decided, index < 13, "{pattern:?}: decided by the host");
    }
}

/// A pattern of the subset the host takes, as RE2 syntax.
fn pattern() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("-".to_owned()),
        Just("1".to_owned()),
        Just("é".to_owned()),
        Just("K".to_owned()),
        Just(".".to_owned()),
        Just(r"\d".to_owned()),
        Just(r"\D".to_owned()),
        Just(r"\w".to_owned()),
        Just(r"\W".to_owned()),
        Just(r"\s".to_owned()),
        Just(r"\S".to_owned()),
        Just(r"\b".to_owned()),
        Just(r"\B".to_owned()),
        Just("^".to_owned()),
        Just("$".to_owned()),
        Just(r"\.".to_owned()),
        Just(r"\x{b}".to_owned()),
        Just("[a-c]".to_owned()),
        Just("[^a]".to_owned()),
        Just(r"[\d\s-]".to_owned()),
        Just(r"[\W]".to_owned()),
        Just("[[:alpha:]]".to_owned()),
    ];
    atom.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(|parts| parts.concat()),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}|{b}")),
            inner.clone().prop_map(|a| format!("(?:{a})*")),
            inner.clone().prop_map(|a| format!("({a})+")),
            inner.clone().prop_map(|a| format!("(?:{a})?")),
            (inner.clone(), 0u32..3, 0u32..3).prop_map(|(a, m, n)| format!(
                "(?:{a}){{{},{}}}",
                m.min(n),
                m.max(n)
            )),
            inner.clone().prop_map(|a| format!("(?i:{a})")),
            inner.clone().prop_map(|a| format!("(?s){a}")),
            inner.prop_map(|a| format!("(?m){a}")),
        ]
    })
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "b", "c", "-", "1", "é", " ", "\n", "\u{b}", "k", "K", "\u{212A}", "_", "\u{663}",
        ]),
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_hosts_regex_match_is_re2s(pattern in pattern(), text in text()) {
        let module = module(SSN);
        let mut instance = instance(&module);
        let guest = guest_regex_match(&mut instance, &pattern, &text, false);
        let host = guest_regex_match(&mut instance, &pattern, &text, true);
        prop_assert_eq!(host, guest, "{:?} on {:?}", pattern, text);
    }
}

/// An image's root and bytes.
type Built = (u32, Vec<u8>);

/// The image built straight from `input` and the image built from its JSON, for `base`: the
/// same bytes and root (`None` when the image does not take it).
fn both_images(input: &impl crate::input::InputJson, base: u32) -> (Option<Built>, Option<Built>) {
    let mut json = Vec::new();
    input.write_json(&mut json);
    let mut image = Image::new();
    let from_json = image
        .build(&json, base)
        .map(|root| (root, image.bytes.clone()));
    image.start(base);
    let direct = input
        .build_image(&mut image)
        .map(|root| (root, image.bytes.clone()));
    (direct, from_json)
}

fn contexts(
    text: &str,
    extra: Value,
) -> (
    portcullis_engine::InputContext,
    portcullis_engine::ToolCallContext,
    portcullis_engine::OutputContext,
) {
    use portcullis_engine::{
        InputContext, Message, Metadata, OutputContext, Role, ToolCallContext,
    };
    let metadata = || {
        let mut metadata = Metadata::new("agent-7", text).with_timestamp("2026-01-01T00:00:00Z");
        if let Value::Object(map) = &extra {
            metadata.extra = map.clone();
        }
        metadata
    };
    let arguments = match json!({"query": text, "n": [1, 2.5, null, true], "nested": {"a": {}}}) {
        Value::Object(map) => map,
        _ => unreachable!(),
    };
    (
        InputContext::new(
            vec![
                Message::new(Role::System, "You are helpful."),
                Message::new(Role::User, text),
            ],
            metadata(),
        ),
        ToolCallContext::new(
            "web_search",
            arguments,
            Message::new(Role::Assistant, text),
            metadata(),
        ),
        OutputContext::new(Message::new(Role::Assistant, text), metadata()),
    )
}

#[test]
fn an_image_built_from_the_context_is_the_image_of_its_json() {
    for (text, extra) in [
        ("my SSN is 123-45-6789", json!({})),
        (
            "tab\t\"quoted\"\\ \u{1} ☃ 😀",
            json!({"tenant": "a", "tags": ["x", {"y": 1e300}]}),
        ),
        ("", json!({"z": null, "é": -0.5})),
    ] {
        let (input, call, output) = contexts(text, extra);
        for base in [0, 123_456] {
            let (direct, from_json) = both_images(&input, base);
            assert!(direct.is_some(), "taken");
            assert_eq!(direct, from_json, "input context");
            let (direct, from_json) = both_images(&call, base);
            assert!(direct.is_some(), "taken");
            assert_eq!(direct, from_json, "tool call context");
            let (direct, from_json) = both_images(&output, base);
            assert!(direct.is_some(), "taken");
            assert_eq!(direct, from_json, "output context");
        }
    }
    // A key of `extra` that is a named one: there twice in the JSON, not taken either way.
    let (input, _, _) = contexts("x", json!({"agent_id": "other"}));
    assert_eq!(both_images(&input, 0), (None, None));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn any_value_built_directly_is_the_image_of_its_json(value in value(), base in 0u32..1 << 20) {
        let (direct, from_json) = both_images(&value, base);
        prop_assert_eq!(direct, from_json);
    }
}

/// A policy whose patterns come from its data document decides alike with the host answering
/// `regex.match` and with the module's own RE2, over many evaluations of one instance.
#[test]
fn a_policy_with_patterns_from_its_data_decides_alike_with_the_host_and_without() {
    let module = module("opa-wasm-extra/authz-allow/bundle.tar.gz");
    assert!(module.regex);
    let dir = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let permissions: Value = serde_json::from_slice(
        &std::fs::read(dir.join("opa-wasm-extra/authz-allow/permissions.json")).expect("reads"),
    )
    .expect("JSON");
    let paths = [
        "/users/bob/age",
        "//users/bob/age",
        "/users/bøb/age",
        "/users/BOB/AGE",
        "/users//age",
        "/users/bob_1/age/x",
        "/offices",
    ];
    for (pattern, host) in [
        ("^/+users/([^/]+)/age", true),
        (r"^/users/\w+/age$", true),
        ("(?i)^/USERS/[a-z]+/AGE", true),
        // Left to the module.
        (r"^/users/\pL+/age$", false),
    ] {
        let data = json!({
            "permissions": permissions,
            "entrypointSetting": {"type": "REST", "restEntrypoints": [{
                "pathRegex": pattern,
                "method": "GET",
                "require": {"resource": "user", "verb": "getage", "whoOwnsInArgs": "user_name"},
            }]},
        });
        let data = serde_json::to_vec(&data).expect("JSON");
        let mut with_host = module.instance(&data, limits()).expect("an instance");
        let mut without = module.instance(&data, limits()).expect("an instance");
        without.store.data_mut().host_regex = false;
        for round in 0..50 {
            let path = paths[round % paths.len()];
            let who = ["alice", "bob", "carol"][round % 3];
            let input =
                json!({"who": who, "path": path, "method": "GET", "args": {"user_name": "bob"}});
            let mut results = Vec::new();
            for instance in [&mut with_host, &mut without] {
                let result = instance
                    .evaluate(0, &input, limits(), |_| None, |json| Ok(json.to_vec()))
                    .expect("evaluates");
                results.push(serde_json::from_slice::<Value>(&result).expect("JSON"));
            }
            assert_eq!(results[0], results[1], "{pattern:?} on {input}");
        }
        assert_eq!(without.store.data().regexes.decided(), 0);
        assert_eq!(
            with_host.store.data().regexes.decided() > 0,
            host,
            "{pattern:?}: the host decided"
        );
    }
}

/// With the heap kept, the input is built for the block the guest's allocator will most likely
/// give; where the block is elsewhere, it is built again there. Both decide right, evaluation
/// after evaluation.
#[test]
fn an_image_built_for_a_block_elsewhere_is_built_again_there() {
    let module = module(SSN);
    let mut instance = instance(&module);
    assert!(instance.keep_heap.is_some(), "the heap is kept");
    for round in 0..200usize {
        let deny = round % 3 == 0;
        let content = if deny {
            format!("{} my SSN is 123-45-6789", "x".repeat(round))
        } else {
            format!("{} nothing here", "y".repeat(round * 7))
        };
        let input = json!({"messages": [{"role": "user", "content": content}], "n": round});
        if round % 2 == 1 {
            // The block will not be where the image is built for.
            instance.heap_end += 64;
        }
        let result = instance
            .evaluate(
                0,
                &input,
                limits(),
                |_| None,
                |json| Ok(serde_json::from_slice::<Value>(json).expect("JSON")),
            )
            .expect("evaluates");
        let expected = if deny { "deny" } else { "allow" };
        assert_eq!(result[0]["result"]["decision"], expected, "round {round}");
    }
}
