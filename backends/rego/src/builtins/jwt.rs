//! JSON Web Tokens: `io.jwt.decode`, and `io.jwt.verify_hs256/384/512` (HMAC signatures).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, string};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "io.jwt.decode",
        func: decode,
    },
    HostBuiltin {
        name: "io.jwt.verify_hs256",
        func: |args, _| verify::<Hmac<sha2::Sha256>>(args),
    },
    HostBuiltin {
        name: "io.jwt.verify_hs384",
        func: |args, _| verify::<Hmac<sha2::Sha384>>(args),
    },
    HostBuiltin {
        name: "io.jwt.verify_hs512",
        func: |args, _| verify::<Hmac<sha2::Sha512>>(args),
    },
];

/// A token's three parts, undecoded.
struct Parts<'a> {
    header: &'a str,
    payload: &'a str,
    signature: &'a str,
}

fn parts(token: &str) -> Result<Parts<'_>, BuiltinError> {
    let mut split = token.split('.');
    match (split.next(), split.next(), split.next(), split.next()) {
        (Some(header), Some(payload), Some(signature), None) => Ok(Parts {
            header,
            payload,
            signature,
        }),
        _ => Err("encoded JWT must have 3 sections".into()),
    }
}

fn base64url(part: &str, what: &str) -> Result<Vec<u8>, BuiltinError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|error| BuiltinError::Failed(format!("JWT {what} had invalid encoding: {error}")))
}

fn json_part(part: &str, what: &str) -> Result<Value, BuiltinError> {
    let bytes = base64url(part, what)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(BuiltinError::Failed(format!(
            "JWT {what} is not a JSON object"
        ))),
    }
}

/// `[header, payload, signature]`: the header and payload as objects, the signature in hex.
fn decode(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let token = string(args, 0)?;
    context.charge(token.len().saturating_mul(4), "io.jwt.decode's output")?;
    let parts = parts(token)?;
    let header = json_part(parts.header, "header")?;
    if header.get("enc").is_some() {
        return Err("JWT is a JWE object, which is not supported".into());
    }
    let payload = json_part(parts.payload, "payload")?;
    let signature = base64url(parts.signature, "signature")?;
    let hex: String = signature.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(Value::from(vec![header, payload, Value::from(hex)]))
}

/// Whether the token's signature is the HMAC of its header and payload under the secret.
fn verify<M: Mac + hmac::digest::KeyInit>(args: &[Value]) -> Outcome {
    let token = string(args, 0)?;
    let secret = string(args, 1)?;
    let parts = parts(token)?;
    let signature = base64url(parts.signature, "signature")?;
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(secret.as_bytes())
        .map_err(|error| format!("invalid secret: {error}"))?;
    mac.update(parts.header.as_bytes());
    mac.update(b".");
    mac.update(parts.payload.as_bytes());
    Ok(Value::Bool(mac.verify_slice(&signature).is_ok()))
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

    /// The well-known HS256 example token, signed with the secret `your-256-bit-secret`.
    const TOKEN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

    #[test]
    fn tokens_decode_and_verify_as_opa_does() {
        assert_eq!(
            call("io.jwt.decode", json!([TOKEN])),
            Ok(json!([
                {"alg": "HS256", "typ": "JWT"},
                {"sub": "1234567890", "name": "John Doe", "iat": 1516239022},
                "49f94ac7044948c78a285d904f87f0a4c7897f7e8f3a4eb2255fda750b2cc397"
            ]))
        );
        assert_eq!(
            call("io.jwt.verify_hs256", json!([TOKEN, "your-256-bit-secret"])),
            Ok(json!(true))
        );
        assert_eq!(
            call("io.jwt.verify_hs256", json!([TOKEN, "wrong"])),
            Ok(json!(false))
        );
        assert_eq!(
            call("io.jwt.verify_hs512", json!([TOKEN, "your-256-bit-secret"])),
            Ok(json!(false))
        );
        assert!(call("io.jwt.decode", json!(["a.b"])).is_err());
        assert!(call("io.jwt.decode", json!(["!!.e30.e30"])).is_err());
        assert!(call("io.jwt.verify_hs256", json!(["a.b", "k"])).is_err());
    }
}
