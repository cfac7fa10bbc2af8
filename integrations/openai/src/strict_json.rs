//! JSON read once, with no key given twice in one object.
//!
//! `serde_json` keeps the last of two equal keys; another reader may keep the first. A
//! request whose policies read one value while the upstream reads another walks around
//! them, so the guard refuses such a body instead of guessing (SPEC §16).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

/// A JSON value parsed with every object's keys distinct.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Strict::deserialize(deserializer).map(|strict| strict.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(value)) = seq.next_element()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match fields.entry(key) {
                Entry::Vacant(entry) => {
                    let Strict(value) = map.next_value()?;
                    entry.insert(value);
                }
                Entry::Occupied(entry) => {
                    return Err(de::Error::custom(format_args!(
                        "the key {:?} is given twice in one object",
                        entry.key()
                    )));
                }
            }
        }
        Ok(Value::Object(fields))
    }
}

/// Parses `bytes` as JSON, refusing an object that gives one key twice.
pub(crate) fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    serde_json::from_slice::<Strict>(bytes).map(|strict| strict.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        for body in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"messages": [{"role": "user", "content": "x", "content": "y"}]}"#,
            r#"[{"x": {"k": 1, "k": 1}}]"#,
            r#"{"a": 1, "\u0061": 2}"#,
        ] {
            let problem = from_slice(body.as_bytes()).expect_err(body).to_string();
            assert!(problem.contains("twice"), "{body}: {problem}");
        }
    }

    #[test]
    fn distinct_keys_parse_as_serde_json_does() {
        let body = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": {"a": 1}, "e": 18446744073709551615}"#;
        assert_eq!(
            from_slice(body.as_bytes()).expect("valid"),
            serde_json::from_str::<Value>(body).expect("valid")
        );
        assert!(from_slice(b"{\"a\": 1").is_err());
    }
}
