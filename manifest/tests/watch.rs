//! Reloading: a change swaps the set in; a broken change keeps the old one.

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::Scratch;
use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine};
use portcullis_manifest::{CodeRegistry, Manifest, ManifestWatcher, ReloadOutcome};

const DENY_A: &str =
    r#"{ "condition": { "field": "messages.0.content", "contains": ["a"] }, "action": "deny" }"#;
const DENY_B: &str =
    r#"{ "condition": { "field": "messages.0.content", "contains": ["b"] }, "action": "deny" }"#;

async fn allowed(engine: &PolicyEngine, text: &str) -> bool {
    let context = InputContext::new(vec![Message::user(text)], Metadata::new("agent", "s"));
    engine.evaluate_input(&context).await.is_ok()
}

/// Writes a file so that its modification time surely changes.
fn rewrite(path: &std::path::Path, text: &str) {
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn a_change_reloads_and_a_broken_change_keeps_the_old_set() {
    let scratch = Scratch::new("watch");
    let rule = scratch.write("rules/rule.json", DENY_A);
    let path = scratch.write("portcullis.yaml", "input:\n  - dsl: rules/rule.json\n");
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    let files = loaded.files().to_vec();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(loaded.into_policy_set())
            .build(),
    );
    let (sender, outcomes) = mpsc::channel();
    let watcher = ManifestWatcher::builder(&path, engine.clone())
        .interval(Duration::from_millis(10))
        .files(files)
        .on_reload(move |outcome: &ReloadOutcome| {
            let _ = sender.send(outcome.clone());
        })
        .spawn();
    assert!(!allowed(&engine, "a").await);

    // A rule file changes: the new rule is in force.
    rewrite(&rule, DENY_B);
    let outcome = outcomes.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(outcome.is_reloaded(), "{outcome:?}");
    assert!(allowed(&engine, "a").await);
    assert!(!allowed(&engine, "b").await);

    // A broken rule: the reload fails with the file and the place, the old set stays.
    rewrite(&rule, "{ \"condition\": ");
    match outcomes.recv_timeout(Duration::from_secs(10)).unwrap() {
        ReloadOutcome::Failed(errors) => {
            let text = errors.to_string();
            assert!(text.contains("rule.json:1:"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!allowed(&engine, "b").await, "the last good set is kept");
    assert!(allowed(&engine, "a").await);

    // A broken manifest: the same.
    rewrite(&path, "input: [");
    assert!(
        !outcomes
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .is_reloaded()
    );
    assert!(!allowed(&engine, "b").await);

    // An empty manifest, as a file caught between truncation and writing is, would allow
    // everything: it is refused as well.
    rewrite(&path, "");
    assert!(
        !outcomes
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .is_reloaded()
    );
    assert!(!allowed(&engine, "b").await, "the last good set is kept");

    // Fixed again: reloaded.
    rewrite(&path, "input:\n  - dsl: rules/rule.json\n");
    rewrite(&rule, DENY_A);
    let mut outcome = outcomes.recv_timeout(Duration::from_secs(10)).unwrap();
    while !outcome.is_reloaded() || !allowed(&engine, "b").await {
        outcome = outcomes.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    assert!(!allowed(&engine, "a").await);
    watcher.stop();
}
