//! [`RegoPolicy`] (named [`RegoInputPolicy`], [`RegoToolCallPolicy`] and [`RegoOutputPolicy`]
//! at each point): a bundle's decision entrypoint as a policy of one interception point.

use std::marker::PhantomData;
use std::path::Path;

use portcullis_engine::{
    BoxError, InputContext, OutputContext, Policy, PolicyContext, PolicyDecision, ToolCallContext,
    ToolResultContext,
};
use serde_json::Value;

use crate::bundle::{RegoBundle, choose_entrypoint_in};
use crate::error::{RegoError, RegoEvaluationError};
use crate::runtime::InPlace;

/// Reads the result set `[{"result": <decision>}]` (or `[]`) as a decision. The common shapes
/// are read straight from the bytes; every other goes through the reader both Rego backends
/// share, [`read_decision`](crate::decision::read_decision).
pub(crate) fn read_decision(
    entrypoint: &str,
    bytes: &[u8],
) -> Result<PolicyDecision, RegoEvaluationError> {
    // An allow, the commonest answer by far, as OPA's JSON dump writes it: no parser needed.
    if let Some(result) = bytes
        .strip_prefix(br#"[{"result":"#)
        .and_then(|rest| rest.strip_suffix(b"}]"))
        && matches!(result, br#"{"decision":"allow"}"# | b"true" | br#""allow""#)
    {
        return Ok(PolicyDecision::allow());
    }
    // The usual shapes (a decision object or a boolean) are read straight from the bytes; any
    // other result, and any error, goes the general way below, which says what is wrong.
    if let Ok(results) = serde_json::from_slice::<Vec<DirectEntry>>(bytes)
        && let Some(entry) = results.into_iter().next()
    {
        return Ok(match entry.result {
            Direct::Decision(decision) => decision,
            Direct::Bool(allowed) => decision_from_bool(entrypoint, allowed),
        });
    }
    read_decision_value(entrypoint, bytes)
}

/// One entry of a result set whose value is a decision object or a boolean.
#[derive(serde::Deserialize)]
struct DirectEntry {
    result: Direct,
}

/// A decision read without building a [`Value`] first.
enum Direct {
    Decision(PolicyDecision),
    Bool(bool),
}

impl<'de> serde::Deserialize<'de> for Direct {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DirectVisitor;

        impl<'de> serde::de::Visitor<'de> for DirectVisitor {
            type Value = Direct;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a decision object or a boolean")
            }

            fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Direct, E> {
                Ok(Direct::Bool(value))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Direct, A::Error> {
                use serde::Deserialize;
                PolicyDecision::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Direct::Decision)
            }
        }

        deserializer.deserialize_any(DirectVisitor)
    }
}

/// Reads the common result sets in place in the guest's memory, as [`read_decision`] reads
/// their JSON: one entry `{"result": …}` whose value is a boolean, the string `"allow"`, or a
/// decision object `allow` (no other key) or `deny` (with a string `reason` and `policy_id`, or
/// without). Any other shape is `None`, and goes the JSON way, which says what is wrong.
pub(crate) fn decision_in_place(entrypoint: &str, set: InPlace<'_>) -> Option<PolicyDecision> {
    let mut entry = None;
    if set.members(|_, value| {
        entry = Some(value);
        Some(())
    })? != 1
    {
        return None;
    }
    let mut result = None;
    entry?.members(|key, value| (key? == "result").then(|| result = Some(value)))?;
    let result = result?;
    if let Some(allowed) = result.as_bool() {
        return Some(decision_from_bool(entrypoint, allowed));
    }
    if result.as_str() == Some("allow") {
        return Some(PolicyDecision::allow());
    }
    let (mut kind, mut reason, mut policy_id) = (None, None, None);
    result.members(|key, value| {
        let slot = match key? {
            "decision" => &mut kind,
            "reason" => &mut reason,
            "policy_id" => &mut policy_id,
            _ => return None,
        };
        *slot = Some(value.as_str()?);
        Some(())
    })?;
    match kind? {
        "allow" if reason.is_none() && policy_id.is_none() => Some(PolicyDecision::allow()),
        "deny" => Some(PolicyDecision::Deny {
            reason: reason.map(str::to_owned),
            policy_id: policy_id.map(str::to_owned),
        }),
        _ => None,
    }
}

fn decision_from_bool(entrypoint: &str, allowed: bool) -> PolicyDecision {
    if allowed {
        PolicyDecision::allow()
    } else {
        PolicyDecision::deny(crate::decision::false_reason(entrypoint))
    }
}

/// [`read_decision`] through a [`Value`]: every result shape, with the errors.
fn read_decision_value(
    entrypoint: &str,
    bytes: &[u8],
) -> Result<PolicyDecision, RegoEvaluationError> {
    #[derive(serde::Deserialize)]
    struct Entry {
        result: Option<Value>,
    }
    let bad = |message: String| RegoEvaluationError::BadDecision {
        entrypoint: entrypoint.to_owned(),
        message,
    };
    let results: Vec<Entry> = serde_json::from_slice(bytes).map_err(|error| {
        RegoEvaluationError::Result(format!("{error} in {}", String::from_utf8_lossy(bytes)))
    })?;
    let Some(value) = results.into_iter().next().and_then(|entry| entry.result) else {
        return Err(RegoEvaluationError::NoDecision {
            entrypoint: entrypoint.to_owned(),
        });
    };
    decision_from_value(entrypoint, value).map_err(bad)
}

/// The entrypoint's value read as a decision, as both Rego backends read it (see
/// [`decision`](crate::decision)).
pub(crate) fn decision_from_value(
    entrypoint: &str,
    value: Value,
) -> Result<PolicyDecision, String> {
    crate::decision::read_decision(entrypoint, value).map_err(|error| error.to_string())
}

/// A bundle's decision entrypoint as a policy of the point of `C`. [`RegoInputPolicy`],
/// [`RegoToolCallPolicy`] and [`RegoOutputPolicy`] name it at each point.
#[derive(Debug, Clone)]
pub struct RegoPolicy<C> {
    id: String,
    bundle: RegoBundle,
    entrypoint: String,
    entrypoint_id: i32,
    point: PhantomData<fn(&C)>,
}

/// A bundle's decision entrypoint as an input policy (see [`RegoPolicy`]).
pub type RegoInputPolicy = RegoPolicy<InputContext>;

/// A bundle's decision entrypoint as a tool-call policy (see [`RegoPolicy`]).
pub type RegoToolCallPolicy = RegoPolicy<ToolCallContext>;

/// A bundle's decision entrypoint as a tool-result policy (see [`RegoPolicy`]).
pub type RegoToolResultPolicy = RegoPolicy<ToolResultContext>;

/// A bundle's decision entrypoint as an output policy (see [`RegoPolicy`]).
pub type RegoOutputPolicy = RegoPolicy<OutputContext>;

impl<C: PolicyContext> RegoPolicy<C> {
    /// Opens the bundle at `bundle_path` and uses its decision entrypoint as a policy of this
    /// point named `id`.
    ///
    /// The entrypoint is the bundle's only one, else the one ending in `/decision`.
    ///
    /// # Errors
    /// The bundle cannot be opened (see [`RegoBundle::open`]), or no entrypoint can be chosen.
    pub fn new(id: impl Into<String>, bundle_path: impl AsRef<Path>) -> Result<Self, RegoError> {
        Self::from_bundle(id, RegoBundle::open(bundle_path)?)
    }

    /// Like [`new`](Self::new), with the entrypoint named (for example `aps/input/decision`).
    ///
    /// # Errors
    /// The bundle cannot be opened, or has no such entrypoint.
    pub fn with_entrypoint(
        id: impl Into<String>,
        bundle_path: impl AsRef<Path>,
        entrypoint: &str,
    ) -> Result<Self, RegoError> {
        Self::from_bundle_entrypoint(id, RegoBundle::open(bundle_path)?, entrypoint)
    }

    /// A policy on an opened bundle (for example one given limits or data first), with the
    /// entrypoint chosen as in [`new`](Self::new).
    ///
    /// # Errors
    /// No entrypoint can be chosen.
    pub fn from_bundle(id: impl Into<String>, bundle: RegoBundle) -> Result<Self, RegoError> {
        let entrypoint = choose_entrypoint_in(bundle.entrypoints())?;
        Self::on_entrypoint(id.into(), bundle, entrypoint)
    }

    /// A policy on an opened bundle and a named entrypoint.
    ///
    /// # Errors
    /// The bundle has no such entrypoint.
    pub fn from_bundle_entrypoint(
        id: impl Into<String>,
        bundle: RegoBundle,
        entrypoint: &str,
    ) -> Result<Self, RegoError> {
        Self::on_entrypoint(id.into(), bundle, entrypoint.to_owned())
    }

    fn on_entrypoint(
        id: String,
        bundle: RegoBundle,
        entrypoint: String,
    ) -> Result<Self, RegoError> {
        let entrypoint_id =
            bundle
                .entrypoint_id(&entrypoint)
                .map_err(|_| RegoError::Entrypoint {
                    message: format!("the bundle has no entrypoint {entrypoint:?}"),
                    available: bundle.entrypoints(),
                })?;
        Ok(RegoPolicy {
            id,
            bundle,
            entrypoint,
            entrypoint_id,
            point: PhantomData,
        })
    }

    /// The bundle evaluated.
    pub fn bundle(&self) -> &RegoBundle {
        &self.bundle
    }

    /// The entrypoint whose value is the decision.
    pub fn entrypoint(&self) -> &str {
        &self.entrypoint
    }
}

impl<C: PolicyContext> RegoPolicy<C> {
    /// Evaluates the policy without `async` (the trait's `evaluate` does the same work).
    ///
    /// # Errors
    /// The evaluation fails (see [`RegoEvaluationError`]), the entrypoint is undefined for
    /// this context, or its value is not a decision.
    pub fn decide(&self, context: &C) -> Result<PolicyDecision, RegoEvaluationError> {
        self.bundle.evaluate_read(
            self.entrypoint_id,
            &context.audit_context(),
            |set| decision_in_place(&self.entrypoint, set),
            |bytes| read_decision(&self.entrypoint, bytes),
        )
    }
}

#[async_trait::async_trait]
impl<C: PolicyContext> Policy<C> for RegoPolicy<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        Ok(self.decide(context)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_engine::{Redaction, RedactionStrategy};
    use serde_json::json;

    #[test]
    fn result_sets_read_as_decisions() {
        let read = |bytes: &str| read_decision("x/decision", bytes.as_bytes());
        for allow in [
            r#"[{"result":{"decision":"allow"}}]"#,
            r#"[{"result":true}]"#,
            r#"[{"result":"allow"}]"#,
            r#"[ {"result": {"decision": "allow"}} ]"#,
        ] {
            assert_eq!(read(allow), Ok(PolicyDecision::allow()), "{allow}");
        }
        assert_eq!(
            read(r#"[{"result":{"decision":"allow","audit":true}}]"#),
            Ok(PolicyDecision::Allow {
                audit: true,
                labels: Vec::new()
            })
        );
        assert_eq!(
            read(r#"[{"result":false}]"#),
            Ok(PolicyDecision::deny("denied by x/decision"))
        );
        assert_eq!(
            read(r#"[{"result":{"decision":"deny","reason":"no"}}]"#),
            Ok(PolicyDecision::deny("no"))
        );
        assert_eq!(
            read(r#"[{"result":{"decision":false,"reason":"no"}}]"#),
            Ok(PolicyDecision::deny("no"))
        );
        assert_eq!(
            read(r#"[{"result":{"decision":"escalate","reason":"ask"}}]"#),
            Ok(PolicyDecision::escalate("ask"))
        );
        assert_eq!(
            read(r#"[{"result":"escalate"}]"#),
            Ok(PolicyDecision::Escalate {
                reason: None,
                labels: Vec::new()
            })
        );
        assert!(matches!(
            read("[]"),
            Err(RegoEvaluationError::NoDecision { .. })
        ));
        assert!(matches!(
            read(r#"[{"result":{"decision":"allowed"}}]"#),
            Err(RegoEvaluationError::BadDecision { .. })
        ));
        assert!(matches!(
            read(r#"[{"result":{"decision":"allow"}}"#),
            Err(RegoEvaluationError::Result(_))
        ));
    }

    #[test]
    fn values_read_as_decisions() {
        let read = |value| decision_from_value("x/decision", value);
        assert_eq!(read(json!(true)), Ok(PolicyDecision::allow()));
        assert_eq!(
            read(json!(false)),
            Ok(PolicyDecision::deny("denied by x/decision"))
        );
        assert_eq!(read(json!("allow")), Ok(PolicyDecision::allow()));
        assert_eq!(
            read(json!("deny")),
            Ok(PolicyDecision::Deny {
                reason: None,
                policy_id: None
            })
        );
        assert_eq!(
            read(json!({"decision": "deny", "reason": "no", "extra": 1})),
            Ok(PolicyDecision::deny("no"))
        );
        assert_eq!(
            read(
                json!({"decision": "redact", "redactions": [{"field": "messages.0.content", "strategy": "mask"}]})
            ),
            Ok(PolicyDecision::redact([Redaction {
                field: "messages.0.content".into(),
                strategy: RedactionStrategy::Mask,
                replacement: None,
                pattern: None
            }]))
        );
        assert_eq!(
            read(json!({"decision": "allow", "labels": ["untrusted", "web"]})),
            Ok(PolicyDecision::allow().with_labels(["untrusted", "web"]))
        );
        assert_eq!(
            read(json!({"decision": "audit", "reason": "r", "labels": ["seen"]})),
            Ok(PolicyDecision::audit("r").with_labels(["seen"]))
        );
        assert!(read(json!({"decision": "allow", "labels": "untrusted"})).is_err());
        assert!(read(json!("redact")).is_err(), "redact needs redactions");
        assert!(read(json!("maybe")).is_err());
        assert!(read(json!({"reason": "x"})).is_err());
        assert!(read(json!(3)).is_err());
        // A package document: the sibling `reason` of a `false` decision is the reason.
        assert_eq!(
            read(json!({"decision": false, "reason": "no secrets", "helper": 1})),
            Ok(PolicyDecision::deny("no secrets"))
        );
        assert_eq!(
            read(json!({"decision": {"decision": "audit", "reason": "look"}})),
            Ok(PolicyDecision::audit("look"))
        );
    }

    #[test]
    fn undefined_is_no_decision() {
        assert_eq!(
            read_decision("a/decision", b"[]"),
            Err(RegoEvaluationError::NoDecision {
                entrypoint: "a/decision".into()
            })
        );
        assert_eq!(
            read_decision("a/decision", br#"[{"result":"allow"}]"#),
            Ok(PolicyDecision::allow())
        );
    }
}
