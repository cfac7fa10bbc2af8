//! The kind of a JSON value, named for people: one helper for every message that says "found a
//! number".

use serde_json::Value;

/// The kind of a JSON value.
///
/// ```
/// use portcullis_dsl::JsonKind;
/// use serde_json::json;
///
/// assert_eq!(JsonKind::of(&json!([1, 2])), JsonKind::Array);
/// assert_eq!(JsonKind::of(&json!([1, 2])).as_str(), "array");
/// assert_eq!(JsonKind::of(&json!([1, 2])).described(), "a list");
/// assert_eq!(format!("found {}", JsonKind::of(&json!({}))), "found an object");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JsonKind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Boolean,
    /// A number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonKind {
    /// The kind of `value`.
    pub const fn of(value: &Value) -> JsonKind {
        match value {
            Value::Null => JsonKind::Null,
            Value::Bool(_) => JsonKind::Boolean,
            Value::Number(_) => JsonKind::Number,
            Value::String(_) => JsonKind::String,
            Value::Array(_) => JsonKind::Array,
            Value::Object(_) => JsonKind::Object,
        }
    }

    /// The JSON Schema name of the kind: `null`, `boolean`, `number`, `string`, `array`,
    /// `object`.
    pub const fn as_str(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Boolean => "boolean",
            JsonKind::Number => "number",
            JsonKind::String => "string",
            JsonKind::Array => "array",
            JsonKind::Object => "object",
        }
    }

    /// The kind as a sentence names it: `null`, `a boolean`, `a number`, `a string`, `a list`,
    /// `an object` (what `Display` writes).
    pub const fn described(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Boolean => "a boolean",
            JsonKind::Number => "a number",
            JsonKind::String => "a string",
            JsonKind::Array => "a list",
            JsonKind::Object => "an object",
        }
    }
}

/// The kind as a sentence names it ([`JsonKind::described`]).
impl std::fmt::Display for JsonKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.described())
    }
}
