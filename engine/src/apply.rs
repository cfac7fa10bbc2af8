//! Applying `redact` and `transform` decisions to a context.
//!
//! The context is turned into its JSON shape, changed in place, then read back as the same
//! kind of context: whatever the changes produce must still be a valid context, or the whole
//! application fails and the context is left as it was.
//!
//! Rules, for each redaction or operation in order:
//! - every segment of the path but `*` must resolve, otherwise it is an error; a `*` that
//!   selects nothing changes nothing;
//! - `mask` replaces the value with the replacement text; `replace` substitutes every match of
//!   the pattern in a string value; `remove` deletes an object key or drops a list element;
//! - `set` replaces a value, or adds a key to an object that exists; `prepend` and `append`
//!   need a string value and a string to add.

use serde_json::Value;

use crate::decision::{
    PolicyDecision, Redaction, RedactionStrategy, TransformOp, TransformOperation,
};
use crate::error::ApplyError;
use crate::path::{FieldPath, Segment, list_position};
use crate::point::PolicyContext;

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
        PolicyDecision::Redact { redactions } => apply_redactions(context, redactions).map(Some),
        PolicyDecision::Transform { transformation } => {
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
    change(context, |root| {
        redactions
            .iter()
            .try_for_each(|redaction| redact(root, redaction))
    })
}

/// Applies transform operations in order and returns the changed context.
pub fn apply_operations<C: PolicyContext>(
    context: &C,
    operations: &[TransformOperation],
) -> Result<C, ApplyError> {
    change(context, |root| {
        operations
            .iter()
            .try_for_each(|operation| transform(root, operation))
    })
}

fn change<C: PolicyContext>(
    context: &C,
    edit: impl FnOnce(&mut Value) -> Result<(), ApplyError>,
) -> Result<C, ApplyError> {
    let mut root = serde_json::to_value(context)
        .map_err(|error| ApplyError::new("", format!("cannot read the context: {error}")))?;
    edit(&mut root)?;
    let changed: C = serde_json::from_value(root).map_err(|error| {
        ApplyError::new(
            "",
            format!("it is no longer a valid {}: {error}", C::POINT.as_str()),
        )
    })?;
    changed
        .check()
        .map_err(|problem| ApplyError::new("", problem.problem()))?;
    Ok(changed)
}

fn parse(field: &str) -> Result<FieldPath, ApplyError> {
    FieldPath::parse(field).map_err(|error| ApplyError::new(field, error.to_string()))
}

fn redact(root: &mut Value, redaction: &Redaction) -> Result<(), ApplyError> {
    let path = parse(&redaction.field)?;
    let field = redaction.field.as_str();
    match redaction.strategy {
        RedactionStrategy::Mask => {
            let replacement = redaction.replacement_or_default();
            on_each_target(root, &path, &mut |target| {
                *target = Value::String(replacement.to_owned());
                Ok(())
            })
        }
        RedactionStrategy::Replace => {
            let pattern = redaction.pattern.as_deref().ok_or_else(|| {
                ApplyError::new(field, "the `replace` strategy needs a `pattern`")
            })?;
            let regex = cached_regex(pattern).map_err(|problem| ApplyError::new(field, problem))?;
            let replacement = redaction.replacement_or_default();
            on_each_target(root, &path, &mut |target| match target {
                Value::String(text) => {
                    if let std::borrow::Cow::Owned(replaced) =
                        regex.replace_all(text, regex::NoExpand(replacement))
                    {
                        *text = replaced;
                    }
                    Ok(())
                }
                other => Err(ApplyError::new(
                    field,
                    format!("`replace` needs a string, found {}", kind(other)),
                )),
            })
        }
        RedactionStrategy::Remove => remove(root, &path),
    }
}

fn transform(root: &mut Value, operation: &TransformOperation) -> Result<(), ApplyError> {
    let path = parse(&operation.field)?;
    let field = operation.field.as_str();
    match operation.op {
        TransformOp::Set => set(root, &path, &operation.value),
        TransformOp::Prepend | TransformOp::Append => {
            let Value::String(addition) = &operation.value else {
                return Err(ApplyError::new(
                    field,
                    format!(
                        "`{}` needs a string value, found {}",
                        op_name(operation.op),
                        kind(&operation.value)
                    ),
                ));
            };
            on_each_target(root, &path, &mut |target| match target {
                Value::String(text) => {
                    if operation.op == TransformOp::Prepend {
                        text.insert_str(0, addition);
                    } else {
                        text.push_str(addition);
                    }
                    Ok(())
                }
                other => Err(ApplyError::new(
                    field,
                    format!(
                        "`{}` needs a string field, found {}",
                        op_name(operation.op),
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

fn split_last(path: &FieldPath) -> (&[Segment], &Segment) {
    let segments = path.segments();
    let (last, parents) = segments
        .split_last()
        .expect("a parsed path has at least one segment");
    (parents, last)
}

/// Calls `visit` on every value the path selects; it must select at least one unless a
/// `*` is involved.
fn on_each_target(
    root: &mut Value,
    path: &FieldPath,
    visit: &mut dyn FnMut(&mut Value) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    on_each_parent(root, path, path.segments(), visit)
}

fn set(root: &mut Value, path: &FieldPath, new_value: &Value) -> Result<(), ApplyError> {
    let (parents, last) = split_last(path);
    on_each_parent(root, path, parents, &mut |parent| match (last, parent) {
        (Segment::Any, Value::Array(items)) => {
            items.iter_mut().for_each(|item| *item = new_value.clone());
            Ok(())
        }
        (Segment::Any, Value::Object(map)) => {
            map.values_mut().for_each(|item| *item = new_value.clone());
            Ok(())
        }
        (Segment::Index { index, .. }, Value::Array(items)) => {
            match list_position(*index, items.len()).and_then(|at| items.get_mut(at)) {
                Some(item) => {
                    *item = new_value.clone();
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
            map.insert(key.to_owned(), new_value.clone());
            Ok(())
        }
        (segment, other) => Err(not_found(path, segment, other)),
    })
}

fn remove(root: &mut Value, path: &FieldPath) -> Result<(), ApplyError> {
    let (parents, last) = split_last(path);
    on_each_parent(root, path, parents, &mut |parent| match (last, parent) {
        (Segment::Any, Value::Array(items)) => {
            items.clear();
            Ok(())
        }
        (Segment::Any, Value::Object(map)) => {
            map.clear();
            Ok(())
        }
        (Segment::Index { index, .. }, Value::Array(items)) => {
            match list_position(*index, items.len()) {
                Some(at) => {
                    items.remove(at);
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
                Some(_) => Ok(()),
                None => Err(not_found_kind(path, segment, "the object")),
            }
        }
        (segment, other) => Err(not_found(path, segment, other)),
    })
}
