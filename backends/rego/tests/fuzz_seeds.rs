//! The seeds of the `bundle` fuzz target (`fuzz/seeds/bundle/`), generated here with the layout
//! of bundles `opa build -t wasm` writes: `/data.json`, the Rego sources, `/policy.wasm` and
//! `/.manifest`, absolute names, mode 0600, owner 0 and time 0. The module is a small
//! hand-written OPA-ABI module.
//!
//! A seed's first byte says how the fuzz target uses the rest: even, as the file itself; odd,
//! as the contents of a gzip stream (so the fuzzer mutates the tar archive, not its
//! compressed bytes). This test fails when the committed seeds differ from what it generates;
//! `PORTCULLIS_WRITE_FUZZ_SEEDS=1 cargo test -p portcullis-rego --test fuzz_seeds` rewrites them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write as _;
use std::path::PathBuf;

use portcullis_rego::RegoBundle;
use serde_json::json;

const ENTRYPOINT: &str = "seed/decision";

const REGO: &str = "package seed\n\ndefault decision := {\"decision\": \"allow\"}\n";

/// The bundle's `.manifest`, written out so its bytes do not depend on whether a build orders
/// serde_json's maps (a whole-workspace build turns `preserve_order` on).
fn manifest() -> String {
    format!(
        r#"{{"rego_version":1,"revision":"","roots":[""],"wasm":[{{"entrypoint":"{ENTRYPOINT}","module":"/policy.wasm"}}]}}"#
    )
}

/// A tar archive of `files`, each under its absolute name, as OPA writes bundles.
fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        // Absolute names, which `set_path` refuses, go straight into the name field.
        let field = &mut header.as_old_mut().name;
        field[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, *bytes).expect("tar in memory");
    }
    builder.into_inner().expect("tar in memory")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

/// Each seed: its file name and its bytes (the mode byte first).
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let wasm = common::document_module(&[ENTRYPOINT], &[r#"{"decision":"allow"}"#]);
    let manifest = manifest();
    let bundle = |data: &str| {
        tar(&[
            ("/data.json", data.as_bytes()),
            ("/policy/seed.rego", REGO.as_bytes()),
            ("/policy.wasm", &wasm),
            ("/.manifest", manifest.as_bytes()),
        ])
    };
    let with_mode = |mode: u8, bytes: &[u8]| {
        let mut seed = vec![mode];
        seed.extend_from_slice(bytes);
        seed
    };
    vec![
        ("bundle.tar.gz", with_mode(0, &gzip(&bundle("{}")))),
        ("bundle.tar", with_mode(1, &bundle("{}"))),
        (
            "bundle-with-data.tar",
            with_mode(
                1,
                &bundle(r#"{"roles":{"admin":["read","write"]},"limits":[1,2.5,null]}"#),
            ),
        ),
        ("policy.wasm", with_mode(0, &wasm)),
        (
            "no-policy.tar",
            with_mode(
                1,
                &tar(&[("/data.json", b"{}"), ("/.manifest", manifest.as_bytes())]),
            ),
        ),
    ]
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/bundle")
}

/// The bytes the fuzz target hands `RegoBundle::from_bytes` for `seed`.
fn opened(seed: &[u8]) -> Vec<u8> {
    match seed.split_first() {
        Some((mode, rest)) if mode % 2 == 0 => rest.to_vec(),
        Some((_, rest)) => gzip(rest),
        None => Vec::new(),
    }
}

#[test]
fn the_seeds_open_as_their_names_say() {
    for (name, seed) in seeds() {
        let result = RegoBundle::from_bytes(&opened(&seed));
        if name.starts_with("no-policy") {
            assert!(result.is_err(), "{name}");
            continue;
        }
        let bundle = result.unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(bundle.entrypoints(), [ENTRYPOINT], "{name}");
        if name == "bundle-with-data.tar" {
            assert_eq!(bundle.data()["roles"]["admin"], json!(["read", "write"]));
        }
    }
}

/// What a seed holds: its mode byte and, for a gzip seed, the uncompressed bytes (the
/// compressed ones depend on which deflate backend a build picks); any other seed's bytes as
/// they are. `None` for a gzip seed that does not decompress.
fn content(name: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    if !name.ends_with(".gz") {
        return Some(bytes.to_vec());
    }
    let (mode, compressed) = bytes.split_first()?;
    let mut plain = vec![*mode];
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(compressed), &mut plain).ok()?;
    Some(plain)
}

#[test]
fn the_committed_seeds_are_the_generated_ones() {
    let dir = seed_dir();
    let write = std::env::var_os("PORTCULLIS_WRITE_FUZZ_SEEDS").is_some();
    for (name, seed) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &seed).expect("the seed is written");
            continue;
        }
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            content(name, &committed)
                .is_some_and(|committed| Some(committed) == content(name, &seed)),
            "{} is missing or stale: run this test with PORTCULLIS_WRITE_FUZZ_SEEDS=1",
            path.display()
        );
    }
}
