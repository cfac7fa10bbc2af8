//! The context as a Cedar record: which attributes the record holds ([`Shape`]) and how a JSON
//! value becomes a Cedar value ([`to_cedar`]).
//!
//! JSON values map to Cedar's as a policy author expects: a string is a `String`, a boolean a
//! `Bool`, a whole number that fits 64 bits a `Long`, an array a set (Cedar's sets are
//! unordered and hold each value once), an object a record. Cedar has no null and no
//! fractions: a `null` is left out (the attribute is absent: `context.x has y` is false), and
//! any other number becomes its JSON text as a `String`. Keys are taken as written:
//! `__entity` and `__extn` keys of a tool's arguments are plain attributes, never Cedar's JSON
//! escapes, so a caller cannot slip an entity reference or an extension value into the record.

use std::collections::BTreeMap;

use cedar_policy::RestrictedExpression;
use cedar_policy_core::entities::SchemaType;
use serde_json::Value;

/// Which attributes of a JSON value the Cedar value keeps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    /// All of them, at every depth.
    Any,
    /// A record with only these attributes (each of its own shape); a value that is not an
    /// object is kept whole, for Cedar to refuse.
    Record(BTreeMap<String, Shape>),
    /// A set whose elements have this shape.
    Set(Box<Shape>),
}

impl Shape {
    /// The shape of a schema type: records keep their declared attributes only (Cedar's
    /// schema records are closed: an undeclared attribute would fail the request).
    pub(crate) fn of_schema_type(schema_type: &SchemaType) -> Shape {
        match schema_type {
            SchemaType::Record { attrs, open_attrs } if !open_attrs => Shape::Record(
                attrs
                    .iter()
                    .map(|(name, attribute)| {
                        (
                            name.to_string(),
                            Shape::of_schema_type(attribute.schema_type()),
                        )
                    })
                    .collect(),
            ),
            SchemaType::Set { element_ty } => {
                Shape::Set(Box::new(Shape::of_schema_type(element_ty)))
            }
            _ => Shape::Any,
        }
    }
}

/// `value` as a Cedar value of `shape`; `None` for a `null` (left out).
pub(crate) fn to_cedar(value: &Value, shape: &Shape) -> Option<RestrictedExpression> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(flag) => RestrictedExpression::new_bool(*flag),
        Value::Number(number) => match number.as_i64() {
            Some(long) => RestrictedExpression::new_long(long),
            None => RestrictedExpression::new_string(number.to_string()),
        },
        Value::String(text) => RestrictedExpression::new_string(text.clone()),
        Value::Array(items) => {
            let element = match shape {
                Shape::Set(element) => element,
                _ => &Shape::Any,
            };
            RestrictedExpression::new_set(items.iter().filter_map(|item| to_cedar(item, element)))
        }
        Value::Object(map) => {
            // A JSON object's keys are distinct, so the record is always built.
            RestrictedExpression::new_record(record_pairs(map, shape)).ok()?
        }
    })
}

/// The attributes of a JSON object that a record of `shape` keeps, as Cedar values.
pub(crate) fn record_pairs<'a>(
    map: &'a serde_json::Map<String, Value>,
    shape: &'a Shape,
) -> impl Iterator<Item = (String, RestrictedExpression)> + 'a {
    map.iter().filter_map(move |(key, value)| {
        let inner = match shape {
            Shape::Record(attributes) => attributes.get(key)?,
            _ => &Shape::Any,
        };
        Some((key.clone(), to_cedar(value, inner)?))
    })
}

/// The top-level attributes of `context` the policies can read: `Any` when a policy uses
/// `context` other than through `context.<attribute>` or `context has <attribute>`.
///
/// Reads each policy's JSON form (Cedar's EST), where an attribute access is
/// `{".": {"left": {"Var": "context"}, "attr": ..}}` and a `has` test is the same under
/// `"has"`. Anything else that mentions `context`, or a policy without a JSON form, keeps the
/// whole context: leaving out what a policy could read would change its decision.
pub(crate) fn context_use<'a>(
    policies: impl IntoIterator<Item = &'a cedar_policy::Policy>,
) -> Shape {
    let mut attributes = BTreeMap::new();
    for policy in policies {
        let Ok(json) = policy.to_json() else {
            return Shape::Any;
        };
        if !collect_context_use(&json, &mut attributes) {
            return Shape::Any;
        }
    }
    Shape::Record(attributes)
}

/// Adds the attributes of `context` that `json` reads; false when it reads `context` whole.
fn collect_context_use(json: &Value, attributes: &mut BTreeMap<String, Shape>) -> bool {
    match json {
        Value::Object(map) => {
            if map.len() == 1 && map.get("Var").and_then(Value::as_str) == Some("context") {
                return false;
            }
            for (key, value) in map {
                if (key == "." || key == "has")
                    && let Some(access) = value.as_object()
                    && access.get("left").is_some_and(|left| {
                        left.as_object().is_some_and(|var| {
                            var.len() == 1
                                && var.get("Var").and_then(Value::as_str) == Some("context")
                        })
                    })
                    && let Some(attribute) = access.get("attr").and_then(Value::as_str)
                {
                    attributes.insert(attribute.to_owned(), Shape::Any);
                    continue;
                }
                if !collect_context_use(value, attributes) {
                    return false;
                }
            }
            true
        }
        Value::Array(items) => items
            .iter()
            .all(|item| collect_context_use(item, attributes)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn use_of(source: &str) -> Shape {
        let set = cedar_policy::PolicySet::from_str(source).unwrap();
        context_use(set.policies())
    }

    fn names(shape: &Shape) -> Vec<&str> {
        match shape {
            Shape::Record(attributes) => attributes.keys().map(String::as_str).collect(),
            _ => vec!["*"],
        }
    }

    #[test]
    fn a_policy_without_context_reads_nothing_of_it() {
        let shape = use_of(r#"permit(principal, action, resource == Tool::"web_search");"#);
        assert!(names(&shape).is_empty());
    }

    #[test]
    fn attribute_reads_and_has_tests_name_their_attributes() {
        let shape = use_of(
            r#"permit(principal, action, resource) when { context.tool_name == "x" };
               forbid(principal, action, resource) when { context has metadata && context.metadata.session.labels.contains("untrusted") };"#,
        );
        assert_eq!(names(&shape), ["metadata", "tool_name"]);
    }

    #[test]
    fn the_context_as_a_whole_keeps_everything() {
        let shape = use_of(r#"permit(principal, action, resource) when { context == {} };"#);
        assert_eq!(shape, Shape::Any);
        let shape =
            use_of(r#"permit(principal, action, resource) when { context["tool_name"] == "x" };"#);
        assert_ne!(
            names(&shape),
            Vec::<&str>::new(),
            "indexing reads an attribute: {shape:?}"
        );
    }

    #[test]
    fn json_values_become_cedar_values() {
        let value = serde_json::json!({
            "text": "hi", "flag": true, "count": 3, "ratio": 0.5, "gone": null,
            "list": ["a", "a", null], "nested": {"__entity": {"type": "Agent", "id": "x"}}
        });
        assert!(to_cedar(&value, &Shape::Any).is_some());
        let pairs: Vec<_> = record_pairs(value.as_object().unwrap(), &Shape::Any).collect();
        let context = cedar_policy::Context::from_pairs(pairs).unwrap();
        // Cedar's JSON form refuses `__entity` as a key: it is printed without it.
        let mut printable = value.clone();
        printable.as_object_mut().unwrap().remove("nested");
        let pairs: Vec<_> = record_pairs(printable.as_object().unwrap(), &Shape::Any).collect();
        let json = cedar_policy::Context::from_pairs(pairs)
            .unwrap()
            .to_json_value()
            .unwrap();
        assert_eq!(json["text"], "hi");
        assert_eq!(json["count"], 3);
        assert_eq!(json["ratio"], "0.5");
        assert!(json.get("gone").is_none());
        assert_eq!(json["list"], serde_json::json!(["a"]));
        // `__entity` stays a plain record attribute, not an entity reference.
        let entity = cedar_policy::EntityUid::from_str(r#"Agent::"x""#).unwrap();
        let policy = cedar_policy::PolicySet::from_str(&format!(
            "permit(principal, action, resource) when {{ context.nested.__entity == {entity} }};"
        ))
        .unwrap();
        let request = cedar_policy::Request::new(
            entity.clone(),
            cedar_policy::EntityUid::from_str(r#"Action::"input""#).unwrap(),
            entity,
            context,
            None,
        )
        .unwrap();
        let response = cedar_policy::Authorizer::new().is_authorized(
            &request,
            &policy,
            &cedar_policy::Entities::empty(),
        );
        assert_eq!(response.decision(), cedar_policy::Decision::Deny);
    }

    #[test]
    fn a_record_shape_keeps_its_attributes_only() {
        let value = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}]});
        let shape = Shape::Record(BTreeMap::from([
            (
                "b".to_owned(),
                Shape::Record(BTreeMap::from([("c".to_owned(), Shape::Any)])),
            ),
            (
                "e".to_owned(),
                Shape::Set(Box::new(Shape::Record(BTreeMap::from([(
                    "g".to_owned(),
                    Shape::Any,
                )])))),
            ),
        ]));
        let pairs: Vec<_> = record_pairs(value.as_object().unwrap(), &shape).collect();
        let context = cedar_policy::Context::from_pairs(pairs).unwrap();
        assert_eq!(
            context.to_json_value().unwrap(),
            serde_json::json!({"b": {"c": 2}, "e": [{"g": 2}]})
        );
    }
}
