//! Applying `redact` and `transform` decisions to a context.
//!
//! Whatever the changes produce must still be a valid context (the shape its schema gives,
//! with a tool call's and an answer's message the assistant's, and a timestamp that is an RFC
//! 3339 date-time), or the whole application fails and the context is left as it was.
//!
//! Rules, for each redaction or operation in order:
//! - every segment of the path but `*` must resolve, otherwise it is an error; a `*` that
//!   selects nothing changes nothing;
//! - `mask` replaces the value with the replacement text; `replace` substitutes every match of
//!   the pattern in a string value; `remove` deletes an object key or drops a list element;
//! - `set` replaces a value, or adds a key to an object that exists; `prepend` and `append`
//!   need a string value and a string to add.
//!
//! Changes are made on a copy of the typed context: a path to a string field (a message's
//! content, a tool result's `content`, a tool's name, a metadata field) changes that string, and
//! a path into the open JSON values (tool arguments, a tool result's `structured`, extra
//! metadata) changes the value in place. A first change to the
//! text of a message is made while the copy is taken, so the old text is read where it is and
//! never copied (and a change that changes nothing copies nothing). Paths and patterns are
//! parsed and compiled once per thread and kept (see [`cached_regex`]), so applying the same
//! decision again takes no lock and parses nothing. The rare changes that replace a structured
//! part of a context as a whole (`set` of `messages.0`, `remove` of a message, a `*` over a
//! message's fields) go through the context's JSON shape instead, and must read back as a valid
//! context.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use regex::Regex;
use serde_json::{Map, Value};

use crate::context::{
    InputContext, Message, Metadata, OutputContext, ToolCallContext, ToolResultContext,
};
use crate::decision::{
    PolicyDecision, Redaction, RedactionStrategy, TransformOp, TransformOperation,
};
use crate::error::ApplyError;
use crate::path::{FieldPath, Segment, list_position};
use crate::point::PolicyContext;
use crate::time::is_rfc3339;

// Pattern support the dsl and rego crates call; not public API.
#[doc(hidden)]
pub use crate::pattern::{
    PATTERN_CACHE_CAPACITY, PATTERN_SIZE_LIMIT, cached_regex, compile_pattern,
};

/// Applies the changes a decision asks for. Returns `Ok(None)` for decisions that change
/// nothing (`allow`, `deny`, `audit`).
pub fn apply_decision<C: PolicyContext>(
    context: &C,
    decision: &PolicyDecision,
) -> Result<Option<C>, ApplyError> {
    match decision {
        PolicyDecision::Redact { redactions, .. } => {
            apply_redactions(context, redactions).map(Some)
        }
        PolicyDecision::Transform { transformation, .. } => {
            apply_operations(context, &transformation.operations).map(Some)
        }
        _ => Ok(None),
    }
}

/// Applies redactions in order and returns the changed context.
pub fn apply_redactions<C: PolicyContext>(
    context: &C,
    redactions: &[Redaction],
) -> Result<C, ApplyError> {
    Ok(changed_redactions(context, redactions, true)?.unwrap_or_else(|| context.clone()))
}

/// Applies transform operations in order and returns the changed context.
pub fn apply_operations<C: PolicyContext>(
    context: &C,
    operations: &[TransformOperation],
) -> Result<C, ApplyError> {
    Ok(changed_operations(context, operations, true)?.unwrap_or_else(|| context.clone()))
}

/// Applies the changes a decision asks for; `Ok(None)` when the context stays as it was (a
/// decision that changes nothing, or changes that changed nothing, such as a redaction that
/// matched nothing).
pub(crate) fn apply_changes<C: PolicyContext>(
    context: &C,
    decision: &PolicyDecision,
) -> Result<Option<C>, ApplyError> {
    match decision {
        PolicyDecision::Redact { redactions, .. } => changed_redactions(context, redactions, true),
        PolicyDecision::Transform { transformation, .. } => {
            changed_operations(context, &transformation.operations, true)
        }
        _ => Ok(None),
    }
}

fn changed_redactions<C: PolicyContext>(
    context: &C,
    redactions: &[Redaction],
    typed: bool,
) -> Result<Option<C>, ApplyError> {
    change(context, redactions.len(), typed, |at| {
        let redaction = &redactions[at];
        let path = parse(&redaction.field)?;
        let change = match redaction.strategy {
            RedactionStrategy::Mask => Change::Mask(redaction.replacement_or_default()),
            RedactionStrategy::Replace => {
                let pattern = redaction.pattern.as_deref().ok_or_else(|| {
                    ApplyError::new(&redaction.field, "the `replace` strategy needs a `pattern`")
                })?;
                let regex = thread_regex(pattern)
                    .map_err(|problem| ApplyError::new(&redaction.field, problem))?;
                Change::Replace(regex, redaction.replacement_or_default())
            }
            RedactionStrategy::Remove => Change::Remove,
        };
        Ok((path, change))
    })
}

fn changed_operations<C: PolicyContext>(
    context: &C,
    operations: &[TransformOperation],
    typed: bool,
) -> Result<Option<C>, ApplyError> {
    change(context, operations.len(), typed, |at| {
        let operation = &operations[at];
        let path = parse(&operation.field)?;
        let change = match (operation.op, &operation.value) {
            (TransformOp::Set, value) => Change::Set(value),
            (TransformOp::Prepend, Value::String(text)) => Change::Prepend(text),
            (TransformOp::Append, Value::String(text)) => Change::Append(text),
            (op, other) => {
                return Err(ApplyError::new(
                    &operation.field,
                    format!(
                        "`{}` needs a string value, found {}",
                        op_name(op),
                        kind(other)
                    ),
                ));
            }
        };
        Ok((path, change))
    })
}

/// One redaction or operation, ready to apply.
enum Change<'d> {
    Mask(&'d str),
    Replace(Rc<Regex>, &'d str),
    Remove,
    Set(&'d Value),
    Prepend(&'d str),
    Append(&'d str),
}

/// Why a change could not be made on the typed context.
enum Edit {
    /// It fails, as it would on the JSON shape.
    Failed(ApplyError),
    /// It reaches past what the typed context edits in place: the JSON shape takes over.
    Untyped,
}

impl From<ApplyError> for Edit {
    fn from(error: ApplyError) -> Self {
        Edit::Failed(error)
    }
}

/// Applies `count` changes, the `at`-th made by `prepare(at)`, on a copy of `context`; `None`
/// when nothing changed. Without `typed`, on the JSON shape only (the reference the typed
/// application is tested against).
fn change<'d, C: PolicyContext>(
    context: &C,
    count: usize,
    typed: bool,
    mut prepare: impl FnMut(usize) -> Result<(Rc<FieldPath>, Change<'d>), ApplyError>,
) -> Result<Option<C>, ApplyError> {
    // Extras named like a metadata field do not survive the JSON shape (the field wins): such
    // a context is changed through it, as its JSON readers see it.
    let shadowed = METADATA_FIELDS.iter().any(|field| {
        context
            .audit_context()
            .metadata()
            .extra
            .contains_key(*field)
    });
    if typed && !shadowed {
        // The first change, when it edits a message's text, is made while copying: the old
        // text is read where it is, and only the new one is written (a redaction of a long
        // message copies it once, not twice), and a change that changes nothing copies nothing.
        // (The prepared change is used where it was returned, not moved out of it.)
        let first = match (count > 0).then(|| prepare(0)) {
            Some(Ok(ref prepared)) => copy_with_text(context, &prepared.0, &prepared.1),
            Some(Err(error)) => return Err(error),
            None => None,
        };
        let (mut copy, mut changed, start) = match first {
            // The usual decision, one change: the copy goes out as it is (each step
            // between here and the caller would move it again).
            Some(Some(copy)) if count == 1 => {
                check_changed(context, &copy)?;
                return Ok(Some(copy));
            }
            Some(None) if count == 1 => return Ok(None),
            Some(Some(copy)) => (copy, true, 1),
            Some(None) => (context.clone(), false, 1),
            None => (context.clone(), false, 0),
        };
        let mut untyped = false;
        for at in start..count {
            let (path, change) = prepare(at)?;
            match edit_typed(&mut copy, &path, &change) {
                Ok(did) => changed |= did,
                Err(Edit::Failed(error)) => return Err(error),
                Err(Edit::Untyped) => {
                    untyped = true;
                    break;
                }
            }
        }
        if !untyped {
            if !changed {
                return Ok(None);
            }
            check_changed(context, &copy)?;
            return Ok(Some(copy));
        }
    }
    // The JSON shape, from the start, each change prepared and applied in turn (so errors
    // come in the same order as on the typed path; preparing again what the typed path
    // prepared gives the same, from the caches).
    let mut root = serde_json::to_value(context)
        .map_err(|error| ApplyError::new("", format!("cannot read the context: {error}")))?;
    for at in 0..count {
        let (path, change) = prepare(at)?;
        apply_json(&mut root, &path, path.segments(), &change, &mut false)?;
    }
    let changed: C = serde_json::from_value(root).map_err(|error| {
        ApplyError::new(
            "",
            format!("it is no longer a valid {}: {error}", C::POINT.as_str()),
        )
    })?;
    check_changed(context, &changed)?;
    Ok((changed != *context).then_some(changed))
}

/// Checks what the schema of a context asks that its types cannot say: the rules of
/// [`PolicyContext::check`], and that a timestamp the changes touched is still an RFC 3339
/// date-time.
fn check_changed<C: PolicyContext>(original: &C, changed: &C) -> Result<(), ApplyError> {
    changed
        .check()
        .map_err(|problem| ApplyError::new("", problem.problem()))?;
    let (before, after) = (original.audit_context(), changed.audit_context());
    let timestamp = &after.metadata().timestamp;
    if *timestamp != before.metadata().timestamp && !is_rfc3339(timestamp) {
        return Err(ApplyError::new(
            "",
            format!("`metadata.timestamp` must be an RFC 3339 date-time, found {timestamp:?}"),
        ));
    }
    Ok(())
}

/// A redaction pattern compiled for this thread (see [`cached_regex`], which compiles it
/// once for all threads): a handle the thread counts without atomic operations, on a copy
/// of the regex whose scratch space this thread owns, so a search takes no lock either.
fn thread_regex(pattern: &str) -> Result<Rc<Regex>, String> {
    thread_local! {
        /// The pattern used last: comparing it costs less than hashing it.
        static LAST: RefCell<Option<Rc<Regex>>> = const { RefCell::new(None) };
        static REGEXES: RefCell<HashMap<Box<str>, Rc<Regex>>> = RefCell::new(HashMap::new());
    }
    let last = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|regex| regex.as_str() == pattern)
            .map(Rc::clone)
    });
    if let Some(regex) = last {
        return Ok(regex);
    }
    let found = REGEXES.with(|regexes| regexes.borrow().get(pattern).map(Rc::clone));
    let regex = match found {
        Some(regex) => regex,
        None => {
            // A clone shares the compiled program and gets scratch space of its own.
            let regex = Rc::new(Regex::clone(&*cached_regex(pattern)?));
            REGEXES.with(|regexes| {
                let mut regexes = regexes.borrow_mut();
                if regexes.len() >= PATTERN_CACHE_CAPACITY {
                    regexes.clear();
                }
                regexes.insert(pattern.into(), Rc::clone(&regex));
            });
            regex
        }
    };
    LAST.with(|last| *last.borrow_mut() = Some(Rc::clone(&regex)));
    Ok(regex)
}

/// Parsed paths, per thread: decisions name the same few fields again and again.
fn parse(field: &str) -> Result<Rc<FieldPath>, ApplyError> {
    thread_local! {
        /// The path parsed last: comparing it costs less than hashing it.
        static LAST: RefCell<Option<Rc<FieldPath>>> = const { RefCell::new(None) };
    }
    let last = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|path| path.as_str() == field)
            .map(Rc::clone)
    });
    if let Some(path) = last {
        return Ok(path);
    }
    let path = parse_cached(field)?;
    LAST.with(|last| *last.borrow_mut() = Some(Rc::clone(&path)));
    Ok(path)
}

/// [`parse`] past the last path: the per-thread cache.
fn parse_cached(field: &str) -> Result<Rc<FieldPath>, ApplyError> {
    thread_local! {
        static PATHS: RefCell<HashMap<Box<str>, Rc<FieldPath>>> = RefCell::new(HashMap::new());
    }
    PATHS.with(|paths| {
        if let Some(path) = paths.borrow().get(field) {
            return Ok(Rc::clone(path));
        }
        let path = Rc::new(
            FieldPath::parse(field).map_err(|error| ApplyError::new(field, error.to_string()))?,
        );
        let mut paths = paths.borrow_mut();
        if paths.len() >= PATTERN_CACHE_CAPACITY {
            paths.clear();
        }
        paths.insert(field.into(), Rc::clone(&path));
        Ok(path)
    })
}

/// `context` copied with `change` made to the text of a message (a message of an input, an
/// answer, a tool call's calling message) or of a tool result, without copying the text it replaces: `None` when
/// `path` names another field or `change` is not a text change (the caller copies and edits
/// as usual), `Some(None)` when the change leaves the text as it is.
fn copy_with_text<C: PolicyContext>(
    context: &C,
    path: &FieldPath,
    change: &Change<'_>,
) -> Option<Option<C>> {
    let (Segment::Name(first), rest) = path.segments().split_first()? else {
        return None;
    };
    let content = |rest: &[Segment]| matches!(rest, [Segment::Name(name)] if name == "content");
    let mut copy: Option<C> = None;
    let source: &dyn Any = context;
    let target: &mut dyn Any = &mut copy;
    if let (Some(input), Some(target)) = (
        source.downcast_ref::<InputContext>(),
        target.downcast_mut::<Option<InputContext>>(),
    ) {
        let ("messages", [Segment::Index { index, .. }, rest @ ..]) = (first.as_str(), rest) else {
            return None;
        };
        let at = list_position(*index, input.messages.len()).filter(|_| content(rest))?;
        let Some(text) = edited_text(&input.messages[at].content, change)? else {
            return Some(None);
        };
        let mut text = Some(text);
        let mut messages = Vec::with_capacity(input.messages.len());
        for (position, message) in input.messages.iter().enumerate() {
            messages.push(match text.take_if(|_| position == at) {
                Some(content) => Message {
                    role: message.role,
                    content,
                },
                None => message.clone(),
            });
        }
        *target = Some(InputContext {
            messages,
            metadata: input.metadata.clone(),
        });
    } else if let (Some(output), Some(target)) = (
        source.downcast_ref::<OutputContext>(),
        target.downcast_mut::<Option<OutputContext>>(),
    ) {
        if first != "response" || !content(rest) {
            return None;
        }
        let Some(content) = edited_text(&output.response.content, change)? else {
            return Some(None);
        };
        *target = Some(OutputContext {
            response: Message {
                role: output.response.role,
                content,
            },
            metadata: output.metadata.clone(),
        });
    } else if let (Some(result), Some(target)) = (
        source.downcast_ref::<ToolResultContext>(),
        target.downcast_mut::<Option<ToolResultContext>>(),
    ) {
        if first != "content" || !rest.is_empty() {
            return None;
        }
        let Some(content) = edited_text(&result.content, change)? else {
            return Some(None);
        };
        *target = Some(ToolResultContext {
            tool_name: result.tool_name.clone(),
            arguments: result.arguments.clone(),
            content,
            structured: result.structured.clone(),
            is_error: result.is_error,
            metadata: result.metadata.clone(),
        });
    } else if let (Some(call), Some(target)) = (
        source.downcast_ref::<ToolCallContext>(),
        target.downcast_mut::<Option<ToolCallContext>>(),
    ) {
        if first != "calling_message" || !content(rest) {
            return None;
        }
        let Some(content) = edited_text(&call.calling_message.content, change)? else {
            return Some(None);
        };
        *target = Some(ToolCallContext {
            tool_name: call.tool_name.clone(),
            arguments: call.arguments.clone(),
            calling_message: Message {
                role: call.calling_message.role,
                content,
            },
            metadata: call.metadata.clone(),
        });
    }
    copy.map(Some)
}

/// The text `change` makes of `text`, as [`edit_string`] would: `None` for a change that is
/// not a text change, `Some(None)` when the text stays as it is.
#[inline]
fn edited_text(text: &str, change: &Change<'_>) -> Option<Option<String>> {
    let edited = match change {
        Change::Replace(regex, replacement) => {
            match regex.replace_all(text, regex::NoExpand(replacement)) {
                std::borrow::Cow::Owned(replaced) if replaced != text => Some(replaced),
                _ => None,
            }
        }
        Change::Mask(value) => (text != *value).then(|| (*value).to_owned()),
        Change::Set(Value::String(value)) => (text != value).then(|| value.clone()),
        Change::Prepend(addition) => (!addition.is_empty()).then(|| [*addition, text].concat()),
        Change::Append(addition) => (!addition.is_empty()).then(|| [text, *addition].concat()),
        Change::Set(_) | Change::Remove => return None,
    };
    Some(edited)
}

/// Makes one change on a typed context; whether it changed anything.
fn edit_typed<C: PolicyContext>(
    context: &mut C,
    path: &FieldPath,
    change: &Change<'_>,
) -> Result<bool, Edit> {
    let Some((Segment::Name(first), rest)) = path.segments().split_first() else {
        return Err(Edit::Untyped);
    };
    let context: &mut dyn Any = context;
    if let Some(input) = context.downcast_mut::<InputContext>() {
        match first.as_str() {
            "messages" => edit_messages(&mut input.messages, path, rest, change),
            "metadata" => edit_metadata(&mut input.metadata, path, rest, change),
            _ => Err(Edit::Untyped),
        }
    } else if let Some(call) = context.downcast_mut::<ToolCallContext>() {
        match first.as_str() {
            "tool_name" => edit_string(&mut call.tool_name, rest, change),
            "arguments" => edit_map(&mut call.arguments, path, rest, change),
            "calling_message" => edit_message(&mut call.calling_message, rest, change),
            "metadata" => edit_metadata(&mut call.metadata, path, rest, change),
            _ => Err(Edit::Untyped),
        }
    } else if let Some(result) = context.downcast_mut::<ToolResultContext>() {
        match first.as_str() {
            "tool_name" => edit_string(&mut result.tool_name, rest, change),
            "arguments" => edit_map(&mut result.arguments, path, rest, change),
            "content" => edit_string(&mut result.content, rest, change),
            "structured" => match &mut result.structured {
                Some(structured) if !rest.is_empty() => {
                    let mut changed = false;
                    apply_json(structured, path, rest, change, &mut changed)?;
                    Ok(changed)
                }
                _ => Err(Edit::Untyped),
            },
            "metadata" => edit_metadata(&mut result.metadata, path, rest, change),
            _ => Err(Edit::Untyped),
        }
    } else if let Some(output) = context.downcast_mut::<OutputContext>() {
        match first.as_str() {
            "response" => edit_message(&mut output.response, rest, change),
            "metadata" => edit_metadata(&mut output.metadata, path, rest, change),
            _ => Err(Edit::Untyped),
        }
    } else {
        Err(Edit::Untyped)
    }
}

fn edit_messages(
    messages: &mut [Message],
    path: &FieldPath,
    rest: &[Segment],
    change: &Change<'_>,
) -> Result<bool, Edit> {
    let _ = path;
    match rest.split_first() {
        Some((Segment::Index { index, .. }, rest)) => {
            let at = list_position(*index, messages.len()).ok_or(Edit::Untyped)?;
            edit_message(&mut messages[at], rest, change)
        }
        Some((Segment::Any, rest)) => {
            let mut changed = false;
            for message in messages {
                changed |= edit_message(message, rest, change)?;
            }
            Ok(changed)
        }
        _ => Err(Edit::Untyped),
    }
}

fn edit_message(
    message: &mut Message,
    rest: &[Segment],
    change: &Change<'_>,
) -> Result<bool, Edit> {
    match rest {
        [Segment::Name(name)] if name == "content" => {
            edit_string(&mut message.content, &[], change)
        }
        _ => Err(Edit::Untyped),
    }
}

/// The keys of metadata that are fields of their own; any other key is an extra.
const METADATA_FIELDS: [&str; 3] = ["agent_id", "session_id", "timestamp"];

fn edit_metadata(
    metadata: &mut Metadata,
    path: &FieldPath,
    rest: &[Segment],
    change: &Change<'_>,
) -> Result<bool, Edit> {
    let Some(key) = rest.first().and_then(Segment::key) else {
        return Err(Edit::Untyped);
    };
    match key {
        "agent_id" => edit_string(&mut metadata.agent_id, &rest[1..], change),
        "session_id" => edit_string(&mut metadata.session_id, &rest[1..], change),
        "timestamp" => edit_string(&mut metadata.timestamp, &rest[1..], change),
        _ => edit_map(&mut metadata.extra, path, rest, change),
    }
}

/// Makes a change below an open JSON object (tool arguments, extra metadata).
fn edit_map(
    map: &mut Map<String, Value>,
    path: &FieldPath,
    rest: &[Segment],
    change: &Change<'_>,
) -> Result<bool, Edit> {
    if rest.is_empty() {
        return Err(Edit::Untyped);
    }
    let mut object = Value::Object(std::mem::take(map));
    let mut changed = false;
    let result = apply_json(&mut object, path, rest, change, &mut changed);
    if let Value::Object(back) = object {
        *map = back;
    }
    result?;
    Ok(changed)
}

/// Makes a change to a string field of a context.
fn edit_string(text: &mut String, rest: &[Segment], change: &Change<'_>) -> Result<bool, Edit> {
    if !rest.is_empty() {
        return Err(Edit::Untyped);
    }
    let changed = match change {
        Change::Mask(replacement) => assign(text, replacement),
        Change::Replace(regex, replacement) => replace(regex, text, replacement),
        Change::Set(Value::String(value)) => assign(text, value),
        Change::Prepend(addition) => {
            text.insert_str(0, addition);
            !addition.is_empty()
        }
        Change::Append(addition) => {
            text.push_str(addition);
            !addition.is_empty()
        }
        Change::Set(_) | Change::Remove => return Err(Edit::Untyped),
    };
    Ok(changed)
}

fn assign(text: &mut String, value: &str) -> bool {
    if text == value {
        return false;
    }
    value.clone_into(text);
    true
}

fn replace(regex: &Regex, text: &mut String, replacement: &str) -> bool {
    match regex.replace_all(text, regex::NoExpand(replacement)) {
        std::borrow::Cow::Owned(replaced) => {
            let changed = replaced != *text;
            *text = replaced;
            changed
        }
        std::borrow::Cow::Borrowed(_) => false,
    }
}

/// Makes a change on a JSON value, along `segments` (the part of `path` below `root`);
/// `changed` is set when anything changed.
fn apply_json(
    root: &mut Value,
    path: &FieldPath,
    segments: &[Segment],
    change: &Change<'_>,
    changed: &mut bool,
) -> Result<(), ApplyError> {
    let field = path.as_str();
    match change {
        Change::Mask(replacement) => on_each_parent(root, path, segments, &mut |target| {
            if !matches!(target, Value::String(text) if text == replacement) {
                *target = Value::String((*replacement).to_owned());
                *changed = true;
            }
            Ok(())
        }),
        Change::Replace(regex, replacement) => {
            on_each_parent(root, path, segments, &mut |target| match target {
                Value::String(text) => {
                    *changed |= replace(regex, text, replacement);
                    Ok(())
                }
                other => Err(ApplyError::new(
                    field,
                    format!("`replace` needs a string, found {}", kind(other)),
                )),
            })
        }
        Change::Remove => remove(root, path, segments, changed),
        Change::Set(value) => set(root, path, segments, value, changed),
        Change::Prepend(addition) | Change::Append(addition) => {
            let (op, prepend) = match change {
                Change::Prepend(_) => (TransformOp::Prepend, true),
                _ => (TransformOp::Append, false),
            };
            on_each_parent(root, path, segments, &mut |target| match target {
                Value::String(text) => {
                    if prepend {
                        text.insert_str(0, addition);
                    } else {
                        text.push_str(addition);
                    }
                    *changed |= !addition.is_empty();
                    Ok(())
                }
                other => Err(ApplyError::new(
                    field,
                    format!(
                        "`{}` needs a string field, found {}",
                        op_name(op),
                        kind(other)
                    ),
                )),
            })
        }
    }
}

fn op_name(op: TransformOp) -> &'static str {
    match op {
        TransformOp::Set => "set",
        TransformOp::Prepend => "prepend",
        TransformOp::Append => "append",
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Calls `visit` on each parent of the path's last segment; every segment but `*` must resolve.
fn on_each_parent(
    value: &mut Value,
    path: &FieldPath,
    segments: &[Segment],
    visit: &mut dyn FnMut(&mut Value) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    let Some((segment, rest)) = segments.split_first() else {
        return visit(value);
    };
    match segment {
        Segment::Any => match value {
            Value::Array(items) => items
                .iter_mut()
                .try_for_each(|item| on_each_parent(item, path, rest, visit)),
            Value::Object(map) => map
                .values_mut()
                .try_for_each(|item| on_each_parent(item, path, rest, visit)),
            other => Err(not_found(path, segment, other)),
        },
        _ => match child_mut(value, segment) {
            Ok(child) => on_each_parent(child, path, rest, visit),
            Err(parent_kind) => Err(not_found_kind(path, segment, parent_kind)),
        },
    }
}

fn child_mut<'v>(value: &'v mut Value, segment: &Segment) -> Result<&'v mut Value, &'static str> {
    let parent_kind = kind(value);
    let found = match (segment, value) {
        (Segment::Index { index, .. }, Value::Array(items)) => {
            list_position(*index, items.len()).and_then(|at| items.get_mut(at))
        }
        (segment, Value::Object(map)) => segment.key().and_then(|key| map.get_mut(key)),
        _ => None,
    };
    found.ok_or(parent_kind)
}

fn not_found(path: &FieldPath, segment: &Segment, parent: &Value) -> ApplyError {
    not_found_kind(path, segment, kind(parent))
}

fn not_found_kind(path: &FieldPath, segment: &Segment, parent_kind: &str) -> ApplyError {
    ApplyError::new(
        path.as_str(),
        format!(
            "the path does not exist (no \"{}\" in {parent_kind})",
            segment.as_str()
        ),
    )
}

fn set(
    root: &mut Value,
    path: &FieldPath,
    segments: &[Segment],
    new_value: &Value,
    changed: &mut bool,
) -> Result<(), ApplyError> {
    let Some((last, parents)) = segments.split_last() else {
        if root != new_value {
            new_value.clone_into(root);
            *changed = true;
        }
        return Ok(());
    };
    let put = |item: &mut Value, changed: &mut bool| {
        if item != new_value {
            new_value.clone_into(item);
            *changed = true;
        }
    };
    on_each_parent(root, path, parents, &mut |parent| match (last, parent) {
        (Segment::Any, Value::Array(items)) => {
            items.iter_mut().for_each(|item| put(item, changed));
            Ok(())
        }
        (Segment::Any, Value::Object(map)) => {
            map.values_mut().for_each(|item| put(item, changed));
            Ok(())
        }
        (Segment::Index { index, .. }, Value::Array(items)) => {
            match list_position(*index, items.len()).and_then(|at| items.get_mut(at)) {
                Some(item) => {
                    put(item, changed);
                    Ok(())
                }
                None => Err(ApplyError::new(
                    path.as_str(),
                    format!(
                        "the list has no element {} (it has {})",
                        last.as_str(),
                        items.len()
                    ),
                )),
            }
        }
        (segment, Value::Object(map)) => {
            let key = segment.key().unwrap_or_default();
            match map.get_mut(key) {
                Some(item) => put(item, changed),
                None => {
                    map.insert(key.to_owned(), new_value.clone());
                    *changed = true;
                }
            }
            Ok(())
        }
        (segment, other) => Err(not_found(path, segment, other)),
    })
}

fn remove(
    root: &mut Value,
    path: &FieldPath,
    segments: &[Segment],
    changed: &mut bool,
) -> Result<(), ApplyError> {
    let Some((last, parents)) = segments.split_last() else {
        // Removing the root itself: nothing to remove it from.
        return Err(ApplyError::new(path.as_str(), "the path selects no field"));
    };
    on_each_parent(root, path, parents, &mut |parent| match (last, parent) {
        (Segment::Any, Value::Array(items)) => {
            *changed |= !items.is_empty();
            items.clear();
            Ok(())
        }
        (Segment::Any, Value::Object(map)) => {
            *changed |= !map.is_empty();
            map.clear();
            Ok(())
        }
        (Segment::Index { index, .. }, Value::Array(items)) => {
            match list_position(*index, items.len()) {
                Some(at) => {
                    items.remove(at);
                    *changed = true;
                    Ok(())
                }
                None => Err(ApplyError::new(
                    path.as_str(),
                    format!(
                        "the list has no element {} (it has {})",
                        last.as_str(),
                        items.len()
                    ),
                )),
            }
        }
        (segment, Value::Object(map)) => {
            let key = segment.key().unwrap_or_default();
            match map.remove(key) {
                Some(_) => {
                    *changed = true;
                    Ok(())
                }
                None => Err(not_found_kind(path, segment, "the object")),
            }
        }
        (segment, other) => Err(not_found(path, segment, other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const PATHS: &[&str] = &[
        "messages.0.content",
        "messages.*.content",
        "messages.-1.content",
        "messages.5.content",
        "messages.0.role",
        "messages.0",
        "messages.*",
        "messages",
        "metadata.agent_id",
        "metadata.timestamp",
        "metadata.tenant",
        "metadata.tenant.0",
        "metadata.new_key",
        "metadata.*",
        "arguments.a",
        "arguments.*",
        "arguments.b.x",
        "arguments.q.0",
        "arguments.q.*",
        "arguments",
        "tool_name",
        "calling_message.content",
        "calling_message.role",
        "content",
        "structured.a",
        "structured.*",
        "structured.q.0",
        "structured",
        "is_error",
        "response.content",
        "response",
        "nope",
        "*",
        "*.content",
        "messages.0.content.x",
    ];

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!("v")),
            Just(json!("2026-01-01T00:00:00Z")),
            Just(json!("assistant")),
            Just(json!(1)),
            Just(json!({"x": "y"})),
            Just(json!({"role": "user", "content": "c"})),
            Just(json!(["a", "b"])),
            Just(Value::Null),
        ]
    }

    fn redaction() -> impl Strategy<Value = Redaction> {
        (
            prop::sample::select(PATHS),
            0..3u8,
            prop::option::of(prop::sample::select(&["R", "[REDACTED]", ""][..])),
            prop::sample::select(&["a+", "zzz", "(", "b|c"][..]),
        )
            .prop_map(|(path, strategy, replacement, pattern)| {
                let redaction = match strategy {
                    0 => Redaction::mask(path),
                    1 => Redaction::remove(path),
                    _ => Redaction::replace(path, pattern),
                };
                match replacement {
                    Some(text) => redaction.with_replacement(text),
                    None => redaction,
                }
            })
    }

    fn operation() -> impl Strategy<Value = TransformOperation> {
        (
            prop::sample::select(PATHS),
            0..3u8,
            value(),
            prop::sample::select(&["p", ""][..]),
        )
            .prop_map(|(path, op, value, text)| match op {
                0 => TransformOperation::set(path, value),
                1 => TransformOperation::prepend(path, text),
                _ => TransformOperation {
                    op: TransformOp::Append,
                    field: path.into(),
                    value: if text.is_empty() {
                        json!(3)
                    } else {
                        json!(text)
                    },
                },
            })
    }

    fn metadata() -> impl Strategy<Value = Metadata> {
        prop::option::of(prop::sample::select(&["acme", "agent_id"][..])).prop_map(|extra| {
            let metadata = Metadata::new("agent", "session").with_timestamp("2026-01-01T00:00:00Z");
            match extra {
                Some("agent_id") => metadata.with_extra("agent_id", "shadow"),
                Some(tenant) => metadata.with_extra("tenant", json!([tenant, "b"])),
                None => metadata,
            }
        })
    }

    fn input() -> impl Strategy<Value = InputContext> {
        (
            prop::collection::vec(
                (0..3u8, prop::sample::select(&["aab", "xyz", "", "b a"][..])),
                0..4,
            ),
            metadata(),
        )
            .prop_map(|(messages, metadata)| {
                let messages = messages
                    .into_iter()
                    .map(|(role, text)| match role {
                        0 => Message::user(text),
                        1 => Message::assistant(text),
                        _ => Message::system(text),
                    })
                    .collect();
                InputContext::new(messages, metadata)
            })
    }

    fn tool_call() -> impl Strategy<Value = ToolCallContext> {
        (
            prop::collection::btree_map(prop::sample::select(&["a", "b", "q"][..]), value(), 0..3),
            metadata(),
        )
            .prop_map(|(arguments, metadata)| {
                ToolCallContext::new(
                    "search",
                    arguments
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect(),
                    Message::assistant("calling aab"),
                    metadata,
                )
            })
    }

    fn tool_result() -> impl Strategy<Value = ToolResultContext> {
        (
            prop::option::of(prop::collection::btree_map(
                prop::sample::select(&["a", "b", "q"][..]),
                value(),
                0..3,
            )),
            prop::sample::select(&["aab", "", "zzz b"][..]),
            any::<bool>(),
            metadata(),
        )
            .prop_map(|(structured, content, is_error, metadata)| {
                let mut context = ToolResultContext::new("fetch", Map::new(), content, metadata)
                    .with_error(is_error);
                if let Some(structured) = structured {
                    context = context.with_structured(Value::Object(
                        structured
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect(),
                    ));
                }
                context
            })
    }

    /// The typed application decides exactly as the JSON shape does: same result, same error.
    fn same<C: PolicyContext>(
        context: &C,
        redactions: &[Redaction],
        operations: &[TransformOperation],
    ) -> Result<(), TestCaseError> {
        let typed = changed_redactions(context, redactions, true);
        let reference = changed_redactions(context, redactions, false);
        prop_assert_eq!(typed, reference);
        let typed = changed_operations(context, operations, true);
        let reference = changed_operations(context, operations, false);
        prop_assert_eq!(typed, reference);
        Ok(())
    }

    proptest! {
        #[test]
        fn typed_changes_match_the_json_shape_on_inputs(
            context in input(),
            redactions in prop::collection::vec(redaction(), 1..4),
            operations in prop::collection::vec(operation(), 1..4),
        ) {
            same(&context, &redactions, &operations)?;
        }

        #[test]
        fn typed_changes_match_the_json_shape_on_tool_calls(
            context in tool_call(),
            redactions in prop::collection::vec(redaction(), 1..4),
            operations in prop::collection::vec(operation(), 1..4),
        ) {
            same(&context, &redactions, &operations)?;
        }

        #[test]
        fn typed_changes_match_the_json_shape_on_tool_results(
            context in tool_result(),
            redactions in prop::collection::vec(redaction(), 1..4),
            operations in prop::collection::vec(operation(), 1..4),
        ) {
            same(&context, &redactions, &operations)?;
        }

        #[test]
        fn typed_changes_match_the_json_shape_on_outputs(
            content in prop::sample::select(&["aab", "", "zzz b"][..]),
            metadata in metadata(),
            redactions in prop::collection::vec(redaction(), 1..4),
            operations in prop::collection::vec(operation(), 1..4),
        ) {
            let context = OutputContext::new(Message::assistant(content), metadata);
            same(&context, &redactions, &operations)?;
        }
    }
}
