//! `audit: { jsonl: <file> }`: audit records appended to a file, one JSON object per line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use portcullis_engine::{AuditHandler, AuditRecord, PolicyDecision};
use serde_json::Value;

/// An audit handler that appends each record to a file as one line of JSON: the record's
/// fields (`policy_id`, `decision`, `interception_point`, `reason`, `context`, `timestamp`,
/// `enforced`) and, for a `redact` or `transform`, the full decision under `policy_decision`,
/// so that a replay can tell what the call forwarded.
///
/// Each line is written with one `write` call: lines of concurrent evaluations never mix.
/// A record that cannot be written is dropped (an evaluation never fails because of its
/// audit log).
#[derive(Debug)]
pub struct JsonlAuditLog {
    file: Mutex<File>,
}

impl JsonlAuditLog {
    /// Opens `path` for appending, creating it when it does not exist.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(JsonlAuditLog {
            file: Mutex::new(file),
        })
    }

    /// The line written for `record` (without the newline).
    pub fn line(record: &AuditRecord<'_>) -> String {
        let mut json = record.to_json();
        if let (Value::Object(map), Some(decision)) = (&mut json, record.policy_decision)
            && matches!(
                decision,
                PolicyDecision::Redact { .. } | PolicyDecision::Transform { .. }
            )
            && let Ok(value) = serde_json::to_value(decision)
        {
            map.insert("policy_decision".to_owned(), value);
        }
        json.to_string()
    }
}

impl AuditHandler for JsonlAuditLog {
    fn handle(&self, record: &AuditRecord<'_>) {
        let mut line = JsonlAuditLog::line(record);
        line.push('\n');
        let mut file = match self.file.lock() {
            Ok(file) => file,
            Err(poisoned) => poisoned.into_inner(),
        };
        let _ = file.write_all(line.as_bytes());
    }
}
