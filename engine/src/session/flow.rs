//! The engine's session steps, kept apart from its evaluation loop: the key of a call, the
//! context the policies see (with the session's facts in `metadata.session`), the context
//! forwarded (with the caller's `metadata.session` back), and the update recorded.

use std::any::Any;
use std::cell::RefCell;

use serde_json::Value;

use crate::context::{
    InputContext, InterceptionPoint, InvalidContext, OutputContext, ToolCallContext,
    ToolResultContext,
};
use crate::point::PolicyContext;
use crate::session::store::{SessionFacts, SessionKey, SessionUpdate};

/// The key under `metadata` where policies read the session's facts.
pub(crate) const METADATA_KEY: &str = "session";

/// The session `context` belongs to, checked.
pub(crate) fn key_of<C: PolicyContext>(context: &C) -> Result<SessionKey<'_>, InvalidContext> {
    let metadata = context.metadata();
    SessionKey::new(&metadata.agent_id, &metadata.session_id)
}

/// The session of a `context` whose key [`key_of`] accepted before.
pub(crate) fn checked_key_of<C: PolicyContext>(context: &C) -> SessionKey<'_> {
    let metadata = context.metadata();
    SessionKey {
        agent_id: &metadata.agent_id,
        session_id: &metadata.session_id,
    }
}

/// The context the policies see: a copy of the caller's whose `metadata.session` holds the
/// session's facts (replacing whatever the caller put there), or holds nothing when the facts
/// could not be loaded.
pub(crate) struct Seen<C> {
    pub(crate) context: C,
    /// The facts `metadata.session` was written from.
    facts: Option<SessionFacts>,
}

/// The context the policies see, with `facts` in `metadata.session`.
///
/// The copy is refilled from a spare the thread keeps ([`give_back`]): its strings, lists and
/// facts value are reused, and only the facts that changed since the spare's are written, so
/// once the thread has seen a context of this shape the copy allocates nothing.
pub(crate) fn with_facts<C: PolicyContext>(
    context: &C,
    facts: Option<SessionFacts>,
) -> Box<Seen<C>> {
    let Some(mut spare) = take_spare::<C>() else {
        let mut seen = Box::new(Seen {
            context: context.clone(),
            facts: None,
        });
        put_facts(&mut seen.context, None, facts.as_ref());
        seen.facts = facts;
        return seen;
    };
    let seen = &mut spare.context;
    let mut extra = std::mem::take(&mut seen.metadata_mut().extra);
    seen.clone_from(context);
    let written = spare.facts.take();
    if context.metadata().extra.is_empty()
        && extra.len() == 1
        && let Some(value) = extra.get_mut(METADATA_KEY)
        && let Some(loaded) = &facts
    {
        // The usual case, a caller without extra metadata: the spare's map holds only the
        // facts, and keeps them.
        match &written {
            Some(written) => loaded.write_value_over(value, written),
            None => loaded.write_value(value),
        }
        spare.context.metadata_mut().extra = extra;
        spare.facts = facts;
        return spare;
    }
    let kept = extra
        .remove_entry(METADATA_KEY)
        .map(|(key, value)| (key, value, written));
    put_facts(&mut spare.context, kept, facts.as_ref());
    spare.facts = facts;
    spare
}

/// Puts `facts` (or their absence) in `seen`'s `metadata.session`, reusing `kept`, the entry
/// of an earlier call with the facts it was written from.
fn put_facts<C: PolicyContext>(
    seen: &mut C,
    kept: Option<(String, Value, Option<SessionFacts>)>,
    facts: Option<&SessionFacts>,
) {
    let extra = &mut seen.metadata_mut().extra;
    let Some(facts) = facts else {
        extra.remove(METADATA_KEY);
        return;
    };
    let (key, value) = match kept {
        Some((key, mut value, Some(written))) => {
            facts.write_value_over(&mut value, &written);
            (key, value)
        }
        Some((key, mut value, None)) => {
            facts.write_value(&mut value);
            (key, value)
        }
        None => (METADATA_KEY.to_owned(), facts.to_value()),
    };
    extra.insert(key, value);
}

/// Text a spare context may hold, in bytes: a larger one is dropped rather than kept, so a
/// thread never pins the memory of a large context.
const SPARE_TEXT_LIMIT: usize = 64 * 1024;

/// Spare contexts, one per point, for [`with_facts`] to refill.
struct Spare {
    input: Option<Box<Seen<InputContext>>>,
    tool_call: Option<Box<Seen<ToolCallContext>>>,
    tool_result: Option<Box<Seen<ToolResultContext>>>,
    output: Option<Box<Seen<OutputContext>>>,
}

thread_local! {
    static SPARE: RefCell<Spare> = const {
        RefCell::new(Spare {
            input: None,
            tool_call: None,
            tool_result: None,
            output: None,
        })
    };
}

fn spare_slot<C: PolicyContext>(spare: &mut Spare) -> Option<&mut Option<Box<Seen<C>>>> {
    let slot: &mut dyn Any = match C::POINT {
        InterceptionPoint::Input => &mut spare.input,
        InterceptionPoint::ToolCall => &mut spare.tool_call,
        InterceptionPoint::ToolResult => &mut spare.tool_result,
        InterceptionPoint::Output => &mut spare.output,
    };
    slot.downcast_mut::<Option<Box<Seen<C>>>>()
}

fn take_spare<C: PolicyContext>() -> Option<Box<Seen<C>>> {
    SPARE
        .try_with(|spare| {
            let mut spare = spare.try_borrow_mut().ok()?;
            spare_slot::<C>(&mut spare)?.take()
        })
        .ok()
        .flatten()
}

/// Keeps `seen` (a context [`with_facts`] made) for the thread's next [`with_facts`], unless
/// it holds much text; what is not reused (tool arguments, extra metadata) is dropped now.
pub(crate) fn give_back<C: PolicyContext>(mut seen: Box<Seen<C>>) {
    let context: &mut dyn Any = &mut seen.context;
    let text = if let Some(input) = context.downcast_mut::<InputContext>() {
        input
            .messages
            .iter()
            .map(|message| message.content.capacity())
            .sum()
    } else if let Some(call) = context.downcast_mut::<ToolCallContext>() {
        call.arguments.clear();
        call.tool_name.capacity() + call.calling_message.content.capacity()
    } else if let Some(result) = context.downcast_mut::<ToolResultContext>() {
        result.arguments.clear();
        result.structured = None;
        result.tool_name.capacity() + result.content.capacity()
    } else if let Some(output) = context.downcast_mut::<OutputContext>() {
        output.response.content.capacity()
    } else {
        usize::MAX
    };
    let metadata = seen.context.metadata_mut();
    if metadata.extra.len() > 1 || !metadata.extra.contains_key(METADATA_KEY) {
        metadata.extra.retain(|key, _| key == METADATA_KEY);
    }
    let text = text
        .saturating_add(metadata.agent_id.capacity())
        .saturating_add(metadata.session_id.capacity())
        .saturating_add(metadata.timestamp.capacity());
    if text > SPARE_TEXT_LIMIT {
        return;
    }
    let _ = SPARE.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut()
            && let Some(slot) = spare_slot::<C>(&mut spare)
        {
            *slot = Some(seen);
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Message, Metadata};
    use crate::session::store::SessionUpdate;

    /// What the policies must see: the caller's context with the facts put in plainly.
    fn expected(context: &InputContext, facts: Option<&SessionFacts>) -> InputContext {
        let mut expected = context.clone();
        match facts {
            Some(facts) => {
                expected
                    .metadata
                    .extra
                    .insert(METADATA_KEY.to_owned(), facts.to_value());
            }
            None => {
                expected.metadata.extra.remove(METADATA_KEY);
            }
        }
        expected
    }

    #[test]
    fn a_reused_spare_shows_exactly_the_facts_of_each_call() {
        let plain = InputContext::new(
            vec![Message::user("hello"), Message::assistant("hi")],
            Metadata::new("agent", "s1"),
        );
        let forged = InputContext::new(
            vec![Message::user("a longer message than before")],
            Metadata::new("agent", "s1")
                .with_extra("session", serde_json::json!({"labels": ["forged"]}))
                .with_extra("tenant", "acme"),
        );
        let with_extra = InputContext::new(
            vec![],
            Metadata::new("agent", "s2").with_extra("tenant", "acme"),
        );
        let mut facts = SessionFacts::default();
        let mut history = Vec::new();
        for step in 0..12 {
            let labels = [format!("label-{}", step % 3)];
            let update = SessionUpdate {
                point: [
                    InterceptionPoint::Input,
                    InterceptionPoint::ToolCall,
                    InterceptionPoint::Output,
                ][step % 3],
                tool: Some(["fetch", "shell"][step % 2]),
                labels: if step % 4 == 0 { &labels } else { &[] },
            };
            facts.apply(&update);
            history.push(facts.clone());
        }
        let contexts = [&plain, &forged, &plain, &with_extra, &plain, &plain];
        for (step, facts) in history.iter().enumerate() {
            let context = contexts[step % contexts.len()];
            // Every fifth call runs without facts (a store that failed under `on_error: allow`).
            let facts = (step % 5 != 4).then_some(facts);
            let seen = with_facts(context, facts.cloned());
            assert_eq!(seen.context, expected(context, facts), "step {step}");
            give_back(seen);
        }
    }
}
