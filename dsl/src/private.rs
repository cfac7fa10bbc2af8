//! Support for the code `dsl_policy!` generates. Not public API: it may change in any release.
//!
//! Generated code reaches these items as `::portcullis::__private::dsl::...`. The operators
//! are the very functions the runtime policies call, so both decide alike.

pub use crate::ops::{
    Needles, ValueSet, contains, equals, greater_than, has_label, json_equal, node_equals, not_in,
    push_field,
};
pub use crate::select::{Node, Root, Walk, any, select};
pub use portcullis_engine::path::Segment;
pub use serde_json;

/// A JSON number from an `f64` known to be finite (generated code writes the bits).
pub fn number(value: f64) -> serde_json::Value {
    serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// A JSON object from its entries, in order.
pub fn object<const N: usize>(entries: [(&str, serde_json::Value); N]) -> serde_json::Value {
    serde_json::Value::Object(
        entries
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect(),
    )
}
