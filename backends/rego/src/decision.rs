//! How Portcullis reads the value of a Rego document as a decision.
//!
//! Both Rego backends use this one reader: the in-process one (feature `wasm`), which evaluates
//! OPA's WebAssembly, and the policy-server one ([`server`](crate::server), feature `server`),
//! which asks a policy server. The same Rego therefore
//! decides the same way through either. It is a crate of its own so that the server backend
//! does not depend on the WebAssembly runtime.
//!
//! The document is the value of the entrypoint (in process) or of the package path (on a
//! server); `name` names it in reasons and errors. It reads as:
//!
//! - a **package** whose `decision` rule holds an object: that object is the decision
//!   (`{"decision": {"decision": "deny", "reason": "…"}}`);
//! - a **package** whose `decision` is a string naming the decision: the package's other rules
//!   of a decision's field names (`reason`, `policy_id`, `audit`, `redactions`,
//!   `transformation`, `labels`) complete it. This is also how a decision object reads
//!   (`{"decision": "deny", "reason": "…"}`), whether it is one rule's value or a package;
//! - a **package** whose `decision` is a boolean: `true` allows; `false` denies, with the
//!   package's `reason` rule as the reason if it is a string, else a reason naming the document;
//! - a bare **string** naming the decision (`"allow"`), or a bare **boolean** (`false` denies
//!   with a reason naming the document).
//!
//! Anything else (an object without `decision`, a number, an unknown decision name, a decision
//! with a malformed field) is a [`DecisionError`] saying what is wrong.
//!
//! ```
//! use portcullis_engine::PolicyDecision;
//! use portcullis_rego::decision::read_decision;
//! use serde_json::json;
//!
//! let package = json!({"decision": false, "reason": "no secrets", "helper": [1, 2]});
//! assert_eq!(read_decision("data.guard", package), Ok(PolicyDecision::deny("no secrets")));
//! assert_eq!(read_decision("guard/allow", json!(false)), Ok(PolicyDecision::deny("denied by guard/allow")));
//! assert!(read_decision("guard", json!({"allow": true})).is_err());
//! ```

use std::fmt;

use portcullis_engine::PolicyDecision;
use serde_json::{Map, Value};

/// The fields of a decision that sibling rules of a string `decision` may give.
const DECISION_FIELDS: [&str; 6] = [
    "reason",
    "policy_id",
    "audit",
    "redactions",
    "transformation",
    "labels",
];

/// Why a document is not a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionError {
    message: String,
}

impl DecisionError {
    fn new(message: String) -> Self {
        DecisionError { message }
    }

    /// What is wrong, naming the document.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DecisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecisionError {}

/// The reason of a `false` decision without a `reason` rule.
pub fn false_reason(name: &str) -> String {
    format!("denied by {name}")
}

/// Reads `document`, the value of the document `name`, as a decision (see the crate docs).
pub fn read_decision(name: &str, document: Value) -> Result<PolicyDecision, DecisionError> {
    match document {
        Value::Object(mut object) => match object.remove("decision") {
            Some(decision) => read_package(name, decision, object),
            None => {
                let rules: Vec<&str> = object.keys().map(String::as_str).collect();
                Err(DecisionError::new(format!(
                    "`{name}` has no `decision` rule (its rules: {})",
                    if rules.is_empty() {
                        "none".to_owned()
                    } else {
                        rules.join(", ")
                    }
                )))
            }
        },
        Value::String(kind) => decision_of(name, kind, &Map::new()),
        Value::Bool(allowed) => Ok(from_bool(name, allowed, None)),
        other => Err(DecisionError::new(format!(
            "`{name}` is {}: expected an object, a string or a boolean",
            excerpt(&other)
        ))),
    }
}

fn read_package(
    name: &str,
    decision: Value,
    siblings: Map<String, Value>,
) -> Result<PolicyDecision, DecisionError> {
    match decision {
        Value::Object(object) => serde_json::from_value(Value::Object(object)).map_err(|error| {
            DecisionError::new(format!(
                "`{name}` decision is not a decision object: {error}"
            ))
        }),
        Value::String(kind) => decision_of(name, kind, &siblings),
        Value::Bool(allowed) => Ok(from_bool(
            name,
            allowed,
            siblings.get("reason").and_then(Value::as_str),
        )),
        other => Err(DecisionError::new(format!(
            "`{name}` decision is {}: expected an object, a string or a boolean",
            excerpt(&other)
        ))),
    }
}

/// The decision named `kind`, its fields from `siblings`.
fn decision_of(
    name: &str,
    kind: String,
    siblings: &Map<String, Value>,
) -> Result<PolicyDecision, DecisionError> {
    let mut object = Map::new();
    object.insert("decision".to_owned(), Value::String(kind));
    for field in DECISION_FIELDS {
        if let Some(value) = siblings.get(field) {
            object.insert(field.to_owned(), value.clone());
        }
    }
    serde_json::from_value(Value::Object(object))
        .map_err(|error| DecisionError::new(format!("`{name}` is not a decision: {error}")))
}

fn from_bool(name: &str, allowed: bool, reason: Option<&str>) -> PolicyDecision {
    match (allowed, reason) {
        (true, _) => PolicyDecision::allow(),
        (false, Some(reason)) => PolicyDecision::deny(reason),
        (false, None) => PolicyDecision::deny(false_reason(name)),
    }
}

/// A value for an error message: its JSON, cut short.
fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_shape_reads() {
        let read = |value: Value| read_decision("data.p", value);
        assert_eq!(
            read(json!({"decision": "audit", "labels": ["untrusted"]})),
            Ok(PolicyDecision::Audit {
                reason: None,
                labels: vec!["untrusted".into()]
            })
        );
        assert_eq!(
            read(json!({"decision": {"decision": "deny", "reason": "r"}, "reason": "ignored"})),
            Ok(PolicyDecision::deny("r"))
        );
        assert_eq!(
            read(json!({"decision": "audit", "reason": "look", "other": 1})),
            Ok(PolicyDecision::audit("look"))
        );
        assert_eq!(
            read(json!({"decision": "deny", "reason": "r", "policy_id": "q"})),
            Ok(PolicyDecision::Deny {
                reason: Some("r".into()),
                policy_id: Some("q".into())
            })
        );
        assert_eq!(
            read(json!({"decision": true, "reason": "x"})),
            Ok(PolicyDecision::allow())
        );
        assert_eq!(
            read(json!({"decision": false})),
            Ok(PolicyDecision::deny("denied by data.p"))
        );
        assert_eq!(
            read(json!({"decision": false, "reason": "why"})),
            Ok(PolicyDecision::deny("why"))
        );
        assert_eq!(
            read(json!({"decision": false, "reason": 3})),
            Ok(PolicyDecision::deny("denied by data.p"))
        );
        assert_eq!(read(json!("allow")), Ok(PolicyDecision::allow()));
        assert_eq!(read(json!(true)), Ok(PolicyDecision::allow()));
        assert_eq!(
            read(json!(false)),
            Ok(PolicyDecision::deny("denied by data.p"))
        );
        assert_eq!(
            read(json!({"decision": "redact", "redactions": [{"field": "response.content", "strategy": "mask"}]}))
                .map(|d| matches!(d, PolicyDecision::Redact { .. })),
            Ok(true)
        );
    }

    #[test]
    fn what_is_not_a_decision_says_why() {
        let error = |value: Value| read_decision("data.p", value).unwrap_err().to_string();
        assert!(error(json!({"allow": true})).contains("no `decision` rule (its rules: allow)"));
        assert!(error(json!({})).contains("(its rules: none)"));
        assert!(
            error(json!({"decision": 3})).contains("expected an object, a string or a boolean")
        );
        assert!(error(json!(3)).contains("expected an object, a string or a boolean"));
        assert!(error(json!({"decision": "maybe"})).contains("unknown variant"));
        assert!(error(json!({"decision": "redact", "redactions": []})).contains("redaction"));
        assert!(error(json!({"decision": {"reason": "r"}})).contains("not a decision object"));
        assert!(error(json!(vec![1; 500])).len() < 400);
    }
}
