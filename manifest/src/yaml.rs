//! YAML text → a tree of values that remember where they are.
//!
//! Every configuration file of this crate (manifests, policy-set files, test files) is read
//! into a [`Node`] tree first, with limits on size, depth and aliases, and only then checked
//! key by key, so that every problem can name its line and column.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::{Budget, DuplicateKeyPolicy, Options, Spanned};

/// The largest file read as YAML (16 MiB).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// The deepest nesting of lists and maps accepted (deep enough for any manifest or context,
/// shallow enough for a thread with a small stack).
pub const MAX_DEPTH: usize = 32;
/// The most aliases (`*name`) a file may use (what they expand to is bounded too: 100,000
/// values in all).
pub const MAX_ALIASES: usize = 256;

/// A line and a column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A YAML value and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: NodeValue,
    /// Where it starts.
    pub position: Position,
}

/// The values a [`Node`] holds.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeValue {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(String),
    /// A list.
    List(Vec<Node>),
    /// A map, keys in file order (each key a node, so that it has a position too).
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The string, when this is one.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::String(text) => Some(text),
            _ => None,
        }
    }

    /// What kind of value this is, for messages ("a list", "a string", ...).
    pub fn kind(&self) -> &'static str {
        match &self.value {
            NodeValue::Null => "null",
            NodeValue::Bool(_) => "a boolean",
            NodeValue::Number(_) => "a number",
            NodeValue::String(_) => "a string",
            NodeValue::List(_) => "a list",
            NodeValue::Map(_) => "a map",
        }
    }

    /// The value as JSON (map keys that are not strings are written as their JSON text).
    pub fn to_json(&self) -> Value {
        match &self.value {
            NodeValue::Null => Value::Null,
            NodeValue::Bool(value) => Value::Bool(*value),
            NodeValue::Number(number) => Value::Number(number.clone()),
            NodeValue::String(text) => Value::String(text.clone()),
            NodeValue::List(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Map(entries) => {
                let mut map = Map::new();
                for (key, value) in entries {
                    let key = match key.to_json() {
                        Value::String(text) => text,
                        other => other.to_string(),
                    };
                    map.insert(key, value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// Follows a JSON path as the DSL checker writes them (`condition.all[1].field`) and gives
    /// the position of the part it names: the key for a map entry (so that an unknown key
    /// points at itself), the element for a list index. Stops at the deepest part found.
    pub fn locate(&self, path: &str) -> Position {
        let mut node = self;
        let mut position = self.position;
        for segment in split_json_path(path) {
            match (&node.value, segment) {
                (NodeValue::Map(entries), JsonStep::Key(name)) => {
                    match entries.iter().find(|(key, _)| key.as_str() == Some(name)) {
                        Some((key, value)) => {
                            position = key.position;
                            node = value;
                        }
                        None => return position,
                    }
                }
                (NodeValue::List(items), JsonStep::Index(index)) => match items.get(index) {
                    Some(item) => {
                        position = item.position;
                        node = item;
                    }
                    None => return position,
                },
                _ => return position,
            }
        }
        position
    }
}

/// One step of a dotted JSON path (`a.b[0]`) into a YAML node: a key or a list position.
enum JsonStep<'a> {
    Key(&'a str),
    Index(usize),
}

fn split_json_path(path: &str) -> Vec<JsonStep<'_>> {
    let mut segments = Vec::new();
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (name, mut rest) = match part.find('[') {
            Some(at) => part.split_at(at),
            None => (part, ""),
        };
        if !name.is_empty() {
            segments.push(JsonStep::Key(name));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let Some(end) = stripped.find(']') else { break };
            if let Ok(index) = stripped[..end].parse() {
                segments.push(JsonStep::Index(index));
            }
            rest = &stripped[end + 1..];
        }
    }
    segments
}

/// Why a text could not be read as YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where, when the parser knows.
    pub position: Option<Position>,
    /// What is wrong.
    pub message: String,
}

/// Parses `text` (YAML 1.2, so JSON too) into a tree, within this crate's limits.
pub fn parse(text: &str) -> Result<Node, YamlError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(YamlError {
            position: None,
            message: format!("the file is larger than {MAX_FILE_BYTES} bytes"),
        });
    }
    if text.trim().is_empty() {
        return Ok(Node {
            value: NodeValue::Null,
            position: Position { line: 1, column: 1 },
        });
    }
    let mut budget = Budget::default();
    budget.max_reader_input_bytes = Some(MAX_FILE_BYTES as usize);
    budget.max_depth = MAX_DEPTH;
    budget.max_aliases = MAX_ALIASES;
    budget.max_anchors = MAX_ALIASES;
    budget.max_nodes = 1_000_000;
    budget.max_documents = 1;
    budget.max_recorded_anchor_events = 100_000;
    let mut options = Options::default();
    options.budget = Some(budget);
    // What aliases may expand to, in all: a manifest has no use for more.
    options.alias_limits.max_total_replayed_events = 100_000;
    options.alias_limits.max_replay_stack_depth = 16;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.with_snippet = false;
    serde_saphyr::from_str_with_options::<Node>(text, options).map_err(|error| {
        let position = error.location().and_then(|location| {
            let (line, column) = (location.line(), location.column());
            (line > 0).then(|| Position {
                line: line as usize,
                column: column.max(1) as usize,
            })
        });
        let mut message = error.to_string();
        // The position is reported separately.
        if let Some(at) = message.find(" at line ") {
            message.truncate(at);
        }
        YamlError {
            position,
            message: first_line(&message).to_owned(),
        }
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text).trim()
}

/// Reads and parses a file, or says why not (the error has no position when the file cannot
/// be read).
pub fn read(path: &Path) -> Result<(String, Node), YamlError> {
    let text = read_text(path).map_err(|message| YamlError {
        position: None,
        message,
    })?;
    let node = parse(&text)?;
    Ok((text, node))
}

/// Reads a text file of at most [`MAX_FILE_BYTES`].
pub fn read_text(path: &Path) -> Result<String, String> {
    let metadata =
        std::fs::metadata(path).map_err(|error| format!("cannot read the file: {error}"))?;
    if metadata.is_dir() {
        return Err("this is a folder, not a file".to_owned());
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(format!("the file is larger than {MAX_FILE_BYTES} bytes"));
    }
    std::fs::read_to_string(path).map_err(|error| format!("cannot read the file: {error}"))
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<NodeValue>::deserialize(deserializer)?;
        Ok(Node {
            value: spanned.value,
            position: Position {
                line: spanned.referenced.line() as usize,
                column: spanned.referenced.column() as usize,
            },
        })
    }
}

impl<'de> Deserialize<'de> for NodeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = NodeValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<NodeValue, E> {
        Ok(NodeValue::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<NodeValue, E> {
        Ok(NodeValue::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<NodeValue, E> {
        Ok(NodeValue::Number(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<NodeValue, E> {
        match i64::try_from(value) {
            Ok(value) => Ok(NodeValue::Number(value.into())),
            Err(_) => match u64::try_from(value) {
                Ok(value) => Ok(NodeValue::Number(value.into())),
                Err(_) => Err(E::custom("integer out of range")),
            },
        }
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<NodeValue, E> {
        u64::try_from(value)
            .map(|value| NodeValue::Number(value.into()))
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<NodeValue, E> {
        Number::from_f64(value)
            .map(NodeValue::Number)
            .ok_or_else(|| E::custom("numbers must be finite"))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<NodeValue, E> {
        Ok(NodeValue::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<NodeValue, E> {
        Ok(NodeValue::String(value))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<NodeValue, E> {
        Err(E::custom("binary values are not accepted"))
    }

    fn visit_none<E: de::Error>(self) -> Result<NodeValue, E> {
        Ok(NodeValue::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<NodeValue, E> {
        Ok(NodeValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<NodeValue, D::Error> {
        NodeValue::deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<NodeValue, D::Error> {
        NodeValue::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodeValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(NodeValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeValue, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(NodeValue::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_have_positions() {
        let node = parse("a: 1\nb:\n  - x\n  - {c: true}\n").unwrap();
        let NodeValue::Map(entries) = &node.value else {
            panic!("{node:?}")
        };
        assert_eq!(entries[1].0.position, Position { line: 2, column: 1 });
        let NodeValue::List(items) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(items[1].position.line, 4);
        assert_eq!(node.locate("b[1].c"), Position { line: 4, column: 6 });
        assert_eq!(
            node.to_json(),
            serde_json::json!({"a": 1, "b": ["x", {"c": true}]})
        );
    }

    #[test]
    fn json_is_yaml() {
        let node = parse("{\"x\": [1, 2.5, null, \"y\"]}").unwrap();
        assert_eq!(
            node.to_json(),
            serde_json::json!({"x": [1, 2.5, null, "y"]})
        );
    }

    #[test]
    fn errors_have_positions() {
        let error = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(error.position.is_some(), "{error:?}");
        let error = parse("a: 1\na: 2\n").unwrap_err();
        assert!(error.message.contains("duplicate"), "{error:?}");
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut previous = 'a';
        for name in 'b'..='z' {
            bomb.push_str(&format!(
                "{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
            ));
            previous = name;
        }
        assert!(parse(&bomb).is_err());
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(&deep).is_err());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&deep).is_ok());
    }
}
