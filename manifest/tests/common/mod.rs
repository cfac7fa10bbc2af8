//! A scratch folder per test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use portcullis_engine::PolicyEngine;
use portcullis_manifest::{CodeRegistry, Manifest, ManifestWatcher, ReloadOutcome};

/// The testing crate's scratch folder (made new, removed when dropped), with the manifest
/// tests' way of naming files in it.
pub(crate) struct Scratch(portcullis_testing::process::Scratch);

impl Scratch {
    pub(crate) fn new(name: &str) -> Self {
        Scratch(portcullis_testing::process::Scratch::new(&format!(
            "manifest-{name}"
        )))
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        self.0.write(name, text)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    pub(crate) fn dir(&self) -> &Path {
        self.0.path()
    }
}

/// Writes a file so that its modification time surely changes.
pub(crate) fn rewrite(path: &Path, text: &str) {
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(path, text).unwrap();
}

/// Loads the manifest at `path` into an engine and watches its files every 10 ms: the engine,
/// each reload's outcome as it comes, and the watcher.
pub(crate) fn watched(
    path: &Path,
) -> (
    Arc<PolicyEngine>,
    mpsc::Receiver<ReloadOutcome>,
    ManifestWatcher,
) {
    let loaded = Manifest::load(path, &CodeRegistry::new()).unwrap();
    let files = loaded.files().to_vec();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(loaded.into_policy_set())
            .build(),
    );
    let (sender, outcomes) = mpsc::channel();
    let watcher = ManifestWatcher::builder(path, engine.clone())
        .interval(Duration::from_millis(10))
        .files(files)
        .on_reload(move |outcome: &ReloadOutcome| {
            let _ = sender.send(outcome.clone());
        })
        .spawn();
    (engine, outcomes, watcher)
}

pub(crate) const NO_SSN: &str = r#"{
  "condition": { "field": "messages.*.content", "contains": ["ssn"] },
  "action": "deny",
  "reason": "no SSN"
}"#;

pub(crate) const REDACT_CARD: &str = r#"{
  "condition": { "always": true },
  "action": "redact",
  "redactions": [{ "field": "messages.0.content", "strategy": "replace", "pattern": "\\d{4}-\\d{4}", "replacement": "[CARD]" }]
}"#;

pub(crate) const BLOCK_RM: &str = r#"{
  "condition": { "field": "arguments.command", "contains": ["rm -rf"] },
  "action": "deny",
  "reason": "no rm -rf"
}"#;
