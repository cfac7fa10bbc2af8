//! `portcullis replay`: the calls of an audit log against a candidate set.
//!
//! The log is read line by line; memory stays flat in its size. The records of one call are
//! those with the same interception point and the same context metadata (agent, session,
//! timestamp), each policy once: a record whose policy already has one in the open call
//! starts a new call. Records of concurrent calls may interleave; a call is complete when a
//! new call with its key starts, [`WINDOW`] lines after its first record, or at the end.
//!
//! What the log says a call did: denied by the policy of its enforced `deny` record; an
//! error when its last record is an enforced `evaluation_error`; otherwise allowed, forwarding
//! the context of its last record, with that record's change applied when the record holds the
//! decision (`policy_decision`, as the manifest's `audit: jsonl` log writes it). When a log
//! does not say what a last change did, the forwarded context is not compared. Approvals: the
//! `approval_*` records of a call's escalations belong to it; a call whose approval was
//! pending is `approval_required`, refused is denied by the escalating policy, granted is
//! allowed, and is replayed with a grant for the action it was granted for (so only a change
//! of the policies shows, or of the action: another action needs another approval).
//!
//! The candidate engine is the manifest's for a trial
//! ([`LoadedManifest::for_trials`](portcullis::manifest::LoadedManifest::for_trials)): calls are
//! replayed in log order with their session state kept in memory from empty, and nothing is
//! written to the manifest's audit sinks (the log being read among them).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::Path;

use portcullis::apply::apply_decision;
use portcullis::manifest::{CodeRegistry, Manifest};
use portcullis::{AuditDecision, InterceptionPoint, PolicyDecision};
use serde_json::{Value, json};

use crate::outcome::{self, Context, Outcome, Verdict};
use crate::{Format, render};

/// Lines after its first record by which a call is complete.
const WINDOW: u64 = 4096;
/// The longest line read (longer ones are reported as broken).
const MAX_LINE: usize = 64 * 1024 * 1024;

type Key = (InterceptionPoint, (String, String, String));

struct Call {
    first_line: u64,
    point: InterceptionPoint,
    key: (String, String, String),
    /// The context of the first record: what the call was given.
    context: Value,
    /// The context of the last record: what the last policy saw.
    last_context: Value,
    policies: Vec<String>,
    records: Vec<Record>,
    /// The action a person approved (the context its grant's record holds), when the call's
    /// approval was granted.
    granted: Option<Value>,
}

struct Record {
    decision: AuditDecision,
    enforced: bool,
    change: Option<PolicyDecision>,
}

/// What the log says a call came to.
struct Recorded {
    outcome: Verdict,
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
    let runtime = crate::runtime();
    let engine = match runtime.block_on(outcome::engine(loaded.for_trials())) {
        Ok(built) => built,
        Err(errors) => {
            render::print_load_errors(&errors);
            return 1;
        }
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number = 0u64;
    // The calls still open, by the line they start on, and where each key's call is.
    let mut open: BTreeMap<u64, Call> = BTreeMap::new();
    let mut index: HashMap<Key, u64> = HashMap::new();
    let mut totals = Totals::default();
    let json_out = format == Format::Json;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json_out {
        let _ = write!(out, "{{\"changes\": [");
    }
    let finish = |call: Call, totals: &mut Totals, out: &mut dyn Write| {
        let recorded = recorded(&call);
        let context = match outcome::parse_context(call.point, call.context.clone()) {
            Ok(context) => context,
            Err(message) => {
                totals.broken += 1;
                report_broken(log, call.first_line, &message);
                return;
            }
        };
        totals.calls += 1;
        let now = runtime.block_on(async {
            let Some(action) = &call.granted else {
                return outcome::evaluate(&engine, &context).await;
            };
            let digests = granted_digests(call.point, action, &call.context);
            let approvals = engine.approvals();
            let mut granted = Vec::new();
            for digest in &digests {
                if approvals
                    .grant(digest, outcome::GRANTED_BY, outcome::GRANT_TTL)
                    .await
                    .is_ok()
                {
                    granted.push(digest);
                }
            }
            let now = outcome::evaluate(&engine, &context).await;
            // A grant the call did not use must not let a later call through.
            for digest in granted {
                let _ = approvals.store().take(digest).await;
            }
            now
        });
        match difference(&recorded, &now) {
            None => totals.unchanged += 1,
            Some(what) => {
                totals.changed += 1;
                let description = describe(&call, &context);
                if json_out {
                    let change = json!({
                        "line": call.first_line,
                        "point": call.point.as_str(),
                        "call": description,
                        "change": what,
                        "recorded": recorded.outcome.as_str(),
                        "now": now.to_json(),
                    });
                    let comma = if totals.changed > 1 { "," } else { "" };
                    let _ = write!(out, "{comma}\n  {change}");
                } else {
                    let _ = writeln!(
                        out,
                        "{}:{}: {description}: {what}",
                        log.display(),
                        call.first_line
                    );
                }
            }
        }
    };
    loop {
        let read = read_line(&mut reader, &mut line, MAX_LINE);
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                eprintln!(
                    "{}: error: cannot read the audit log: {error}",
                    log.display()
                );
                return 1;
            }
        };
        number += 1;
        match read {
            LineRead::End => break,
            LineRead::Line => {}
            LineRead::TooLong => {
                totals.broken += 1;
                report_broken(
                    log,
                    number,
                    &format!("the line is longer than {MAX_LINE} bytes: skipped"),
                );
                continue;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let (point, key, policy_id, context, record) = match parse_record(text) {
            Ok(parsed) => parsed,
            Err(message) => {
                totals.broken += 1;
                report_broken(log, number, &message);
                continue;
            }
        };
        // Calls that began more than a window ago are complete.
        while let Some(entry) = open.first_entry() {
            if number - entry.get().first_line <= WINDOW {
                break;
            }
            let call = entry.remove();
            index.remove(&(call.point, call.key.clone()));
            finish(call, &mut totals, &mut out);
        }
        let key = (point, key);
        // A policy that already has a record in its key's open call starts a new call: the
        // open one is complete, and so are those that began before it (log order).
        // An approval's records follow their escalation, with the escalating policy's id.
        if let Some(&id) = index.get(&key)
            && !record.decision.is_approval()
            && open
                .get(&id)
                .is_some_and(|call| call.policies.contains(&policy_id))
        {
            let later = open.split_off(&(id + 1));
            for (_, call) in std::mem::replace(&mut open, later) {
                index.remove(&(call.point, call.key.clone()));
                finish(call, &mut totals, &mut out);
            }
        }
        let granted = (record.decision == AuditDecision::ApprovalGranted).then(|| context.clone());
        match index.get(&key).and_then(|id| open.get_mut(id)) {
            Some(call) => {
                if granted.is_some() {
                    call.granted = granted;
                }
                call.policies.push(policy_id);
                call.last_context = context;
                call.records.push(record);
            }
            None => {
                index.insert(key.clone(), number);
                open.insert(
                    number,
                    Call {
                        first_line: number,
                        point: key.0,
                        key: key.1,
                        last_context: context.clone(),
                        context,
                        policies: vec![policy_id],
                        records: vec![record],
                        granted,
                    },
                );
            }
        }
    }
    for (_, call) in std::mem::take(&mut open) {
        finish(call, &mut totals, &mut out);
    }
    let summary = format!(
        "{} calls, {} unchanged, {} changed",
        totals.calls, totals.unchanged, totals.changed
    );
    if json_out {
        let newline = if totals.changed > 0 { "\n" } else { "" };
        let _ = writeln!(
            out,
            "{newline}],\n\"calls\": {}, \"unchanged\": {}, \"changed\": {}, \"broken_lines\": {}}}",
            totals.calls, totals.unchanged, totals.changed, totals.broken
        );
    } else {
        if totals.broken > 0 {
            let noun = if totals.broken == 1 { "line" } else { "lines" };
            let _ = writeln!(out, "{} broken {noun} skipped", totals.broken);
        }
        let _ = writeln!(out, "{summary}");
    }
    let _ = out.flush();
    if fail_on_change && totals.changed > 0 {
        2
    } else {
        0
    }
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// The end of the log.
    End,
    /// A line (with its newline, unless it is the last).
    Line,
    /// A line longer than the limit, skipped up to its newline (or the end of the log).
    TooLong,
}

/// Reads the next line into `line` (cleared first), keeping at most `max` bytes of it (and
/// its newline): the rest of a longer line is skipped a buffer at a time, never held.
fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let read = std::io::Read::take(&mut *reader, limit).read_until(b'\n', line)?;
    if read == 0 {
        return Ok(LineRead::End);
    }
    if line.len() <= max || line.ends_with(b"\n") {
        return Ok(LineRead::Line);
    }
    line.clear();
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(LineRead::TooLong);
        }
        match buffer.iter().position(|&byte| byte == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(LineRead::TooLong);
            }
            None => {
                let skipped = buffer.len();
                reader.consume(skipped);
            }
        }
    }
}

/// Broken lines go to standard error in both formats: standard output stays one document.
fn report_broken(log: &Path, line: u64, message: &str) {
    eprintln!("{}:{line}: error: {message}", log.display());
}

type ParsedRecord = (
    InterceptionPoint,
    (String, String, String),
    String,
    Value,
    Record,
);

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
    let point = string("interception_point")?
        .parse::<InterceptionPoint>()
        .map_err(|error| error.to_string())?;
    let policy_id = string("policy_id")?;
    let decision = string("decision")?;
    let decision = AuditDecision::from_name(&decision)
        .ok_or_else(|| format!("the record's `decision` {decision:?} is not an audit decision"))?;
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
        policy_id,
        context,
        Record {
            decision,
            enforced,
            change,
        },
    ))
}

fn recorded(call: &Call) -> Recorded {
    if let Some(at) = call
        .records
        .iter()
        .rposition(|r| r.enforced && r.decision == AuditDecision::Deny)
    {
        return Recorded {
            outcome: Verdict::Denied,
            policy_id: call.policies.get(at).cloned(),
            context: None,
        };
    }
    let approval = |resolved: AuditDecision| {
        call.records
            .iter()
            .position(|r| r.decision == resolved)
            .and_then(|at| call.policies.get(at).cloned())
    };
    if let Some(policy_id) = approval(AuditDecision::ApprovalRefused) {
        return Recorded {
            outcome: Verdict::Denied,
            policy_id: Some(policy_id),
            context: None,
        };
    }
    if let Some(policy_id) = approval(AuditDecision::ApprovalPending) {
        return Recorded {
            outcome: Verdict::ApprovalRequired,
            policy_id: Some(policy_id),
            context: None,
        };
    }
    let Some(last) = call.records.last() else {
        return Recorded {
            outcome: Verdict::Allowed,
            policy_id: None,
            context: Some(call.context.clone()),
        };
    };
    if last.enforced && last.decision == AuditDecision::EvaluationError {
        return Recorded {
            outcome: Verdict::Error,
            policy_id: call.policies.last().cloned(),
            context: None,
        };
    }
    let changes = matches!(
        last.decision,
        AuditDecision::Redact | AuditDecision::Transform
    );
    let context = match (changes && last.enforced, &last.change) {
        (false, _) => Some(call.last_context.clone()),
        (true, Some(decision)) => apply(call.point, &call.last_context, decision),
        (true, None) => None,
    };
    Recorded {
        outcome: Verdict::Allowed,
        policy_id: None,
        context,
    }
}

/// The digests under which a recorded grant is given again: that of the action the grant's
/// record holds, and that of the same action with the `metadata.session` the call's first
/// record holds. (A policy's record holds the context the policies saw, the session's facts
/// in `metadata.session`; replayed as the call's context, those facts are forwarded with it.)
fn granted_digests(point: InterceptionPoint, action: &Value, given: &Value) -> Vec<String> {
    let mut digests = vec![portcullis::approval::action_digest(point, action)];
    let mut seen = action.clone();
    if let Some(Value::Object(metadata)) = seen.get_mut("metadata") {
        match given.get("metadata").and_then(|m| m.get("session")) {
            Some(session) => {
                metadata.insert("session".to_owned(), session.clone());
            }
            None => {
                metadata.remove("session");
            }
        }
    }
    let other = portcullis::approval::action_digest(point, &seen);
    if other != digests[0] {
        digests.push(other);
    }
    digests
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
        Context::ToolResult(context) => changed(&context, decision),
        Context::Output(context) => changed(&context, decision),
    }
}

/// What changed, if anything.
fn difference(recorded: &Recorded, now: &Outcome) -> Option<String> {
    let now_policy = now
        .denial
        .as_ref()
        .map(|(id, _)| id.clone())
        .or(now.error.as_ref().map(|(id, _)| id.clone()))
        .or(now
            .approval
            .as_ref()
            .and_then(|approval| approval.policy_ids.first().cloned()));
    let name = |outcome: Verdict, policy: &Option<String>| match (outcome, policy) {
        (Verdict::Denied, Some(id)) => format!("denied by {id}"),
        (Verdict::Error, Some(id)) => format!("error in {id}"),
        (Verdict::ApprovalRequired, Some(id)) => format!("approval_required by {id}"),
        (outcome, _) => outcome.as_str().to_owned(),
    };
    if recorded.outcome != now.outcome {
        return Some(format!(
            "{} → {}",
            name(recorded.outcome, &recorded.policy_id),
            name(now.outcome, &now_policy)
        ));
    }
    if recorded.outcome != Verdict::Allowed && recorded.policy_id != now_policy {
        return Some(format!(
            "{} → {}",
            name(recorded.outcome, &recorded.policy_id),
            name(now.outcome, &now_policy)
        ));
    }
    if let (Some(before), Some(after)) = (&recorded.context, &now.context) {
        // The session's facts in `metadata.session` are the engine's, not the action's: a
        // record holds those the policies saw, the forwarded context the caller's.
        if before != after && without_session(before) != without_session(after) {
            return Some(format!(
                "allowed, forwarding a different context: {before} → {after}"
            ));
        }
    }
    None
}

/// `context` without `metadata.session`.
fn without_session(context: &Value) -> Value {
    let mut context = context.clone();
    if let Some(Value::Object(metadata)) = context.get_mut("metadata") {
        metadata.remove("session");
    }
    context
}

fn describe(call: &Call, context: &Context) -> String {
    let (agent, session, timestamp) = &call.key;
    let what = match context {
        Context::ToolCall(context) => format!("tool_call {}", context.tool_name),
        Context::ToolResult(context) => format!("tool_result {}", context.tool_name),
        _ => call.point.as_str().to_owned(),
    };
    format!("{what} (agent {agent}, session {session}, {timestamp})")
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use super::{LineRead, read_line};

    /// A log of one line of `len` bytes without a newline so far, then `rest`: produced as it
    /// is read, so a reader that kept the line would need `len` bytes of memory.
    struct HugeLine {
        left: u64,
        rest: &'static [u8],
    }

    impl Read for HugeLine {
        fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            if self.left > 0 {
                let n = buffer
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                buffer[..n].fill(b'x');
                self.left -= n as u64;
                return Ok(n);
            }
            let n = buffer.len().min(self.rest.len());
            buffer[..n].copy_from_slice(&self.rest[..n]);
            self.rest = &self.rest[n..];
            Ok(n)
        }
    }

    #[test]
    fn an_overlong_line_is_skipped_without_being_held() {
        // 1 GiB in one line, a thousand times the limit: the line buffer stays near the limit.
        let huge = HugeLine {
            left: 1 << 30,
            rest: b"\n{\"next\": true}\n",
        };
        let mut reader = BufReader::with_capacity(1 << 16, huge);
        let mut line = Vec::new();
        let max = 1 << 20;
        assert_eq!(
            read_line(&mut reader, &mut line, max).unwrap(),
            LineRead::TooLong
        );
        assert!(
            line.capacity() <= 2 * max + (1 << 16),
            "{}",
            line.capacity()
        );
        assert_eq!(
            read_line(&mut reader, &mut line, max).unwrap(),
            LineRead::Line
        );
        assert_eq!(line, b"{\"next\": true}\n");
        assert_eq!(
            read_line(&mut reader, &mut line, max).unwrap(),
            LineRead::End
        );
    }

    #[test]
    fn a_line_at_the_limit_is_read_and_an_overlong_last_line_is_skipped() {
        let mut reader = BufReader::new(&b"abcd\nabcde"[..]);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut line, 4).unwrap(),
            LineRead::Line
        );
        assert_eq!(line, b"abcd\n");
        assert_eq!(
            read_line(&mut reader, &mut line, 4).unwrap(),
            LineRead::TooLong
        );
        assert_eq!(read_line(&mut reader, &mut line, 4).unwrap(), LineRead::End);
    }
}
