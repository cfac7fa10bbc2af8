//! Every checker message, pinned: each invalid rule under `tests/rules/invalid/<point>/` is
//! loaded with the runtime constructor and its error compared with the `.txt` snapshot next
//! to it, and each rule under `tests/rules/warnings/<point>/` (valid under the schema, so it
//! loads) has its warnings compared likewise (refresh with `UPDATE_SNAPSHOTS=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use portcullis_dsl::{
    DslError, DslInputPolicy, DslOutputPolicy, DslToolCallPolicy, DslToolResultPolicy, Severity,
    Warning, check_source,
};
use portcullis_engine::InterceptionPoint;
use support::{assert_snapshot, rule_files};

/// Loads a rule with the runtime constructor (strictly or not); its warnings.
fn load(
    point: InterceptionPoint,
    id: &str,
    dir: &Path,
    strict: bool,
) -> Result<Vec<Warning>, DslError> {
    match (point, strict) {
        (InterceptionPoint::Input, false) => {
            DslInputPolicy::new(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::Input, true) => {
            DslInputPolicy::new_strict(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::ToolCall, false) => {
            DslToolCallPolicy::new(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::ToolCall, true) => {
            DslToolCallPolicy::new_strict(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::ToolResult, false) => {
            DslToolResultPolicy::new(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::ToolResult, true) => {
            DslToolResultPolicy::new_strict(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::Output, false) => {
            DslOutputPolicy::new(id, dir).map(|p| p.warnings().to_vec())
        }
        (InterceptionPoint::Output, true) => {
            DslOutputPolicy::new_strict(id, dir).map(|p| p.warnings().to_vec())
        }
    }
}

fn warning_lines(warnings: &[Warning]) -> String {
    warnings
        .iter()
        .map(|warning| format!("warning: {warning}\n"))
        .collect()
}

fn check_invalid(point: InterceptionPoint) {
    let dir = Path::new("tests/rules/invalid").join(point.as_str());
    for (id, path) in rule_files(&dir) {
        let error = load(point, &id, &dir, false)
            .expect_err(&format!("{} should be rejected", path.display()));
        let problems = error
            .problems()
            .unwrap_or_else(|| panic!("{}: not a rule problem: {error}", path.display()));
        // The checker alone gives the same problems, with the same messages.
        let source = std::fs::read_to_string(&path).expect("read rule");
        let direct = check_source(&source, &path.display().to_string(), point)
            .expect_err("the checker rejects it too");
        assert_eq!(&direct, problems);
        assert!(
            problems
                .iter()
                .all(|problem| problem.severity() == Severity::Error)
                && problems
                    .warnings()
                    .iter()
                    .all(|warning| warning.severity() == Severity::Warning)
        );
        assert_snapshot(
            &path.with_extension("txt"),
            &format!("{error}\n{}", warning_lines(problems.warnings())),
        );
    }
}

/// Rules valid under the schema load, with warnings; strict loading refuses them, with the
/// warnings as errors.
fn check_warned(point: InterceptionPoint) {
    let dir = Path::new("tests/rules/warnings").join(point.as_str());
    let files = rule_files(&dir);
    assert!(!files.is_empty(), "{}", dir.display());
    for (id, path) in files {
        let warnings = load(point, &id, &dir, false)
            .unwrap_or_else(|error| panic!("{} should load: {error}", path.display()));
        assert!(!warnings.is_empty(), "{} has warnings", path.display());
        assert!(warnings.iter().all(|w| w.severity() == Severity::Warning));
        let strict = load(point, &id, &dir, true)
            .expect_err(&format!("{} is refused when strict", path.display()));
        let problems = strict.problems().expect("rule problems");
        let messages: Vec<&str> = problems.iter().map(|problem| problem.message()).collect();
        let warned: Vec<&str> = warnings.iter().map(|warning| warning.message()).collect();
        assert_eq!(messages, warned, "{}", path.display());
        assert!(
            problems
                .iter()
                .all(|problem| problem.severity() == Severity::Error)
        );
        assert_snapshot(&path.with_extension("txt"), &warning_lines(&warnings));
    }
}

#[test]
fn rules_with_warnings_load_and_strict_loading_refuses_them() {
    check_warned(InterceptionPoint::Input);
    check_warned(InterceptionPoint::ToolCall);
    check_warned(InterceptionPoint::Output);
}

#[test]
fn invalid_input_rules() {
    check_invalid(InterceptionPoint::Input);
}

#[test]
fn invalid_tool_call_rules() {
    check_invalid(InterceptionPoint::ToolCall);
}

#[test]
fn invalid_output_rules() {
    check_invalid(InterceptionPoint::Output);
}

#[test]
fn syntax_errors_have_line_and_column() {
    let dir = Path::new("tests/rules/invalid/input");
    let error = DslInputPolicy::new("bad_json", dir).unwrap_err();
    let problems = error.problems().expect("a rule problem");
    assert_eq!(problems.len(), 1);
    let problem = problems.iter().next().expect("one problem");
    assert_eq!(problem.line_column(), Some((4, 3)));
    assert_eq!(problem.json_path(), None);
    assert!(
        problem
            .to_string()
            .starts_with("tests/rules/invalid/input/bad_json.json:4:3: invalid JSON")
    );
}

#[test]
fn problems_carry_json_paths() {
    let problems = check_source(
        r#"{ "condition": { "all": [ { "always": true }, { "field": "messages.0.contnet", "equals": "x" } ] }, "action": "deny" }"#,
        "rule.json",
        InterceptionPoint::Input,
    )
    .unwrap_err();
    let problem = problems.iter().next().expect("one problem");
    assert_eq!(problem.json_path(), Some("condition.all[1].field"));
    assert_eq!(problem.help(), Some("did you mean \"messages.0.content\"?"));
    // Where the part starts in the text: the key `"field"` of the second condition.
    assert_eq!(problem.line_column(), Some((1, 49)));
    assert!(
        problem
            .to_string()
            .starts_with("rule.json:1:49: at condition.all[1].field: ")
    );

    // A rule checked without its text has no line to give.
    let value: serde_json::Value = serde_json::from_str(
        r#"{ "condition": { "field": "messages.0.contnet", "equals": "x" }, "action": "deny" }"#,
    )
    .expect("JSON");
    let problems =
        portcullis_dsl::check_value(&value, "rule.json", InterceptionPoint::Input).unwrap_err();
    let problem = problems.iter().next().expect("one problem");
    assert_eq!(problem.line_column(), None);
    assert!(
        problem
            .to_string()
            .starts_with("rule.json: at condition.field: ")
    );
}

#[test]
fn bracketed_indexes_are_paths_and_suggestions_keep_the_index() {
    // As JavaScript and Python write them: `messages[0].content` is `messages.0.content`.
    let rule = r#"{ "condition": { "field": "messages[0].content", "contains": ["x"] },
        "action": "redact", "redactions": [{ "field": "messages[-1].content", "strategy": "mask" }] }"#;
    assert!(check_source(rule, "rule.json", InterceptionPoint::Input).is_ok());

    let problems = check_source(
        r#"{ "condition": { "field": "messages[0].contnet", "equals": "x" }, "action": "deny" }"#,
        "rule.json",
        InterceptionPoint::Input,
    )
    .unwrap_err();
    let problem = problems.iter().next().expect("one problem");
    assert_eq!(problem.help(), Some("did you mean \"messages.0.content\"?"));

    let problems = check_source(
        r#"{ "condition": { "field": "messages[first].content", "equals": "x" }, "action": "deny" }"#,
        "rule.json",
        InterceptionPoint::Input,
    )
    .unwrap_err();
    let problem = problems.iter().next().expect("one problem");
    assert!(
        problem.to_string().contains("a bracket holds a list index"),
        "{problem}"
    );
}

#[test]
fn every_problem_of_a_rule_is_reported() {
    let error = DslInputPolicy::new("many_problems", "tests/rules/invalid/input").unwrap_err();
    assert_eq!(error.problems().map(|problems| problems.len()), Some(7));
}

#[test]
fn missing_file_and_bad_ids() {
    let error = DslInputPolicy::new("does_not_exist", "tests/rules/input").unwrap_err();
    assert!(matches!(error, DslError::Read { .. }));
    assert_eq!(
        error.to_string().split(':').next(),
        Some("cannot read the rule file tests/rules/input/does_not_exist.json")
    );
    for bad in ["../input/ping", "input/ping", "a\\b", "..", "", ".hidden"] {
        let error = DslInputPolicy::new(bad, "tests/rules").unwrap_err();
        assert!(
            matches!(error, DslError::InvalidId { .. }),
            "{bad:?}: {error}"
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("invalid DSL policy id {bad:?}: "))
        );
    }
}

#[test]
fn a_rule_is_checked_for_its_point() {
    // Valid for tool calls, invalid for input: the point decides which fields exist.
    let error = DslInputPolicy::new("dangerous_shell", "tests/rules/tool_call").unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("\"tool_name\" is a field of tool-call rules"),
        "{text}"
    );
    let checked = check_source(
        r#"{ "condition": { "always": true }, "action": "allow" }"#,
        "x.json",
        InterceptionPoint::Output,
    )
    .unwrap();
    let error = DslInputPolicy::from_checked("x", checked).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the rule was checked for the output point; it cannot be used at the input point"
    );
}

/// Shapes the rule schema accepts load, whatever the checker thinks of them (edge cases of
/// the schema: an empty `not_in`, a `reason` on `allow`, a `replacement` on `mask`, an empty
/// template, `greater_than` with a fraction, an empty transformation).
#[test]
fn edge_shapes_the_schema_accepts_load() {
    for (point, source) in [
        (
            InterceptionPoint::ToolCall,
            r#"{ "condition": { "field": "tool_name", "not_in": [] }, "action": "deny" }"#,
        ),
        (
            InterceptionPoint::Input,
            r#"{ "condition": { "always": true }, "action": "allow", "reason": "fine" }"#,
        ),
        (
            InterceptionPoint::Output,
            r#"{ "condition": { "always": true }, "action": "redact",
                 "redactions": [{ "field": "response.content", "strategy": "mask", "replacement": "" }] }"#,
        ),
        (
            InterceptionPoint::Output,
            r#"{ "condition": { "field": "response.content.length", "greater_than": 0.5 },
                 "action": "transform", "transformation": { "response.content": "" } }"#,
        ),
        (
            InterceptionPoint::Input,
            r#"{ "condition": { "field": "metadata.priority", "equals": null }, "action": "audit",
                 "transformation": {} }"#,
        ),
        (
            InterceptionPoint::ToolCall,
            r#"{ "condition": { "field": "arguments.a.b.0", "contains": ["x"] }, "action": "transform",
                 "transformation": {} }"#,
        ),
    ] {
        if let Err(problems) = check_source(source, "edge.json", point) {
            panic!("{source}: {problems}");
        }
    }
}

/// Errors follow std's convention: the message says what went wrong at this level and the
/// cause is the `source()`, not pasted into the message too; the problems of an invalid rule
/// are the error's own message, not a cause.
#[test]
fn errors_do_not_repeat_their_cause() {
    use std::error::Error as _;

    let missing = DslInputPolicy::new("does_not_exist", "tests/rules/input").unwrap_err();
    let source = missing.source().expect("the I/O error is the source");
    assert!(
        !missing.to_string().contains(&source.to_string()),
        "{missing} repeats {source}"
    );

    let invalid =
        DslInputPolicy::from_source("x", r#"{ "action": "deny" }"#, "x.json").unwrap_err();
    assert!(
        invalid
            .to_string()
            .contains("the rule has no \"condition\"")
    );
    assert!(invalid.source().is_none(), "the problems are the message");
}
