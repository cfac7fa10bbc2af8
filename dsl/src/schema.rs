//! The shape of each point's context, as far as rules can see it, and the typing of paths.
//!
//! `arguments` and the extra keys of `metadata` are open maps: any key is allowed below them
//! and its value can be anything.

use portcullis_engine::InterceptionPoint;
use portcullis_engine::path::{FieldPath, Segment};

/// The shape of a part of a context.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A string.
    Text,
    /// A message role: a string that is `system`, `user` or `assistant`.
    Role,
    /// A list of messages.
    Messages,
    /// An object with fixed fields.
    Record(&'static Record),
    /// A JSON object with any keys (`arguments`).
    OpenMap,
    /// A number (a session counter).
    Number,
    /// A list of strings (the session's labels).
    Labels,
    /// An object whose keys are any names and whose values are numbers (counters by tool).
    Counts,
    /// Any JSON value (a tool result's `structured` and `is_error`): anything below it.
    Value,
}

#[derive(Debug)]
struct Record {
    /// How messages name it ("a message").
    name: &'static str,
    fields: &'static [(&'static str, Shape)],
    /// Whether keys beyond `fields` are allowed (metadata).
    open: bool,
}

const MESSAGE: Record = Record {
    name: "a message",
    fields: &[("role", Shape::Role), ("content", Shape::Text)],
    open: false,
};

const METADATA: Record = Record {
    name: "metadata",
    fields: &[
        ("agent_id", Shape::Text),
        ("session_id", Shape::Text),
        ("timestamp", Shape::Text),
        ("session", Shape::Record(&SESSION)),
    ],
    open: true,
};

/// `metadata.session`: the facts a session store keeps, put there by the engine.
const SESSION: Record = Record {
    name: "the session's facts",
    fields: &[
        ("labels", Shape::Labels),
        ("counters", Shape::Record(&COUNTERS)),
    ],
    open: false,
};

const COUNTERS: Record = Record {
    name: "the session's counters",
    fields: &[
        ("input", Shape::Record(&COUNTER)),
        ("output", Shape::Record(&COUNTER)),
        ("tool_call", Shape::Record(&TOOL_COUNTERS)),
        ("tool_result", Shape::Record(&TOOL_COUNTERS)),
    ],
    open: false,
};

const COUNTER: Record = Record {
    name: "a point's counter",
    fields: &[("total", Shape::Number)],
    open: false,
};

const TOOL_COUNTERS: Record = Record {
    name: "the counters of a point about a tool",
    fields: &[("total", Shape::Number), ("by_tool", Shape::Counts)],
    open: false,
};

/// Whether `path` is `metadata.session.labels`, on which `contains` matches labels exactly.
pub(crate) fn is_session_labels(path: &FieldPath) -> bool {
    matches!(
        path.segments(),
        [Segment::Name(a), Segment::Name(b), Segment::Name(c)]
            if a == "metadata" && b == "session" && c == "labels"
    )
}

const INPUT: Record = Record {
    name: "an input context",
    fields: &[
        ("messages", Shape::Messages),
        ("metadata", Shape::Record(&METADATA)),
    ],
    open: false,
};

const TOOL_CALL: Record = Record {
    name: "a tool-call context",
    fields: &[
        ("tool_name", Shape::Text),
        ("arguments", Shape::OpenMap),
        ("calling_message", Shape::Record(&MESSAGE)),
        ("metadata", Shape::Record(&METADATA)),
    ],
    open: false,
};

const TOOL_RESULT: Record = Record {
    name: "a tool-result context",
    fields: &[
        ("tool_name", Shape::Text),
        ("arguments", Shape::OpenMap),
        ("content", Shape::Text),
        ("structured", Shape::Value),
        ("is_error", Shape::Value),
        ("metadata", Shape::Record(&METADATA)),
    ],
    open: false,
};

const OUTPUT: Record = Record {
    name: "an output context",
    fields: &[
        ("response", Shape::Record(&MESSAGE)),
        ("metadata", Shape::Record(&METADATA)),
    ],
    open: false,
};

fn root(point: InterceptionPoint) -> &'static Record {
    match point {
        InterceptionPoint::Input => &INPUT,
        InterceptionPoint::ToolCall => &TOOL_CALL,
        InterceptionPoint::ToolResult => &TOOL_RESULT,
        InterceptionPoint::Output => &OUTPUT,
    }
}

/// What a path gives, as far as the checker can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string.
    Text,
    /// A message role.
    Role,
    /// A number (a `length`).
    Number,
    /// A list.
    List,
    /// An object with fixed fields.
    Object,
    /// An object with any keys.
    Map,
    /// Anything (below an open map).
    Any,
}

impl Kind {
    /// How messages describe a value of this kind.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Role => "a message role (text)",
            Kind::Number => "a number",
            Kind::List => "a list",
            Kind::Object => "an object",
            Kind::Map => "an object",
            Kind::Any => "any value",
        }
    }
}

/// What a path is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Read by a condition or a template: a final `length` gives a length.
    Read,
    /// Changed by a redaction or a transform.
    Write,
}

/// A path that fits the point's context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Typed {
    /// What the path gives.
    pub(crate) kind: Kind,
    /// Whether what the path selects can be removed without breaking the context (a list
    /// element or a key of an open map).
    pub(crate) removable: bool,
}

/// Why a path cannot exist in a point's context: a message and a hint.
#[derive(Debug, Clone)]
pub(crate) struct PathProblem {
    pub(crate) message: String,
    pub(crate) help: Option<String>,
}

fn quoted_fields(record: &Record) -> String {
    let names: Vec<String> = record
        .fields
        .iter()
        .map(|(name, _)| format!("\"{name}\""))
        .collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn point_name(point: InterceptionPoint) -> &'static str {
    match point {
        InterceptionPoint::Input => "input",
        InterceptionPoint::ToolCall => "tool-call",
        InterceptionPoint::ToolResult => "tool-result",
        InterceptionPoint::Output => "output",
    }
}

/// Types `path` in the context of `point`.
pub(crate) fn type_path(
    point: InterceptionPoint,
    path: &FieldPath,
    usage: Use,
) -> Result<Typed, PathProblem> {
    let segments = path.segments();
    let mut shape = Shape::Record(root(point));
    let mut removable = false;
    for (position, segment) in segments.iter().enumerate() {
        let last = position + 1 == segments.len();
        let prefix = prefix(segments, position);
        let fail = |message: String, help: Option<String>| {
            Err(PathProblem {
                message: format!(
                    "field \"{path}\" does not exist in {}: {message}",
                    root(point).name
                ),
                help,
            })
        };
        match shape {
            Shape::Value => {
                // Any JSON below it, optional as a whole.
                return Ok(Typed {
                    kind: Kind::Any,
                    removable: true,
                });
            }
            Shape::OpenMap => {
                // Any key, any value below it.
                return Ok(Typed {
                    kind: Kind::Any,
                    removable: true,
                });
            }
            Shape::Counts => {
                // Any tool name; its count is a number.
                shape = Shape::Number;
                removable = true;
                continue;
            }
            Shape::Number => {
                return fail(
                    format!(
                        "\"{prefix}\" is a number, it has no \"{}\"",
                        segment.as_str()
                    ),
                    Some(format!("use \"{prefix}\" itself")),
                );
            }
            Shape::Labels => match segment {
                Segment::Index { .. } | Segment::Any => {
                    shape = Shape::Text;
                    removable = true;
                }
                Segment::Name(name) if name == "length" && last && usage == Use::Read => {
                    return Ok(Typed {
                        kind: Kind::Number,
                        removable: false,
                    });
                }
                Segment::Name(name) => {
                    return fail(
                        format!("\"{prefix}\" is a list of labels, it has no \"{name}\""),
                        Some(format!(
                            "test it with {{ \"field\": \"{prefix}\", \"contains\": [\"a label\"] }}"
                        )),
                    );
                }
            },
            Shape::Text | Shape::Role => {
                if last && usage == Use::Read && segment.as_str() == "length" {
                    return Ok(Typed {
                        kind: Kind::Number,
                        removable: false,
                    });
                }
                return fail(
                    format!("\"{prefix}\" is text, it has no \"{}\"", segment.as_str()),
                    (usage == Use::Read).then(|| {
                        format!("use \"{prefix}\" itself, or \"{prefix}.length\" for its length")
                    }),
                );
            }
            Shape::Messages => match segment {
                Segment::Index { .. } | Segment::Any => {
                    shape = Shape::Record(&MESSAGE);
                    removable = true;
                }
                Segment::Name(name) if name == "length" && last && usage == Use::Read => {
                    return Ok(Typed {
                        kind: Kind::Number,
                        removable: false,
                    });
                }
                Segment::Name(name) => {
                    return fail(
                        format!("\"{prefix}\" is a list, it has no \"{name}\""),
                        Some(format!(
                            "select an element first: \"{prefix}.0.{rest}\" (the first), \"{prefix}.-1.{rest}\" (the latest) or \"{prefix}.*.{rest}\" (any){length}",
                            rest = rest_from(segments, position),
                            length = if usage == Use::Read {
                                format!("; \"{prefix}.length\" is its length")
                            } else {
                                String::new()
                            },
                        )),
                    );
                }
            },
            Shape::Record(record) => {
                let found = segment
                    .key()
                    .and_then(|key| record.fields.iter().find(|(name, _)| *name == key));
                match (found, segment) {
                    (Some((_, next)), _) => {
                        shape = *next;
                        removable = false;
                    }
                    (None, Segment::Any) if record.open => {
                        return Ok(Typed {
                            kind: Kind::Any,
                            removable: true,
                        });
                    }
                    (None, Segment::Any) => {
                        return fail(
                            format!(
                                "\"*\" selects the elements of a list or the values of an open map, and {} has fixed fields {}",
                                describe_at(record, &prefix),
                                quoted_fields(record)
                            ),
                            Some("name the field instead".to_owned()),
                        );
                    }
                    (None, _) if record.open => {
                        return Ok(Typed {
                            kind: Kind::Any,
                            removable: true,
                        });
                    }
                    (None, segment) => {
                        let key = segment.as_str();
                        let mut help = crate::suggest::closest(
                            key,
                            record.fields.iter().map(|(name, _)| *name),
                        )
                        .map(|name| {
                            format!(
                                "did you mean \"{}\"?",
                                replace_segment(segments, position, name)
                            )
                        });
                        if position == 0 && help.is_none() {
                            help = other_point_having(point, key);
                        }
                        let has = if record.fields.len() == 1 {
                            "has"
                        } else {
                            "has fields"
                        };
                        let what = if position == 0 {
                            format!("{} {has} {}", record.name, quoted_fields(record))
                        } else {
                            format!(
                                "{} (\"{prefix}\") {has} {}",
                                record.name,
                                quoted_fields(record)
                            )
                        };
                        let message = if matches!(segment, Segment::Index { .. }) {
                            format!("{what}; it is not a list")
                        } else {
                            what
                        };
                        return fail(message, help);
                    }
                }
            }
        }
    }
    let kind = match shape {
        Shape::Text => Kind::Text,
        Shape::Role => Kind::Role,
        Shape::Messages => Kind::List,
        Shape::Record(_) => Kind::Object,
        Shape::OpenMap | Shape::Counts => Kind::Map,
        Shape::Number => Kind::Number,
        Shape::Labels => Kind::List,
        Shape::Value => Kind::Any,
    };
    Ok(Typed { kind, removable })
}

fn describe_at(record: &Record, prefix: &str) -> String {
    if prefix.is_empty() {
        record.name.to_owned()
    } else {
        format!("{} (\"{prefix}\")", record.name)
    }
}

fn prefix(segments: &[Segment], position: usize) -> String {
    segments[..position]
        .iter()
        .map(Segment::as_str)
        .collect::<Vec<_>>()
        .join(".")
}

fn rest_from(segments: &[Segment], position: usize) -> String {
    segments[position..]
        .iter()
        .map(Segment::as_str)
        .collect::<Vec<_>>()
        .join(".")
}

fn replace_segment(segments: &[Segment], position: usize, with: &str) -> String {
    segments
        .iter()
        .enumerate()
        .map(|(at, segment)| {
            if at == position {
                with
            } else {
                segment.as_str()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn other_point_having(point: InterceptionPoint, key: &str) -> Option<String> {
    InterceptionPoint::ALL
        .into_iter()
        .filter(|other| *other != point)
        .find(|other| root(*other).fields.iter().any(|(name, _)| *name == key))
        .map(|other| {
            format!(
                "\"{key}\" is a field of {} rules, and this is {} {} rule",
                point_name(other),
                if matches!(
                    point,
                    InterceptionPoint::ToolCall | InterceptionPoint::ToolResult
                ) {
                    "a"
                } else {
                    "an"
                },
                point_name(point)
            )
        })
}

/// The context's JSON shape is written down in the engine's types (their serde derives), in
/// the selectors (`select.rs`) and here. These tests serialize a fully populated context of
/// each point (struct literals: a new field does not compile until it is filled in here) and
/// compare, recursively, its keys with what the selectors and this schema know, so a field one
/// of them does not know fails here instead of being silently unreachable to rules.
#[cfg(test)]
mod tests {
    use portcullis_engine::{
        InputContext, Message, Metadata, OutputContext, Role, ToolCallContext,
    };
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::select::{Node, Root, Walk, select};

    /// The extra metadata key the contexts carry: an open map's key, not a field.
    const EXTRA: &str = "tier";

    fn metadata() -> Metadata {
        let mut extra = Map::new();
        extra.insert(EXTRA.to_owned(), json!("gold"));
        // What the engine puts there with a session store.
        let mut facts = portcullis_engine::SessionFacts::default();
        facts.labels.push("untrusted".to_owned());
        facts.counters.tool_call.total = 2;
        facts
            .counters
            .tool_call
            .by_tool
            .insert("shell".to_owned(), 2);
        extra.insert("session".to_owned(), facts.to_value());
        Metadata {
            agent_id: "agent".to_owned(),
            session_id: "session".to_owned(),
            timestamp: "2026-01-01T00:00:00Z".to_owned(),
            extra,
        }
    }

    fn message(role: Role, content: &str) -> Message {
        Message {
            role,
            content: content.to_owned(),
        }
    }

    fn input() -> InputContext {
        InputContext {
            messages: vec![
                message(Role::System, "be brief"),
                message(Role::User, "hello"),
            ],
            metadata: metadata(),
        }
    }

    fn tool_call() -> ToolCallContext {
        let mut arguments = Map::new();
        arguments.insert("query".to_owned(), json!("rust"));
        ToolCallContext {
            tool_name: "search".to_owned(),
            arguments,
            calling_message: message(Role::Assistant, "searching"),
            metadata: metadata(),
        }
    }

    fn output() -> OutputContext {
        OutputContext {
            response: message(Role::Assistant, "an answer"),
            metadata: metadata(),
        }
    }

    /// Walks `value` (the JSON at `path` of a part of shape `shape`) and checks that the
    /// schema and the selectors know every key, and the schema no key the JSON lacks.
    fn compare<C: Root>(
        point: InterceptionPoint,
        context: &C,
        shape: Shape,
        path: &str,
        value: &Value,
    ) {
        // The root has no path of its own.
        if !path.is_empty() {
            let parsed = FieldPath::parse(path).expect("a valid path");
            // The selectors find exactly the serialized value there.
            let mut found = Vec::new();
            select(context.node(), parsed.segments(), &mut |node: Node<'_>| {
                found.push(node.to_json());
                Walk::Continue
            });
            assert_eq!(
                found,
                std::slice::from_ref(value),
                "the selectors at {path:?}"
            );
            // The schema types it as what it is.
            let typed = type_path(point, &parsed, Use::Read)
                .unwrap_or_else(|problem| panic!("the schema at {path:?}: {}", problem.message));
            let fits = matches!(
                (typed.kind, value),
                (Kind::Text | Kind::Role, Value::String(_))
                    | (Kind::List, Value::Array(_))
                    | (Kind::Object | Kind::Map, Value::Object(_))
                    | (Kind::Number, Value::Number(_))
                    | (Kind::Any, _)
            );
            assert!(
                fits,
                "the schema says {path:?} is {:?}, the JSON is {value}",
                typed.kind
            );
        }

        match (shape, value) {
            (Shape::Record(record), Value::Object(object)) => {
                let mut keys: Vec<&str> = object
                    .keys()
                    .map(String::as_str)
                    .filter(|key| !(record.open && *key == EXTRA))
                    .collect();
                keys.sort_unstable();
                let mut known: Vec<&str> = record.fields.iter().map(|(name, _)| *name).collect();
                known.sort_unstable();
                assert_eq!(keys, known, "the fields of {path:?} ({})", record.name);
                for (name, field_shape) in record.fields {
                    let child = if path.is_empty() {
                        (*name).to_owned()
                    } else {
                        format!("{path}.{name}")
                    };
                    compare(point, context, *field_shape, &child, &object[*name]);
                }
            }
            (Shape::Messages, Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    compare(
                        point,
                        context,
                        Shape::Record(&MESSAGE),
                        &format!("{path}.{index}"),
                        item,
                    );
                }
            }
            (Shape::Labels, Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    compare(
                        point,
                        context,
                        Shape::Text,
                        &format!("{path}.{index}"),
                        item,
                    );
                }
            }
            (Shape::Counts, Value::Object(object)) => {
                for (name, item) in object {
                    compare(
                        point,
                        context,
                        Shape::Number,
                        &format!("{path}.{name}"),
                        item,
                    );
                }
            }
            (Shape::Text | Shape::Role, Value::String(_))
            | (Shape::OpenMap, Value::Object(_))
            | (Shape::Number, Value::Number(_)) => {}
            (shape, value) => panic!("{path:?}: the schema has {shape:?}, the JSON {value}"),
        }
    }

    fn root_value(value: &Value) -> &Map<String, Value> {
        value.as_object().expect("a context is an object")
    }

    #[test]
    fn the_schema_and_the_selectors_know_every_field_of_an_input_context() {
        let context = input();
        let value = serde_json::to_value(&context).expect("serializable");
        let point = InterceptionPoint::Input;
        assert!(!root_value(&value).is_empty());
        compare(point, &context, Shape::Record(root(point)), "", &value);
    }

    #[test]
    fn the_schema_and_the_selectors_know_every_field_of_a_tool_call_context() {
        let context = tool_call();
        let value = serde_json::to_value(&context).expect("serializable");
        let point = InterceptionPoint::ToolCall;
        assert!(!root_value(&value).is_empty());
        compare(point, &context, Shape::Record(root(point)), "", &value);
    }

    #[test]
    fn the_schema_and_the_selectors_know_every_field_of_an_output_context() {
        let context = output();
        let value = serde_json::to_value(&context).expect("serializable");
        let point = InterceptionPoint::Output;
        assert!(!root_value(&value).is_empty());
        compare(point, &context, Shape::Record(root(point)), "", &value);
    }
}
