//! The engine's session steps, kept apart from its evaluation loop: the key of a call, the
//! context the policies see (with the session's facts in `metadata.session`), the context
//! forwarded (with the caller's `metadata.session` back), and the update recorded.

use crate::context::InvalidContext;
use crate::point::PolicyContext;
use crate::session::store::{SessionFacts, SessionKey, SessionUpdate};

/// The key under `metadata` where policies read the session's facts.
pub(crate) const METADATA_KEY: &str = "session";

/// The session `context` belongs to, checked.
pub(crate) fn key_of<C: PolicyContext>(context: &C) -> Result<SessionKey<'_>, InvalidContext> {
    let metadata = context.metadata();
    SessionKey::new(&metadata.agent_id, &metadata.session_id)
}

/// A copy of `context` whose `metadata.session` holds `facts` (replacing whatever the caller
/// put there), or holds nothing when the facts could not be loaded.
pub(crate) fn with_facts<C: PolicyContext>(context: &C, facts: Option<&SessionFacts>) -> C {
    let mut seen = context.clone();
    let extra = &mut seen.metadata_mut().extra;
    match facts {
        Some(facts) => {
            extra.insert(METADATA_KEY.to_owned(), facts.to_value());
        }
        None => {
            extra.remove(METADATA_KEY);
        }
    }
    seen
}

/// Puts the caller's own `metadata.session` (or its absence) back into a changed context, so
/// that what is forwarded differs from what the caller gave only by the policies' changes.
pub(crate) fn restore<C: PolicyContext>(changed: &mut C, original: &C) {
    let extra = &mut changed.metadata_mut().extra;
    match original.metadata().extra.get(METADATA_KEY) {
        Some(value) => {
            extra.insert(METADATA_KEY.to_owned(), value.clone());
        }
        None => {
            extra.remove(METADATA_KEY);
        }
    }
}

/// The update to record for a call of `context` that proceeded with `labels`.
pub(crate) fn update_of<'a, C: PolicyContext>(
    context: &'a C,
    labels: &'a [String],
) -> SessionUpdate<'a> {
    SessionUpdate {
        point: C::POINT,
        tool: context.tool_name(),
        labels,
    }
}

/// Adds `decision_labels` to `labels`, each once.
pub(crate) fn gather(labels: &mut Vec<String>, decision_labels: &[String]) {
    for label in decision_labels {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
}
