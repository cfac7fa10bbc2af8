//! `portcullis test`: test cases in YAML, run in order on one engine per file.
//!
//! Each file gets a fresh engine built from the manifest for a trial
//! ([`LoadedManifest::for_trials`](portcullis::manifest::LoadedManifest::for_trials)): its
//! cases share that engine's session state, in order, starting from empty sessions (a Redis
//! store named by the manifest is replaced by one in memory, so tests never change a session
//! real agents share, and run the same every time); nothing is written to the manifest's
//! audit sinks. A manifest without `sessions` keeps no state, as in production: a case sees
//! the `metadata.session` it was given. A case's `grants` are recorded before it runs.

use std::path::{Path, PathBuf};

use portcullis::InterceptionPoint;
use portcullis::manifest::yaml::{self, Node, NodeValue};
use portcullis::manifest::{CodeRegistry, Diagnostic, Manifest};
use serde_json::{Value, json};

use crate::outcome::{self, Context, Outcome, Verdict};
use crate::{Format, render};

const FILE_KEYS: &[&str] = &["tests"];
const CASE_KEYS: &[&str] = &["name", "point", "context", "expect", "grants"];
const EXPECT_KEYS: &[&str] = &[
    "outcome",
    "context",
    "decisions",
    "policy_id",
    "reason_contains",
];
/// One test case as written.
struct Case {
    name: String,
    point: InterceptionPoint,
    context: Context,
    grants: Vec<String>,
    expect: Expect,
}

#[derive(Default)]
struct Expect {
    outcome: Option<Verdict>,
    context: Option<Value>,
    decisions: Vec<(String, String)>,
    policy_id: Option<String>,
    reason_contains: Option<String>,
}

/// How one case went.
struct Ran {
    file: PathBuf,
    name: String,
    failures: Vec<String>,
}

pub(crate) fn run(manifest: &Path, tests: &[PathBuf], format: Format) -> u8 {
    let loaded = match Manifest::load(manifest, &CodeRegistry::new()) {
        Ok(loaded) => loaded,
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };
    let mut files = Vec::new();
    for path in tests {
        if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(read) => {
                    let mut found: Vec<PathBuf> = read
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| {
                            p.extension()
                                .is_some_and(|ext| ext == "yaml" || ext == "yml")
                        })
                        .collect();
                    found.sort();
                    files.extend(found);
                }
                Err(error) => {
                    eprintln!("{}: error: cannot read the folder: {error}", path.display());
                    return 1;
                }
            }
        } else {
            files.push(path.clone());
        }
    }
    // Every file is read before any case runs: a broken file stops the run.
    let mut suites = Vec::new();
    let mut problems = Vec::new();
    for file in &files {
        match read_file(file) {
            Ok(cases) => suites.push((file.clone(), cases)),
            Err(found) => problems.extend(found),
        }
    }
    if !problems.is_empty() {
        let colour = render::colours();
        for problem in &problems {
            eprint!("{}", render::human(problem, colour));
        }
        return 1;
    }
    let runtime = crate::runtime();
    let mut results = Vec::new();
    let model = loaded.manifest().clone();
    let mut loaded = Some(loaded);
    for (file, cases) in suites {
        // One engine per file: its cases share it, in order. The first file takes the
        // manifest loaded above; the others build it again, for sessions of their own.
        let fresh = match loaded.take() {
            Some(first) => Ok(first),
            None => model.build(&CodeRegistry::new()),
        };
        let built = match fresh {
            Ok(fresh) => runtime.block_on(outcome::engine(fresh.for_trials())),
            Err(errors) => Err(errors),
        };
        let engine = match built {
            Ok(built) => built,
            Err(errors) => {
                render::print_load_errors(&errors);
                return 1;
            }
        };
        for case in cases {
            let outcome = runtime.block_on(async {
                for digest in &case.grants {
                    if let Err(error) = engine
                        .approvals()
                        .grant(digest, outcome::GRANTED_BY, outcome::GRANT_TTL)
                        .await
                    {
                        eprintln!("warning: grant {digest}: not recorded: {error}");
                    }
                }
                outcome::evaluate(&engine, &case.context).await
            });
            let failures = compare(&case.expect, &outcome);
            let _ = case.point;
            results.push(Ran {
                file: file.clone(),
                name: case.name,
                failures,
            });
        }
    }
    let failed = results.iter().filter(|r| !r.failures.is_empty()).count();
    let passed = results.len() - failed;
    match format {
        Format::Human => {
            let colour = render::colours();
            let paint = |code: &str, text: &str| {
                if colour {
                    format!("\x1b[{code}m{text}\x1b[0m")
                } else {
                    text.to_owned()
                }
            };
            for ran in &results {
                if ran.failures.is_empty() {
                    println!(
                        "{} {}: {}",
                        paint("32", "ok  "),
                        ran.file.display(),
                        ran.name
                    );
                } else {
                    println!(
                        "{} {}: {}",
                        paint("1;31", "FAIL"),
                        ran.file.display(),
                        ran.name
                    );
                    for failure in &ran.failures {
                        println!("       {failure}");
                    }
                }
            }
            println!("{passed} passed, {failed} failed");
        }
        Format::Json => {
            let document = json!({
                "tests": results.iter().map(|ran| json!({
                    "file": ran.file.display().to_string(),
                    "name": ran.name,
                    "passed": ran.failures.is_empty(),
                    "failures": ran.failures,
                })).collect::<Vec<_>>(),
                "passed": passed,
                "failed": failed,
            });
            println!("{document:#}");
        }
        Format::Junit => print!("{}", junit(&results, passed, failed)),
    }
    if failed == 0 { 0 } else { 2 }
}

fn junit(results: &[Ran], _passed: usize, failed: usize) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"portcullis\" tests=\"{}\" failures=\"{failed}\">\n",
        results.len()
    ));
    let mut files: Vec<&PathBuf> = Vec::new();
    for ran in results {
        if !files.contains(&&ran.file) {
            files.push(&ran.file);
        }
    }
    for file in files {
        let cases: Vec<&Ran> = results.iter().filter(|r| &r.file == file).collect();
        let failures = cases.iter().filter(|r| !r.failures.is_empty()).count();
        let name = xml(&file.display().to_string());
        out.push_str(&format!(
            "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\">\n",
            cases.len()
        ));
        for ran in cases {
            let case = xml(&ran.name);
            if ran.failures.is_empty() {
                out.push_str(&format!(
                    "    <testcase classname=\"{name}\" name=\"{case}\"/>\n"
                ));
            } else {
                let message = xml(&ran.failures[0]);
                let body = xml(&ran.failures.join("\n"));
                out.push_str(&format!(
                    "    <testcase classname=\"{name}\" name=\"{case}\">\n      <failure message=\"{message}\">{body}</failure>\n    </testcase>\n"
                ));
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// What differs between what a case expects and what happened.
fn compare(expect: &Expect, outcome: &Outcome) -> Vec<String> {
    let mut failures = Vec::new();
    let happened = describe(outcome);
    if let Some(expected) = expect.outcome
        && expected != outcome.outcome
    {
        failures.push(format!("expected outcome {expected}, got {happened}"));
    }
    if let Some(expected) = &expect.context {
        match &outcome.context {
            Some(forwarded) if subset(expected, forwarded) => {}
            Some(forwarded) => failures.push(format!(
                "expected the forwarded context to contain {expected}, got {forwarded}"
            )),
            None => failures.push(format!(
                "expected a forwarded context containing {expected}, got {happened}"
            )),
        }
    }
    for (policy_id, decision) in &expect.decisions {
        let taken: Vec<&str> = outcome
            .decisions
            .iter()
            .filter(|(id, _)| id == policy_id)
            .map(|(_, decision)| decision.as_str())
            .collect();
        if !taken.contains(&decision.as_str()) {
            let got = if taken.is_empty() {
                "it did not run".to_owned()
            } else {
                taken.join(", ")
            };
            failures.push(format!(
                "expected {policy_id} to decide {decision}, got {got}"
            ));
        }
    }
    if let Some(expected) = &expect.policy_id {
        let got = outcome
            .denial
            .as_ref()
            .map(|(id, _)| id)
            .or(outcome.error.as_ref().map(|(id, _)| id));
        let escalated = outcome
            .approval
            .as_ref()
            .is_some_and(|approval| approval.policy_ids.contains(expected));
        if got != Some(expected) && !escalated {
            failures.push(format!(
                "expected policy {expected} to stop the call, got {happened}"
            ));
        }
    }
    if let Some(expected) = &expect.reason_contains {
        let reason = outcome
            .denial
            .as_ref()
            .and_then(|(_, reason)| reason.clone())
            .or(outcome.error.as_ref().map(|(_, message)| message.clone()))
            .or(outcome
                .approval
                .as_ref()
                .map(|approval| approval.reasons.join("; ")));
        if !reason
            .as_deref()
            .is_some_and(|reason| reason.contains(expected.as_str()))
        {
            failures.push(format!(
                "expected a reason containing {expected:?}, got {}",
                reason.map_or("no reason".to_owned(), |r| format!("{r:?}"))
            ));
        }
    }
    failures
}

fn describe(outcome: &Outcome) -> String {
    match (&outcome.denial, &outcome.error) {
        (Some((id, reason)), _) => match reason {
            Some(reason) => format!("denied by {id} ({reason})"),
            None => format!("denied by {id}"),
        },
        (_, Some((id, message))) => format!("error in {id} ({message})"),
        _ => match &outcome.approval {
            Some(approval) => format!(
                "approval_required by {} (action_digest {})",
                approval.policy_ids.join(", "),
                approval.action_digest
            ),
            None => outcome.outcome.as_str().to_owned(),
        },
    }
}

/// Whether `expected` is part of `actual`: objects by their listed keys, lists element by
/// element (as long as `expected` lists), anything else by equality.
fn subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(expected), Value::Object(actual)) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|found| subset(value, found))),
        (Value::Array(expected), Value::Array(actual)) => {
            expected.len() <= actual.len() && expected.iter().zip(actual).all(|(e, a)| subset(e, a))
        }
        _ => expected == actual,
    }
}

/// Reads a test file; its problems, all of them, when it has some.
fn read_file(path: &Path) -> Result<Vec<Case>, Vec<Diagnostic>> {
    let root = match yaml::read(path) {
        Ok((_, root)) => root,
        Err(error) => return Err(vec![Diagnostic::error(path, error.position, error.message)]),
    };
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    let fields = keys(path, &root, "a test file", FILE_KEYS, &mut problems);
    let tests = fields.iter().find(|(name, _, _)| *name == "tests");
    match tests.map(|(_, _, value)| &value.value) {
        Some(NodeValue::List(items)) => {
            for item in items {
                if let Some(case) = read_case(path, item, &mut problems) {
                    cases.push(case);
                }
            }
        }
        Some(_) => problems.push(Diagnostic::error(
            path,
            tests.map(|t| t.2.position),
            "`tests` must be a list of test cases",
        )),
        None if problems.is_empty() => problems.push(
            Diagnostic::error(path, Some(root.position), "a test file needs `tests`")
                .with_help("tests:\n    - name: ...\n      point: input\n      context: {...}\n      expect: { outcome: allowed }"),
        ),
        None => {}
    }
    if problems.is_empty() {
        Ok(cases)
    } else {
        problems.sort_by_key(|problem| problem.position().map(|p| (p.line, p.column)));
        Err(problems)
    }
}

fn keys<'n>(
    path: &Path,
    node: &'n Node,
    what: &str,
    allowed: &[&str],
    problems: &mut Vec<Diagnostic>,
) -> Vec<(&'n str, &'n Node, &'n Node)> {
    let NodeValue::Map(entries) = &node.value else {
        problems.push(Diagnostic::error(
            path,
            Some(node.position),
            format!("{what} must be a map, not {}", node.kind()),
        ));
        return Vec::new();
    };
    let mut fields = Vec::new();
    for (key, value) in entries {
        match key.as_str() {
            Some(name) if allowed.contains(&name) => fields.push((name, key, value)),
            other => {
                let name = other.unwrap_or("?");
                let help = suggestion(name, allowed)
                    .map(|s| format!("did you mean `{s}`?"))
                    .unwrap_or_else(|| format!("the keys of {what} are: {}", allowed.join(", ")));
                problems.push(
                    Diagnostic::error(
                        path,
                        Some(key.position),
                        format!("unknown key `{name}` in {what}"),
                    )
                    .with_help(help),
                );
            }
        }
    }
    fields
}

fn suggestion<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (distance(word, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            current[j + 1] = (previous[j] + usize::from(ca != *cb))
                .min(previous[j + 1] + 1)
                .min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

fn read_case(path: &Path, node: &Node, problems: &mut Vec<Diagnostic>) -> Option<Case> {
    let before = problems.len();
    let fields = keys(path, node, "a test case", CASE_KEYS, problems);
    let field = |name: &str| fields.iter().find(|(key, _, _)| *key == name).map(|f| f.2);
    let name = match field("name").and_then(Node::as_str) {
        Some(name) => name.to_owned(),
        None => {
            problems.push(Diagnostic::error(
                path,
                Some(node.position),
                "a test case needs a `name` (a string)",
            ));
            String::new()
        }
    };
    let point = match field("point").map(|n| (n, n.as_str())) {
        Some((_, Some("input"))) => Some(InterceptionPoint::Input),
        Some((_, Some("tool_call"))) => Some(InterceptionPoint::ToolCall),
        Some((_, Some("tool_result"))) => Some(InterceptionPoint::ToolResult),
        Some((_, Some("output"))) => Some(InterceptionPoint::Output),
        Some((n, _)) => {
            problems.push(Diagnostic::error(
                path,
                Some(n.position),
                "`point` must be input, tool_call, tool_result or output",
            ));
            None
        }
        None => {
            problems.push(Diagnostic::error(
                path,
                Some(node.position),
                format!("the test case {name:?} needs a `point`"),
            ));
            None
        }
    };
    let context = match (field("context"), point) {
        (Some(context), Some(point)) => match outcome::parse_context(point, context.to_json()) {
            Ok(parsed) => Some(parsed),
            Err(message) => {
                problems.push(Diagnostic::error(path, Some(context.position), message));
                None
            }
        },
        (None, _) => {
            problems.push(Diagnostic::error(
                path,
                Some(node.position),
                format!("the test case {name:?} needs a `context`"),
            ));
            None
        }
        _ => None,
    };
    let mut grants = Vec::new();
    if let Some(node) = field("grants") {
        match &node.value {
            NodeValue::List(items) => {
                for item in items {
                    match item
                        .as_str()
                        .map(|digest| (digest, outcome::check_digest(digest)))
                    {
                        Some((digest, Ok(()))) => grants.push(digest.to_owned()),
                        Some((_, Err(message))) => {
                            problems.push(Diagnostic::error(path, Some(item.position), message));
                        }
                        None => problems.push(Diagnostic::error(
                            path,
                            Some(item.position),
                            "`grants` lists action digests (strings)",
                        )),
                    }
                }
            }
            _ => problems.push(Diagnostic::error(
                path,
                Some(node.position),
                "`grants` must be a list of action digests",
            )),
        }
    }
    let mut expect = Expect::default();
    match field("expect") {
        Some(node) => {
            for (key, _, value) in keys(path, node, "`expect`", EXPECT_KEYS, problems) {
                match key {
                    "outcome" => match value.as_str().and_then(Verdict::from_name) {
                        Some(verdict) => expect.outcome = Some(verdict),
                        _ => problems.push(Diagnostic::error(
                            path,
                            Some(value.position),
                            "`outcome` must be allowed, denied, error or approval_required",
                        )),
                    },
                    "context" => expect.context = Some(value.to_json()),
                    "decisions" => match &value.value {
                        NodeValue::Map(entries) => {
                            for (id, decision) in entries {
                                match (id.as_str(), decision.as_str()) {
                                    (Some(id), Some(decision)) => {
                                        expect.decisions.push((id.to_owned(), decision.to_owned()));
                                    }
                                    _ => problems.push(Diagnostic::error(
                                        path,
                                        Some(id.position),
                                        "`decisions` maps policy ids to decisions (allow, deny, audit, redact, transform, evaluation_error)",
                                    )),
                                }
                            }
                        }
                        _ => problems.push(Diagnostic::error(
                            path,
                            Some(value.position),
                            "`decisions` must be a map of policy id to decision",
                        )),
                    },
                    "policy_id" => match value.as_str() {
                        Some(id) => expect.policy_id = Some(id.to_owned()),
                        None => problems.push(Diagnostic::error(
                            path,
                            Some(value.position),
                            "`policy_id` must be a string",
                        )),
                    },
                    _ => match value.as_str() {
                        Some(text) => expect.reason_contains = Some(text.to_owned()),
                        None => problems.push(Diagnostic::error(
                            path,
                            Some(value.position),
                            "`reason_contains` must be a string",
                        )),
                    },
                }
            }
        }
        None => problems.push(Diagnostic::error(
            path,
            Some(node.position),
            format!("the test case {name:?} needs an `expect`"),
        )),
    }
    if problems.len() > before {
        return None;
    }
    Some(Case {
        name,
        point: point?,
        context: context?,
        grants,
        expect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PIECES: &[&str] = &[
        "tests:",
        "\n",
        "  ",
        "- ",
        "name: ",
        "point: ",
        "input",
        "tool_call",
        "tool_result",
        "output",
        "context: ",
        "expect: ",
        "outcome: ",
        "denied",
        "decisions: ",
        "{",
        "}",
        "[",
        "]",
        ": ",
        ", ",
        "messages",
        "metadata",
        "role",
        "user",
        "content",
        "\"x\"",
        "&a ",
        "*a",
        "~",
        "grants: ",
        "policy_id: ",
        "reason_contains: ",
        "9e999",
        "-",
        "#",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn test_files_never_panic(pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..80)) {
            let dir = std::env::temp_dir().join(format!("portcullis-test-prop-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("case.yaml");
            std::fs::write(&path, pieces.concat()).unwrap();
            let _ = read_file(&path);
        }

        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let dir = std::env::temp_dir().join(format!("portcullis-test-prop-any-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("case.yaml");
            std::fs::write(&path, text).unwrap();
            let _ = read_file(&path);
        }
    }

    #[test]
    fn subset_matching() {
        let actual = serde_json::json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "x": 1});
        assert!(subset(
            &serde_json::json!({"messages": [{"content": "a"}]}),
            &actual
        ));
        assert!(subset(&serde_json::json!({}), &actual));
        assert!(!subset(
            &serde_json::json!({"messages": [{"content": "b"}]}),
            &actual
        ));
        assert!(!subset(&serde_json::json!({"y": null}), &actual));
    }
}
