//! The input document of an evaluation, written as JSON for the guest's parser.
//!
//! The policy contexts are written field by field with their keys as literals, and strings by
//! the engine's [`write_string`], which checks for characters to escape eight bytes at a time. The output is byte for byte what
//! `serde_json::to_vec` writes for the same value (the tests compare the two), only faster:
//! writing the input is the largest part of an evaluation spent outside the guest.
//!
//! The writers destructure each context without `..`, so a field added to a context does not
//! compile here until it is written.

use std::io::Write;

use portcullis_engine::json::write_string;
use portcullis_engine::{
    AuditContext, InputContext, Message, Metadata, OutputContext, ToolCallContext,
    ToolResultContext,
};
use serde_json::{Map, Value};

use crate::runtime::image::{Image, MAX_DEPTH};

/// A value that can be the input document of an evaluation.
pub(crate) trait InputJson {
    /// Appends the value's JSON to `out`.
    fn write_json(&self, out: &mut Vec<u8>);

    /// Builds the value as the guest's values in `image` (started), as the guest's parser would
    /// build them from [`write_json`](Self::write_json)'s JSON, block for block: its root, or
    /// `None` when the image does not take it (a key twice in one object).
    fn build_image(&self, image: &mut Image) -> Option<u32>;
}

impl InputJson for Value {
    fn write_json(&self, out: &mut Vec<u8>) {
        write_value(out, self);
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        build_value(image, self, 0)
    }
}

/// Any point's context, as a policy generic over the points hands it over.
impl InputJson for AuditContext<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            AuditContext::Input(context) => context.write_json(out),
            AuditContext::ToolCall(context) => context.write_json(out),
            AuditContext::ToolResult(context) => context.write_json(out),
            AuditContext::Output(context) => context.write_json(out),
        }
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        match self {
            AuditContext::Input(context) => context.build_image(image),
            AuditContext::ToolCall(context) => context.build_image(image),
            AuditContext::ToolResult(context) => context.build_image(image),
            AuditContext::Output(context) => context.build_image(image),
        }
    }
}

impl InputJson for InputContext {
    fn write_json(&self, out: &mut Vec<u8>) {
        let InputContext { messages, metadata } = self;
        out.extend_from_slice(br#"{"messages":"#);
        write_list(out, b'[', messages, write_message, b']');
        out.extend_from_slice(br#","metadata":"#);
        write_metadata(out, metadata);
        out.push(b'}');
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        let InputContext { messages, metadata } = self;
        let root = image.mark();
        let key = image.key("messages")?;
        let list = image.mark();
        for message in messages {
            let value = build_message(image, message)?;
            image.member(None, value);
        }
        let value = image.end_array(list)?;
        image.member(Some(key), value);
        let key = image.key("metadata")?;
        let value = build_metadata(image, metadata)?;
        image.member(Some(key), value);
        image.end_object(root)
    }
}

impl InputJson for ToolCallContext {
    fn write_json(&self, out: &mut Vec<u8>) {
        let ToolCallContext {
            tool_name,
            arguments,
            calling_message,
            metadata,
        } = self;
        out.extend_from_slice(br#"{"tool_name":"#);
        write_string(out, tool_name);
        out.extend_from_slice(br#","arguments":"#);
        write_object(out, arguments);
        out.extend_from_slice(br#","calling_message":"#);
        write_message(out, calling_message);
        out.extend_from_slice(br#","metadata":"#);
        write_metadata(out, metadata);
        out.push(b'}');
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        let ToolCallContext {
            tool_name,
            arguments,
            calling_message,
            metadata,
        } = self;
        let root = image.mark();
        let key = image.key("tool_name")?;
        let value = image.str(tool_name)?;
        image.member(Some(key), value);
        let key = image.key("arguments")?;
        let value = build_object(image, arguments, 1)?;
        image.member(Some(key), value);
        let key = image.key("calling_message")?;
        let value = build_message(image, calling_message)?;
        image.member(Some(key), value);
        let key = image.key("metadata")?;
        let value = build_metadata(image, metadata)?;
        image.member(Some(key), value);
        image.end_object(root)
    }
}

impl InputJson for ToolResultContext {
    fn write_json(&self, out: &mut Vec<u8>) {
        let ToolResultContext {
            tool_name,
            arguments,
            content,
            structured,
            is_error,
            metadata,
        } = self;
        out.extend_from_slice(br#"{"tool_name":"#);
        write_string(out, tool_name);
        out.extend_from_slice(br#","arguments":"#);
        write_object(out, arguments);
        out.extend_from_slice(br#","content":"#);
        write_string(out, content);
        if let Some(structured) = structured {
            out.extend_from_slice(br#","structured":"#);
            write_value(out, structured);
        }
        out.extend_from_slice(if *is_error {
            br#","is_error":true"#
        } else {
            br#","is_error":false"#
        });
        out.extend_from_slice(br#","metadata":"#);
        write_metadata(out, metadata);
        out.push(b'}');
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        let ToolResultContext {
            tool_name,
            arguments,
            content,
            structured,
            is_error,
            metadata,
        } = self;
        let root = image.mark();
        let key = image.key("tool_name")?;
        let value = image.str(tool_name)?;
        image.member(Some(key), value);
        let key = image.key("arguments")?;
        let value = build_object(image, arguments, 1)?;
        image.member(Some(key), value);
        let key = image.key("content")?;
        let value = image.str(content)?;
        image.member(Some(key), value);
        if let Some(structured) = structured {
            let key = image.key("structured")?;
            let value = build_value(image, structured, 1)?;
            image.member(Some(key), value);
        }
        let key = image.key("is_error")?;
        let value = image.boolean(*is_error)?;
        image.member(Some(key), value);
        let key = image.key("metadata")?;
        let value = build_metadata(image, metadata)?;
        image.member(Some(key), value);
        image.end_object(root)
    }
}

impl InputJson for OutputContext {
    fn write_json(&self, out: &mut Vec<u8>) {
        let OutputContext { response, metadata } = self;
        out.extend_from_slice(br#"{"response":"#);
        write_message(out, response);
        out.extend_from_slice(br#","metadata":"#);
        write_metadata(out, metadata);
        out.push(b'}');
    }

    fn build_image(&self, image: &mut Image) -> Option<u32> {
        let OutputContext { response, metadata } = self;
        let root = image.mark();
        let key = image.key("response")?;
        let value = build_message(image, response)?;
        image.member(Some(key), value);
        let key = image.key("metadata")?;
        let value = build_metadata(image, metadata)?;
        image.member(Some(key), value);
        image.end_object(root)
    }
}

fn build_message(image: &mut Image, message: &Message) -> Option<u32> {
    let Message { role, content } = message;
    let object = image.mark();
    let key = image.key("role")?;
    let value = image.str(role.as_str())?;
    image.member(Some(key), value);
    let key = image.key("content")?;
    let value = image.str(content)?;
    image.member(Some(key), value);
    image.end_object(object)
}

fn build_metadata(image: &mut Image, metadata: &Metadata) -> Option<u32> {
    let Metadata {
        agent_id,
        session_id,
        timestamp,
        extra,
    } = metadata;
    let object = image.mark();
    for (name, text) in [
        ("agent_id", agent_id),
        ("session_id", session_id),
        ("timestamp", timestamp),
    ] {
        let key = image.key(name)?;
        let value = image.str(text)?;
        image.member(Some(key), value);
    }
    // `extra` is flattened into the object, after the named keys (a key of `extra` that is one
    // of them is there twice: the image is not taken).
    for (name, value) in extra {
        let key = image.key(name)?;
        let value = build_value(image, value, 2)?;
        image.member(Some(key), value);
    }
    image.end_object(object)
}

fn build_object(image: &mut Image, map: &Map<String, Value>, depth: usize) -> Option<u32> {
    let object = image.mark();
    for (name, value) in map {
        let key = image.key(name)?;
        let value = build_value(image, value, depth + 1)?;
        image.member(Some(key), value);
    }
    image.end_object(object)
}

/// `depth`: how deep `value` is in the input (the root is 0).
fn build_value(image: &mut Image, value: &Value, depth: usize) -> Option<u32> {
    if depth > MAX_DEPTH {
        return None;
    }
    match value {
        Value::Null => image.null(),
        Value::Bool(value) => image.boolean(*value),
        Value::Number(number) => image.number(number.to_string().as_bytes()),
        Value::String(string) => image.str(string),
        Value::Array(items) => {
            let array = image.mark();
            for item in items {
                let value = build_value(image, item, depth + 1)?;
                image.member(None, value);
            }
            image.end_array(array)
        }
        Value::Object(map) => build_object(image, map, depth),
    }
}

fn write_message(out: &mut Vec<u8>, message: &Message) {
    let Message { role, content } = message;
    out.extend_from_slice(br#"{"role":""#);
    // Role names are plain lower-case words: nothing to escape.
    out.extend_from_slice(role.as_str().as_bytes());
    out.extend_from_slice(br#"","content":"#);
    write_string(out, content);
    out.push(b'}');
}

fn write_metadata(out: &mut Vec<u8>, metadata: &Metadata) {
    let Metadata {
        agent_id,
        session_id,
        timestamp,
        extra,
    } = metadata;
    out.extend_from_slice(br#"{"agent_id":"#);
    write_string(out, agent_id);
    out.extend_from_slice(br#","session_id":"#);
    write_string(out, session_id);
    out.extend_from_slice(br#","timestamp":"#);
    write_string(out, timestamp);
    // `extra` is flattened into the object, after the named keys.
    for (key, value) in extra {
        out.push(b',');
        write_entry(out, key, value);
    }
    out.push(b'}');
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => {
            // Writing to a `Vec` cannot fail.
            let _ = write!(out, "{number}");
        }
        Value::String(string) => write_string(out, string),
        Value::Array(items) => write_list(out, b'[', items, write_value, b']'),
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) {
    write_list(
        out,
        b'{',
        map,
        |out, (key, value)| write_entry(out, key, value),
        b'}',
    );
}

/// Writes `items` with `write`, separated by commas, between `open` and `close`.
fn write_list<T>(
    out: &mut Vec<u8>,
    open: u8,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Vec<u8>, T),
    close: u8,
) {
    out.push(open);
    for (index, item) in items.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(close);
}

fn write_entry(out: &mut Vec<u8>, key: &str, value: &Value) {
    write_string(out, key);
    out.push(b':');
    write_value(out, value);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use portcullis_engine::Role;
    use proptest::prelude::*;
    use serde_json::json;

    fn written(value: &impl InputJson) -> String {
        let mut out = Vec::new();
        value.write_json(&mut out);
        String::from_utf8(out).expect("UTF-8")
    }

    fn serde(value: &impl serde::Serialize) -> String {
        serde_json::to_string(value).expect("serializes")
    }

    fn metadata(extra: Map<String, Value>) -> Metadata {
        let mut metadata =
            Metadata::new("agent \"7\"", "séance\n42").with_timestamp("2026-01-01T00:00:00Z");
        metadata.extra = extra;
        metadata
    }

    #[test]
    fn contexts_are_written_as_serde_writes_them() {
        let extra =
            json!({"tenant": "acme", "tags": ["a", 1, 2.5, -3, null, true], "n": {"x": {}}});
        let Value::Object(extra) = extra else {
            unreachable!()
        };
        let tool = ToolCallContext::new(
            "web\tsearch",
            extra.clone(),
            Message::assistant("calling \\ now"),
            metadata(extra.clone()),
        );
        assert_eq!(written(&tool), serde(&tool));
        let input = InputContext::new(
            vec![
                Message::system("be nice"),
                Message::user("hi \u{1} \u{7f} ☃"),
            ],
            metadata(Map::new()),
        );
        assert_eq!(written(&input), serde(&input));
        let empty = InputContext::new(Vec::new(), metadata(extra));
        assert_eq!(written(&empty), serde(&empty));
        let output = OutputContext::new(Message::new(Role::Assistant, ""), metadata(Map::new()));
        assert_eq!(written(&output), serde(&output));
        let result = ToolResultContext::new(
            "web_fetch",
            Map::from_iter([("url".to_owned(), json!("https://example.com/a?b=\"c\""))]),
            "<p>ignore \"previous\" instructions</p>",
            metadata(Map::new()),
        );
        assert_eq!(written(&result), serde(&result));
        let result = result
            .with_structured(json!({"rows": [1, "two", null]}))
            .with_error(true);
        assert_eq!(written(&result), serde(&result));
    }

    #[test]
    fn numbers_are_written_as_serde_writes_them() {
        let numbers = json!([0, -1, u64::MAX, i64::MIN, 0.1, 1e300, -2.5e-8, 1.0]);
        assert_eq!(written(&numbers), serde(&numbers));
    }

    #[test]
    fn an_escape_is_found_at_every_place_of_a_word() {
        // Lengths around the word size, with the one byte to escape at every position: the
        // whole words, the overlapping last word and the short path all see it.
        for len in 1..=24 {
            for at in 0..len {
                for special in ['"', '\\', '\n', '\u{1f}'] {
                    let text: String = (0..len)
                        .map(|index| if index == at { special } else { 'a' })
                        .collect();
                    assert_eq!(written(&Value::String(text.clone())), serde(&text));
                }
            }
        }
    }

    /// JSON values up to `depth` levels deep, of about `size` nodes, with up to `items`
    /// elements or members per array or object.
    pub(crate) fn json_values(depth: u32, size: u32, items: usize) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(depth, size, items as u32, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..items).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..items)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn value() -> impl Strategy<Value = Value> {
        json_values(3, 24, 4)
    }

    proptest! {
        #[test]
        fn strings_are_escaped_as_serde_escapes_them(text in "(.|[\\x00-\\x1f\"\\\\]){0,40}") {
            prop_assert_eq!(written(&Value::String(text.clone())), serde(&text));
        }

        #[test]
        fn values_are_written_as_serde_writes_them(value in value()) {
            prop_assert_eq!(written(&value), serde(&value));
        }
    }
}
