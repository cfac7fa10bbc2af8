//! Two reloads that cross (a `SIGHUP` while the watcher reloads, a slow read and a quick
//! change): the set read last is the one in force, never the older one swapped in last.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use common::Scratch;
use portcullis_engine::PolicyEngine;
use portcullis_manifest::{CodeRegistry, reload};

const DENY: &str =
    r#"{ "condition": { "field": "messages.0.content", "contains": ["x"] }, "action": "deny" }"#;

fn input_ids(engine: &PolicyEngine) -> Vec<String> {
    let set = engine.policy_set();
    set.input().policies().map(|p| p.id().to_owned()).collect()
}

#[test]
fn the_reload_that_read_the_files_last_is_the_one_in_force() {
    let scratch = Scratch::new("reload-race");
    scratch.write("rules/old.json", DENY);
    scratch.write("rules/new.json", DENY);
    // The older manifest includes a policy-set file that is a pipe: its reload reads the
    // manifest, then waits on the pipe until the test lets it go on.
    let gate = scratch.path("gate.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&gate)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let path = scratch.write(
        "portcullis.yaml",
        "input:\n  - dsl: rules/old.json\ninclude:\n  - gate.json\n",
    );
    let engine = std::sync::Arc::new(PolicyEngine::builder().build());

    let older = {
        let (path, engine) = (path.clone(), engine.clone());
        std::thread::spawn(move || reload(&path, &CodeRegistry::new(), &engine))
    };
    // Opening the pipe for writing returns once the older reload opened it to read: it has
    // read the older manifest and waits.
    let mut pipe = std::fs::OpenOptions::new()
        .write(true)
        .open(&gate)
        .expect("the pipe opens");

    // The manifest changes, and a second reload starts.
    let changed = scratch.write("portcullis.yaml.tmp", "input:\n  - dsl: rules/new.json\n");
    std::fs::rename(&changed, &path).expect("renamed");
    let (done, finished) = mpsc::channel();
    let newer = {
        let (path, engine) = (path.clone(), engine.clone());
        std::thread::spawn(move || {
            let outcome = reload(&path, &CodeRegistry::new(), &engine);
            let _ = done.send(());
            outcome
        })
    };
    // The newer reload may finish first (it must not then be undone), or wait for the older.
    let _ = finished.recv_timeout(Duration::from_secs(2));

    // The older reload goes on, and swaps its set in.
    pipe.write_all(br#"{"aps_version": "0.1.0", "policies": [{"condition": {"always": true}, "action": "audit"}]}"#)
        .expect("written");
    drop(pipe);
    let older = older.join().expect("the older reload ran");
    let newer = newer.join().expect("the newer reload ran");
    assert!(older.is_reloaded(), "{older:?}");
    assert!(newer.is_reloaded(), "{newer:?}");
    assert_eq!(input_ids(&engine), ["new"]);
}
