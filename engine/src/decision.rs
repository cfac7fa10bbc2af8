//! What a policy decides: [`PolicyDecision`], with the redactions and transform operations a
//! decision can carry.
//!
//! Six kinds: `allow` and `audit` let the interaction proceed (`audit` to record a note),
//! `deny` stops it, `redact` and `transform` change the context before it is forwarded (see
//! [`apply`](crate::apply) for how), and `escalate` lets it proceed only once a person has
//! approved this exact action (see [`approval`](crate::approval)). Field paths are dotted paths into the context's JSON
//! shape (see [`path`](crate::path)).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::fmt;

/// The decision a policy returns.
///
/// On the wire it is an object whose `decision` field names the kind
/// (`allow`, `deny`, `audit`, `redact`, `transform`, `escalate`); any other name is rejected
/// when deserializing.
///
/// ```
/// use portcullis_engine::PolicyDecision;
///
/// let decision: PolicyDecision =
///     serde_json::from_str(r#"{"decision":"deny","reason":"no secrets"}"#).unwrap();
/// assert_eq!(decision, PolicyDecision::deny("no secrets"));
/// assert!(serde_json::from_str::<PolicyDecision>(r#"{"decision":"maybe"}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum PolicyDecision {
    /// Proceed.
    Allow {
        /// Ask for this interaction to be audited too (informational: every decision is audited).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        audit: bool,
        /// Labels added to the session's state when the call proceeds (with a session store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
    },
    /// Stop: the engine fails the call with a [`PolicyDenialError`](crate::PolicyDenialError).
    Deny {
        /// Why, for the caller and the audit trail. May be left out for sensitive denials.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The policy to report as the denier, when it is not the policy that returned this.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_id: Option<String>,
    },
    /// Proceed; the audit record is the point.
    Audit {
        /// A note for the audit record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Labels added to the session's state when the call proceeds (with a session store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
    },
    /// Apply the redactions to the context, then proceed.
    Redact {
        /// The redactions, applied in order (at least one).
        #[serde(deserialize_with = "non_empty")]
        redactions: Vec<Redaction>,
        /// Labels added to the session's state when the call proceeds (with a session store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
    },
    /// Apply the operations to the context, then proceed.
    Transform {
        /// The operations, applied in order.
        transformation: Transformation,
        /// Labels added to the session's state when the call proceeds (with a session store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
    },
    /// Proceed only with a person's approval of this exact action: the engine asks its
    /// [`ApprovalResolver`](crate::ApprovalResolver) or looks for a stored grant (see
    /// [`approval`](crate::approval)).
    Escalate {
        /// Why an approval is needed, shown to the person asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Labels added to the session's state when the call proceeds (with a session store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        labels: Vec<String>,
    },
}

fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Redaction>, D::Error> {
    let redactions = Vec::<Redaction>::deserialize(deserializer)?;
    if redactions.is_empty() {
        return Err(serde::de::Error::invalid_length(
            0,
            &"at least one redaction",
        ));
    }
    Ok(redactions)
}

impl PolicyDecision {
    /// `allow`.
    pub const fn allow() -> Self {
        PolicyDecision::Allow {
            audit: false,
            labels: Vec::new(),
        }
    }

    /// `deny` with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        PolicyDecision::Deny {
            reason: Some(reason.into()),
            policy_id: None,
        }
    }

    /// `deny` without a reason (for denials whose reason must not be disclosed).
    pub const fn deny_silently() -> Self {
        PolicyDecision::Deny {
            reason: None,
            policy_id: None,
        }
    }

    /// `audit` with a note.
    pub fn audit(reason: impl Into<String>) -> Self {
        PolicyDecision::Audit {
            reason: Some(reason.into()),
            labels: Vec::new(),
        }
    }

    /// `redact` with the given redactions.
    pub fn redact(redactions: impl IntoIterator<Item = Redaction>) -> Self {
        PolicyDecision::Redact {
            redactions: redactions.into_iter().collect(),
            labels: Vec::new(),
        }
    }

    /// `transform` with the given operations.
    pub fn transform(operations: impl IntoIterator<Item = TransformOperation>) -> Self {
        PolicyDecision::Transform {
            transformation: Transformation {
                operations: operations.into_iter().collect(),
            },
            labels: Vec::new(),
        }
    }

    /// `escalate` with a reason: proceed only once a person approves.
    pub fn escalate(reason: impl Into<String>) -> Self {
        PolicyDecision::Escalate {
            reason: Some(reason.into()),
            labels: Vec::new(),
        }
    }

    /// The wire name of the decision: `allow`, `deny`, `audit`, `redact`, `transform` or
    /// `escalate`.
    pub const fn name(&self) -> &'static str {
        match self {
            PolicyDecision::Allow { .. } => "allow",
            PolicyDecision::Deny { .. } => "deny",
            PolicyDecision::Audit { .. } => "audit",
            PolicyDecision::Redact { .. } => "redact",
            PolicyDecision::Transform { .. } => "transform",
            PolicyDecision::Escalate { .. } => "escalate",
        }
    }

    /// The reason carried by a `deny`, `audit` or `escalate` decision.
    pub fn reason(&self) -> Option<&str> {
        match self {
            PolicyDecision::Deny { reason, .. }
            | PolicyDecision::Audit { reason, .. }
            | PolicyDecision::Escalate { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// The labels this decision adds to the session's state when the call proceeds (always
    /// empty for `deny`).
    pub fn labels(&self) -> &[String] {
        match self {
            PolicyDecision::Allow { labels, .. }
            | PolicyDecision::Audit { labels, .. }
            | PolicyDecision::Redact { labels, .. }
            | PolicyDecision::Transform { labels, .. }
            | PolicyDecision::Escalate { labels, .. } => labels,
            PolicyDecision::Deny { .. } => &[],
        }
    }

    /// This decision with `labels` added to the ones it carries. A `deny` carries no labels
    /// (a denied call changes no session), so it is returned unchanged.
    ///
    /// ```
    /// use portcullis_engine::PolicyDecision;
    ///
    /// let decision = PolicyDecision::allow().with_labels(["untrusted"]);
    /// assert_eq!(decision.labels(), ["untrusted"]);
    /// assert_eq!(
    ///     serde_json::to_string(&decision).unwrap(),
    ///     r#"{"decision":"allow","labels":["untrusted"]}"#
    /// );
    /// assert!(PolicyDecision::deny("no").with_labels(["x"]).labels().is_empty());
    /// ```
    #[must_use]
    pub fn with_labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        match &mut self {
            PolicyDecision::Allow { labels: own, .. }
            | PolicyDecision::Audit { labels: own, .. }
            | PolicyDecision::Redact { labels: own, .. }
            | PolicyDecision::Transform { labels: own, .. }
            | PolicyDecision::Escalate { labels: own, .. } => {
                own.extend(labels.into_iter().map(Into::into));
            }
            PolicyDecision::Deny { .. } => {}
        }
        self
    }

    /// Whether this is a `deny`.
    pub const fn is_deny(&self) -> bool {
        matches!(self, PolicyDecision::Deny { .. })
    }

    /// Whether this is an `escalate`.
    pub const fn is_escalate(&self) -> bool {
        matches!(self, PolicyDecision::Escalate { .. })
    }
}

impl Default for PolicyDecision {
    fn default() -> Self {
        PolicyDecision::allow()
    }
}

impl fmt::Display for PolicyDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// How a [`Redaction`] changes its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactionStrategy {
    /// The whole value becomes the replacement (default `"[REDACTED]"`).
    Mask,
    /// The field is removed: an object key is deleted, a list element dropped.
    Remove,
    /// Every match of the pattern inside the string becomes the replacement.
    Replace,
}

/// The replacement used by `mask` and `replace` when a redaction names none.
pub const DEFAULT_REPLACEMENT: &str = "[REDACTED]";

/// One redaction of one field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redaction {
    /// Dotted path of the field (`messages.0.content`, `arguments.query`).
    pub field: String,
    /// What to do with the field.
    pub strategy: RedactionStrategy,
    /// The text to put in place of the value or of each match (default `"[REDACTED]"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// The regular expression whose matches `replace` substitutes (required by `replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

impl Redaction {
    /// Masks the whole field.
    pub fn mask(field: impl Into<String>) -> Self {
        Redaction {
            field: field.into(),
            strategy: RedactionStrategy::Mask,
            replacement: None,
            pattern: None,
        }
    }

    /// Removes the field.
    pub fn remove(field: impl Into<String>) -> Self {
        Redaction {
            field: field.into(),
            strategy: RedactionStrategy::Remove,
            replacement: None,
            pattern: None,
        }
    }

    /// Replaces every match of `pattern` inside the string field.
    pub fn replace(field: impl Into<String>, pattern: impl Into<String>) -> Self {
        Redaction {
            field: field.into(),
            strategy: RedactionStrategy::Replace,
            replacement: None,
            pattern: Some(pattern.into()),
        }
    }

    /// Sets the replacement text.
    pub fn with_replacement(mut self, replacement: impl Into<String>) -> Self {
        self.replacement = Some(replacement.into());
        self
    }

    /// The replacement text, or [`DEFAULT_REPLACEMENT`].
    pub fn replacement_or_default(&self) -> &str {
        self.replacement.as_deref().unwrap_or(DEFAULT_REPLACEMENT)
    }
}

/// The operations of a `transform` decision.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transformation {
    /// Applied in order.
    pub operations: Vec<TransformOperation>,
}

/// What a [`TransformOperation`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransformOp {
    /// Replace the field's value (or add the key to an existing object).
    Set,
    /// Put a string before a string field.
    Prepend,
    /// Put a string after a string field.
    Append,
}

/// One change to one field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformOperation {
    /// The kind of change.
    pub op: TransformOp,
    /// Dotted path of the field.
    pub field: String,
    /// The value to set, or the string to prepend or append.
    pub value: Value,
}

impl TransformOperation {
    /// Sets `field` to `value`.
    pub fn set(field: impl Into<String>, value: impl Into<Value>) -> Self {
        TransformOperation {
            op: TransformOp::Set,
            field: field.into(),
            value: value.into(),
        }
    }

    /// Puts `text` before the string `field`.
    pub fn prepend(field: impl Into<String>, text: impl Into<String>) -> Self {
        TransformOperation {
            op: TransformOp::Prepend,
            field: field.into(),
            value: Value::String(text.into()),
        }
    }

    /// Puts `text` after the string `field`.
    pub fn append(field: impl Into<String>, text: impl Into<String>) -> Self {
        TransformOperation {
            op: TransformOp::Append,
            field: field.into(),
            value: Value::String(text.into()),
        }
    }
}
