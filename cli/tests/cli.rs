//! The `portcullis` binary, run as a process on the fixtures, for every subcommand, outcome
//! and exit status. Human and JSON output are compared with the files in `tests/golden`
//! (refresh them with `PORTCULLIS_BLESS=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use portcullis::manifest::{CodeRegistry, JsonlAuditLog, Manifest};
use portcullis::{InputContext, Message, Metadata, PolicyEngine, ToolCallContext};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary in the fixtures folder (paths in messages stay short) without colours.
fn portcullis(args: &[&str]) -> Run {
    portcullis_with_input(args, None)
}

fn portcullis_with_input(args: &[&str], input: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .current_dir(fixtures())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Compares `actual` with the golden file `name`, or writes it with `PORTCULLIS_BLESS=1`.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("PORTCULLIS_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with PORTCULLIS_BLESS=1",
            path.display()
        )
    });
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

#[test]
fn check_a_clean_manifest() {
    let run = portcullis(&["check", "portcullis.yaml"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    golden("check-clean.txt", &run.stdout);
}

#[test]
fn check_reports_every_problem_like_a_compiler() {
    let run = portcullis(&["check", "broken/portcullis.yaml"]);
    assert_eq!(run.code, 1);
    golden("check-broken.txt", &run.stdout);
    let run = portcullis(&["check", "broken/portcullis.yaml", "--format", "json"]);
    assert_eq!(run.code, 1);
    golden("check-broken.json", &run.stdout);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["ok"], false);
    assert_eq!(document["errors"].as_array().unwrap().len(), 5);
}

#[test]
fn check_warnings_pass_unless_denied() {
    let run = portcullis(&["check", "warnings.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "warnings.yaml:4:17: warning: `audit.jsonl`: the folder no-such-folder does not exist (yet)"
        ),
        "{}",
        run.stdout
    );
    let run = portcullis(&["check", "warnings.yaml", "--deny-warnings"]);
    assert_eq!(run.code, 1);
}

#[test]
fn check_shows_a_rules_warnings_with_their_place() {
    // A rule the schema accepts loads; what the checker knows beyond the schema is a warning,
    // on the rule file's line and column, whether the rule is checked alone or by its manifest.
    for target in ["warned/shouting_user.json", "warned/portcullis.yaml"] {
        let run = portcullis(&["check", target]);
        assert_eq!(run.code, 0, "{target}: {}", run.stdout);
        assert!(
            run.stdout
                .contains("warned/shouting_user.json:2:46: warning: "),
            "{target}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("0 errors, 1 warning"), "{}", run.stdout);
        let run = portcullis(&["check", target, "--deny-warnings"]);
        assert_eq!(run.code, 1, "{target}: {}", run.stdout);
        let run = portcullis(&["check", target, "--format", "json"]);
        let document: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(document["warnings"].as_array().map(Vec::len), Some(1));
    }
}

#[test]
fn check_rules_folders_and_bundles() {
    // A folder of tests is not a folder of manifests.
    let run = portcullis(&["check", "tests"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = portcullis(&["check", "rules"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("4 checked: 0 errors, 0 warnings"),
        "{}",
        run.stdout
    );
    let run = portcullis(&[
        "check",
        "broken/rules/typo.json",
        "broken/junk.tar.gz",
        "nowhere.json",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("broken/rules/typo.json:2:18: error: field \"messages.0.contnet\""),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("broken/junk.tar.gz: error: the bundle cannot be used"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("nowhere.json: error: cannot read the file"),
        "{}",
        run.stdout
    );
    let bundle = opa_fixtures().join("rego-wasm/no-ssn-input.tar.gz");
    let run = portcullis(&["check", bundle.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn eval_allowed_with_the_forwarded_context() {
    let run = portcullis(&[
        "eval",
        "portcullis.yaml",
        "--point",
        "input",
        "--context",
        "contexts/input-card.json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    golden("eval-allowed.json", &run.stdout);
}

#[test]
fn eval_denied() {
    let run = portcullis(&[
        "eval",
        "portcullis.yaml",
        "--point",
        "tool_call",
        "--context",
        "contexts/tool-rm.json",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    golden("eval-denied.json", &run.stdout);
    // The same from standard input.
    let context = std::fs::read_to_string(fixtures().join("contexts/input-ssn.json")).unwrap();
    let run = portcullis_with_input(
        &[
            "eval",
            "portcullis.yaml",
            "--point",
            "input",
            "--context",
            "-",
            "--format",
            "human",
        ],
        Some(&context),
    );
    assert_eq!(run.code, 2);
    golden("eval-denied-human.json", &run.stdout);
}

#[test]
fn eval_evaluation_error() {
    let run = portcullis(&[
        "eval",
        "remote.yaml",
        "--point",
        "tool_call",
        "--context",
        "contexts/tool-rm.json",
    ]);
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["outcome"], "error");
    assert_eq!(document["error"]["policy_id"], "remote");
    assert!(
        document["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:9"),
        "{document}"
    );
    assert_eq!(
        document["decisions"],
        json!([{ "policy_id": "remote", "decision": "evaluation_error" }])
    );
}

#[test]
fn eval_bad_input_is_status_1() {
    let run = portcullis(&[
        "eval",
        "portcullis.yaml",
        "--point",
        "input",
        "--context",
        "contexts/not-a-context.json",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "contexts/not-a-context.json: error: not a valid input context: invalid type: string \"hello\", expected a sequence\n"
    );
    let run = portcullis(&[
        "eval",
        "portcullis.yaml",
        "--point",
        "input",
        "--context",
        "contexts/missing.json",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("cannot read the file"),
        "{}",
        run.stderr
    );
    let run = portcullis(&[
        "eval",
        "broken/portcullis.yaml",
        "--point",
        "input",
        "--context",
        "contexts/input-ssn.json",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .starts_with("broken/portcullis.yaml:1:1: error: unknown key `on_eror`"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
}

#[test]
fn eval_a_rego_bundle() {
    let scratch = std::env::temp_dir().join(format!("portcullis-cli-rego-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let manifest = scratch.join("portcullis.yaml");
    let bundle = opa_fixtures().join("rego-wasm/no-ssn-input.tar.gz");
    std::fs::write(
        &manifest,
        format!("input:\n  - rego: {}\n", bundle.display()),
    )
    .unwrap();
    let context = fixtures().join("contexts/input-ssn.json");
    let run = portcullis(&[
        "eval",
        manifest.to_str().unwrap(),
        "--point",
        "input",
        "--context",
        context.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        "{\"outcome\":\"denied\",\"decisions\":[{\"policy_id\":\"no-ssn-input\",\"decision\":\"deny\"}],\"denial\":{\"policy_id\":\"no-ssn-input\",\"reason\":\"Message contains a potential SSN.\"}}\n"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn test_all_passing() {
    let run = portcullis(&["test", "portcullis.yaml", "tests/policies.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    golden("test-passing.txt", &run.stdout);
}

#[test]
fn test_with_a_failing_case() {
    let run = portcullis(&["test", "portcullis.yaml", "tests"]);
    assert_eq!(run.code, 2);
    golden("test-failing.txt", &run.stdout);
    let run = portcullis(&["test", "portcullis.yaml", "tests", "--format", "json"]);
    assert_eq!(run.code, 2);
    golden("test-failing.json", &run.stdout);
    let run = portcullis(&["test", "portcullis.yaml", "tests", "--format", "junit"]);
    assert_eq!(run.code, 2);
    golden("test-failing.xml", &run.stdout);
}

#[test]
fn test_files_with_unknown_keys_are_status_1() {
    let run = portcullis(&["test", "portcullis.yaml", "broken/tests-unknown-key.yaml"]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.is_empty());
    golden("test-broken.txt", &run.stderr);
}

/// Records an audit log with the `before` set, as an application with `audit: jsonl` does.
fn record_log(path: &Path) {
    let loaded = Manifest::load(fixtures().join("before.yaml"), &CodeRegistry::new()).unwrap();
    let engine = PolicyEngine::builder()
        .policy_set(loaded.into_policy_set())
        .on_audit(JsonlAuditLog::open(path).unwrap())
        .build();
    let metadata = |session: &str| {
        let mut metadata = Metadata::new("agent", session);
        metadata.timestamp = format!("2026-01-01T00:00:0{}Z", session.len());
        metadata
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        for (session, text) in [
            ("s1", "hello"),
            ("s22", "my ssn is 1"),
            ("s333", "card 1234-5678-9012-3456"),
        ] {
            let context = InputContext::new(vec![Message::user(text)], metadata(session));
            let _ = engine.evaluate_input(&context).await;
        }
        // A tool call the `before` set had no policy for: no record, nothing to replay.
        let call = ToolCallContext::new(
            "shell",
            json!({ "command": "rm -rf /" })
                .as_object()
                .unwrap()
                .clone(),
            Message::assistant(""),
            metadata("s4444"),
        );
        let _ = engine.evaluate_tool_call(&call).await;
    });
    // Dropping the engine drops the log, which waits for its writer to write every record.
    drop(engine);
    // A line a crash cut short.
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(b"{\"policy_id\": \"a_no_ssn\", \"deci\n")
        .unwrap();
}

#[test]
fn replay_reports_what_would_change() {
    let dir = std::env::temp_dir().join(format!("portcullis-cli-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&log);
    record_log(&log);
    let log_arg = log.to_str().unwrap();
    let run = portcullis(&["replay", "portcullis.yaml", log_arg]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    golden("replay.txt", &run.stdout.replace(log_arg, "<log>"));
    let stderr = run.stderr.replace(log_arg, "<log>");
    assert!(
        stderr.starts_with("<log>:4: error: not a JSON audit record: EOF while parsing"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let run = portcullis(&["replay", "portcullis.yaml", log_arg, "--fail-on-change"]);
    assert_eq!(run.code, 2);
    let run = portcullis(&["replay", "portcullis.yaml", log_arg, "--format", "json"]);
    assert_eq!(run.code, 0);
    golden("replay.json", &run.stdout.replace(log_arg, "<log>"));
    // Against the set it was recorded with, nothing changes.
    let run = portcullis(&["replay", "before.yaml", log_arg, "--fail-on-change"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.ends_with("3 calls, 3 unchanged, 0 changed\n"),
        "{}",
        run.stdout
    );
    let run = portcullis(&["replay", "portcullis.yaml", "no-such.jsonl"]);
    assert_eq!(run.code, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_and_usage_errors() {
    let run = portcullis(&["--help"]);
    assert_eq!(run.code, 0);
    for command in ["check", "eval", "test", "replay", "serve", "proxy"] {
        assert!(run.stdout.contains(command), "{}", run.stdout);
    }
    let run = portcullis(&[
        "eval",
        "portcullis.yaml",
        "--point",
        "inptu",
        "--context",
        "x",
    ]);
    assert_eq!(run.code, 2, "clap's usage errors");
}

fn opa_fixtures() -> PathBuf {
    let dir = std::env::var_os("PORTCULLIS_OPA_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        dir.join("rego-wasm").is_dir(),
        "the OPA WebAssembly fixtures are missing: looked in {}; set PORTCULLIS_OPA_FIXTURES",
        dir.display()
    );
    dir
}

#[test]
fn replay_groups_interleaved_calls_and_applies_recorded_changes() {
    let dir =
        std::env::temp_dir().join(format!("portcullis-cli-interleaved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let context = |session: &str, text: &str| {
        json!({
            "messages": [{ "role": "user", "content": text }],
            "metadata": { "agent_id": "a", "session_id": session, "timestamp": "2026-01-01T00:00:00Z" }
        })
    };
    let record = |policy: &str, decision: &str, context: Value, change: Option<Value>| {
        let mut record = json!({
            "policy_id": policy, "decision": decision, "interception_point": "input",
            "context": context, "timestamp": "2026-01-01T00:00:00.001Z", "enforced": true
        });
        if let Some(change) = change {
            record["policy_decision"] = change;
        }
        record.to_string()
    };
    let card = "card 1234-5678-9012-3456";
    let redaction = json!({ "decision": "redact", "redactions": [{
        "field": "messages.0.content", "strategy": "replace",
        "pattern": "\\d{4}-\\d{4}-\\d{4}-\\d{4}", "replacement": "[CARD]" }] });
    let mut other_redaction = redaction.clone();
    other_redaction["redactions"][0]["replacement"] = json!("[C]");
    let lines = [
        record("a_no_ssn", "allow", context("x", card), None),
        record("a_no_ssn", "allow", context("y", "hello"), None),
        record(
            "b_redact_card",
            "redact",
            context("x", card),
            Some(redaction),
        ),
        record("b_redact_card", "allow", context("y", "hello"), None),
        // The same key again: a new call (its recorded outcome differs from today's).
        record("a_no_ssn", "deny", context("y", "hello"), None),
        // A call whose recorded change differs from today's: another forwarded context.
        record("a_no_ssn", "allow", context("z", card), None),
        record(
            "b_redact_card",
            "redact",
            context("z", card),
            Some(other_redaction),
        ),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let run = portcullis(&["replay", "portcullis.yaml", log.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.stdout.replace(log.to_str().unwrap(), "<log>");
    assert_eq!(
        out,
        "<log>:5: input (agent a, session y, 2026-01-01T00:00:00Z): denied by a_no_ssn → allowed\n\
         <log>:6: input (agent a, session z, 2026-01-01T00:00:00Z): allowed, forwarding a different context: \
         {\"messages\":[{\"role\":\"user\",\"content\":\"card [C]\"}],\"metadata\":{\"agent_id\":\"a\",\"session_id\":\"z\",\"timestamp\":\"2026-01-01T00:00:00Z\"}} → \
         {\"messages\":[{\"role\":\"user\",\"content\":\"card [CARD]\"}],\"metadata\":{\"agent_id\":\"a\",\"session_id\":\"z\",\"timestamp\":\"2026-01-01T00:00:00Z\"}}\n\
         4 calls, 2 unchanged, 2 changed\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The document of an `approval_required` outcome, its approval's `id` (unique per process)
/// replaced by `<id>`, and the approval's action digest.
fn approval_of(stdout: &str) -> (Value, String) {
    let mut document: Value = serde_json::from_str(stdout).unwrap();
    let approval = document["approval"].as_object_mut().expect("an approval");
    let id = std::mem::replace(approval.get_mut("id").expect("an id"), json!("<id>"));
    assert!(id.as_str().is_some_and(|id| id.starts_with("apr-")), "{id}");
    let digest = approval["action_digest"].as_str().unwrap().to_owned();
    assert_eq!(digest.len(), 64);
    assert!(
        digest
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    (document, digest)
}

#[test]
fn eval_approval_required_then_granted() {
    let args = [
        "eval",
        "sessions/portcullis.yaml",
        "--point",
        "tool_call",
        "--context",
        "contexts/tool-email.json",
    ];
    let run = portcullis(&args);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    let (document, digest) = approval_of(&run.stdout);
    golden(
        "eval-approval-required.json",
        &format!("{}\n", serde_json::to_string_pretty(&document).unwrap()),
    );
    // The digest is the one the engine computes for this action.
    let context: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("contexts/tool-email.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        digest,
        portcullis::approval::action_digest(portcullis::InterceptionPoint::ToolCall, &context)
    );

    // A person's grant, given on the command line, lets the same action through.
    let mut granted: Vec<&str> = args.to_vec();
    granted.extend(["--grant", &digest]);
    let run = portcullis(&granted);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    golden("eval-granted.json", &run.stdout);

    // A grant for another action does not.
    let other = "0".repeat(64);
    let mut wrong: Vec<&str> = args.to_vec();
    wrong.extend(["--grant", &other]);
    assert_eq!(portcullis(&wrong).code, 4);

    // A grant that is not a digest is the command's own input gone wrong.
    let mut bad: Vec<&str> = args.to_vec();
    bad.extend(["--grant", "ABC"]);
    let run = portcullis(&bad);
    assert_eq!(run.code, 1);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr
            .starts_with("error: --grant: \"ABC\" is not an action digest"),
        "{}",
        run.stderr
    );
}

#[test]
fn test_cases_share_session_state_and_record_grants() {
    let run = portcullis(&["test", "sessions/portcullis.yaml", "sessions/tests"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    golden("test-sessions.txt", &run.stdout);
    // Without a session store in the manifest nothing carries over, as in production: the
    // case expecting the label's denial fails, and says what happened instead.
    let run = portcullis(&[
        "test",
        "sessions/stateless.yaml",
        "sessions/tests/a-sequence.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    golden("test-stateless.json", &run.stdout);
}

#[test]
fn test_files_with_bad_grants_are_status_1() {
    let dir = std::env::temp_dir().join(format!("portcullis-cli-grants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad-grants.yaml");
    std::fs::write(
        &file,
        "tests:\n  - name: x\n    point: input\n    grants: [nothex, 3]\n    context: { messages: [], metadata: { agent_id: a, session_id: s, timestamp: \"2026-01-01T00:00:00Z\" } }\n    expect: { outcome: allowed }\n",
    )
    .unwrap();
    let run = portcullis(&["test", "portcullis.yaml", file.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let stderr = run.stderr.replace(file.to_str().unwrap(), "<file>");
    assert!(
        stderr.contains("<file>:4:14: error: \"nothex\" is not an action digest"),
        "{stderr}"
    );
    assert!(
        stderr.contains("<file>:4:22: error: `grants` lists action digests (strings)"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A manifest in a scratch folder over the session fixtures' rules, with an audit log.
fn audited_manifest(dir: &Path, escalate: bool) -> PathBuf {
    let rules = fixtures().join("sessions/rules");
    let mut text = format!(
        "input:\n  - dsl: {}\ntool_call:\n  - dsl: {}\n",
        rules.join("mark_untrusted.json").display(),
        rules.join("no_email_after_untrusted.json").display()
    );
    if escalate {
        text.push_str(&format!(
            "  - dsl: {}\n",
            rules.join("escalate_email.json").display()
        ));
    }
    text.push_str("sessions: { store: memory }\naudit: { jsonl: audit.jsonl }\n");
    let manifest = dir.join(if escalate {
        "audited.yaml"
    } else {
        "candidate.yaml"
    });
    std::fs::write(&manifest, text).unwrap();
    manifest
}

#[test]
fn eval_writes_the_manifests_audit_log_and_replay_understands_approvals() {
    let dir = std::env::temp_dir().join(format!("portcullis-cli-audited-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = audited_manifest(&dir, true);
    let email = fixtures().join("contexts/tool-email.json");
    let args = [
        "eval",
        manifest.to_str().unwrap(),
        "--point",
        "tool_call",
        "--context",
        email.to_str().unwrap(),
    ];
    let run = portcullis(&args);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    let (_, digest) = approval_of(&run.stdout);
    let mut granted: Vec<&str> = args.to_vec();
    granted.extend(["--grant", &digest]);
    assert_eq!(portcullis(&granted).code, 0);
    let log = dir.join("audit.jsonl");
    let decisions: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            format!(
                "{} {}",
                record["policy_id"].as_str().unwrap(),
                record["decision"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            "no_email_after_untrusted allow",
            "escalate_email escalate",
            "escalate_email approval_pending",
            "no_email_after_untrusted allow",
            "escalate_email escalate",
            "escalate_email approval_granted",
        ]
    );
    let log_arg = log.to_str().unwrap();
    // Against the same set: the pending call still waits, the granted one still goes out.
    let run = portcullis(&[
        "replay",
        manifest.to_str().unwrap(),
        log_arg,
        "--fail-on-change",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stdout, "2 calls, 2 unchanged, 0 changed\n");
    // Replaying wrote nothing to the log it read (the candidate's audit sinks are not used).
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 6);
    // Against a set without the approval: the call that waited would go out.
    let candidate = audited_manifest(&dir, false);
    let run = portcullis(&["replay", candidate.to_str().unwrap(), log_arg]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout.replace(log_arg, "<log>"),
        "<log>:1: tool_call send_email (agent a, session s1, 2026-01-01T00:00:00Z): approval_required by escalate_email → allowed\n\
         2 calls, 1 unchanged, 1 changed\n"
    );

    // An audit log that cannot be opened stops `eval` with the manifest's place.
    std::fs::write(
        dir.join("unopenable.yaml"),
        "input: []\naudit: { jsonl: missing/audit.jsonl }\n",
    )
    .unwrap();
    let unopenable = dir.join("unopenable.yaml");
    let input = fixtures().join("contexts/input-card.json");
    let run = portcullis(&[
        "eval",
        unopenable.to_str().unwrap(),
        "--point",
        "input",
        "--context",
        input.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr
            .replace(unopenable.to_str().unwrap(), "<manifest>")
            .starts_with("<manifest>:2:17: error: `audit.jsonl`: cannot open"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eval_and_test_at_the_tool_result_point() {
    let run = portcullis(&[
        "eval",
        "tool-result/portcullis.yaml",
        "--point",
        "tool_result",
        "--context",
        "tool-result/contexts/web.json",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["outcome"], "allowed", "{document}");
    assert_eq!(
        document["decisions"],
        json!([{ "policy_id": "label_web_results", "decision": "audit" }])
    );
    for (context, says) in [
        ("no-tool-name", "missing field `tool_name`"),
        ("bad-is-error", "`is_error` must be a boolean"),
    ] {
        let path = format!("tool-result/contexts/{context}.json");
        let run = portcullis(&[
            "eval",
            "tool-result/portcullis.yaml",
            "--point",
            "tool_result",
            "--context",
            &path,
        ]);
        assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("not a valid tool_result context") && run.stderr.contains(says),
            "{}",
            run.stderr
        );
    }
    // The untrusted-content pattern, case after case in one session.
    let run = portcullis(&["test", "tool-result/portcullis.yaml", "tool-result/tests"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("3 passed"), "{}", run.stdout);
}

#[test]
fn check_eval_and_test_a_cedar_manifest() {
    let run = portcullis(&["check", "cedar/portcullis.yaml"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("1 checked: 0 errors, 0 warnings"),
        "{}",
        run.stdout
    );

    let eval = |context: &str| {
        let path = format!("cedar/contexts/{context}.json");
        portcullis(&[
            "eval",
            "cedar/portcullis.yaml",
            "--point",
            "tool_call",
            "--context",
            &path,
        ])
    };
    let run = eval("read-file");
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["outcome"], "allowed");
    assert_eq!(
        document["decisions"],
        json!([{ "policy_id": "tools", "decision": "allow" }])
    );
    let run = eval("intern-read-file");
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        document["denial"],
        json!({ "policy_id": "tools", "reason": "interns may not read files" })
    );
    let run = eval("delete-database");
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["denial"]["reason"], "no Cedar policy permits this");

    let run = portcullis(&["test", "cedar/portcullis.yaml", "cedar/tests"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("6 passed, 0 failed"), "{}", run.stdout);
}

#[test]
fn check_reports_cedar_diagnostics_at_their_place() {
    let run = portcullis(&["check", "cedar/broken/portcullis.yaml"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    // Cedar's validation against the schema, and its parser, each at the line and column in
    // the file at fault, with the line shown.
    assert!(
        run.stdout.contains("cedar/broken/tools.cedar:2:8: error: for policy `policy0`, attribute `owner` on entity type `Tool` not found"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("2 | when { resource.owner == principal };"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("cedar/broken/syntax.cedar:3:18: error: unexpected token `action`"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("2 errors"), "{}", run.stdout);
    // A Cedar file on its own: its parse errors.
    let run = portcullis(&["check", "cedar/broken/syntax.cedar", "--format", "json"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let document: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(document["errors"][0]["line"], 3, "{document}");
    let run = portcullis(&["check", "cedar/policies/tools.cedar"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
}
