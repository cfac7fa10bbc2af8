//! Versions and identifiers: `semver.is_valid`, `semver.compare`, `uuid.parse`.

use serde_json::{Map, Value};

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, arg, string};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "semver.is_valid",
        func: |args, _| {
            Ok(Value::Bool(
                arg(args, 0)?
                    .as_str()
                    .is_some_and(|text| semver::Version::parse(text).is_ok()),
            ))
        },
    },
    HostBuiltin {
        name: "semver.compare",
        func: |args, _| {
            let version = |index: usize| -> Result<semver::Version, BuiltinError> {
                let text = string(args, index)?;
                semver::Version::parse(text).map_err(|_| {
                    BuiltinError::Failed(format!(
                        "semver.compare: operand {}: string {text:?} is not a valid SemVer",
                        index + 1
                    ))
                })
            };
            // Build metadata does not count, as SemVer says.
            let ordering = version(0)?.cmp_precedence(&version(1)?);
            Ok(Value::from(ordering as i8))
        },
    },
    HostBuiltin {
        name: "uuid.parse",
        func: uuid_parse,
    },
];

/// The version and variant of a UUID (`8-4-4-4-12` hexadecimal digits, bare, braced or as a
/// `urn:uuid:`); undefined when the string is not one.
fn uuid_parse(args: &[Value], _: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?;
    let bytes = uuid_bytes(text).ok_or(BuiltinError::Undefined)?;
    let version = bytes[6] >> 4;
    let variant = match bytes[8] {
        b if b & 0x80 == 0 => "Reserved",
        b if b & 0xc0 == 0x80 => "RFC4122",
        b if b & 0xe0 == 0xc0 => "Microsoft",
        _ => "Future",
    };
    let mut object = Map::new();
    object.insert("version".into(), Value::from(version));
    object.insert("variant".into(), Value::from(variant));
    Ok(Value::Object(object))
}

fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let text = text
        .strip_prefix("urn:uuid:")
        .or_else(|| text.strip_prefix('{').and_then(|t| t.strip_suffix('}')))
        .unwrap_or(text);
    let hex: String = match text.len() {
        36 => {
            let dashes = [8, 13, 18, 23];
            if dashes.iter().any(|&at| text.as_bytes()[at] != b'-') {
                return None;
            }
            text.chars().filter(|&c| c != '-').collect()
        }
        32 => text.to_owned(),
        _ => return None,
    };
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(bytes)
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

    /// The examples of OPA's documentation.
    #[test]
    fn versions_and_identifiers_answer_as_opa_does() {
        assert_eq!(call("semver.is_valid", json!(["1.2.3"])), Ok(json!(true)));
        assert_eq!(
            call("semver.is_valid", json!(["1.2.3-rc.1+build.5"])),
            Ok(json!(true))
        );
        assert_eq!(call("semver.is_valid", json!(["v1.2.3"])), Ok(json!(false)));
        assert_eq!(call("semver.is_valid", json!(["1.2"])), Ok(json!(false)));
        assert_eq!(call("semver.is_valid", json!([1])), Ok(json!(false)));
        assert_eq!(
            call("semver.compare", json!(["1.0.0", "1.0.1"])),
            Ok(json!(-1))
        );
        assert_eq!(
            call("semver.compare", json!(["1.0.0-alpha", "1.0.0"])),
            Ok(json!(-1))
        );
        assert_eq!(
            call("semver.compare", json!(["2.0.0", "1.9.9"])),
            Ok(json!(1))
        );
        assert_eq!(
            call("semver.compare", json!(["1.0.0+a", "1.0.0+b"])),
            Ok(json!(0))
        );
        assert!(call("semver.compare", json!(["1.0", "1.0.0"])).is_err());
        assert_eq!(
            call(
                "uuid.parse",
                json!(["00000000-0000-4000-8000-000000000000"])
            ),
            Ok(json!({"version": 4, "variant": "RFC4122"}))
        );
        assert_eq!(
            call(
                "uuid.parse",
                json!(["{6ba7b810-9dad-51d1-80b4-00c04fd430c8}"])
            ),
            Ok(json!({"version": 5, "variant": "RFC4122"}))
        );
        assert_eq!(
            call("uuid.parse", json!(["nope"])),
            Err(BuiltinError::Undefined)
        );
        assert_eq!(
            call(
                "uuid.parse",
                json!(["00000000-0000-4000-8000-00000000000g"])
            ),
            Err(BuiltinError::Undefined)
        );
    }
}
