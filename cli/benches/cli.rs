//! Figures for the command line and hot reload (a bench binary: `cargo bench -p portcullis-cli
//! --bench cli -- <what>`, where `<what>` is `load`, `check`, `replay`, `swap` or nothing for all).
//!
//! - `load`: loading a manifest of 100 DSL rules (and, with the `rego` feature, 2 OPA
//!   bundles from `$PORTCULLIS_OPA_FIXTURES`), in process and as `portcullis check`.
//! - `check`: `Manifest::check` of that manifest (bundles validated without compiling their
//!   WebAssembly) against `Manifest::load`, side by side, and `portcullis check` on it.
//! - `replay`: `portcullis replay` of a generated log of recorded calls of 3 DSL rules
//!   (`REPLAY_CALLS`, default 1,000,000, and a tenth of it, to show memory stays flat):
//!   calls per second and the process's peak resident memory (VmHWM).
//! - `swap`: evaluations per second and p99 latency with the set reloaded from its manifest
//!   every 10 ms, against the same without reloads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use portcullis::manifest::{CodeRegistry, Manifest};
use portcullis::{InputContext, Message, Metadata, PolicyEngine};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portcullis-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const RULES: [&str; 3] = [
    r#"{ "condition": { "field": "messages.*.content", "contains": ["password", "api key"] }, "action": "deny", "reason": "secrets" }"#,
    r#"{ "condition": { "always": true }, "action": "redact", "redactions": [{ "field": "messages.0.content", "strategy": "replace", "pattern": "\\d{3}-\\d{2}-\\d{4}", "replacement": "[SSN]" }] }"#,
    r#"{ "condition": { "field": "messages.length", "greater_than": 50 }, "action": "deny", "reason": "too long" }"#,
];

fn three_rules(dir: &Path) -> PathBuf {
    for (index, rule) in RULES.iter().enumerate() {
        std::fs::create_dir_all(dir.join("rules")).unwrap();
        std::fs::write(dir.join(format!("rules/r{index}.json")), rule).unwrap();
    }
    let manifest = dir.join("portcullis.yaml");
    std::fs::write(&manifest, "input:\n  - dsl: rules/\n").unwrap();
    manifest
}

/// A manifest of 100 DSL rules and, with the `rego` feature, 2 OPA bundles: its folder, its
/// path and what it holds.
fn load_manifest(name: &str) -> (PathBuf, PathBuf, &'static str) {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("rules")).unwrap();
    for index in 0..100 {
        let rule = match index % 3 {
            0 => format!(
                r#"{{ "condition": {{ "field": "messages.*.content", "contains": ["word{index}", "other{index}"] }}, "action": "deny", "reason": "r{index}" }}"#
            ),
            1 => format!(
                r#"{{ "condition": {{ "field": "metadata.agent_id", "equals": "agent{index}" }}, "action": "audit", "reason": "r{index}" }}"#
            ),
            _ => format!(
                r#"{{ "condition": {{ "always": true }}, "action": "redact", "redactions": [{{ "field": "messages.0.content", "strategy": "replace", "pattern": "n{index}\\d+", "replacement": "[X]" }}] }}"#
            ),
        };
        std::fs::write(dir.join(format!("rules/rule{index:03}.json")), rule).unwrap();
    }
    #[cfg_attr(not(feature = "rego"), allow(unused_mut))]
    let mut manifest = String::from("input:\n  - dsl: rules/\n");
    #[cfg(not(feature = "rego"))]
    let what = "100 DSL rules";
    #[cfg(feature = "rego")]
    let what = {
        let fixtures = std::env::var_os("PORTCULLIS_OPA_FIXTURES").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
            PathBuf::from,
        );
        let bundles = fixtures.join("rego-wasm");
        manifest.push_str(&format!(
            "  - rego: {}\n",
            bundles.join("no-ssn-input.tar.gz").display()
        ));
        manifest.push_str(&format!(
            "tool_call:\n  - rego: {}\n",
            bundles.join("approved-tools.tar.gz").display()
        ));
        "100 DSL rules and 2 OPA bundles"
    };
    let path = dir.join("portcullis.yaml");
    std::fs::write(&path, manifest).unwrap();
    (dir, path, what)
}

fn load() {
    let (dir, path, what) = load_manifest("load");
    let runs = 10;
    let started = Instant::now();
    for _ in 0..runs {
        let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            loaded.policy_set().input().len(),
            100 + usize::from(what.contains("bundles"))
        );
    }
    let per_load = started.elapsed() / runs;
    println!("load: {what}: {per_load:?} per Manifest::load (mean of {runs})");
    let started = Instant::now();
    for _ in 0..3 {
        let status = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["check", path.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }
    println!(
        "load: `portcullis check` on it: {:?} per run (mean of 3, process included)",
        started.elapsed() / 3
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `calls` recorded calls of the three rules as the manifest's JSONL audit log writes
/// them: a call either denied by the first rule (one record) or allowed by all three (three
/// records, the second a redaction with its decision, the third seeing the redacted text).
fn write_log(path: &Path, calls: u64) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let redaction = r#"{"decision":"redact","redactions":[{"field":"messages.0.content","strategy":"replace","replacement":"[SSN]","pattern":"\\d{3}-\\d{2}-\\d{4}"}]}"#;
    for call in 0..calls {
        let (text, redacted) = match call % 4 {
            0 => ("please share the api key", ""),
            1 => ("my ssn is 123-45-6789", "my ssn is [SSN]"),
            _ => ("hello there, how are you", "hello there, how are you"),
        };
        let context = |text: &str| {
            format!(
                r#"{{"messages":[{{"role":"user","content":"{text}"}}],"metadata":{{"agent_id":"agent","session_id":"s{}","timestamp":"2026-01-01T00:00:00.{:03}Z"}}}}"#,
                call % 1000,
                call % 997
            )
        };
        let record = |policy: &str, decision: &str, text: &str, extra: &str| {
            format!(
                r#"{{"policy_id":"{policy}","decision":"{decision}","interception_point":"input","context":{},"timestamp":"2026-01-01T00:00:00.000Z","enforced":true{extra}}}"#,
                context(text)
            )
        };
        if call % 4 == 0 {
            writeln!(
                out,
                "{}",
                record("r0", "deny", text, r#","reason":"secrets""#)
            )
            .unwrap();
            continue;
        }
        writeln!(out, "{}", record("r0", "allow", text, "")).unwrap();
        let decision = format!(r#","policy_decision":{redaction}"#);
        writeln!(out, "{}", record("r1", "redact", text, &decision)).unwrap();
        writeln!(out, "{}", record("r2", "allow", redacted, "")).unwrap();
    }
    out.flush().unwrap();
}

/// Runs `portcullis replay` and watches its peak resident memory.
fn replay_once(manifest: &Path, log: &Path, calls: u64) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["replay", manifest.to_str().unwrap(), log.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the report as it comes: a full pipe would stop the child.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut report = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut report);
        report
    });
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let output = loop {
        if let Ok(status) = std::fs::read_to_string(&status_file)
            && let Some(line) = status.lines().find(|line| line.starts_with("VmHWM:"))
        {
            peak_kib = peak_kib.max(
                line.split_whitespace()
                    .nth(1)
                    .and_then(|kib| kib.parse().ok())
                    .unwrap_or(0),
            );
        }
        if child.try_wait().unwrap().is_some() {
            break reader.join().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let summary = output.lines().last().unwrap_or_default().to_owned();
    let size = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    println!(
        "replay: {calls} calls ({} MB log): {elapsed:.2?}, {:.0} calls/s, peak memory {:.1} MiB; `{summary}`",
        size / 1_000_000,
        calls as f64 / elapsed.as_secs_f64(),
        peak_kib as f64 / 1024.0
    );
}

fn replay() {
    let dir = scratch("replay");
    let manifest = three_rules(&dir);
    let calls: u64 = std::env::var("REPLAY_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    for calls in [calls / 10, calls] {
        let log = dir.join("audit.jsonl");
        write_log(&log, calls);
        replay_once(&manifest, &log, calls);
        let _ = std::fs::remove_file(&log);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn swap() {
    let dir = scratch("swap");
    let manifest = three_rules(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    // `Reload::Load`: load the manifest and swap its set in; `Reload::Swap`: swap in a set
    // loaded beforehand (the cost of the swap alone).
    #[derive(Clone, Copy, PartialEq)]
    enum Reload {
        None,
        Load,
        Swap,
    }
    let measure = |reload: Reload| {
        let loaded = Manifest::load(&manifest, &CodeRegistry::new()).unwrap();
        let engine = Arc::new(
            PolicyEngine::builder()
                .policy_set(loaded.into_policy_set())
                .build(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut ready: Vec<_> = if reload == Reload::Swap {
            (0..400)
                .map(|_| {
                    Manifest::load(&manifest, &CodeRegistry::new())
                        .unwrap()
                        .into_policy_set()
                })
                .collect()
        } else {
            Vec::new()
        };
        let reloader = (reload != Reload::None).then(|| {
            let (engine, stop, manifest) = (engine.clone(), stop.clone(), manifest.clone());
            std::thread::spawn(move || {
                let mut reloads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(10));
                    let set = match ready.pop() {
                        Some(set) => set,
                        None => Manifest::load(&manifest, &CodeRegistry::new())
                            .unwrap()
                            .into_policy_set(),
                    };
                    engine.replace_policy_set(set);
                    reloads += 1;
                }
                reloads
            })
        });
        let duration = Duration::from_secs(3);
        let latencies = runtime.block_on(async {
            let mut tasks = Vec::new();
            for task in 0..4 {
                let engine = engine.clone();
                tasks.push(tokio::spawn(async move {
                    let context = InputContext::new(
                        vec![Message::user("my ssn is 123-45-6789, nothing else")],
                        Metadata::new("agent", format!("s{task}")),
                    );
                    let mut latencies = Vec::with_capacity(1 << 20);
                    let started = Instant::now();
                    while started.elapsed() < duration {
                        let one = Instant::now();
                        let evaluation = engine.evaluate_input(&context).await.unwrap();
                        assert!(evaluation.is_modified());
                        latencies.push(one.elapsed());
                    }
                    latencies
                }));
            }
            let mut all = Vec::new();
            for task in tasks {
                all.extend(task.await.unwrap());
            }
            all
        });
        stop.store(true, Ordering::Relaxed);
        let reloads = reloader.map(|thread| thread.join().unwrap()).unwrap_or(0);
        let mut latencies = latencies;
        latencies.sort();
        let rate = latencies.len() as f64 / duration.as_secs_f64();
        let p99 = latencies[latencies.len() * 99 / 100];
        (rate, p99, reloads)
    };
    let (base_rate, base_p99, _) = measure(Reload::None);
    println!("swap: without reloads: {base_rate:.0} evaluations/s, p99 {base_p99:?}");
    for (reload, what) in [
        (Reload::Load, "loading the manifest and swapping its set in"),
        (Reload::Swap, "swapping in a set loaded beforehand"),
    ] {
        let (rate, p99, reloads) = measure(reload);
        println!(
            "swap: {what} every 10 ms ({reloads} times): {rate:.0} evaluations/s ({:.0}% of the rate without), p99 {p99:?} ({:.2}x)",
            100.0 * rate / base_rate,
            p99.as_secs_f64() / base_p99.as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let what: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |name: &str| what.is_empty() || what.iter().any(|w| w == name);
    if wants("load") {
        load();
    }
    if wants("check") {
        check();
    }
    if wants("swap") {
        swap();
    }
    if wants("replay") {
        replay();
    }
}

/// `check`: checking the manifest of `load` (100 DSL rules and, with `rego`, 2 OPA bundles)
/// without compiling the bundles, against loading it, side by side in alternating rounds;
/// then `portcullis check` as a process (median of its runs).
fn check() {
    let (dir, path, what) = load_manifest("check");
    let rounds = 10;
    let mut checks = Vec::with_capacity(rounds);
    let mut loads = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let warnings =
            Manifest::check(&path, &CodeRegistry::new()).unwrap_or_else(|e| panic!("{e}"));
        checks.push(started.elapsed());
        assert!(warnings.is_empty(), "{warnings:?}");
        let started = Instant::now();
        let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap_or_else(|e| panic!("{e}"));
        loads.push(started.elapsed());
        drop(loaded);
    }
    let check = median(&mut checks);
    let load = median(&mut loads);
    println!(
        "check: {what}: Manifest::check {check:?}, Manifest::load {load:?} (medians of {rounds} alternating rounds; load/check = {:.1}x)",
        load.as_secs_f64() / check.as_secs_f64()
    );
    let mut runs = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["check", path.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        runs.push(started.elapsed());
        assert!(status.success());
    }
    println!(
        "check: `portcullis check` on it: {:?} per run (median of 7, process included)",
        median(&mut runs)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}
