//! The typed model of a rule: the shape of `dsl-policy.schema.json`, plus the extensions
//! (`all`, `any`, `not`, `mode`, `labels`).
//!
//! These types serialize to, and deserialize from, the JSON shape of a rule file. Deserializing
//! with serde stops at the first mistake and knows nothing of interception points; to load a
//! rule, use [`check_source`](crate::check_source), which reports every problem at once and
//! gives back a [`CheckedRule`](crate::CheckedRule).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One rule: when `condition` holds, `action` is taken; otherwise the rule allows.
///
/// ```
/// use portcullis_dsl::{Action, Condition, Rule};
///
/// let rule: Rule = serde_json::from_str(r#"{
///     "condition": { "field": "tool_name", "not_in": ["search", "calculator"] },
///     "action": "deny",
///     "reason": "tool not approved"
/// }"#).unwrap();
/// assert_eq!(rule.action, Action::Deny);
/// assert!(matches!(rule.condition, Condition::NotIn { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// When the rule applies.
    pub condition: Condition,
    /// What the rule decides when the condition holds.
    pub action: Action,
    /// A note carried by `deny` and `audit` decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The redactions of a `redact` rule (at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redactions: Option<Vec<RuleRedaction>>,
    /// The transformation of a `transform` rule: field path → template pairs, in the file's
    /// key order, applied as `set` operations in that order. (De)serialized as a JSON object
    /// whose keys keep that order.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ordered_templates"
    )]
    pub transformation: Option<Vec<(String, String)>>,
    /// Extension: `monitor` evaluates and audits the rule without enforcing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<RuleMode>,
    /// Extension: labels the rule's decision carries when its condition holds, added to the
    /// session's state when the call proceeds. A `deny` carries none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

/// A condition. The first five are the schema's; `all`, `any` and `not` are extensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Condition {
    /// The field's text contains any of the strings, ignoring case.
    Contains {
        /// Dotted path of the field.
        field: String,
        /// The strings to look for (at least one).
        contains: Vec<String>,
    },
    /// The field equals the value (JSON equality; numbers compare by value).
    Equals {
        /// Dotted path of the field.
        field: String,
        /// The value to compare with.
        equals: Value,
    },
    /// The field's value is none of the values.
    NotIn {
        /// Dotted path of the field.
        field: String,
        /// The values the field must not be.
        not_in: Vec<Value>,
    },
    /// The field is a number greater than the threshold.
    GreaterThan {
        /// Dotted path of the field.
        field: String,
        /// The threshold (kept as written: `4` stays `4`).
        greater_than: serde_json::Number,
    },
    /// Always holds (`{"always": true}`).
    Always {
        /// Must be `true`.
        always: bool,
    },
    /// Extension: every condition holds.
    All {
        /// The conditions (at least one).
        all: Vec<Condition>,
    },
    /// Extension: at least one condition holds.
    Any {
        /// The conditions (at least one).
        any: Vec<Condition>,
    },
    /// Extension: the condition does not hold.
    Not {
        /// The negated condition.
        not: Box<Condition>,
    },
}

/// The action of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Proceed.
    Allow,
    /// Stop with a denial.
    Deny,
    /// Proceed and note it in the audit trail.
    Audit,
    /// Apply the rule's redactions.
    Redact,
    /// Apply the rule's transformation.
    Transform,
    /// Extension: proceed only once a person approves this exact action (the engine's
    /// approval flow).
    Escalate,
}

impl Action {
    /// All actions, in the order messages list them.
    pub const ALL: [Action; 6] = [
        Action::Allow,
        Action::Deny,
        Action::Audit,
        Action::Redact,
        Action::Transform,
        Action::Escalate,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Audit => "audit",
            Action::Redact => "redact",
            Action::Transform => "transform",
            Action::Escalate => "escalate",
        }
    }
}

/// Extension: whether a rule's decisions are enforced (the default) or only monitored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleMode {
    /// Decisions take effect.
    #[default]
    Enforce,
    /// Decisions are evaluated and audited but take no effect.
    Monitor,
}

/// How a redaction changes its field (the schema's `strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleStrategy {
    /// The whole value becomes the replacement.
    Mask,
    /// The field is removed.
    Remove,
    /// Every match of the pattern becomes the replacement.
    Replace,
}

/// One redaction of a `redact` rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRedaction {
    /// Dotted path of the field to redact.
    pub field: String,
    /// How.
    pub strategy: RuleStrategy,
    /// The replacement text (`mask`, `replace`; default `"[REDACTED]"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// The regular expression to replace (`replace` only, required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

/// `transformation` as a JSON object read and written in its key order (whatever map type
/// `serde_json` is built with). A key written twice keeps its first place and its last
/// template, as JavaScript's `JSON.parse` does.
mod ordered_templates {
    use std::fmt;

    use serde::de::{MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        templates: &Option<Vec<(String, String)>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let templates = templates.as_deref().unwrap_or_default();
        let mut map = serializer.serialize_map(Some(templates.len()))?;
        for (field, template) in templates {
            map.serialize_entry(field, template)?;
        }
        map.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<(String, String)>>, D::Error> {
        struct Ordered;

        impl<'de> Visitor<'de> for Ordered {
            type Value = Vec<(String, String)>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of field paths to templates")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut templates: Vec<(String, String)> = Vec::new();
                while let Some((field, template)) = map.next_entry::<String, String>()? {
                    match templates.iter_mut().find(|(known, _)| *known == field) {
                        Some(entry) => entry.1 = template,
                        None => templates.push((field, template)),
                    }
                }
                Ok(templates)
            }
        }

        deserializer.deserialize_map(Ordered).map(Some)
    }
}
