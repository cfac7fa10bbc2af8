//! `portcullis replay`: the calls of an audit log against a candidate set.
//!
//! The log is read line by line; memory stays flat in its size. The records of one call are
//! those with the same interception point and the same context metadata (agent, session,
//! timestamp), each policy once: a record whose policy already has one in the open call
//! starts a new call. Records of concurrent calls may interleave; a call is complete when a
//! new call with its key starts, after [`WINDOW`] lines without a record of it, or at the end.
//!
//! What the log says a call did: denied by the policy of its enforced `deny` record; an
//! error when its last record is an enforced `evaluation_error`; otherwise allowed, forwarding
//! the context of its last record, with that record's change applied when the record holds the
//! decision (`policy_decision`, as the manifest's `audit: jsonl` log writes it). When a log
//! does not say what a last change did, the forwarded context is not compared.

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::Path;

use portcullis::apply::apply_decision;
use portcullis::manifest::{CodeRegistry, Manifest};
use portcullis::{InterceptionPoint, PolicyDecision};
use serde_json::{Value, json};

use crate::outcome::{self, Context, Outcome};
use crate::{Format, render};

/// Lines after which a call without a new record is complete.
const WINDOW: u64 = 4096;
/// The longest line read (longer ones are reported as broken).
const MAX_LINE: usize = 64 * 1024 * 1024;

struct Call {
    first_line: u64,
    last_line: u64,
    point: InterceptionPoint,
    key: (String, String, String),
    context: Value,
    policies: Vec<String>,
    records: Vec<Record>,
}

struct Record {
    policy_id: String,
    decision: String,
    enforced: bool,
    context: Value,
    change: Option<PolicyDecision>,
}

/// What the log says a call came to.
struct Recorded {
    outcome: &'static str,
    policy_id: Option<String>,
    context: Option<Value>,
}

#[derive(Default)]
struct Totals {
    calls: u64,
    unchanged: u64,
    changed: u64,
    broken: u64,
}

pub(crate) fn run(manifest: &Path, log: &Path, fail_on_change: bool, format: Format) -> u8 {
    let loaded = match Manifest::load(manifest, &CodeRegistry::new()) {
        Ok(loaded) => loaded,
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };
    let file = match std::fs::File::open(log) {
        Ok(file) => file,
        Err(error) => {
            eprintln!(
                "{}: error: cannot read the audit log: {error}",
                log.display()
            );
            return 1;
        }
    };
    let (engine, taken) = outcome::engine(loaded.into_policy_set());
    let runtime = crate::runtime();
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut open: VecDeque<Call> = VecDeque::new();
    let mut totals = Totals::default();
    let mut changes = Vec::new();
    let json_out = format == Format::Json;
    let mut finish = |call: Call, totals: &mut Totals| {
        totals.calls += 1;
        let recorded = recorded(&call);
        let context = match outcome::parse_context(call.point, call.context.clone()) {
            Ok(context) => context,
            Err(message) => {
                totals.broken += 1;
                report_broken(log, call.first_line, &message, json_out);
                totals.calls -= 1;
                return;
            }
        };
        let now = runtime.block_on(outcome::evaluate(&engine, &taken, &context));
        match difference(&recorded, &now) {
            None => totals.unchanged += 1,
            Some(what) => {
                totals.changed += 1;
                let description = describe(&call, &context);
                if json_out {
                    changes.push(json!({
                        "line": call.first_line,
                        "point": call.point.as_str(),
                        "call": description,
                        "change": what,
                        "recorded": recorded.outcome,
                        "now": now.to_json(),
                    }));
                } else {
                    println!(
                        "{}:{}: {description}: {what}",
                        log.display(),
                        call.first_line
                    );
                }
            }
        }
    };
    loop {
        line.clear();
        let read =
            std::io::Read::take(&mut reader, MAX_LINE as u64 + 1).read_until(b'\n', &mut line);
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => {
                eprintln!(
                    "{}: error: cannot read the audit log: {error}",
                    log.display()
                );
                return 1;
            }
        }
        number += 1;
        if line.len() > MAX_LINE && !line.ends_with(b"\n") {
            // Skip the rest of an overlong line.
            totals.broken += 1;
            report_broken(log, number, "the line is too long", json_out);
            let mut rest = Vec::new();
            let _ = reader.read_until(b'\n', &mut rest);
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let record = match parse_record(text) {
            Ok(record) => record,
            Err(message) => {
                totals.broken += 1;
                report_broken(log, number, &message, json_out);
                continue;
            }
        };
        let (point, key, record) = record;
        // Complete the calls this record closes: its own key's when the policy repeats, and
        // those that have been silent too long.
        while let Some(call) = open.front() {
            if number - call.last_line > WINDOW {
                let call = open.pop_front().expect("a front call");
                finish(call, &mut totals);
            } else {
                break;
            }
        }
        let existing = open
            .iter()
            .position(|call| call.point == point && call.key == key);
        if let Some(at) = existing
            && open[at].policies.contains(&record.policy_id)
        {
            let call = open.remove(at).expect("an open call");
            // Calls that began before it are finished first, to report in log order.
            let earlier: Vec<Call> = open.drain(..at).collect();
            for call in earlier {
                finish(call, &mut totals);
            }
            finish(call, &mut totals);
        }
        match open
            .iter_mut()
            .find(|call| call.point == point && call.key == key)
        {
            Some(call) => {
                call.last_line = number;
                call.policies.push(record.policy_id.clone());
                call.records.push(record);
            }
            None => open.push_back(Call {
                first_line: number,
                last_line: number,
                point,
                key,
                context: record.context.clone(),
                policies: vec![record.policy_id.clone()],
                records: vec![record],
            }),
        }
    }
    while let Some(call) = open.pop_front() {
        finish(call, &mut totals);
    }
    let summary = format!(
        "{} calls, {} unchanged, {} changed",
        totals.calls, totals.unchanged, totals.changed
    );
    if json_out {
        let document = json!({
            "calls": totals.calls,
            "unchanged": totals.unchanged,
            "changed": totals.changed,
            "broken_lines": totals.broken,
            "changes": changes,
        });
        println!("{document:#}");
    } else {
        if totals.broken > 0 {
            let noun = if totals.broken == 1 { "line" } else { "lines" };
            println!("{} broken {noun} skipped", totals.broken);
        }
        println!("{summary}");
    }
    if fail_on_change && totals.changed > 0 {
        2
    } else {
        0
    }
}

fn report_broken(log: &Path, line: u64, message: &str, json_out: bool) {
    // Broken lines go to standard error in both formats: standard output stays one document.
    let _ = json_out;
    eprintln!("{}:{line}: error: {message}", log.display());
}

type ParsedRecord = (InterceptionPoint, (String, String, String), Record);

fn parse_record(text: &str) -> Result<ParsedRecord, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| format!("not a JSON audit record: {error}"))?;
    let field = |name: &str| value.get(name);
    let string = |name: &str| -> Result<String, String> {
        field(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("the record has no `{name}` (a string)"))
    };
    let point = match string("interception_point")?.as_str() {
        "input" => InterceptionPoint::Input,
        "tool_call" => InterceptionPoint::ToolCall,
        "output" => InterceptionPoint::Output,
        other => return Err(format!("unknown interception point {other:?}")),
    };
    let policy_id = string("policy_id")?;
    let decision = string("decision")?;
    let context = field("context")
        .filter(|c| c.is_object())
        .cloned()
        .ok_or("the record has no `context` (an object)")?;
    let metadata = context.get("metadata");
    let meta = |name: &str| {
        metadata
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let key = (meta("agent_id"), meta("session_id"), meta("timestamp"));
    let enforced = field("enforced").and_then(Value::as_bool).unwrap_or(true);
    let change = field("policy_decision").and_then(|d| serde_json::from_value(d.clone()).ok());
    Ok((
        point,
        key,
        Record {
            policy_id,
            decision,
            enforced,
            context,
            change,
        },
    ))
}

fn recorded(call: &Call) -> Recorded {
    if let Some(denial) = call
        .records
        .iter()
        .rev()
        .find(|r| r.enforced && r.decision == "deny")
    {
        return Recorded {
            outcome: "denied",
            policy_id: Some(denial.policy_id.clone()),
            context: None,
        };
    }
    let Some(last) = call.records.last() else {
        return Recorded {
            outcome: "allowed",
            policy_id: None,
            context: Some(call.context.clone()),
        };
    };
    if last.enforced && last.decision == "evaluation_error" {
        return Recorded {
            outcome: "error",
            policy_id: Some(last.policy_id.clone()),
            context: None,
        };
    }
    let changes = matches!(last.decision.as_str(), "redact" | "transform");
    let context = match (changes && last.enforced, &last.change) {
        (false, _) => Some(last.context.clone()),
        (true, Some(decision)) => apply(call.point, &last.context, decision),
        (true, None) => None,
    };
    Recorded {
        outcome: "allowed",
        policy_id: None,
        context,
    }
}

/// `context` with `decision`'s change applied, as JSON.
fn apply(point: InterceptionPoint, context: &Value, decision: &PolicyDecision) -> Option<Value> {
    fn changed<C: portcullis::PolicyContext + serde::Serialize>(
        context: &C,
        decision: &PolicyDecision,
    ) -> Option<Value> {
        match apply_decision(context, decision).ok()? {
            Some(changed) => serde_json::to_value(changed).ok(),
            None => serde_json::to_value(context).ok(),
        }
    }
    match outcome::parse_context(point, context.clone()).ok()? {
        Context::Input(context) => changed(&context, decision),
        Context::ToolCall(context) => changed(&context, decision),
        Context::Output(context) => changed(&context, decision),
    }
}

/// What changed, if anything.
fn difference(recorded: &Recorded, now: &Outcome) -> Option<String> {
    let now_policy = now
        .denial
        .as_ref()
        .map(|(id, _)| id.clone())
        .or(now.error.as_ref().map(|(id, _)| id.clone()));
    let name = |outcome: &str, policy: &Option<String>| match (outcome, policy) {
        ("denied", Some(id)) => format!("denied by {id}"),
        ("error", Some(id)) => format!("error in {id}"),
        (outcome, _) => outcome.to_owned(),
    };
    if recorded.outcome != now.outcome {
        return Some(format!(
            "{} → {}",
            name(recorded.outcome, &recorded.policy_id),
            name(now.outcome, &now_policy)
        ));
    }
    if recorded.outcome != "allowed" && recorded.policy_id != now_policy {
        return Some(format!(
            "{} → {}",
            name(recorded.outcome, &recorded.policy_id),
            name(now.outcome, &now_policy)
        ));
    }
    if let (Some(before), Some(after)) = (&recorded.context, &now.context)
        && before != after
    {
        return Some(format!(
            "allowed, forwarding a different context: {before} → {after}"
        ));
    }
    None
}

fn describe(call: &Call, context: &Context) -> String {
    let (agent, session, timestamp) = &call.key;
    let what = match context {
        Context::ToolCall(context) => format!("tool_call {}", context.tool_name),
        _ => call.point.as_str().to_owned(),
    };
    format!("{what} (agent {agent}, session {session}, {timestamp})")
}
