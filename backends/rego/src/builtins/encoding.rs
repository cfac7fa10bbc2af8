//! Encodings: `hex.*`, `base64url.encode_no_pad`, `urlquery.*`, `json.is_valid`, and the
//! `yaml.*` builtins over the `yaml` module.
//!
//! As in OPA, decoded bytes that are not UTF-8 become U+FFFD, and `json.is_valid` checks the
//! syntax only, as Go's `json.Valid`: `1e400` and a lone surrogate escape are valid JSON.

use std::fmt::Write as _;

use serde_json::Value;

use super::{
    BuiltinContext, BuiltinError, HostBuiltin, Outcome, arg, hex, string, type_name, yaml,
};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "json.is_valid",
        func: |args, context| {
            Ok(Value::Bool(match arg(args, 0)? {
                Value::String(text) => json_is_valid(text.as_bytes(), context)?,
                _ => false,
            }))
        },
    },
    HostBuiltin {
        name: "hex.encode",
        func: |args, context| {
            let text = string(args, 0)?;
            context.charge(text.len().saturating_mul(2), "hex.encode's output")?;
            Ok(Value::from(hex(text.as_bytes())))
        },
    },
    HostBuiltin {
        name: "hex.decode",
        func: hex_decode,
    },
    HostBuiltin {
        name: "base64url.encode_no_pad",
        func: |args, context| {
            let text = string(args, 0)?;
            context.charge(
                text.len().div_ceil(3) * 4,
                "base64url.encode_no_pad's output",
            )?;
            Ok(Value::from(base64url_no_pad(text.as_bytes())))
        },
    },
    HostBuiltin {
        name: "urlquery.encode",
        func: |args, context| {
            let text = string(args, 0)?;
            context.charge(text.len().saturating_mul(3), "urlquery.encode's output")?;
            Ok(Value::from(query_escape(text)))
        },
    },
    HostBuiltin {
        name: "urlquery.decode",
        func: |args, _| Ok(Value::from(query_unescape(string(args, 0)?)?)),
    },
    HostBuiltin {
        name: "urlquery.encode_object",
        func: urlquery_encode_object,
    },
    HostBuiltin {
        name: "urlquery.decode_object",
        func: urlquery_decode_object,
    },
    HostBuiltin {
        name: "json.patch",
        func: json_patch,
    },
    HostBuiltin {
        name: "json.verify_schema",
        func: |args, _| {
            Ok(match compile_schema(arg(args, 0)?) {
                Ok(_) => Value::from(vec![Value::Bool(true), Value::Null]),
                Err(message) => Value::from(vec![Value::Bool(false), Value::from(message)]),
            })
        },
    },
    HostBuiltin {
        name: "json.match_schema",
        func: match_schema,
    },
    HostBuiltin {
        name: "yaml.is_valid",
        func: |args, context| {
            let Value::String(text) = arg(args, 0)? else {
                return Ok(Value::Bool(false));
            };
            match yaml::unmarshal(text, context) {
                Ok(_) => Ok(Value::Bool(true)),
                Err(BuiltinError::Failed(_) | BuiltinError::Undefined) => Ok(Value::Bool(false)),
                Err(error) => Err(error),
            }
        },
    },
    HostBuiltin {
        name: "yaml.unmarshal",
        func: |args, context| yaml::unmarshal(string(args, 0)?, context),
    },
    HostBuiltin {
        name: "yaml.marshal",
        func: |args, context| Ok(Value::from(yaml::marshal(arg(args, 0)?, context)?)),
    },
];

/// Where a schema is put in the validator: a name, never fetched (a `$ref` to anything else
/// fails, as nothing outside the schema is loaded).
const SCHEMA_URL: &str = "urn:portcullis:schema";

/// A JSON Schema (an object, a boolean, or its JSON text) compiled, draft 7 unless its
/// `$schema` says otherwise (the `boon` crate).
fn compile_schema(schema: &Value) -> Result<(boon::Schemas, boon::SchemaIndex), String> {
    let schema = match schema {
        Value::String(text) => serde_json::from_str(text).map_err(|error| error.to_string())?,
        other => other.clone(),
    };
    let mut compiler = boon::Compiler::new();
    // A loader for no scheme at all: a `$ref` outside the schema (a file, a URL) never loads.
    compiler.use_loader(Box::new(boon::SchemeUrlLoader::new()));
    compiler.set_default_draft(boon::Draft::V7);
    compiler
        .add_resource(SCHEMA_URL, schema)
        .map_err(|error| error.to_string())?;
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(SCHEMA_URL, &mut schemas)
        .map_err(|error| format!("{error:#}"))?;
    Ok((schemas, index))
}

/// `[true, []]` when `document` matches the schema, else `[false, errors]`, each error an
/// object with the `field` (dotted, `(root)` for the document), the failing keyword as `type`,
/// a `desc`ription and the whole `error`, as OPA lays them out.
fn match_schema(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let document = arg(args, 0)?;
    let (schemas, index) = compile_schema(arg(args, 1)?).map_err(BuiltinError::Failed)?;
    let Err(error) = schemas.validate(document, index) else {
        return Ok(Value::from(vec![
            Value::Bool(true),
            Value::Array(Vec::new()),
        ]));
    };
    let mut errors = Vec::new();
    let mut pending = vec![&error];
    while let Some(error) = pending.pop() {
        context.check_time()?;
        if !error.causes.is_empty() {
            pending.extend(error.causes.iter().rev());
            continue;
        }
        let field = if error.instance_location.tokens.is_empty() {
            "(root)".to_owned()
        } else {
            error
                .instance_location
                .tokens
                .iter()
                .map(|token| match token {
                    boon::InstanceToken::Prop(name) => name.to_string(),
                    boon::InstanceToken::Item(index) => index.to_string(),
                })
                .collect::<Vec<_>>()
                .join(".")
        };
        let kind = error
            .kind
            .keyword_path()
            .map_or("schema", |path| path.keyword);
        let desc = error.kind.to_string();
        context.charge(
            field.len() * 2 + desc.len() * 2 + 4 * super::VALUE_COST,
            "json.match_schema's errors",
        )?;
        errors.push(serde_json::json!({
            "error": format!("{field}: {desc}"),
            "type": kind,
            "field": field,
            "desc": desc,
        }));
    }
    Ok(Value::from(vec![Value::Bool(false), Value::from(errors)]))
}

/// RFC 6902 JSON Patch (the `json-patch` crate), with OPA's paths: a JSON pointer string or an
/// array of segments. A patch that does not apply (a failed `test`, a missing path) is an error.
fn json_patch(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let mut target = arg(args, 0)?.clone();
    let Value::Array(operations) = arg(args, 1)? else {
        return Err(BuiltinError::Failed(format!(
            "operand 2 must be an array, got {}",
            type_name(arg(args, 1)?)
        )));
    };
    let mut patch = Vec::with_capacity(operations.len());
    for operation in operations {
        context.check_time()?;
        let Value::Object(fields) = operation else {
            return Err("each patch must be an object".into());
        };
        let mut fields = fields.clone();
        for key in ["path", "from"] {
            if let Some(Value::Array(segments)) = fields.get(key) {
                let pointer = pointer_of(segments)?;
                fields.insert(key.to_owned(), Value::from(pointer));
            }
        }
        patch.push(Value::Object(fields));
    }
    // Copies can double the document: charge the document once per operation.
    let size = serde_json::to_vec(&target).map_or(0, |json| json.len());
    context.charge(
        size.saturating_mul(operations.len().max(1))
            .min(usize::MAX / 2),
        "json.patch's document",
    )?;
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(patch))
        .map_err(|error| BuiltinError::Failed(format!("invalid patch: {error}")))?;
    json_patch::patch(&mut target, &patch)
        .map_err(|error| BuiltinError::Failed(error.to_string()))?;
    Ok(target)
}

/// An array of path segments as a JSON pointer (`["a", 0]` is `/a/0`).
fn pointer_of(segments: &[Value]) -> Result<String, BuiltinError> {
    let mut pointer = String::new();
    for segment in segments {
        pointer.push('/');
        match segment {
            Value::String(s) => pointer.push_str(&s.replace('~', "~0").replace('/', "~1")),
            Value::Number(n) => pointer.push_str(&n.to_string()),
            other => {
                return Err(BuiltinError::Failed(format!(
                    "a path segment must be a string or a number, got {}",
                    type_name(other)
                )));
            }
        }
    }
    Ok(pointer)
}

/// Go's `hex.DecodeString`, the bytes read as UTF-8 (U+FFFD for what is not).
fn hex_decode(args: &[Value], _: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?.as_bytes();
    let nibble = |b: u8| char::from(b).to_digit(16);
    let invalid = |b: u8| {
        BuiltinError::Failed(format!(
            "encoding/hex: invalid byte: U+{:04X} {:?}",
            u32::from(b),
            char::from(b)
        ))
    };
    let mut bytes = Vec::with_capacity(text.len() / 2);
    for pair in text.chunks(2) {
        let high = nibble(pair[0]).ok_or_else(|| invalid(pair[0]))?;
        let Some(&low) = pair.get(1) else {
            return Err("encoding/hex: odd length hex string".into());
        };
        let low = nibble(low).ok_or_else(|| invalid(low))?;
        bytes.push(u8::try_from(high * 16 + low).unwrap_or(0));
    }
    Ok(Value::from(String::from_utf8_lossy(&bytes).into_owned()))
}

fn base64url_no_pad(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// Go's `url.QueryUnescape`, the bytes read as UTF-8 (U+FFFD for what is not).
pub(crate) fn query_unescape(text: &str) -> Result<String, BuiltinError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let escape = bytes.get(i + 1..i + 3);
                let value = escape.and_then(|hex| {
                    let high = char::from(hex[0]).to_digit(16)?;
                    let low = char::from(hex[1]).to_digit(16)?;
                    u8::try_from(high * 16 + low).ok()
                });
                let Some(value) = value else {
                    let end = (i + 3).min(bytes.len());
                    let shown = String::from_utf8_lossy(&bytes[i..end]);
                    return Err(BuiltinError::Failed(format!(
                        "invalid URL escape {shown:?}"
                    )));
                };
                out.push(value);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `url.Values.Encode`: keys sorted, each key's values in their order.
fn urlquery_encode_object(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let Value::Object(map) = arg(args, 0)? else {
        return Err(BuiltinError::Failed(format!(
            "operand 1 must be an object, got {}",
            type_name(arg(args, 0)?)
        )));
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let mut out = String::new();
    for key in keys {
        let values: Vec<&str> = match &map[key] {
            Value::String(value) => vec![value.as_str()],
            Value::Array(values) => values
                .iter()
                .map(|value| {
                    value.as_str().ok_or_else(|| {
                        BuiltinError::Failed(format!(
                            "the values of {key:?} must be strings, got {}",
                            type_name(value)
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(BuiltinError::Failed(format!(
                    "the value of {key:?} must be a string or an array of strings, got {}",
                    type_name(other)
                )));
            }
        };
        for value in values {
            context.check_time()?;
            context.charge(
                (key.len() + value.len()).saturating_mul(3) + 2,
                "urlquery.encode_object's output",
            )?;
            if !out.is_empty() {
                out.push('&');
            }
            out.push_str(&query_escape(key));
            out.push('=');
            out.push_str(&query_escape(value));
        }
    }
    Ok(Value::from(out))
}

/// Go's `url.ParseQuery`: each key to the array of its values, in order.
fn urlquery_decode_object(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?;
    context.charge(
        text.len().saturating_mul(2),
        "urlquery.decode_object's output",
    )?;
    let mut object = serde_json::Map::new();
    for pair in text.split('&') {
        context.check_time()?;
        if pair.is_empty() {
            continue;
        }
        if pair.contains(';') {
            return Err("invalid semicolon separator in query".into());
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = query_unescape(key)?;
        let value = query_unescape(value)?;
        context.charge(super::VALUE_COST * 2, "urlquery.decode_object's output")?;
        if let Value::Array(values) = object
            .entry(key)
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            values.push(Value::from(value));
        }
    }
    Ok(Value::Object(object))
}

/// Go's JSON nesting limit.
const MAX_DEPTH: usize = 10_000;

/// Go's `json.Valid`: the syntax of one JSON value, iteratively (no recursion on nesting).
pub(crate) fn json_is_valid(
    text: &[u8],
    context: &mut BuiltinContext,
) -> Result<bool, BuiltinError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Container {
        Array,
        Object,
    }
    let mut stack: Vec<Container> = Vec::new();
    let mut i = 0;
    let skip_space = |i: &mut usize| {
        while text
            .get(*i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            *i += 1;
        }
    };
    // Each turn reads one value, then the separators after it.
    'value: loop {
        context.check_time()?;
        skip_space(&mut i);
        match text.get(i) {
            Some(b'{' | b'[') if stack.len() >= MAX_DEPTH => return Ok(false),
            Some(b'{') => {
                i += 1;
                skip_space(&mut i);
                if text.get(i) == Some(&b'}') {
                    i += 1;
                } else {
                    stack.push(Container::Object);
                    if !read_key(text, &mut i, &skip_space) {
                        return Ok(false);
                    }
                    continue 'value;
                }
            }
            Some(b'[') => {
                i += 1;
                skip_space(&mut i);
                if text.get(i) == Some(&b']') {
                    i += 1;
                } else {
                    stack.push(Container::Array);
                    continue 'value;
                }
            }
            Some(b'"') => {
                if !read_string(text, &mut i) {
                    return Ok(false);
                }
            }
            Some(b't') if text[i..].starts_with(b"true") => i += 4,
            Some(b'f') if text[i..].starts_with(b"false") => i += 5,
            Some(b'n') if text[i..].starts_with(b"null") => i += 4,
            Some(b'-' | b'0'..=b'9') => {
                if !read_number(text, &mut i) {
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
        // After a value: close containers, or go on to the next element.
        loop {
            skip_space(&mut i);
            let Some(&container) = stack.last() else {
                return Ok(i == text.len());
            };
            match (text.get(i), container) {
                (Some(b','), Container::Array) => {
                    i += 1;
                    continue 'value;
                }
                (Some(b','), Container::Object) => {
                    i += 1;
                    skip_space(&mut i);
                    if !read_key(text, &mut i, &skip_space) {
                        return Ok(false);
                    }
                    continue 'value;
                }
                (Some(b']'), Container::Array) | (Some(b'}'), Container::Object) => {
                    i += 1;
                    stack.pop();
                }
                _ => return Ok(false),
            }
        }
    }
}

/// A key and its colon, at `i`.
fn read_key(text: &[u8], i: &mut usize, skip_space: &impl Fn(&mut usize)) -> bool {
    if text.get(*i) != Some(&b'"') || !read_string(text, i) {
        return false;
    }
    skip_space(i);
    if text.get(*i) != Some(&b':') {
        return false;
    }
    *i += 1;
    true
}

/// A string at `i` (on its opening quote).
fn read_string(text: &[u8], i: &mut usize) -> bool {
    *i += 1;
    while let Some(&b) = text.get(*i) {
        *i += 1;
        match b {
            b'"' => return true,
            b'\\' => match text.get(*i) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => *i += 1,
                Some(b'u') => {
                    let hex = text.get(*i + 1..*i + 5);
                    if !hex.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                        return false;
                    }
                    *i += 5;
                }
                _ => return false,
            },
            0..0x20 => return false,
            _ => {}
        }
    }
    false
}

/// A number at `i`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn read_number(text: &[u8], i: &mut usize) -> bool {
    let digits = |i: &mut usize| {
        let start = *i;
        while text.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    if text.get(*i) == Some(&b'-') {
        *i += 1;
    }
    match text.get(*i) {
        Some(b'0') => *i += 1,
        Some(b'1'..=b'9') => {
            digits(i);
        }
        _ => return false,
    }
    if text.get(*i) == Some(&b'.') {
        *i += 1;
        if !digits(i) {
            return false;
        }
    }
    if matches!(text.get(*i), Some(b'e' | b'E')) {
        *i += 1;
        if matches!(text.get(*i), Some(b'+' | b'-')) {
            *i += 1;
        }
        if !digits(i) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Outcome {
        let Value::Array(args) = args else {
            unreachable!()
        };
        let builtin = TABLE.iter().find(|b| b.name == name).expect(name);
        (builtin.func)(&args, &mut BuiltinContext::default())
    }

    #[test]
    fn encoding_builtins() {
        let encoded = call("hex.encode", json!(["hi!"])).expect("hex");
        assert_eq!(call("hex.decode", json!([encoded])), Ok(json!("hi!")));
        assert_eq!(
            call("base64url.encode_no_pad", json!(["hi?>"])),
            Ok(json!("aGk_Pg"))
        );
        assert_eq!(
            call("urlquery.encode", json!(["a b&c"])),
            Ok(json!("a+b%26c"))
        );
        assert_eq!(
            call("urlquery.decode", json!(["a+b%26c"])),
            Ok(json!("a b&c"))
        );
    }

    /// Each line: what OPA v1.20 answers.
    #[test]
    fn encodings_answer_as_opa_does() {
        // Bytes that are not UTF-8 become U+FFFD.
        assert_eq!(call("hex.decode", json!(["ff41"])), Ok(json!("\u{FFFD}A")));
        assert_eq!(
            call("urlquery.decode", json!(["%FF%41"])),
            Ok(json!("\u{FFFD}A"))
        );
        assert_eq!(
            call("hex.decode", json!(["zz"])),
            Err(BuiltinError::Failed(
                "encoding/hex: invalid byte: U+007A 'z'".into()
            ))
        );
        assert!(call("hex.decode", json!(["abc"])).is_err());
        assert_eq!(
            call("urlquery.decode", json!(["%zz"])),
            Err(BuiltinError::Failed("invalid URL escape \"%zz\"".into()))
        );
        // Keys sorted, values in their order.
        assert_eq!(
            call(
                "urlquery.encode_object",
                json!([{"b": ["2", "1"], "a": "x y", "c": []}])
            ),
            Ok(json!("a=x+y&b=2&b=1"))
        );
        assert!(call("urlquery.encode_object", json!([{"a": 1}])).is_err());
    }

    #[test]
    fn query_objects_decode_as_go_does() {
        assert_eq!(
            call(
                "urlquery.decode_object",
                json!(["a=1&b=x+y&a=2&c&&d=%C3%A9"])
            ),
            Ok(json!({"a": ["1", "2"], "b": ["x y"], "c": [""], "d": ["é"]}))
        );
        assert!(call("urlquery.decode_object", json!(["a=1;b=2"])).is_err());
        assert!(call("urlquery.decode_object", json!(["a=%zz"])).is_err());
    }

    /// The examples of OPA's documentation.
    #[test]
    fn schemas_verify_and_match_as_opa_does() -> Result<(), BuiltinError> {
        let schema = json!({
            "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["id"]
        });
        assert_eq!(
            call("json.verify_schema", json!([schema])),
            Ok(json!([true, null]))
        );
        assert_eq!(
            call("json.verify_schema", json!([schema.to_string()])),
            Ok(json!([true, null]))
        );
        let refused = call("json.verify_schema", json!([{"type": 5}])).expect("answers");
        assert_eq!(refused[0], json!(false));
        assert!(refused[1].is_string());
        assert_eq!(
            call(
                "json.match_schema",
                json!([{"id": 5, "tags": ["a"]}, schema])
            ),
            Ok(json!([true, []]))
        );
        let mismatch = call(
            "json.match_schema",
            json!([{"id": "x", "tags": [1]}, schema]),
        )
        .expect("answers");
        assert_eq!(mismatch[0], json!(false));
        let fields: Vec<&str> = mismatch[1]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|error| error["field"].as_str())
            .collect();
        assert_eq!(fields, ["id", "tags.0"]);
        assert_eq!(mismatch[1][0]["type"], json!("type"));
        let missing = call("json.match_schema", json!([{}, schema])).expect("answers");
        assert_eq!(missing[1][0]["field"], json!("(root)"));
        assert_eq!(missing[1][0]["type"], json!("required"));
        // Nothing outside the schema is fetched.
        let remote = json!({"$ref": "https://example.com/schema.json"});
        assert_eq!(
            call("json.verify_schema", json!([remote]))?[0],
            json!(false)
        );
        Ok(())
    }

    /// The examples of OPA's documentation.
    #[test]
    fn yaml_answers_as_opa_does() {
        assert_eq!(
            call(
                "yaml.unmarshal",
                json!(["foo:\n- 1\n- two\nbar: {a: true}\n"])
            ),
            Ok(json!({"foo": [1, "two"], "bar": {"a": true}}))
        );
        assert_eq!(
            call("yaml.marshal", json!([{"foo": [1, 2, 3]}])),
            Ok(json!("foo:\n- 1\n- 2\n- 3\n"))
        );
        assert_eq!(call("yaml.is_valid", json!(["a: [1, 2"])), Ok(json!(false)));
        assert_eq!(call("yaml.is_valid", json!(["a: 1"])), Ok(json!(true)));
        assert_eq!(call("yaml.is_valid", json!([3])), Ok(json!(false)));
        assert!(call("yaml.unmarshal", json!(["a: [1, 2"])).is_err());
        // A billion laughs stops at the parser's bounds.
        let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 9].join(", ");
            laughs.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        assert!(call("yaml.unmarshal", json!([laughs])).is_err());
    }

    /// The examples of OPA's documentation and of RFC 6902.
    #[test]
    fn patches_apply_as_opa_does() {
        let patch = |target: Value, patches: Value| call("json.patch", json!([target, patches]));
        assert_eq!(
            patch(
                json!({"a": {"foo": 1}}),
                json!([{"op": "add", "path": "/a/bar", "value": 2}])
            ),
            Ok(json!({"a": {"foo": 1, "bar": 2}}))
        );
        assert_eq!(
            patch(
                json!({"a": {"foo": 1}}),
                json!([{"op": "add", "path": ["a", "bar"], "value": 2}])
            ),
            Ok(json!({"a": {"foo": 1, "bar": 2}}))
        );
        assert_eq!(
            patch(
                json!({"a": [1, 2], "b/c": 3}),
                json!([
                    {"op": "add", "path": "/a/-", "value": 3},
                    {"op": "remove", "path": ["a", 0]},
                    {"op": "move", "from": "/b~1c", "path": "/d"},
                    {"op": "copy", "from": "/d", "path": "/e"},
                    {"op": "replace", "path": "/e", "value": "x"},
                    {"op": "test", "path": "/d", "value": 3}
                ])
            ),
            Ok(json!({"a": [2, 3], "d": 3, "e": "x"}))
        );
        assert!(
            patch(
                json!({"a": 1}),
                json!([{"op": "test", "path": "/a", "value": 2}])
            )
            .is_err()
        );
        assert!(patch(json!({"a": 1}), json!([{"op": "remove", "path": "/b"}])).is_err());
        assert!(patch(json!({"a": 1}), json!([{"op": "frobnicate", "path": "/a"}])).is_err());
    }

    #[test]
    fn json_validity_is_syntax_only() {
        let valid = |text: &str| call("json.is_valid", json!([text]));
        for text in [
            "1e400",
            r#""\ud800""#,
            r#" {"a": [1, -0.5e+3, true, false, null, {}, [], "\u00e9\n"]} "#,
            "0",
        ] {
            assert_eq!(valid(text), Ok(json!(true)), "{text}");
        }
        let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
        assert_eq!(valid(&deep), Ok(json!(true)));
        let too_deep = format!("{}{}", "[".repeat(10_001), "]".repeat(10_001));
        assert_eq!(valid(&too_deep), Ok(json!(false)));
        for text in [
            "",
            "01",
            "1.",
            "-",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "\"\t\"",
            "[1] 2",
            "nul",
            "{1:2}",
            r#""\x""#,
            "[",
            "+1",
            ".5",
        ] {
            assert_eq!(valid(text), Ok(json!(false)), "{text}");
        }
        assert_eq!(call("json.is_valid", json!([3])), Ok(json!(false)));
    }
}
