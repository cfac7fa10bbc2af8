//! YAML as OPA reads and writes it: `yaml.unmarshal`, `yaml.is_valid`, `yaml.marshal`.
//!
//! OPA goes through `sigs.k8s.io/yaml` over go-yaml v2, which speaks YAML 1.1. So, on the way
//! in, a plain scalar is typed by YAML 1.1's rules, not 1.2's: `yes`, `no`, `on`, `off`, `y` and
//! `n` (in three casings) are booleans, `0123` is octal, `1_000` is a thousand, `0b101` is
//! binary, and timestamps stay strings; quoted scalars are always strings. Keys that are not
//! strings become their text (`1: a` reads as `{"1": "a"}`), `<<` merges mappings, aliases are
//! expanded (with go-yaml's bound on aliasing), and only the first document counts. On the way
//! out, keys are sorted as go-yaml sorts them (runs of digits by value), and a string that YAML
//! 1.1 would read as something else (`"yes"`, `"0123"`, `"1:30"`, a date) is double-quoted;
//! multi-line strings are literal blocks and long lines fold at 80 columns, as go-yaml's
//! emitter does.

use base64::Engine as _;
use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

use super::sprintf::format_float;
use super::{BuiltinContext, BuiltinError, Outcome, VALUE_COST};

// ---------------------------------------------------------------------------------------------
// Reading

const TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// A node of the first document, as go-yaml's parser builds it.
#[derive(Debug)]
enum Node {
    Scalar {
        text: String,
        /// Written without quotes or block indicators and without a tag: typed by resolution.
        plain: bool,
        /// Its tag, in full (`tag:yaml.org,2002:str`).
        tag: Option<String>,
    },
    Sequence(Vec<usize>),
    /// Keys and values, alternating.
    Mapping(Vec<usize>),
    /// An alias of the node at this index.
    Alias(usize),
}

/// The first document of `text` as JSON, as OPA's `yaml.unmarshal` reads it.
pub(super) fn unmarshal(text: &str, context: &mut BuiltinContext) -> Outcome {
    let nodes = parse(text, context)?;
    if nodes.is_empty() {
        return Ok(Value::Null);
    }
    let mut decoder = Decoder {
        nodes: &nodes,
        context,
        decoded: 0,
        aliased: 0,
        alias_depth: 0,
        expanding: vec![false; nodes.len()],
    };
    // go-yaml counts the document node too.
    decoder.decoded = 1;
    decoder.value(0)
}

/// The nodes of the first document (the root first), or none for an empty stream.
fn parse(text: &str, context: &mut BuiltinContext) -> Result<Vec<Node>, BuiltinError> {
    let failed = |message: String| BuiltinError::Failed(format!("yaml: {message}"));
    let mut nodes: Vec<Node> = Vec::new();
    // Anchor ids to the nodes they name.
    let mut anchors: Vec<(usize, usize)> = Vec::new();
    // Open sequences and mappings.
    let mut open: Vec<usize> = Vec::new();
    for event in Parser::new_from_str(text) {
        context.check_time()?;
        let (event, _) = event.map_err(|error| failed(error.to_string()))?;
        let (node, anchor) = match event {
            Event::DocumentEnd => break,
            Event::Scalar(text, style, anchor, tag) => {
                context.charge(VALUE_COST + text.len(), "yaml.unmarshal's document")?;
                let tag = tag.map(|tag| format!("{}{}", tag.handle(), tag.suffix()));
                let plain = style == ScalarStyle::Plain && tag.is_none();
                (
                    Node::Scalar {
                        text: text.into_owned(),
                        plain,
                        tag,
                    },
                    anchor,
                )
            }
            Event::SequenceStart(_, anchor, _) => (Node::Sequence(Vec::new()), anchor),
            Event::MappingStart(_, anchor, _) => (Node::Mapping(Vec::new()), anchor),
            Event::Alias(anchor) => {
                let target = anchors
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == anchor)
                    .map(|(_, node)| *node)
                    .ok_or_else(|| failed("unknown anchor referenced".to_owned()))?;
                (Node::Alias(target), 0)
            }
            Event::SequenceEnd | Event::MappingEnd => {
                open.pop();
                continue;
            }
            _ => continue,
        };
        context.charge(VALUE_COST, "yaml.unmarshal's document")?;
        let index = nodes.len();
        let opens = matches!(node, Node::Sequence(_) | Node::Mapping(_));
        nodes.push(node);
        if anchor != 0 {
            anchors.push((anchor, index));
        }
        if let Some(Node::Sequence(children) | Node::Mapping(children)) =
            open.last().and_then(|parent| nodes.get_mut(*parent))
        {
            children.push(index);
        }
        if opens {
            open.push(index);
        }
    }
    Ok(nodes)
}

/// What go-yaml makes of a scalar.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// A string; also a timestamp, which go-yaml leaves as its text.
    Str(String),
}

/// What a plain scalar's text resolves to under YAML 1.1, as go-yaml's `resolve` has it.
#[derive(Debug, Clone, PartialEq)]
enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Timestamp,
    Str,
}

impl Resolved {
    /// The short name of the tag, for messages.
    fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => "null",
            Resolved::Bool(_) => "bool",
            Resolved::Int(_) | Resolved::Uint(_) => "int",
            Resolved::Float(_) => "float",
            Resolved::Timestamp => "timestamp",
            Resolved::Str => "str",
        }
    }
}

/// go-yaml v2's resolution of a plain scalar.
fn resolve(text: &str) -> Resolved {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false);
        }
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        // `<<` merges as a key (see `is_merge`); as a value it is a string.
        _ => {}
    }
    match text.as_bytes().first() {
        Some(b'.') => match text.parse::<f64>() {
            Ok(float) if float.is_finite() => Resolved::Float(float),
            _ => Resolved::Str,
        },
        Some(b'0'..=b'9' | b'+' | b'-') => {
            if is_timestamp(text) {
                return Resolved::Timestamp;
            }
            let plain = text.replace('_', "");
            if let Some(int) = go_parse_int(&plain) {
                return int;
            }
            if is_yaml_float(&plain)
                && let Ok(float) = plain.parse::<f64>()
                && float.is_finite()
            {
                return Resolved::Float(float);
            }
            // go-yaml's own binary forms, tried after Go's (so `0b-1` is -1).
            if let Some(digits) = plain.strip_prefix("0b") {
                if let Ok(int) = i64::from_str_radix(digits, 2) {
                    return Resolved::Int(int);
                }
                if let Ok(uint) = u64::from_str_radix(digits, 2) {
                    return Resolved::Uint(uint);
                }
            } else if let Some(digits) = plain.strip_prefix("-0b")
                && let Ok(int) = i64::from_str_radix(&format!("-{digits}"), 2)
            {
                return Resolved::Int(int);
            }
            Resolved::Str
        }
        _ => Resolved::Str,
    }
}

/// Go's `strconv.ParseInt(text, 0, 64)`, then `ParseUint(text, 0, 64)`: a sign (for the
/// former), then `0x`, `0o`, `0b` or a bare `0` (octal) prefix, or decimal digits.
fn go_parse_int(text: &str) -> Option<Resolved> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let signed = unsigned.len() != text.len();
    let (radix, digits) = match unsigned.as_bytes() {
        [b'0', b'x' | b'X', ..] => (16, &unsigned[2..]),
        [b'0', b'o' | b'O', ..] => (8, &unsigned[2..]),
        [b'0', b'b' | b'B', ..] => (2, &unsigned[2..]),
        [b'0', _, ..] => (8, &unsigned[1..]),
        _ => (10, unsigned),
    };
    // Rust's parsers take a sign of their own; Go's take none after the prefix.
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        if magnitude <= i64::MAX as u64 + 1 {
            return Some(Resolved::Int((magnitude as i64).wrapping_neg()));
        }
        return None;
    }
    match i64::try_from(magnitude) {
        Ok(int) => Some(Resolved::Int(int)),
        // `ParseUint` takes no sign.
        Err(_) if !signed => Some(Resolved::Uint(magnitude)),
        Err(_) => None,
    }
}

/// go-yaml's float syntax: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at - start
    };
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        if digits(&mut at) == 0 {
            return false;
        }
    } else {
        if digits(&mut at) == 0 {
            return false;
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at);
        }
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'-' | b'+')) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return false;
        }
    }
    at == bytes.len()
}

/// Whether go-yaml takes `text` for a timestamp: `2006-1-2`, `2006-1-2 15:4:5.999999999`, or
/// `2006-1-2T15:4:5.999999999Z07:00` (`t` too), as Go's `time.Parse` reads those layouts.
fn is_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() < 5 || !bytes[..4].iter().all(u8::is_ascii_digit) || bytes[4] != b'-' {
        return false;
    }
    let mut at = 5;
    // One or two digits, as Go reads `1`, `2`, `15`, `4` and `5`.
    let number = |at: &mut usize| -> Option<u32> {
        let first = *bytes.get(*at).filter(|byte| byte.is_ascii_digit())?;
        *at += 1;
        let mut value = u32::from(first - b'0');
        if let Some(second) = bytes.get(*at).filter(|byte| byte.is_ascii_digit()) {
            *at += 1;
            value = value * 10 + u32::from(second - b'0');
        }
        Some(value)
    };
    let expect = |at: &mut usize, byte: u8| -> Option<()> {
        (bytes.get(*at) == Some(&byte)).then(|| *at += 1)
    };
    let date = (|| {
        let year: i16 = text[..4].parse().ok()?;
        let month = i8::try_from(number(&mut at)?).ok()?;
        expect(&mut at, b'-')?;
        let day = i8::try_from(number(&mut at)?).ok()?;
        // A real day of the calendar, as Go's `time.Parse` checks.
        jiff::civil::Date::new(year, month, day).ok()
    })();
    if date.is_none() {
        return false;
    }
    if at == bytes.len() {
        return true;
    }
    let zoned = match bytes[at] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    at += 1;
    let time = (|| {
        let hour = number(&mut at)?;
        expect(&mut at, b':')?;
        let minute = number(&mut at)?;
        expect(&mut at, b':')?;
        let second = number(&mut at)?;
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        if matches!(bytes.get(at), Some(b'.' | b','))
            && bytes.get(at + 1).is_some_and(u8::is_ascii_digit)
        {
            at += 1;
            while bytes.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
        }
        if !zoned {
            return Some(());
        }
        match bytes.get(at) {
            Some(b'Z') => {
                at += 1;
                Some(())
            }
            Some(b'+' | b'-') => {
                let zone = bytes.get(at + 1..at + 6)?;
                let digits = [zone[0], zone[1], zone[3], zone[4]];
                if zone[2] != b':' || !digits.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                let hours = u32::from(zone[0] - b'0') * 10 + u32::from(zone[1] - b'0');
                let minutes = u32::from(zone[3] - b'0') * 10 + u32::from(zone[4] - b'0');
                at += 6;
                (hours <= 24 && minutes <= 60).then_some(())
            }
            _ => None,
        }
    })();
    time.is_some() && at == bytes.len()
}

/// go-yaml's decoding of the node tree into Go values, then `sigs.k8s.io/yaml`'s into JSON.
struct Decoder<'a> {
    nodes: &'a [Node],
    context: &'a mut BuiltinContext,
    /// Nodes decoded so far, aliases counted again each time.
    decoded: usize,
    /// Of those, the ones decoded inside an alias.
    aliased: usize,
    alias_depth: usize,
    /// Aliases being expanded, by node: one met again contains itself.
    expanding: Vec<bool>,
}

/// go-yaml's bound on aliasing: the share of decoded nodes that may come from aliases.
fn allowed_alias_ratio(decoded: usize) -> f64 {
    const LOW: usize = 400_000;
    const HIGH: usize = 4_000_000;
    if decoded <= LOW {
        0.99
    } else if decoded >= HIGH {
        0.10
    } else {
        0.99 - 0.89 * ((decoded - LOW) as f64 / (HIGH - LOW) as f64)
    }
}

impl Decoder<'_> {
    fn node(&self, index: usize) -> Result<&Node, BuiltinError> {
        self.nodes
            .get(index)
            .ok_or_else(|| BuiltinError::from("yaml: a node refers to nothing"))
    }

    /// Counts one decoded node, failing as go-yaml does on excessive aliasing.
    fn count(&mut self) -> Result<(), BuiltinError> {
        self.context.check_time()?;
        self.context.charge(VALUE_COST, "yaml.unmarshal's value")?;
        self.decoded += 1;
        if self.alias_depth > 0 {
            self.aliased += 1;
        }
        if self.aliased > 100
            && self.decoded > 1000
            && self.aliased as f64 / self.decoded as f64 > allowed_alias_ratio(self.decoded)
        {
            return Err("yaml: document contains excessive aliasing".into());
        }
        Ok(())
    }

    /// Runs `decode` on the node an alias at `index` names.
    fn through_alias<T>(
        &mut self,
        index: usize,
        target: usize,
        decode: impl FnOnce(&mut Self, usize) -> Result<T, BuiltinError>,
    ) -> Result<T, BuiltinError> {
        if self.expanding.get(index).copied().unwrap_or(false) {
            return Err("yaml: anchor value contains itself".into());
        }
        if let Some(flag) = self.expanding.get_mut(index) {
            *flag = true;
        }
        self.alias_depth += 1;
        let result = decode(self, target);
        self.alias_depth -= 1;
        if let Some(flag) = self.expanding.get_mut(index) {
            *flag = false;
        }
        result
    }

    /// The Go value of the node at `index`, as JSON.
    fn value(&mut self, index: usize) -> Outcome {
        self.count()?;
        match self.node(index)? {
            Node::Alias(target) => {
                let target = *target;
                self.through_alias(index, target, Self::value)
            }
            Node::Scalar { .. } => Ok(match self.scalar(index)? {
                Scalar::Null => Value::Null,
                Scalar::Bool(b) => Value::Bool(b),
                Scalar::Int(int) => Value::from(int),
                Scalar::Uint(uint) => Value::from(uint),
                Scalar::Float(float) => json_float(float)?,
                Scalar::Str(text) => Value::String(text),
            }),
            Node::Sequence(children) => {
                let children = children.clone();
                let mut items = Vec::with_capacity(children.len());
                for child in children {
                    items.push(self.value(child)?);
                }
                Ok(Value::Array(items))
            }
            Node::Mapping(_) => {
                let mut map = Map::new();
                self.mapping_into(index, &mut map)?;
                Ok(Value::Object(map))
            }
        }
    }

    /// The entries of the mapping at `index` set into `map`, merges included.
    fn mapping_into(
        &mut self,
        index: usize,
        map: &mut Map<String, Value>,
    ) -> Result<(), BuiltinError> {
        let Node::Mapping(children) = self.node(index)? else {
            return Err("yaml: map merge requires map or sequence of maps as the value".into());
        };
        let children = children.clone();
        for pair in children.chunks(2) {
            let [key, value] = *pair else {
                return Err("yaml: a mapping key has no value".into());
            };
            if self.is_merge(key)? {
                self.merge(value, map)?;
                continue;
            }
            self.count()?;
            let key_text = match self.node(key)? {
                Node::Alias(target) => {
                    let target = *target;
                    self.through_alias(key, target, |decoder, target| {
                        decoder.count()?;
                        decoder.key(target)
                    })?
                }
                _ => self.key(key)?,
            };
            let value = self.value(value)?;
            map.insert(key_text, value);
        }
        Ok(())
    }

    /// Whether the key at `index` is `<<` (plain or tagged `!!merge`).
    fn is_merge(&self, index: usize) -> Result<bool, BuiltinError> {
        Ok(match self.node(index)? {
            Node::Scalar { text, plain, tag } => {
                text == "<<" && (*plain || tag.as_deref() == Some("tag:yaml.org,2002:merge"))
            }
            _ => false,
        })
    }

    /// A `<<` merge: a mapping, an alias of one, or a sequence of those (earlier ones win).
    fn merge(&mut self, index: usize, map: &mut Map<String, Value>) -> Result<(), BuiltinError> {
        let wants_map =
            || BuiltinError::from("yaml: map merge requires map or sequence of maps as the value");
        let into_map = |decoder: &mut Self, index: usize, map: &mut Map<String, Value>| {
            decoder.count()?;
            match decoder.node(index)? {
                Node::Mapping(_) => decoder.mapping_into(index, map),
                Node::Alias(target) => {
                    let target = *target;
                    if !matches!(decoder.node(target)?, Node::Mapping(_)) {
                        return Err(wants_map());
                    }
                    decoder.through_alias(index, target, |decoder, target| {
                        decoder.count()?;
                        decoder.mapping_into(target, map)
                    })
                }
                _ => Err(wants_map()),
            }
        };
        match self.node(index)? {
            Node::Mapping(_) | Node::Alias(_) => into_map(self, index, map),
            Node::Sequence(children) => {
                let children = children.clone();
                for child in children.into_iter().rev() {
                    into_map(self, child, map)?;
                }
                Ok(())
            }
            Node::Scalar { .. } => Err(wants_map()),
        }
    }

    /// The text of the key at `index`, as `sigs.k8s.io/yaml` makes a JSON key of a Go one.
    fn key(&mut self, index: usize) -> Result<String, BuiltinError> {
        if !matches!(self.node(index)?, Node::Scalar { .. }) {
            return Err("yaml: invalid map key: a sequence or a mapping".into());
        }
        match self.scalar(index)? {
            Scalar::Str(text) => Ok(text),
            Scalar::Int(int) => Ok(int.to_string()),
            Scalar::Bool(b) => Ok(b.to_string()),
            Scalar::Float(float) => Ok(float32_text(float)),
            Scalar::Null => {
                Err("error converting YAML to JSON: unsupported map key of type: <nil>".into())
            }
            Scalar::Uint(uint) => Err(format!(
                "error converting YAML to JSON: unsupported map key of type: uint64, key: {uint}"
            )
            .into()),
        }
    }

    /// The Go value of the scalar at `index`.
    fn scalar(&self, index: usize) -> Result<Scalar, BuiltinError> {
        let Node::Scalar { text, plain, tag } = self.node(index)? else {
            return Err("yaml: not a scalar".into());
        };
        let tag = match (tag.as_deref(), plain) {
            (None, true) => "",
            // Quoted or block scalars without a tag are strings.
            (None, false) => return Ok(Scalar::Str(text.clone())),
            (Some(tag), _) => tag,
        };
        let Some(short) = tag
            .strip_prefix(TAG_PREFIX)
            .or(tag.is_empty().then_some(""))
        else {
            // A tag go-yaml does not resolve: the text.
            return Ok(Scalar::Str(text.clone()));
        };
        let resolved = match short {
            "" | "bool" | "int" | "float" | "null" | "timestamp" => resolve(text),
            "str" => Resolved::Str,
            "binary" => return binary(text).map(Scalar::Str),
            _ => return Ok(Scalar::Str(text.clone())),
        };
        let resolved = match (short, resolved) {
            ("float", Resolved::Int(int)) => Resolved::Float(int as f64),
            (short, resolved) if short.is_empty() || short == resolved.tag() || short == "str" => {
                resolved
            }
            (short, resolved) => {
                return Err(format!(
                    "yaml: cannot decode !!{} `{text}` as a !!{short}",
                    resolved.tag()
                )
                .into());
            }
        };
        Ok(match resolved {
            Resolved::Null => Scalar::Null,
            Resolved::Bool(b) => Scalar::Bool(b),
            Resolved::Int(int) => Scalar::Int(int),
            Resolved::Uint(uint) => Scalar::Uint(uint),
            Resolved::Float(float) => Scalar::Float(float),
            Resolved::Timestamp | Resolved::Str => Scalar::Str(text.clone()),
        })
    }
}

/// A `!!binary` scalar: its base64 decoded, bytes that are not UTF-8 replaced as Go's JSON
/// encoder replaces them.
fn binary(text: &str) -> Result<String, BuiltinError> {
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| BuiltinError::from("yaml: !!binary value contains invalid base64 data"))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A float as Go's JSON encoder writes it and OPA reads it back: a whole number in range is an
/// integer; not-a-number and the infinities are refused.
fn json_float(float: f64) -> Outcome {
    if !float.is_finite() {
        let text = if float.is_nan() {
            "NaN"
        } else if float > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(format!("json: unsupported value: {text}").into());
    }
    if float.fract() == 0.0 && float.abs() < 9.2e18 {
        return Ok(Value::from(float as i64));
    }
    Number::from_f64(float)
        .map(Value::Number)
        .ok_or_else(|| "json: unsupported value".into())
}

/// A float key as `sigs.k8s.io/yaml` writes it: Go's `FormatFloat(key, 'g', -1, 32)`.
fn float32_text(float: f64) -> String {
    let single = float as f32;
    if single.is_nan() {
        return ".nan".to_owned();
    }
    if single.is_infinite() {
        return if single > 0.0 { ".inf" } else { "-.inf" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest digits that read back as the same `f32`, as Go's does.
    let scientific = format!("{:e}", single.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let sign = if single.is_sign_negative() { "-" } else { "" };
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{point}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    let point = exponent + 1;
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = point as usize;
    if digits.len() <= point {
        return format!("{sign}{digits}{}", "0".repeat(point - digits.len()));
    }
    format!("{sign}{}.{}", &digits[..point], &digits[point..])
}

// ---------------------------------------------------------------------------------------------
// Writing

/// How wide go-yaml's emitter lets a line grow before folding it at a space.
const BEST_WIDTH: usize = 80;
/// How far go-yaml's emitter indents a level.
const BEST_INDENT: i64 = 2;
/// The longest key go-yaml writes as `key:` rather than `? key`.
const SIMPLE_KEY_LENGTH: usize = 128;

/// `value` as OPA's `yaml.marshal` writes it.
pub(super) fn marshal(value: &Value, context: &mut BuiltinContext) -> Result<String, BuiltinError> {
    let mut emitter = Emitter {
        out: String::new(),
        column: 0,
        indent: -1,
        indents: Vec::new(),
        whitespace: true,
        indention: true,
        context,
    };
    emitter.node(value, Place::Root)?;
    // The implicit end of the document; go-yaml's encoder never writes a `...` after it.
    emitter.write_indent();
    Ok(emitter.out)
}

/// Where a node is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    SequenceItem,
    MappingValue,
    /// A key written as `key:`.
    SimpleKey,
    /// A key written after `? `.
    ComplexKey,
}

/// A scalar's style, as go-yaml's emitter picks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

/// What go-yaml's emitter finds in a scalar's text.
#[derive(Debug, Clone, Copy)]
struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

/// go-yaml's (libyaml's) printable characters.
fn is_printable(c: char) -> bool {
    matches!(c, '\n' | '\u{20}'..='\u{7e}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        && c != '\u{feff}'
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn analyze(text: &str) -> Analysis {
    if text.is_empty() {
        return Analysis {
            multiline: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let mut block_indicators = text.starts_with("---") || text.starts_with("...");
    let (mut line_breaks, mut special) = (false, false);
    let (mut leading, mut trailing_space, mut trailing_break) = (false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        let followed_by_whitespace = matches!(next, None | Some(' ' | '\t'));
        let last = i + 1 == chars.len();
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            leading |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = matches!(c, ' ' | '\t' | '\0') || is_break(c);
    }
    let mut analysis = Analysis {
        multiline: line_breaks,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading || trailing_space || trailing_break || line_breaks || block_indicators {
        analysis.block_plain_allowed = false;
    }
    if trailing_space {
        analysis.block_allowed = false;
    }
    if break_space {
        analysis.block_plain_allowed = false;
        analysis.single_quoted_allowed = false;
    }
    if space_break || special {
        analysis.block_plain_allowed = false;
        analysis.single_quoted_allowed = false;
        analysis.block_allowed = false;
    }
    analysis
}

/// go-yaml's YAML 1.1 base-60 float, which it quotes on the way out:
/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn is_base60_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    if !bytes.get(at).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while bytes
        .get(at)
        .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
    {
        at += 1;
    }
    let mut groups = 0;
    while bytes.get(at) == Some(&b':') {
        at += 1;
        let start = at;
        while at - start < 2 && bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        // `[0-5]?[0-9]`: one digit, or two with the first at most 5.
        match at - start {
            1 => {}
            2 if bytes[start] <= b'5' => {}
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        while bytes
            .get(at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
        {
            at += 1;
        }
    }
    at == bytes.len()
}

/// go-yaml's order of string keys: letters after other characters, runs of digits by value.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let is_digit = |c: char| c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric());
    let less = |a: &[char], b: &[char]| -> bool {
        for i in 0..a.len().min(b.len()) {
            if a[i] == b[i] {
                continue;
            }
            let (al, bl) = (a[i].is_alphabetic(), b[i].is_alphabetic());
            if al && bl {
                return a[i] < b[i];
            }
            if al || bl {
                return bl;
            }
            let (mut an, mut bn) = (0i64, 0i64);
            if (a[i] == '0' || b[i] == '0')
                && a[..i]
                    .iter()
                    .rev()
                    .take_while(|c| is_digit(**c))
                    .any(|c| *c != '0')
            {
                an = 1;
                bn = 1;
            }
            let value = |c: char| i64::from(u32::from(c).wrapping_sub(u32::from('0')));
            let mut ai = i;
            while ai < a.len() && is_digit(a[ai]) {
                an = an.wrapping_mul(10).wrapping_add(value(a[ai]));
                ai += 1;
            }
            let mut bi = i;
            while bi < b.len() && is_digit(b[bi]) {
                bn = bn.wrapping_mul(10).wrapping_add(value(b[bi]));
                bi += 1;
            }
            if an != bn {
                return an < bn;
            }
            if ai != bi {
                return ai < bi;
            }
            return a[i] < b[i];
        }
        a.len() < b.len()
    };
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if less(&a, &b) {
        Ordering::Less
    } else if less(&b, &a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// go-yaml's emitter, for the values JSON has.
struct Emitter<'c> {
    out: String,
    column: usize,
    indent: i64,
    indents: Vec<i64>,
    whitespace: bool,
    indention: bool,
    context: &'c mut BuiltinContext,
}

impl Emitter<'_> {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn increase_indent(&mut self, flow: bool, indentless: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { BEST_INDENT } else { 0 };
        } else if !indentless {
            self.indent += BEST_INDENT;
        }
    }

    fn decrease_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn write_indent(&mut self) {
        let indent = usize::try_from(self.indent).unwrap_or(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(
        &mut self,
        indicator: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in indicator.chars() {
            self.put(c);
        }
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn node(&mut self, value: &Value, place: Place) -> Result<(), BuiltinError> {
        self.context.check_time()?;
        self.context.charge(VALUE_COST, "yaml.marshal's output")?;
        match value {
            Value::Null => self.scalar("null", Style::Plain, place),
            Value::Bool(b) => self.scalar(if *b { "true" } else { "false" }, Style::Plain, place),
            Value::Number(number) => {
                let text = match (number.as_i64(), number.as_u64(), number.as_f64()) {
                    (Some(int), _, _) => int.to_string(),
                    (None, Some(uint), _) => uint.to_string(),
                    (None, None, Some(float)) => {
                        let sign = if float.is_sign_negative() { "-" } else { "" };
                        format!("{sign}{}", format_float(float.abs(), 'g', None))
                    }
                    _ => number.to_string(),
                };
                self.scalar(&text, Style::Plain, place)
            }
            Value::String(text) => {
                let can_be_plain = resolve_or_str(text) && !is_base60_float(text);
                let style = if text.contains('\n') {
                    Style::Literal
                } else if can_be_plain {
                    Style::Plain
                } else {
                    Style::DoubleQuoted
                };
                self.context.charge(text.len(), "yaml.marshal's output")?;
                self.scalar(text, style, place)
            }
            Value::Array(items) if items.is_empty() => {
                self.write_indicator("[", true, true, false);
                self.write_indicator("]", false, false, false);
                Ok(())
            }
            Value::Object(entries) if entries.is_empty() => {
                self.write_indicator("{", true, true, false);
                self.write_indicator("}", false, false, false);
                Ok(())
            }
            Value::Array(items) => {
                self.increase_indent(false, place == Place::MappingValue && !self.indention);
                for item in items {
                    self.write_indent();
                    self.write_indicator("-", true, false, true);
                    self.node(item, Place::SequenceItem)?;
                }
                self.decrease_indent();
                Ok(())
            }
            Value::Object(entries) => {
                self.increase_indent(false, false);
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort_by(|a, b| key_order(a, b));
                for key in keys {
                    self.write_indent();
                    let key_value = Value::String(key.clone());
                    if !key.chars().any(is_break) && key.len() <= SIMPLE_KEY_LENGTH {
                        self.node(&key_value, Place::SimpleKey)?;
                        self.write_indicator(":", false, false, false);
                    } else {
                        self.write_indicator("?", true, false, true);
                        self.node(&key_value, Place::ComplexKey)?;
                        self.write_indent();
                        self.write_indicator(":", true, false, true);
                    }
                    if let Some(value) = entries.get(key) {
                        self.node(value, Place::MappingValue)?;
                    }
                }
                self.decrease_indent();
                Ok(())
            }
        }
    }

    fn scalar(&mut self, text: &str, style: Style, place: Place) -> Result<(), BuiltinError> {
        let analysis = analyze(text);
        let simple_key = place == Place::SimpleKey;
        let mut style = style;
        if simple_key && analysis.multiline {
            style = Style::DoubleQuoted;
        }
        if style == Style::Plain
            && (!analysis.block_plain_allowed || (text.is_empty() && simple_key))
        {
            style = Style::SingleQuoted;
        }
        if style == Style::SingleQuoted && !analysis.single_quoted_allowed {
            style = Style::DoubleQuoted;
        }
        if style == Style::Literal && (!analysis.block_allowed || simple_key) {
            style = Style::DoubleQuoted;
        }
        self.increase_indent(true, false);
        let allow_breaks = !simple_key;
        match style {
            Style::Plain => self.write_plain(text, allow_breaks),
            Style::SingleQuoted => self.write_single_quoted(text, allow_breaks),
            Style::DoubleQuoted => self.write_double_quoted(text, allow_breaks),
            Style::Literal => self.write_literal(text),
        }
        self.decrease_indent();
        Ok(())
    }

    fn write_plain(&mut self, text: &str, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        let chars: Vec<char> = text.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                self.write_space(allow_breaks && !spaces && chars.get(i + 1) != Some(&' '));
                spaces = true;
            } else {
                self.put(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn write_single_quoted(&mut self, text: &str, allow_breaks: bool) {
        self.write_indicator("'", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        let (mut spaces, mut breaks) = (false, false);
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                self.write_space(
                    allow_breaks
                        && !spaces
                        && i > 0
                        && i + 1 < chars.len()
                        && chars.get(i + 1) != Some(&' '),
                );
                spaces = true;
            } else {
                // A line break folds: the first of a run is written twice.
                if c == '\n' && !breaks {
                    self.put_break();
                }
                if self.break_or_indent(c, &mut breaks) {
                    continue;
                }
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.write_indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    /// A space of a plain or single-quoted scalar: where it may fold and the line is past the
    /// width, a line break and the indentation instead.
    fn write_space(&mut self, may_fold: bool) {
        if may_fold && self.column > BEST_WIDTH {
            self.write_indent();
        } else {
            self.put(' ');
        }
    }

    /// In a quoted or block scalar: writes `c` when it is a line break (`true`), otherwise
    /// the indentation a character after line breaks starts with (`false`).
    fn break_or_indent(&mut self, c: char, breaks: &mut bool) -> bool {
        if is_break(c) {
            self.write_break(c);
            self.indention = true;
            *breaks = true;
            return true;
        }
        if std::mem::take(breaks) {
            self.write_indent();
        }
        false
    }

    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.out.push(c);
            self.column = 0;
        }
    }

    fn write_double_quoted(&mut self, text: &str, allow_breaks: bool) {
        self.write_indicator("\"", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        // go-yaml checks for a byte order mark at the start of the text at every character.
        let escape_all = chars.first() == Some(&'\u{feff}');
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if escape_all || !is_printable(c) || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                let short = match c {
                    '\0' => Some('0'),
                    '\u{7}' => Some('a'),
                    '\u{8}' => Some('b'),
                    '\t' => Some('t'),
                    '\n' => Some('n'),
                    '\u{b}' => Some('v'),
                    '\u{c}' => Some('f'),
                    '\r' => Some('r'),
                    '\u{1b}' => Some('e'),
                    '"' => Some('"'),
                    '\\' => Some('\\'),
                    '\u{85}' => Some('N'),
                    '\u{a0}' => Some('_'),
                    '\u{2028}' => Some('L'),
                    '\u{2029}' => Some('P'),
                    _ => None,
                };
                match short {
                    Some(letter) => self.put(letter),
                    None => {
                        let code = u32::from(c);
                        let (letter, width) = match code {
                            0..=0xff => ('x', 2),
                            0x100..=0xffff => ('u', 4),
                            _ => ('U', 8),
                        };
                        self.put(letter);
                        for digit in format!("{code:0width$X}").chars() {
                            self.put(digit);
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < chars.len()
                {
                    self.write_indent();
                    if chars.get(i + 1) == Some(&' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.write_indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_literal(&mut self, text: &str) {
        self.write_indicator("|", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        if chars.first().is_some_and(|c| *c == ' ' || is_break(*c)) {
            self.write_indicator(&BEST_INDENT.to_string(), false, false, false);
        }
        let chomp = match chars.as_slice() {
            [] => Some("-"),
            [.., last] if !is_break(*last) => Some("-"),
            [_] => Some("+"),
            [.., before, _] if is_break(*before) => Some("+"),
            _ => None,
        };
        if let Some(chomp) = chomp {
            self.write_indicator(chomp, false, false, false);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for &c in &chars {
            if !self.break_or_indent(c, &mut breaks) {
                self.put(c);
                self.indention = false;
            }
        }
    }
}

/// Whether a string may go unquoted: YAML 1.1 reads it back as a string.
fn resolve_or_str(text: &str) -> bool {
    resolve(text) == Resolved::Str
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> Outcome {
        unmarshal(text, &mut BuiltinContext::default())
    }

    fn write(value: Value) -> String {
        marshal(&value, &mut BuiltinContext::default()).expect("marshals")
    }

    /// Each line: what `opa eval` (v1.20.2) answers.
    #[test]
    fn plain_scalars_are_typed_by_yaml_1_1_as_in_opa() {
        assert_eq!(read("- yes"), Ok(json!([true])));
        assert_eq!(read("[x, y]"), Ok(json!(["x", true])));
        assert_eq!(
            read("a: [on, Off, N, 'yes', \"no\", ~, null, Null, '']"),
            Ok(json!({"a": [true, false, false, "yes", "no", null, null, null, ""]}))
        );
        assert_eq!(
            read(
                "[0123, 08, 1_000, 0x1F, 0o17, 0b101, 0b-1, -0b11, +12, .5, 1., 1e3, 1E400, \
                 2001-01-01, 2001-01-01T10:00:00Z, 1:30, 18446744073709551615, \
                 9223372036854775808, -9223372036854775809]"
            ),
            Ok(json!([
                83,
                8,
                1000,
                31,
                15,
                5,
                -1,
                -3,
                12,
                0.5,
                1,
                1000,
                "1E400",
                "2001-01-01",
                "2001-01-01T10:00:00Z",
                "1:30",
                18_446_744_073_709_551_615_u64,
                9_223_372_036_854_775_808_u64,
                -9_223_372_036_854_775_809.0
            ]))
        );
        assert!(read("[.inf]").is_err());
        assert_eq!(
            read("{1: a, 1.5: b, true: c, 0.1: d}"),
            Ok(json!({"0.1": "d", "1": "a", "1.5": "b", "true": "c"}))
        );
        assert!(read("{null: a}").is_err());
        assert_eq!(read(""), Ok(Value::Null));
        assert_eq!(read("# only a comment"), Ok(Value::Null));
        assert_eq!(read("a: 1\n---\nb: 2\n"), Ok(json!({"a": 1})));
    }

    #[test]
    fn tags_merges_and_aliases_read_as_in_opa() {
        assert_eq!(
            read("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\ne:\n  b: 5\n  <<: [*x, {b: 3, f: 4}]\n"),
            Ok(json!({"a": {"b": 1}, "c": {"b": 1, "d": 2}, "e": {"b": 1, "f": 4}}))
        );
        assert_eq!(
            read(
                "a: !!str 12\nb: !!int '12'\nc: !!float 1\nd: !!binary aGVsbG8=\ne: !custom 5\nf: ! 7\n"
            ),
            Ok(json!({"a": "12", "b": 12, "c": 1, "d": "hello", "e": "5", "f": "7"}))
        );
        assert!(read("a: &a [*a]").is_err());
        assert!(read("[!!int abc]").is_err());
    }

    #[test]
    fn strings_yaml_1_1_would_retype_are_quoted_as_in_opa() {
        let written = write(json!([
            "yes",
            "0123",
            "no",
            "y",
            "on",
            "1_000",
            "1:30",
            "2001-01-01",
            "<<",
            "",
            "null",
            "~",
            "1.5",
            ".5",
            "abc",
            "a: b",
            "- a",
            "#x",
            "x #y",
            " lead",
            "trail ",
            "it's",
            "tab\there",
            "\u{1F600}",
            "\u{e9}",
            "a\nb",
            "a\nb\n",
            "a\nb\n\n",
            " a\nb",
            "a \nb",
            "true",
            "True",
            "08",
            "0b101",
            "+1",
            "1e3",
            "x:y",
            "-",
            "?",
            "---",
            "@x",
            "%x"
        ]));
        assert_eq!(
            written,
            "- \"yes\"\n- \"0123\"\n- \"no\"\n- \"y\"\n- \"on\"\n- \"1_000\"\n- \"1:30\"\n\
             - \"2001-01-01\"\n- <<\n- \"\"\n- \"null\"\n- \"~\"\n- \"1.5\"\n- \".5\"\n- abc\n\
             - 'a: b'\n- '- a'\n- '#x'\n- 'x #y'\n- ' lead'\n- 'trail '\n- it's\n\
             - \"tab\\there\"\n- \"\\U0001F600\"\n- \u{e9}\n- |-\n  a\n  b\n- |\n  a\n  b\n\
             - |+\n  a\n  b\n\n- |2-\n   a\n  b\n- \"a \\nb\"\n- \"true\"\n- \"True\"\n- \"08\"\n\
             - \"0b101\"\n- \"+1\"\n- \"1e3\"\n- x:y\n- '-'\n- '?'\n- '---'\n- '@x'\n- '%x'\n"
        );
        assert_eq!(write(json!("a")), "a\n");
        assert_eq!(write(json!("yes")), "\"yes\"\n");
        assert_eq!(write(json!("a\nb\n")), "|\n  a\n  b\n");
        assert_eq!(write(json!({"a": "x\n"})), "a: |\n  x\n");
    }

    #[test]
    fn keys_numbers_and_nesting_are_written_as_in_opa() {
        assert_eq!(
            write(
                json!({"b": 1, "a10": 2, "a9": 3, "A": 4, "_": 5, "1": 6, "10": 7, "2": 8,
                "a": {"z": [1, {"k": "v", "j": []}], "y": {}}})
            ),
            "_: 5\n\"1\": 6\n\"2\": 8\n\"10\": 7\nA: 4\na:\n  \"y\": {}\n  z:\n  - 1\n  - j: []\n    \
             k: v\na9: 3\na10: 2\nb: 1\n"
        );
        assert_eq!(
            write(json!([
                1.0,
                1e6,
                1_234_567.0,
                0.000_001,
                0.000_000_1,
                1e21,
                123_456_789_012_345_678_901_234_567_890.0,
                -2.5,
                18_446_744_073_709_551_615_u64
            ])),
            "- 1\n- 1e+06\n- 1.234567e+06\n- 1e-06\n- 1e-07\n- 1e+21\n- 1.2345678901234568e+29\n\
             - -2.5\n- 18446744073709551615\n"
        );
        assert_eq!(
            write(json!([["a", "b"], [], {}, [[1]]])),
            "- - a\n  - b\n- []\n- {}\n- - - 1\n"
        );
        let long_key = "a".repeat(140);
        assert_eq!(
            write(json!({long_key.clone(): 1, "x\ny": 2, "": 3, "yes": 4})),
            format!("\"\": 3\n? {long_key}\n: 1\n? |-\n  x\n  y\n: 2\n\"yes\": 4\n")
        );
    }

    #[test]
    fn long_lines_fold_at_80_columns_as_in_opa() {
        let words = "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp \
                     qqqq rrrr ssss tttt";
        assert_eq!(
            write(json!({"k": words})),
            "k: aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp\n  \
             qqqq rrrr ssss tttt\n"
        );
        assert_eq!(
            write(json!({"k": format!("yes {words}\t")})),
            "k: \"yes aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo\n  \
             pppp qqqq rrrr ssss tttt\\t\"\n"
        );
    }
}
