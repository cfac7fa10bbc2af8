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
                    .is_some_and(|text| Version::parse(text).is_some()),
            ))
        },
    },
    HostBuiltin {
        name: "semver.compare",
        func: |args, _| {
            let version = |index: usize| -> Result<Version<'_>, BuiltinError> {
                let text = string(args, index)?;
                Version::parse(text).ok_or_else(|| {
                    BuiltinError::Failed(format!(
                        "semver.compare: operand {}: string {text:?} is not a valid SemVer",
                        index + 1
                    ))
                })
            };
            let ordering = version(0)?.precedence(&version(1)?);
            Ok(Value::from(ordering as i8))
        },
    },
    HostBuiltin {
        name: "uuid.parse",
        func: uuid_parse,
    },
];

/// A version as OPA's own SemVer parser reads it, which is laxer than SemVer: a leading `v` is
/// dropped, the three numbers are Go integers (leading zeros are fine: `01.2.3` is valid), and
/// an empty pre-release or build (`1.2.3-`, `1.2.3+`) is none. Pre-release and build
/// identifiers are dot-separated runs of `[0-9A-Za-z-]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version<'a> {
    major: i64,
    minor: i64,
    patch: i64,
    pre_release: &'a str,
}

impl<'a> Version<'a> {
    /// `text` as OPA reads a version; `None` when OPA says it is not one.
    fn parse(text: &'a str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let (text, metadata) = cut(text, '+');
        if !metadata.is_empty() && !is_identifier_list(metadata) {
            return None;
        }
        let (text, pre_release) = cut(text, '-');
        if !pre_release.is_empty() && !is_identifier_list(pre_release) {
            return None;
        }
        if text.matches('.').count() != 2 {
            return None;
        }
        let (major, rest) = cut(text, '.');
        let (minor, patch) = cut(rest, '.');
        // Go's `strconv.ParseInt(s, 10, 64)` and Rust's `i64` parser accept the same texts.
        Some(Self {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            patch: patch.parse().ok()?,
            pre_release,
        })
    }

    /// OPA's order of versions: the numbers, then no pre-release above any, then the
    /// pre-release identifiers one by one (numbers below words, numbers by value, words by
    /// bytes, more identifiers above fewer). Build metadata does not count.
    fn precedence(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let numbers =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if numbers != Ordering::Equal || self.pre_release == other.pre_release {
            return numbers;
        }
        match (self.pre_release.is_empty(), other.pre_release.is_empty()) {
            (true, _) => return Ordering::Greater,
            (_, true) => return Ordering::Less,
            _ => {}
        }
        let mut ours = self.pre_release.split('.');
        let mut theirs = other.pre_release.split('.');
        loop {
            let (a, b) = match (ours.next(), theirs.next()) {
                (None, None) => return Ordering::Equal,
                (None, Some(_)) => return Ordering::Less,
                (Some(_), None) => return Ordering::Greater,
                (Some(a), Some(b)) => (a, b),
            };
            let ordering = match (decimal(a), decimal(b)) {
                (Some(a), Some(b)) => a.cmp(&b),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => a.cmp(b),
            };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
    }
}

/// `text` before and after the first `separator`, or all of it and nothing.
fn cut(text: &str, separator: char) -> (&str, &str) {
    text.split_once(separator).unwrap_or((text, ""))
}

/// Whether `text` is dot-separated identifiers of `[0-9A-Za-z-]`, none empty.
fn is_identifier_list(text: &str) -> bool {
    text.split('.').all(|identifier| {
        !identifier.is_empty()
            && identifier
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
    })
}

/// The value of an identifier of decimal digits only, as Go's `strconv.Atoi` clamps it.
fn decimal(identifier: &str) -> Option<i64> {
    if identifier.is_empty() || !identifier.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some(identifier.parse().unwrap_or(i64::MAX))
}

/// What OPA's `uuid.parse` tells of a UUID (`8-4-4-4-12` hexadecimal digits, bare, braced, as
/// a `urn:uuid:` or as 32 digits alone); undefined when the string is not one.
///
/// Every UUID has its `version` and `variant`. Versions 1 and 2 (time based) also give their
/// `time` (nanoseconds since the Unix epoch), `clocksequence`, `nodeid` (the node's six bytes,
/// `aa-bb-cc-dd-ee-ff`) and `macvariables` (whether that address is local or global, unicast or
/// multicast); version 2 (DCE security) adds the local `id` and its `domain`. The other versions
/// are random or hashes: nothing more can be read from them.
fn uuid_parse(args: &[Value], _: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?;
    let bytes = uuid_bytes(text).ok_or(BuiltinError::Undefined)?;
    let version = bytes[6] >> 4;
    let variant = match bytes[8] {
        b if b & 0xc0 == 0x80 => "RFC4122",
        b if b & 0xe0 == 0xc0 => "Microsoft",
        b if b & 0xe0 == 0xe0 => "Future",
        _ => "Reserved",
    };
    let mut object = Map::new();
    object.insert("version".into(), Value::from(version));
    object.insert("variant".into(), Value::from(variant));
    if version == 1 || version == 2 {
        let word = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let low = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        // 100-nanosecond intervals since 1582-10-15, the start of the Gregorian calendar.
        let ticks = i64::from(low) | i64::from(word(4)) << 32 | i64::from(word(6) & 0x0fff) << 48;
        object.insert("time".into(), Value::from(unix_nanos(ticks)));
        object.insert("clocksequence".into(), Value::from(word(8) & 0x3fff));
        let node = &bytes[10..16];
        let nodeid: Vec<String> = node.iter().map(|byte| format!("{byte:02x}")).collect();
        object.insert("nodeid".into(), Value::from(nodeid.join("-")));
        let mac = match node[0] & 0b11 {
            0b11 => "local:multicast",
            0b01 => "global:multicast",
            0b10 => "local:unicast",
            _ => "global:unicast",
        };
        object.insert("macvariables".into(), Value::from(mac));
        if version == 2 {
            object.insert("id".into(), Value::from(low));
            let domain = match bytes[9] {
                0 => "Person".to_owned(),
                1 => "Group".to_owned(),
                2 => "Org".to_owned(),
                other => format!("Domain{other}"),
            };
            object.insert("domain".into(), Value::from(domain));
        }
    }
    Ok(Value::Object(object))
}

/// 100-nanosecond intervals since 1582-10-15 as nanoseconds since 1970-01-01, wrapping around
/// as OPA's 64-bit arithmetic does for times past the year 2262.
fn unix_nanos(ticks: i64) -> i64 {
    /// 1970-01-01 in 100-nanosecond intervals since 1582-10-15.
    const UNIX_EPOCH_TICKS: i64 = 122_192_928_000_000_000;
    let since_epoch = ticks - UNIX_EPOCH_TICKS;
    (since_epoch / 10_000_000)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(since_epoch % 10_000_000 * 100)
}

/// The sixteen bytes of a UUID written in one of the forms OPA reads: `8-4-4-4-12` digits, the
/// same in braces or after `urn:uuid:` (in any case), or 32 digits without dashes.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let dashed = match text.len() {
        36 => text,
        38 => text.strip_prefix('{')?.strip_suffix('}')?,
        45 => {
            let (prefix, rest) = text.split_at_checked(9)?;
            if !prefix.eq_ignore_ascii_case("urn:uuid:") {
                return None;
            }
            rest
        }
        32 => {
            return hex_bytes(text);
        }
        _ => return None,
    };
    let bytes = dashed.as_bytes();
    if [8, 13, 18, 23]
        .iter()
        .any(|&at| bytes.get(at) != Some(&b'-'))
    {
        return None;
    }
    let digits: String = dashed.chars().filter(|&c| c != '-').collect();
    if digits.len() != 32 {
        return None;
    }
    hex_bytes(&digits)
}

/// 32 hexadecimal digits as 16 bytes.
fn hex_bytes(digits: &str) -> Option<[u8; 16]> {
    if digits.len() != 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(digits.get(index * 2..index * 2 + 2)?, 16).ok()?;
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
        assert_eq!(call("semver.is_valid", json!(["v1.2.3"])), Ok(json!(true)));
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
    }

    /// OPA v1.20.2's own SemVer parser, laxer than SemVer: each line is its answer.
    #[test]
    fn versions_are_read_as_opa_reads_them() {
        let valid = |text: &str| call("semver.is_valid", json!([text]));
        assert_eq!(valid("01.2.3"), Ok(json!(true)));
        assert_eq!(valid("1.02.003"), Ok(json!(true)));
        assert_eq!(valid("+1.2.3"), Ok(json!(false)));
        assert_eq!(valid("1.2.3-"), Ok(json!(true)));
        assert_eq!(valid("1.2.3-01"), Ok(json!(true)));
        assert_eq!(valid("1.2.3-rc..1"), Ok(json!(false)));
        assert_eq!(valid("1.2.3+"), Ok(json!(true)));
        assert_eq!(valid("1.2.3+a_b"), Ok(json!(false)));
        assert_eq!(valid("-1.2.3"), Ok(json!(false)));
        assert_eq!(valid("1.2.3.4"), Ok(json!(false)));
        assert_eq!(valid("1.2.x"), Ok(json!(false)));
        assert_eq!(valid("99999999999999999999.0.0"), Ok(json!(false)));
        let compare = |a: &str, b: &str| call("semver.compare", json!([a, b]));
        assert_eq!(compare("01.2.3", "1.2.3"), Ok(json!(0)));
        assert_eq!(compare("v1.2.3", "1.2.3"), Ok(json!(0)));
        // OPA v1.20.2 never returns here (its loop over the identifiers does not end when all
        // are equal but the texts differ); this host answers that they are equal.
        assert_eq!(compare("1.0.0-rc.01", "1.0.0-rc.1"), Ok(json!(0)));
        assert_eq!(compare("1.0.0-alpha.1", "1.0.0-alpha"), Ok(json!(1)));
        assert_eq!(compare("1.0.0-2", "1.0.0-10"), Ok(json!(-1)));
        assert_eq!(compare("1.0.0-a", "1.0.0-1"), Ok(json!(1)));
        assert_eq!(compare("1.0.0-B", "1.0.0-a"), Ok(json!(-1)));
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

    /// OPA's own test cases of `uuid.parse`: time-based UUIDs tell their time, clock sequence
    /// and node; version 2 also its local id and domain.
    #[test]
    fn time_based_uuids_tell_what_opa_reads_from_them() {
        assert_eq!(
            call(
                "uuid.parse",
                json!(["b01d0062-a116-11ee-822b-7ab0b9e5e0c0"])
            ),
            Ok(json!({
                "version": 1,
                "variant": "RFC4122",
                "time": 1_703_282_931_110_717_000_i64,
                "clocksequence": 555,
                "nodeid": "7a-b0-b9-e5-e0-c0",
                "macvariables": "local:unicast",
            }))
        );
        let v2 = json!({
            "version": 2,
            "variant": "RFC4122",
            "time": 1_693_566_990_121_469_600_i64,
            "clocksequence": 12800,
            "nodeid": "32-50-96-b3-9f-47",
            "macvariables": "local:unicast",
            "id": 1000,
            "domain": "Person",
        });
        assert_eq!(
            call(
                "uuid.parse",
                json!(["000003e8-48b9-21ee-b200-325096b39f47"])
            ),
            Ok(v2.clone())
        );
        assert_eq!(
            call(
                "uuid.parse",
                json!(["URN:UUID:000003e8-48b9-21ee-b200-325096b39f47"])
            ),
            Ok(v2)
        );
        assert_eq!(
            call("uuid.parse", json!(["6bea8ef2d3d33cd184e09bab06a52ece"])),
            Ok(json!({"version": 3, "variant": "RFC4122"}))
        );
        // The address bits, the domains past the named ones, the other variants.
        let parsed = call(
            "uuid.parse",
            json!(["00000000-0000-2000-8101-010000000000"]),
        )
        .expect("a UUID");
        assert_eq!(parsed["macvariables"], json!("global:multicast"));
        assert_eq!(parsed["domain"], json!("Group"));
        let parsed = call(
            "uuid.parse",
            json!(["00000000-0000-1000-c000-030000000000"]),
        )
        .expect("a UUID");
        assert_eq!(parsed["macvariables"], json!("local:multicast"));
        assert_eq!(parsed["variant"], json!("Microsoft"));
        assert_eq!(
            call(
                "uuid.parse",
                json!(["00000000-0000-2000-0007-000000000000"])
            )
            .expect("a UUID")["domain"],
            json!("Domain7")
        );
        // Forms OPA does not read.
        for text in [
            "{6bea8ef2d3d33cd184e09bab06a52ece}",
            "urn:uuid:6bea8ef2d3d33cd184e09bab06a52ece",
            "00000000-0000-1000-8000-00000000000é",
            "00000000+0000-1000-8000-000000000000",
        ] {
            assert_eq!(
                call("uuid.parse", json!([text])),
                Err(BuiltinError::Undefined),
                "{text}"
            );
        }
    }
}
