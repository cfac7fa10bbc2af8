//! Compact JSON text, written as `serde_json::to_writer` writes it, with strings escaped eight
//! bytes at a time.
//!
//! Contexts carry long strings (messages, tool results), and the service, the proxies and the
//! bindings write them back out with every answer and audit record. `serde_json` looks at a
//! string one byte at a time to find what needs escaping; [`to_writer`] looks at eight bytes at
//! once and copies the runs between escapes whole. The text is byte for byte what `serde_json`
//! writes, raw values (`serde_json::value::RawValue`) included.
//!
//! ```
//! use portcullis_engine::json;
//!
//! let value = serde_json::json!({"content": "a \"quoted\" word\n", "n": [1, 2.5, null]});
//! let mut text = Vec::new();
//! json::to_writer(&mut text, &value).unwrap();
//! assert_eq!(text, serde_json::to_vec(&value).unwrap());
//! ```

use serde::ser::{self, Error as _, Serialize};

/// What a value that cannot be written as JSON fails with (a map key that is not a string, a
/// `Serialize` implementation's own error).
pub type Error = serde_json::Error;

/// The name `serde_json` gives the one field of a raw value (and, with its
/// `arbitrary_precision` feature, of a number), whose text is written as it is.
const RAW_TOKENS: [&str; 2] = [
    "$serde_json::private::RawValue",
    "$serde_json::private::Number",
];

/// Appends `value` to `out` as compact JSON, exactly as `serde_json::to_writer` would. On an
/// error, `out` may hold part of the text.
pub fn to_writer<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(&mut Writer { out })
}

/// `value` as compact JSON text, exactly as `serde_json::to_string` would write it.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let mut out = Vec::with_capacity(128);
    to_writer(&mut out, value)?;
    // Only whole UTF-8 strings and ASCII were written.
    String::from_utf8(out).map_err(Error::custom)
}

/// Appends `text` to `out` as a JSON string: quoted, with `"`, `\` and the control characters
/// escaped as `serde_json` escapes them (`\b`, `\t`, `\n`, `\f`, `\r`, else `\u00xx` in
/// lowercase hex), everything else as it is.
pub fn write_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        out.extend_from_slice(&bytes[start..at]);
        let byte = bytes[at];
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
        }
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether a JSON string must escape `byte`.
fn must_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Where the first byte at or after `from` that a JSON string must escape is: past the
/// blocks of 32 bytes that need no escape (a test the compiler turns into a few vector
/// instructions), then word by word.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(block) = bytes[at..].first_chunk::<32>() {
        let needs_escape = block
            .iter()
            .fold(false, |found, &byte| found | must_escape(byte));
        if needs_escape {
            break;
        }
        at += 32;
    }
    while let Some(chunk) = bytes[at..].first_chunk::<8>() {
        let found = escapes_in_word(u64::from_le_bytes(*chunk));
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(|&byte| must_escape(byte))
        .map(|offset| at + offset)
}

/// The high bit of each byte of `word` (read little-endian) that a JSON string must escape:
/// exact for the lowest such byte (a borrow only ever runs towards higher bytes).
fn escapes_in_word(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    /// The high bit of each byte of `word` that is zero (exact for the lowest such byte).
    fn zero_bytes(word: u64) -> u64 {
        word.wrapping_sub(ONES) & !word & HIGHS
    }
    // Bytes below 0x20, bytes equal to `"`, bytes equal to `\`.
    (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
        | zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
}

/// Appends what `serde_json` writes for a scalar (numbers, as it formats them).
fn scalar<T: Serialize>(out: &mut Vec<u8>, value: T) -> Result<(), Error> {
    serde_json::to_writer(out, &value)
}

/// The serializer: everything is appended to `out`.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

/// A sequence, map or struct being written: whether a member was written yet, or a raw value
/// whose text comes next.
enum Compound<'w, 'a> {
    Members {
        writer: &'w mut Writer<'a>,
        first: bool,
    },
    Raw(&'w mut Writer<'a>),
}

impl<'w, 'a> Compound<'w, 'a> {
    fn open(writer: &'w mut Writer<'a>, bracket: u8) -> Self {
        writer.out.push(bracket);
        Compound::Members {
            writer,
            first: true,
        }
    }

    /// The writer, after the comma a member other than the first needs.
    fn member(&mut self) -> &mut Writer<'a> {
        match self {
            Compound::Members { writer, first } => {
                if !std::mem::take(first) {
                    writer.out.push(b',');
                }
                writer
            }
            Compound::Raw(writer) => writer,
        }
    }

    fn close(self, bracket: &[u8]) {
        match self {
            Compound::Members { writer, .. } => writer.out.extend_from_slice(bracket),
            Compound::Raw(_) => {}
        }
    }

    fn key(&mut self, key: &str) -> &mut Writer<'a> {
        let writer = self.member();
        write_string(writer.out, key);
        writer.out.push(b':');
        writer
    }
}

/// Opens `{"variant":` for an enum variant that carries data.
fn open_variant(out: &mut Vec<u8>, variant: &str) {
    out.push(b'{');
    write_string(out, variant);
    out.push(b':');
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, value: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_i16(self, value: i16) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_i32(self, value: i32) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_i64(self, value: i64) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_i128(self, value: i128) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_u8(self, value: u8) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_u16(self, value: u16) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_u32(self, value: u32) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_u64(self, value: u64) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_u128(self, value: u128) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_f32(self, value: f32) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_f64(self, value: f64) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_char(self, value: char) -> Result<(), Error> {
        write_string(self.out, value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result<(), Error> {
        write_string(self.out, value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), Error> {
        scalar(self.out, value)
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        open_variant(self.out, variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'['))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        open_variant(self.out, variant);
        Ok(Compound::open(self, b'['))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'{'))
    }

    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        if RAW_TOKENS.contains(&name) {
            return Ok(Compound::Raw(self));
        }
        Ok(Compound::open(self, b'{'))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        open_variant(self.out, variant);
        Ok(Compound::open(self, b'{'))
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(self.member())
    }

    fn end(self) -> Result<(), Error> {
        self.close(b"]");
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<(), Error> {
        self.close(b"]}");
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        let writer = self.member();
        key.serialize(Text::key(writer.out))?;
        writer.out.push(b':');
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        match self {
            Compound::Members { writer, .. } | Compound::Raw(writer) => {
                value.serialize(&mut **writer)
            }
        }
    }

    fn end(self) -> Result<(), Error> {
        self.close(b"}");
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        if let Compound::Raw(writer) = self {
            return value.serialize(Text::raw(writer.out));
        }
        value.serialize(self.key(key))
    }

    fn end(self) -> Result<(), Error> {
        self.close(b"}");
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self.key(key))
    }

    fn end(self) -> Result<(), Error> {
        self.close(b"}}");
        Ok(())
    }
}

/// A serializer of the one piece of text something must be: a map key, written as
/// `serde_json` writes keys, or the text of a raw value, written as it is.
struct Text<'a> {
    out: &'a mut Vec<u8>,
    raw: bool,
}

impl Text<'_> {
    /// Keys: strings as strings, numbers and booleans quoted, an `Option` as what it holds.
    fn key(out: &mut Vec<u8>) -> Text<'_> {
        Text { out, raw: false }
    }

    /// A raw value: its text, as it is (it is JSON already).
    fn raw(out: &mut Vec<u8>) -> Text<'_> {
        Text { out, raw: true }
    }

    /// What is refused: anything that is not text.
    fn refused(&self) -> Error {
        Error::custom(if self.raw {
            "a raw JSON value must be given as text"
        } else {
            "key must be a string"
        })
    }

    /// A number or boolean: quoted as a key; refused as a raw value.
    fn quoted<T: Serialize>(self, value: T) -> Result<(), Error> {
        if self.raw {
            return Err(self.refused());
        }
        self.out.push(b'"');
        scalar(self.out, value)?;
        self.out.push(b'"');
        Ok(())
    }

    /// A float: quoted as a key when `finite` (as `serde_json` writes keys), else refused.
    fn float<T: Serialize>(self, value: T, finite: bool) -> Result<(), Error> {
        if !self.raw && !finite {
            return Err(Error::custom(
                "float key must be finite (got NaN or +/-inf)",
            ));
        }
        self.quoted(value)
    }
}

impl ser::Serializer for Text<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_str(self, value: &str) -> Result<(), Error> {
        if self.raw {
            self.out.extend_from_slice(value.as_bytes());
        } else {
            write_string(self.out, value);
        }
        Ok(())
    }

    fn serialize_char(self, value: char) -> Result<(), Error> {
        if self.raw {
            return Err(self.refused());
        }
        self.serialize_str(value.encode_utf8(&mut [0; 4]))
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        if self.raw {
            return Err(self.refused());
        }
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        if self.raw {
            return Err(self.refused());
        }
        value.serialize(self)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        if self.raw {
            return Err(self.refused());
        }
        value.serialize(self)
    }

    fn serialize_bool(self, value: bool) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_i8(self, value: i8) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_i16(self, value: i16) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_i32(self, value: i32) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_i64(self, value: i64) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_i128(self, value: i128) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_u8(self, value: u8) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_u16(self, value: u16) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_u32(self, value: u32) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_u64(self, value: u64) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_u128(self, value: u128) -> Result<(), Error> {
        self.quoted(value)
    }

    fn serialize_f32(self, value: f32) -> Result<(), Error> {
        self.float(value, value.is_finite())
    }

    fn serialize_f64(self, value: f64) -> Result<(), Error> {
        self.float(value, value.is_finite())
    }

    fn serialize_bytes(self, _value: &[u8]) -> Result<(), Error> {
        Err(self.refused())
    }

    fn serialize_none(self) -> Result<(), Error> {
        Err(self.refused())
    }

    fn serialize_unit(self) -> Result<(), Error> {
        Err(self.refused())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        Err(self.refused())
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(self.refused())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(self.refused())
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(self.refused())
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(self.refused())
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(self.refused())
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(self.refused())
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Error> {
        Err(self.refused())
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(self.refused())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::Value;

    use super::*;

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let mut ours = Vec::new();
        let result = to_writer(&mut ours, value);
        match serde_json::to_vec(value) {
            Ok(theirs) => {
                assert!(result.is_ok(), "{result:?}");
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&theirs)
                );
            }
            Err(_) => assert!(result.is_err(), "serde_json refused, we wrote {ours:?}"),
        }
    }

    #[test]
    fn strings_escape_what_serde_json_escapes_at_every_offset() {
        let specials = [
            "\"", "\\", "\n", "\t", "\r", "\u{8}", "\u{c}", "\u{0}", "\u{1f}", "\u{7f}", "é", "€",
            "𝄞",
        ];
        for special in specials {
            for before in 0..70 {
                for after in 0..10 {
                    let text = format!("{}{special}{}", "a".repeat(before), "b".repeat(after));
                    same_as_serde_json(&text);
                }
            }
        }
        same_as_serde_json("");
        same_as_serde_json(&"x".repeat(1000));
    }

    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    enum Shape {
        Unit,
        Newtype(u8),
        Tuple(i32, String),
        Struct { a: Option<bool>, b: Vec<u8> },
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Wrapper(String);

    #[derive(Serialize)]
    struct Pair(i8, f32);

    #[derive(Serialize)]
    struct Everything {
        shapes: Vec<Shape>,
        unit: Unit,
        wrapper: Wrapper,
        pair: Pair,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        tuple: (u64, i128, u128, char),
        floats: [f64; 5],
        bytes: serde_bytes_like::Bytes,
        numbered: BTreeMap<i32, bool>,
        flags: BTreeMap<bool, ()>,
        empty: Vec<u8>,
        nested: Value,
    }

    mod serde_bytes_like {
        /// Serialized with `serialize_bytes`.
        pub(super) struct Bytes(pub(super) Vec<u8>);

        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn every_shape_of_serde_is_written_as_serde_json_writes_it() {
        let value = Everything {
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(7),
                Shape::Tuple(-3, "t\"".into()),
                Shape::Struct {
                    a: None,
                    b: vec![1, 2],
                },
            ],
            unit: Unit,
            wrapper: Wrapper("w".into()),
            pair: Pair(-8, 0.5),
            skipped: None,
            tuple: (u64::MAX, i128::MIN, u128::MAX, '\n'),
            floats: [0.0, -1.5e300, 1e-7, f64::NAN, f64::INFINITY],
            bytes: serde_bytes_like::Bytes(vec![0, 255]),
            numbered: BTreeMap::from([(-1, true), (2, false)]),
            flags: BTreeMap::from([(true, ())]),
            empty: Vec::new(),
            nested: serde_json::json!({"a": [1, "x", null, {"b\n": 2.25}], "": {}}),
        };
        same_as_serde_json(&value);
    }

    #[test]
    fn raw_values_are_written_as_they_are() {
        let raw = serde_json::value::RawValue::from_string("{ \"kept\" : [1,2] }".into()).unwrap();
        same_as_serde_json(&BTreeMap::from([("raw", &raw)]));
    }

    #[test]
    fn keys_that_are_not_strings_fail_as_serde_json_fails() {
        same_as_serde_json(&BTreeMap::from([(vec![1], 1)]));
        same_as_serde_json(&BTreeMap::from([((), 1)]));
        same_as_serde_json(&BTreeMap::from([(Some(1), 1)]));
        same_as_serde_json(&BTreeMap::from([(None::<u8>, 1)]));
        same_as_serde_json(&BTreeMap::from([('c', 1)]));
        same_as_serde_json(&BTreeMap::from([(Shape::Unit, 1)]));
        same_as_serde_json(&FloatKey(1.5));
        same_as_serde_json(&FloatKey(0.1));
        same_as_serde_json(&FloatKey(f64::NAN));
        same_as_serde_json(&FloatKey(f64::NEG_INFINITY));
    }

    /// A map with one float key.
    struct FloatKey(f64);

    impl Serialize for FloatKey {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(&self.0, &true)?;
            map.serialize_entry(&(self.0 as f32), &false)?;
            map.end()
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\"\\\\\\x00-\\x1f a-z]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_is_written_as_serde_json_writes_it(value in json_value()) {
            same_as_serde_json(&value);
        }

        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(text in any::<String>()) {
            let mut ours = Vec::new();
            write_string(&mut ours, &text);
            prop_assert_eq!(ours, serde_json::to_vec(&text).unwrap());
        }
    }
}
