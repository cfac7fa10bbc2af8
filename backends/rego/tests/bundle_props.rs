//! Opening hostile bundles: arbitrary bytes and arbitrary tar entries never panic; they open to a
//! bundle or fail with a clear error, and entries that try to leave the bundle root, files held
//! twice and broken data are refused.
//!
//! `PORTCULLIS_HEAVY_PROPTEST=1` runs a much longer search.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::OnceLock;

use portcullis_rego::{RegoBundle, RegoError};
use proptest::prelude::*;

fn cases() -> u32 {
    if std::env::var_os("PORTCULLIS_HEAVY_PROPTEST").is_some() {
        20_000
    } else {
        128
    }
}

/// A valid OPA-ABI module (compiled once per process by the bundle cache).
fn valid_wasm() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| common::test_module("{}", ""))
}

/// One tar entry as a hostile archive may hold it: any name bytes, any type, any declared size.
#[derive(Debug, Clone)]
struct RawEntry {
    name: Vec<u8>,
    kind: u8,
    contents: Vec<u8>,
    /// `None`: the real length; otherwise the size the header claims.
    declared: Option<u64>,
}

/// Writes `entries` as a tar archive with hand-made headers (the `tar` builder refuses `..` and
/// absolute names; a hostile archive does not ask), then gzips it.
fn gzip_tar(entries: &[RawEntry], terminate: bool) -> Vec<u8> {
    let mut tar = Vec::new();
    for entry in entries {
        let mut header = tar::Header::new_old();
        let name = &entry.name[..entry.name.len().min(99)];
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::new(entry.kind));
        header.set_size(entry.declared.unwrap_or(entry.contents.len() as u64));
        header.set_cksum();
        tar.extend_from_slice(header.as_bytes());
        tar.extend_from_slice(&entry.contents);
        let padding = (512 - entry.contents.len() % 512) % 512;
        tar.extend(std::iter::repeat_n(0u8, padding));
    }
    if terminate {
        tar.extend(std::iter::repeat_n(0u8, 1024));
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&tar).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

fn entry_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop_oneof![
            Just("policy.wasm"),
            Just("/policy.wasm"),
            Just("./policy.wasm"),
            Just("//policy.wasm"),
            Just("../policy.wasm"),
            Just("/../policy.wasm"),
            Just("a/../policy.wasm"),
            Just("/etc/passwd"),
            Just("data.json"),
            Just("/data.json"),
            Just("a/data.json"),
            Just("a/b/data.json"),
            Just("../data.json"),
            Just("a/../../data.json"),
            Just("/./a/./data.json"),
            Just(".manifest"),
            Just("policy.rego"),
            Just(""),
            Just("/"),
            Just("policy.wasm\0x"),
        ]
        .prop_map(|name| name.as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => "[a-z./]{0,30}".prop_map(String::into_bytes),
    ]
}

fn contents() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(valid_wasm().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|tail| [b"\0asm\x01\0\0\0".as_slice(), &tail].concat()),
        1 => proptest::collection::vec(any::<u8>(), 0..256),
        2 => prop_oneof![
            Just("{}"),
            Just("{\"a\": {\"b\": 1}}"),
            Just("[]"),
            Just("42"),
            Just("{\"a\": 1, \"a\": 2}"),
            Just("{not json"),
            Just(""),
        ]
        .prop_map(|text| text.as_bytes().to_vec()),
        // Not UTF-8.
        1 => Just(b"{\"a\": \"\xff\xfe\"}".to_vec()),
        // Deeper than serde_json's recursion limit.
        1 => Just(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes()),
    ]
}

fn raw_entry() -> impl Strategy<Value = RawEntry> {
    (
        entry_name(),
        prop_oneof![
            16 => Just(b'0'),
            2 => Just(b'\0'),
            1 => Just(b'1'),
            1 => Just(b'2'),
            1 => Just(b'5'),
            1 => Just(b'7'),
            1 => any::<u8>(),
        ],
        contents(),
        prop_oneof![
            20 => Just(None),
            1 => Just(Some(u64::MAX >> 1)),
            1 => Just(Some(0o77_777_777_777)),
            1 => (0u64..2048).prop_map(Some),
        ],
    )
        .prop_map(|(name, kind, contents, declared)| RawEntry {
            name,
            kind,
            contents,
            declared,
        })
}

/// The name as the bundle reader sees it, without leading `/`, `./` or empty segments, when it
/// is free of `..` and NUL.
fn normalized(name: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(name);
    // The old tar header keeps the name up to its first NUL.
    let text = text.split('\0').next().unwrap_or_default();
    let segments: Vec<&str> = text
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if segments.contains(&"..") {
        return None;
    }
    Some(segments.join("/"))
}

fn check_error(error: &RegoError) {
    let message = error.to_string();
    assert!(!message.is_empty(), "{error:?}");
    assert!(!message.contains("panicked"), "{message}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Any bytes at all: a bundle or a clear error.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            proptest::collection::vec(any::<u8>(), 0..512)
                .prop_map(|tail| [[0x1f, 0x8b, 8, 0].as_slice(), &tail].concat()),
            proptest::collection::vec(any::<u8>(), 0..512)
                .prop_map(|tail| [b"\0asm".as_slice(), &tail].concat()),
        ],
    ) {
        if let Err(error) = RegoBundle::from_bytes(&bytes) {
            check_error(&error);
        }
    }

    /// Any gzip tar archive of hostile entries: a bundle or a clear error, and a bundle only when
    /// no file entry names something outside the root and `/policy.wasm` is there exactly once.
    #[test]
    fn arbitrary_tar_entries_never_panic(
        entries in proptest::collection::vec(raw_entry(), 0..5),
        terminate in any::<bool>(),
        truncate in proptest::option::weighted(0.1, 0usize..4096),
    ) {
        let mut bytes = gzip_tar(&entries, terminate);
        if let Some(keep) = truncate {
            bytes.truncate(keep.max(10));
        }
        match RegoBundle::from_bytes(&bytes) {
            Ok(bundle) => {
                prop_assert!(bundle.data().is_object());
                // Everything the reader could see before the bundle opened: with well-formed
                // headers, no entry left the root and policy.wasm was a single regular file.
                let files: Vec<Option<String>> = entries
                    .iter()
                    .filter(|entry| entry.declared.is_none() && matches!(entry.kind, b'0' | b'\0'))
                    .map(|entry| normalized(&entry.name))
                    .collect();
                if entries.iter().all(|entry| entry.declared.is_none()) && truncate.is_none() {
                    prop_assert!(files.iter().all(Option::is_some), "{entries:?}");
                    let wasm = files
                        .iter()
                        .filter(|name| name.as_deref() == Some("policy.wasm"))
                        .count();
                    prop_assert_eq!(wasm, 1, "{:?}", entries);
                }
            }
            Err(error) => check_error(&error),
        }
    }
}

fn entry(name: &str, contents: &[u8]) -> RawEntry {
    RawEntry {
        name: name.as_bytes().to_vec(),
        kind: b'0',
        contents: contents.to_vec(),
        declared: None,
    }
}

fn open(entries: &[RawEntry]) -> Result<RegoBundle, RegoError> {
    RegoBundle::from_bytes(&gzip_tar(entries, true))
}

#[test]
fn a_well_formed_hand_made_bundle_opens() {
    let bundle = open(&[
        entry("/policy.wasm", valid_wasm()),
        entry("/data.json", b"{\"a\": 1}"),
        entry("/x/y/data.json", b"{\"b\": 2}"),
    ])
    .expect("opens");
    assert_eq!(
        bundle.data(),
        &serde_json::json!({"a": 1, "x": {"y": {"b": 2}}})
    );
}

#[test]
fn entries_with_dot_dot_segments_are_refused() {
    for name in [
        "../policy.wasm",
        "/../policy.wasm",
        "a/../policy.wasm",
        "../data.json",
        "a/../../data.json",
    ] {
        let error =
            open(&[entry("/policy.wasm", valid_wasm()), entry(name, b"{}")]).expect_err(name);
        assert!(
            matches!(error, RegoError::Archive { .. }),
            "{name}: {error:?}"
        );
        assert!(error.to_string().contains("`..`"), "{name}: {error}");
    }
    // Even when the entry is one the reader would otherwise skip.
    let error = open(&[
        entry("/policy.wasm", valid_wasm()),
        entry("../notes.txt", b"x"),
    ])
    .expect_err("a skipped file with ..");
    assert!(error.to_string().contains("../notes.txt"), "{error}");
}

#[test]
fn absolute_and_dotted_names_mean_the_bundle_root() {
    for name in [
        "policy.wasm",
        "/policy.wasm",
        "./policy.wasm",
        "//./policy.wasm",
    ] {
        let bundle = open(&[entry(name, valid_wasm())]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(bundle.entrypoints().len(), 10, "{name}");
    }
    // `/etc/passwd` in a bundle is the bundle's own file `etc/passwd`, never the host's.
    let error = open(&[entry("/etc/passwd", b"root:x:0:0")]).expect_err("no policy.wasm");
    match error {
        RegoError::NoPolicyWasm { entries, .. } => assert_eq!(entries, ["/etc/passwd"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_file_held_twice_is_refused() {
    let error = open(&[
        entry("/policy.wasm", valid_wasm()),
        entry("./policy.wasm", valid_wasm()),
    ])
    .expect_err("two policy.wasm");
    assert!(
        error
            .to_string()
            .contains("/policy.wasm appears more than once"),
        "{error}"
    );
    let error = open(&[
        entry("/policy.wasm", valid_wasm()),
        entry("/a/data.json", b"{}"),
        entry("a//data.json", b"{\"x\": 1}"),
    ])
    .expect_err("two a/data.json");
    assert!(
        error
            .to_string()
            .contains("/a/data.json appears more than once"),
        "{error}"
    );
}

#[test]
fn links_named_policy_wasm_are_not_followed() {
    let mut link = entry("/policy.wasm", b"");
    link.kind = b'2';
    let error = open(&[link]).expect_err("a symlink is not the module");
    match error {
        RegoError::NoPolicyWasm { entries, .. } => {
            assert_eq!(entries, ["/policy.wasm (not a regular file, skipped)"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_huge_declared_size_is_an_error_not_an_allocation() {
    let mut huge = entry("/policy.wasm", valid_wasm());
    huge.declared = Some(u64::MAX >> 1);
    let error = open(&[huge]).expect_err("declared size beyond the data");
    assert!(matches!(error, RegoError::Archive { .. }), "{error:?}");
}

#[test]
fn bad_data_files_are_refused_with_their_name() {
    let cases: [(&str, &[u8], &str); 4] = [
        ("/data.json", b"{\"a\": \"\xff\"}", "/data.json"),
        ("/data.json", b"[]", "must be an object"),
        ("/a/data.json", b"{\"x\": 1", "/a/data.json"),
        ("/data.json", b"[[[[[[[[[[", "/data.json"),
    ];
    for (name, contents, expected) in cases {
        let error =
            open(&[entry("/policy.wasm", valid_wasm()), entry(name, contents)]).expect_err(name);
        assert!(matches!(error, RegoError::Data { .. }), "{name}: {error:?}");
        assert!(error.to_string().contains(expected), "{name}: {error}");
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let error = open(&[
        entry("/policy.wasm", valid_wasm()),
        entry("/data.json", deep.as_bytes()),
    ])
    .expect_err("deep data");
    assert!(error.to_string().contains("recursion limit"), "{error}");
}

#[test]
fn data_folders_nested_too_deep_are_refused() {
    // A long GNU name: the tar builder writes the long-name extension itself.
    let name = format!("{}data.json", "a/".repeat(10_000));
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(2);
    header.set_mode(0o644);
    tar.append_data(&mut header, &name, b"{}".as_slice())
        .expect("append");
    let mut header = tar::Header::new_gnu();
    header.set_size(valid_wasm().len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "policy.wasm", valid_wasm())
        .expect("append");
    let tar = tar.into_inner().expect("tar");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&tar).expect("gzip");
    let error = RegoBundle::from_bytes(&encoder.finish().expect("gzip")).expect_err("too deep");
    assert!(error.to_string().contains("nested more than"), "{error}");
}

#[test]
fn a_bundle_path_with_a_nul_byte_is_a_read_error() {
    // The operator names the bundle file itself (there is no directory to stay in); a path the
    // operating system cannot take is a clear error naming it.
    let error = RegoBundle::open("policies/a\0b.tar.gz").expect_err("NUL in a path");
    assert!(matches!(error, RegoError::Read { .. }), "{error:?}");
    assert!(error.to_string().contains("a\0b.tar.gz"), "{error:?}");
}
