//! Checking conditions: operators, their fields and their operands.

use portcullis_engine::path::FieldPath;
use serde_json::Value;

use super::{CheckedCondition, Checker, child, did_you_mean, element, list, plain};
use crate::json_kind::JsonKind;
use crate::model::Condition;
use crate::schema::{Kind, Use};

const FIELD_OPERATORS: [&str; 4] = ["contains", "equals", "not_in", "greater_than"];
const OPERATORS: [&str; 8] = [
    "contains",
    "equals",
    "not_in",
    "greater_than",
    "always",
    "all",
    "any",
    "not",
];

/// A checked operand: what the rule wrote, and what evaluation uses.
enum Operand {
    Contains(Vec<String>, Vec<String>),
    Equals(Value),
    NotIn(Vec<Value>),
    GreaterThan(serde_json::Number, f64),
}

impl Checker<'_> {
    pub(super) fn condition(
        &mut self,
        value: &Value,
        at: &str,
    ) -> Option<(Condition, CheckedCondition)> {
        let Value::Object(map) = value else {
            self.report(
                at,
                format!("a condition is an object, found {}", JsonKind::of(value)),
                Some("write for example { \"field\": \"messages.-1.content\", \"contains\": [\"password\"] }".to_owned()),
            );
            return None;
        };
        let mut operators = Vec::new();
        let mut unknown = false;
        for key in map.keys() {
            if OPERATORS.contains(&key.as_str()) {
                operators.push(key.as_str());
            } else if key != "field" {
                unknown = true;
                let help = did_you_mean(key, OPERATORS)
                    .unwrap_or_else(|| format!("the operators are {}", list(&OPERATORS)));
                self.report(
                    &child(at, key),
                    format!("unknown condition operator \"{key}\""),
                    Some(help),
                );
            }
        }
        let operator = match operators.as_slice() {
            [] if unknown => return None,
            [] => {
                self.report(
                    at,
                    "the condition has no operator".to_owned(),
                    Some(format!("use one of {}", list(&OPERATORS))),
                );
                return None;
            }
            [operator] => *operator,
            several => {
                self.report(
                    at,
                    format!(
                        "the condition has several operators ({}); a condition has exactly one",
                        several
                            .iter()
                            .map(|name| format!("\"{name}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Some(
                        "combine conditions with { \"all\": [...] } or { \"any\": [...] }"
                            .to_owned(),
                    ),
                );
                return None;
            }
        };
        let operand = &map[operator];
        let operand_at = child(at, operator);
        if FIELD_OPERATORS.contains(&operator) {
            let field = self.field(map, at, operator, Use::Read);
            let checked = match operator {
                "contains" => self.contains(operand, &operand_at, field.as_ref(), at),
                "equals" => self.equals(operand, &operand_at, field.as_ref()),
                "not_in" => self.not_in(operand, &operand_at, field.as_ref()),
                _ => self.greater_than(operand, &operand_at, field.as_ref(), at),
            };
            if unknown {
                return None;
            }
            let (path, _) = field?;
            let checked = checked?;
            let (condition, checked) = match checked {
                Operand::Contains(needles, _) if crate::schema::is_session_labels(&path) => (
                    Condition::Contains {
                        field: path.to_string(),
                        contains: needles.clone(),
                    },
                    CheckedCondition::HasLabel {
                        path,
                        labels: needles,
                    },
                ),
                Operand::Contains(needles, lowered) => (
                    Condition::Contains {
                        field: path.to_string(),
                        contains: needles,
                    },
                    CheckedCondition::Contains {
                        path,
                        needles: lowered,
                    },
                ),
                Operand::Equals(value) => (
                    Condition::Equals {
                        field: path.to_string(),
                        equals: value.clone(),
                    },
                    CheckedCondition::Equals { path, value },
                ),
                Operand::NotIn(values) => (
                    Condition::NotIn {
                        field: path.to_string(),
                        not_in: values.clone(),
                    },
                    CheckedCondition::NotIn { path, values },
                ),
                Operand::GreaterThan(number, threshold) => (
                    Condition::GreaterThan {
                        field: path.to_string(),
                        greater_than: number,
                    },
                    CheckedCondition::GreaterThan { path, threshold },
                ),
            };
            return Some((condition, checked));
        }
        if map.contains_key("field") {
            self.report(
                &child(at, "field"),
                format!("\"{operator}\" takes no \"field\""),
                Some("remove it".to_owned()),
            );
            return None;
        }
        let result = match operator {
            "always" => match operand {
                Value::Bool(true) => {
                    Some((Condition::Always { always: true }, CheckedCondition::Always))
                }
                other => {
                    self.report(
                        &operand_at,
                        format!("\"always\" must be true, found {other}"),
                        Some("a rule that never applies does nothing: delete the rule, or write \"always\": true".to_owned()),
                    );
                    None
                }
            },
            "not" => self
                .condition(operand, &operand_at)
                .map(|(condition, checked)| {
                    (
                        Condition::Not {
                            not: Box::new(condition),
                        },
                        CheckedCondition::Not(Box::new(checked)),
                    )
                }),
            _ => {
                let Value::Array(items) = operand else {
                    self.report(
                        &operand_at,
                        format!(
                            "\"{operator}\" takes a list of conditions, found {}",
                            JsonKind::of(operand)
                        ),
                        None,
                    );
                    return None;
                };
                if items.is_empty() {
                    self.report(
                        &operand_at,
                        format!("\"{operator}\" needs at least one condition"),
                        Some("add conditions to the list".to_owned()),
                    );
                    return None;
                }
                let mut conditions = Vec::new();
                let mut checked = Vec::new();
                let mut failed = false;
                for (index, item) in items.iter().enumerate() {
                    match self.condition(item, &element(&operand_at, index)) {
                        Some((condition, compiled)) => {
                            conditions.push(condition);
                            checked.push(compiled);
                        }
                        None => failed = true,
                    }
                }
                if failed {
                    return None;
                }
                if operator == "all" {
                    Some((
                        Condition::All { all: conditions },
                        CheckedCondition::All(checked),
                    ))
                } else {
                    Some((
                        Condition::Any { any: conditions },
                        CheckedCondition::Any(checked),
                    ))
                }
            }
        };
        if unknown { None } else { result }
    }

    fn contains(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
        condition_at: &str,
    ) -> Option<Operand> {
        let mut ok = true;
        if let Some((path, kind)) = field
            && !matches!(kind, Kind::Text | Kind::Role | Kind::Any)
            && !crate::schema::is_session_labels(path)
        {
            let help = match kind {
                Kind::List => format!(
                    "to look in every element, use \"{path}.*.content\" or another path to the text"
                ),
                Kind::Object if path.segments().len() == 1 && path.as_str() == "metadata" => {
                    format!("name a key, such as \"{path}.agent_id\"")
                }
                Kind::Object => format!("to look in its text, use \"{path}.content\""),
                Kind::Map => format!(
                    "name a key, such as \"{path}.query\", or use \"{path}.*\" for any value"
                ),
                _ => "\"contains\" applies to text".to_owned(),
            };
            self.warn(
                &child(condition_at, "field"),
                format!(
                    "\"contains\" looks in text, but \"{path}\" is {}, so the condition never holds",
                    kind.describe()
                ),
                Some(help),
            );
        }
        let Value::Array(items) = operand else {
            self.report(
                at,
                format!(
                    "\"contains\" takes a list of strings, found {}",
                    JsonKind::of(operand)
                ),
                Some(match operand {
                    Value::String(text) => format!("write [{}]", Value::String(text.clone())),
                    _ => "write for example [\"password\", \"secret\"]".to_owned(),
                }),
            );
            return None;
        };
        if items.is_empty() {
            self.report(
                at,
                "\"contains\" needs at least one string".to_owned(),
                Some("add the strings to look for".to_owned()),
            );
            return None;
        }
        let mut needles = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match item {
                Value::String(text) if text.is_empty() => {
                    self.warn(
                        &element(at, index),
                        "an empty string is in every text, so the condition holds whenever the field exists"
                            .to_owned(),
                        Some("remove it, or use { \"always\": true } if that is meant".to_owned()),
                    );
                    needles.push(text.clone());
                }
                Value::String(text) => needles.push(text.clone()),
                other => {
                    self.report(
                        &element(at, index),
                        format!("\"contains\" takes strings, found {}", JsonKind::of(other)),
                        Some(format!("write it as a string: \"{}\"", plain(other))),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let mut lowered: Vec<String> = needles.iter().map(|needle| needle.to_lowercase()).collect();
        lowered.sort();
        lowered.dedup();
        Some(Operand::Contains(needles, lowered))
    }

    /// Whether a value can be what a field of `kind` holds.
    fn fits(
        &mut self,
        kind: Kind,
        path: &FieldPath,
        value: &Value,
        at: &str,
        operator: &str,
    ) -> bool {
        let (fits, help) = match (kind, value) {
            (Kind::Any, _) => (true, None),
            (Kind::Text, Value::String(_)) => (true, None),
            (Kind::Role, Value::String(role)) => (
                ["system", "user", "assistant"].contains(&role.as_str()),
                Some("a role is \"system\", \"user\" or \"assistant\"".to_owned()),
            ),
            (Kind::Text | Kind::Role, other) => (
                false,
                Some(format!("write the value as a string: \"{}\"", plain(other))),
            ),
            (Kind::Number, Value::Number(_)) => (true, None),
            (Kind::Number, _) => (false, Some("compare it with a number".to_owned())),
            (Kind::List, Value::Array(_)) => (true, None),
            (Kind::Object | Kind::Map, Value::Object(_)) => (true, None),
            (Kind::List | Kind::Object | Kind::Map, _) => {
                (false, Some("compare a field inside it instead".to_owned()))
            }
        };
        if !fits {
            self.warn(
                at,
                format!(
                    "\"{path}\" is {}, so {operator} {value} can never match",
                    kind.describe()
                ),
                help,
            );
        }
        fits
    }

    fn equals(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
    ) -> Option<Operand> {
        if let Some((path, kind)) = field {
            // A value the field can never equal is a warning: the condition never holds.
            self.fits(*kind, path, operand, at, "equals");
        }
        Some(Operand::Equals(operand.clone()))
    }

    fn not_in(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
    ) -> Option<Operand> {
        let Value::Array(items) = operand else {
            self.report(
                at,
                format!(
                    "\"not_in\" takes a list of values, found {}",
                    JsonKind::of(operand)
                ),
                Some(format!("write [{operand}]")),
            );
            return None;
        };
        if let Some((path, kind)) = field {
            // A value the field can never be is a warning: it excludes nothing.
            for (index, item) in items.iter().enumerate() {
                self.fits(*kind, path, item, &element(at, index), "the value");
            }
        }
        Some(Operand::NotIn(items.clone()))
    }

    fn greater_than(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
        condition_at: &str,
    ) -> Option<Operand> {
        if let Some((path, kind)) = field
            && !matches!(kind, Kind::Number | Kind::Any)
        {
            let help = match kind {
                Kind::Text | Kind::Role | Kind::List => {
                    format!("to compare its length, use \"field\": \"{path}.length\"")
                }
                _ => "name a numeric field".to_owned(),
            };
            self.warn(
                &child(condition_at, "field"),
                format!(
                    "\"greater_than\" compares numbers, but \"{path}\" is {}, so the condition never holds",
                    kind.describe()
                ),
                Some(help),
            );
        }
        let (number, threshold) = match (operand, operand.as_f64()) {
            (Value::Number(number), Some(threshold)) => (number.clone(), threshold),
            _ => {
                self.report(
                    at,
                    format!(
                        "\"greater_than\" takes a number, found {}",
                        JsonKind::of(operand)
                    ),
                    Some(match operand {
                        Value::String(text) => format!("write it without quotes: {text}"),
                        _ => "write a number such as 4000".to_owned(),
                    }),
                );
                return None;
            }
        };
        Some(Operand::GreaterThan(number, threshold))
    }
}
