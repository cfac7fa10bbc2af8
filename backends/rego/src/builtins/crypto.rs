//! Hashes: `crypto.sha256`, `crypto.sha1`, `crypto.md5` and `crypto.hmac.*`, hex-encoded as
//! OPA returns them.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Digest;

use super::{BuiltinContext, HostBuiltin, Outcome, hex, string};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "crypto.sha256",
        func: |args, context| digest::<sha2::Sha256>(args, context),
    },
    HostBuiltin {
        name: "crypto.sha1",
        func: |args, context| digest::<sha1::Sha1>(args, context),
    },
    HostBuiltin {
        name: "crypto.md5",
        func: |args, context| digest::<md5::Md5>(args, context),
    },
    HostBuiltin {
        name: "crypto.hmac.sha256",
        func: |args, _| mac::<Hmac<sha2::Sha256>>(args),
    },
    HostBuiltin {
        name: "crypto.hmac.sha512",
        func: |args, _| mac::<Hmac<sha2::Sha512>>(args),
    },
    HostBuiltin {
        name: "crypto.hmac.sha1",
        func: |args, _| mac::<Hmac<sha1::Sha1>>(args),
    },
    HostBuiltin {
        name: "crypto.hmac.md5",
        func: |args, _| mac::<Hmac<md5::Md5>>(args),
    },
    HostBuiltin {
        name: "crypto.hmac.equal",
        func: |args, _| {
            let (a, b) = (string(args, 0)?.as_bytes(), string(args, 1)?.as_bytes());
            // In constant time for equal lengths, as Go's `hmac.Equal`.
            let equal =
                a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0;
            Ok(Value::Bool(equal))
        },
    },
];

fn digest<D: Digest>(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let text = string(args, 0)?.as_bytes();
    let mut hasher = D::new();
    // In pieces, so that a long text meets the deadline.
    for chunk in text.chunks(1 << 16) {
        context.check_time_now()?;
        hasher.update(chunk);
    }
    Ok(Value::from(hex(&hasher.finalize())))
}

fn mac<M: Mac + hmac::digest::KeyInit>(args: &[Value]) -> Outcome {
    let text = string(args, 0)?;
    let key = string(args, 1)?;
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key.as_bytes())
        .map_err(|error| format!("invalid key: {error}"))?;
    mac.update(text.as_bytes());
    Ok(Value::from(hex(&mac.finalize().into_bytes())))
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

    /// The answers of OPA's documentation and of the RFC test vectors.
    #[test]
    fn hashes_answer_as_opa_does() {
        assert_eq!(
            call("crypto.sha256", json!(["abc"])),
            Ok(json!(
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
            ))
        );
        assert_eq!(
            call("crypto.sha1", json!(["abc"])),
            Ok(json!("a9993e364706816aba3e25717850c26c9cd0d89d"))
        );
        assert_eq!(
            call("crypto.md5", json!(["abc"])),
            Ok(json!("900150983cd24fb0d6963f7d28e17f72"))
        );
        // RFC 4231, test case 2.
        assert_eq!(
            call(
                "crypto.hmac.sha256",
                json!(["what do ya want for nothing?", "Jefe"])
            ),
            Ok(json!(
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
            ))
        );
        assert_eq!(
            call(
                "crypto.hmac.sha512",
                json!(["what do ya want for nothing?", "Jefe"])
            ),
            Ok(json!(
                "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
            ))
        );
        // RFC 2202.
        assert_eq!(
            call(
                "crypto.hmac.sha1",
                json!(["what do ya want for nothing?", "Jefe"])
            ),
            Ok(json!("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"))
        );
        assert_eq!(
            call(
                "crypto.hmac.md5",
                json!(["what do ya want for nothing?", "Jefe"])
            ),
            Ok(json!("750c783e6ab0b503eaa86e310a5db738"))
        );
        assert_eq!(
            call("crypto.hmac.equal", json!(["ab", "ab"])),
            Ok(json!(true))
        );
        assert_eq!(
            call("crypto.hmac.equal", json!(["ab", "ac"])),
            Ok(json!(false))
        );
        assert_eq!(
            call("crypto.hmac.equal", json!(["ab", "abc"])),
            Ok(json!(false))
        );
    }
}
