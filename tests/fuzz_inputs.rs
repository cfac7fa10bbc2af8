//! The fuzz targets' checks (`fuzz/src/lib.rs`) on stable Rust: every seed and every saved
//! regression input of `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`, then random
//! bytes and random mutations of the seeds as property tests (256 cases each;
//! `PORTCULLIS_HEAVY_PROPTEST=1` runs 20,000).
#![cfg(all(feature = "dsl", feature = "rego"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/src/lib.rs"]
mod checks;

use std::path::Path;

use proptest::prelude::*;

/// A fuzz target's name and its check.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 4] = [
    ("dsl_rule", checks::dsl_rule),
    ("field_path", checks::field_path),
    ("decision", checks::decision),
    ("bundle", checks::bundle),
];

fn cases() -> u32 {
    if std::env::var_os("PORTCULLIS_HEAVY_PROPTEST").is_some() {
        20_000
    } else {
        256
    }
}

/// The files of `fuzz/<kind>/<target>/` (dot files skipped).
fn inputs(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .map(|entry| {
            let bytes = std::fs::read(entry.path()).expect("readable input");
            (entry.path().display().to_string(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn seeds_and_regressions_pass_every_check() {
    let mut count = 0;
    for (target, check) in TARGETS {
        for kind in ["seeds", "regressions"] {
            for (name, bytes) in inputs(kind, target) {
                let outcome = std::panic::catch_unwind(|| check(&bytes));
                assert!(outcome.is_ok(), "{target}: {name} breaks a check");
                count += 1;
            }
        }
    }
    assert!(count >= 30, "only {count} inputs: are the seeds missing?");
}

/// Seeds of every target, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    TARGETS
        .iter()
        .flat_map(|(target, _)| inputs("seeds", target))
        .map(|(_, bytes)| bytes)
        .collect()
}

/// A seed with a few bytes flipped, inserted or cut.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds();
    (
        0..seeds.len().max(1),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    )
        .prop_map(move |(which, edits)| {
            let mut bytes = seeds.get(which).cloned().unwrap_or_default();
            for (at, byte, kind) in edits {
                if bytes.is_empty() {
                    bytes.push(byte);
                    continue;
                }
                let at = at.index(bytes.len());
                match kind {
                    0 => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn random_bytes_pass_every_check(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for (_, check) in TARGETS {
            check(&bytes);
        }
    }

    #[test]
    fn mutated_seeds_pass_every_check(bytes in mutated()) {
        for (_, check) in TARGETS {
            check(&bytes);
        }
    }
}
