//! Helpers shared by the integration tests.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;

/// Compares `actual` with the snapshot file at `path` (relative to the crate). With
/// `UPDATE_SNAPSHOTS=1` in the environment, writes the file instead.
pub fn assert_snapshot(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|error| {
        panic!(
            "cannot read snapshot {}: {error}; run with UPDATE_SNAPSHOTS=1 to create it\n--- actual ---\n{actual}",
            path.display()
        )
    });
    assert_eq!(
        expected,
        actual,
        "snapshot {} differs (run with UPDATE_SNAPSHOTS=1 to accept)",
        path.display()
    );
}

/// The `.json` files of a directory, sorted, as (stem, path).
pub fn rule_files(dir: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .map(|path| {
            let stem = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .expect("utf-8 file name")
                .to_owned();
            (stem, path)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no rule files in {}", dir.display());
    files
}
