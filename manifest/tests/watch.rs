//! Reloading: a change swaps the set in; a broken change keeps the old one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Scratch, rewrite, watched};
use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine};
use portcullis_manifest::{CodeRegistry, Manifest, ReloadOutcome};

const DENY_A: &str =
    r#"{ "condition": { "field": "messages.0.content", "contains": ["a"] }, "action": "deny" }"#;
const DENY_B: &str =
    r#"{ "condition": { "field": "messages.0.content", "contains": ["b"] }, "action": "deny" }"#;

async fn allowed(engine: &PolicyEngine, text: &str) -> bool {
    let context = InputContext::new(vec![Message::user(text)], Metadata::new("agent", "s"));
    engine.evaluate_input(&context).await.is_ok()
}

#[tokio::test]
async fn a_change_reloads_and_a_broken_change_keeps_the_old_set() {
    let scratch = Scratch::new("watch");
    let rule = scratch.write("rules/rule.json", DENY_A);
    let path = scratch.write("portcullis.yaml", "input:\n  - dsl: rules/rule.json\n");
    let (engine, outcomes, watcher) = watched(&path);
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

/// The engine keeps the session store, audit sinks and approval time-out it was assembled
/// with: a reload that changes them says so, naming each section, instead of dropping the
/// change silently.
#[tokio::test]
async fn a_reload_warns_about_engine_sections_it_does_not_apply() {
    let scratch = Scratch::new("watch-sections");
    scratch.write("rules/rule.json", DENY_A);
    let start = "input:\n  - dsl: rules/rule.json\nsessions: { store: memory, ttl: 1h }\napprovals: { timeout: 1m }\n";
    let path = scratch.write("portcullis.yaml", start);
    let engine = Manifest::load(&path, &CodeRegistry::new())
        .unwrap()
        .into_engine_builder()
        .await
        .unwrap()
        .build();
    let warned = |outcome: &ReloadOutcome| -> Vec<String> {
        match outcome {
            ReloadOutcome::Reloaded { warnings } => {
                warnings.iter().map(ToString::to_string).collect()
            }
            ReloadOutcome::Failed(errors) => panic!("{errors}"),
        }
    };

    // Only the policies change: no warning.
    rewrite(
        &path,
        &start.replace("rules/rule.json", "rules/./rule.json"),
    );
    let outcome = portcullis_manifest::reload(&path, &CodeRegistry::new(), &engine);
    assert!(warned(&outcome).is_empty(), "{outcome:?}");

    // The three engine sections change: one warning each, with its place.
    rewrite(
        &path,
        "input:\n  - dsl: rules/rule.json\nsessions: { store: memory, ttl: 2h }\napprovals: { timeout: 5m }\naudit: { jsonl: audit.jsonl }\n",
    );
    let outcome = portcullis_manifest::reload(&path, &CodeRegistry::new(), &engine);
    let warnings = warned(&outcome);
    for section in ["sessions", "audit", "approvals"] {
        assert!(
            warnings
                .iter()
                .any(|warning| warning.contains(&format!("`{section}` changed"))
                    && warning.contains("restart")
                    && warning.contains("portcullis.yaml:")),
            "no warning for `{section}`: {warnings:?}"
        );
    }
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    // The set did change.
    assert!(!allowed(&engine, "a").await);
}
