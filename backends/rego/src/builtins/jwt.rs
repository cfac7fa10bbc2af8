//! JSON Web Tokens: `io.jwt.decode`, `io.jwt.verify_hs256/384/512` (HMAC signatures) and
//! `io.jwt.verify_rs256`/`io.jwt.verify_es256` (RSA and P-256 signatures, checked by `ring`).
//!
//! The key of an RS256 or ES256 check is, as in OPA, a PEM certificate, a PEM public key, a
//! JWK or a JWK set (true when any of its keys verifies the token).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, hex, string};

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
    HostBuiltin {
        name: "io.jwt.verify_rs256",
        func: |args, _| verify_public(args, KeyKind::Rsa),
    },
    HostBuiltin {
        name: "io.jwt.verify_es256",
        func: |args, _| verify_public(args, KeyKind::P256),
    },
];

/// The kind of public key a signature algorithm needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
}

/// A public key: its kind, and its bytes as `ring` reads them (PKCS#1 for RSA, an uncompressed
/// point for P-256), or an RSA key's modulus and exponent.
enum PublicKey {
    Der(KeyKind, Vec<u8>),
    RsaComponents { n: Vec<u8>, e: Vec<u8> },
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

/// One DER element at the start of `bytes`: its tag, contents and what follows.
fn der(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The key of a DER SubjectPublicKeyInfo.
fn from_spki(spki: &[u8]) -> Option<PublicKey> {
    let (0x30, body, _) = der(spki)? else {
        return None;
    };
    let (0x30, algorithm, rest) = der(body)? else {
        return None;
    };
    let (0x06, oid, _) = der(algorithm)? else {
        return None;
    };
    let (0x03, bits, _) = der(rest)? else {
        return None;
    };
    let key = bits.get(1..)?.to_vec();
    match oid {
        OID_RSA => Some(PublicKey::Der(KeyKind::Rsa, key)),
        OID_EC => Some(PublicKey::Der(KeyKind::P256, key)),
        _ => None,
    }
}

/// The SubjectPublicKeyInfo of a DER X.509 certificate.
fn spki_of_certificate(certificate: &[u8]) -> Option<&[u8]> {
    let (0x30, body, _) = der(certificate)? else {
        return None;
    };
    let (0x30, mut tbs, _) = der(body)? else {
        return None;
    };
    // version (optional, [0]), serial, signature algorithm, issuer, validity, subject, key.
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs)?.2;
    }
    for _ in 0..5 {
        tbs = der(tbs)?.2;
    }
    let (_, _, after) = der(tbs)?;
    Some(&tbs[..tbs.len() - after.len()])
}

/// The keys `text` holds: PEM blocks (certificates and public keys), a JWK or a JWK set.
fn public_keys(text: &str) -> Result<Vec<PublicKey>, BuiltinError> {
    let text = text.trim();
    if text.starts_with('{') {
        let value: Value = serde_json::from_str(text).map_err(|error| {
            BuiltinError::Failed(format!("failed to parse a JWK key (set): {error}"))
        })?;
        let keys = match value.get("keys") {
            Some(Value::Array(keys)) => keys.clone(),
            _ => vec![value],
        };
        let field = |key: &Value, name: &str| -> Result<Vec<u8>, BuiltinError> {
            let text = key.get(name).and_then(Value::as_str).unwrap_or_default();
            base64url(text, "key")
        };
        return keys
            .iter()
            .map(|key| match key.get("kty").and_then(Value::as_str) {
                Some("RSA") => Ok(PublicKey::RsaComponents {
                    n: field(key, "n")?,
                    e: field(key, "e")?,
                }),
                Some("EC") if key.get("crv").and_then(Value::as_str) == Some("P-256") => {
                    let mut point = vec![4];
                    point.extend(field(key, "x")?);
                    point.extend(field(key, "y")?);
                    Ok(PublicKey::Der(KeyKind::P256, point))
                }
                _ => Err("unsupported JWK key type".into()),
            })
            .collect();
    }
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let label_end = after.find("-----").ok_or("malformed PEM")?;
        let label = &after[..label_end];
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let body_end = body_start.find(&end_marker).ok_or("malformed PEM")?;
        let body: String = body_start[..body_end].split_whitespace().collect();
        let der_bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|error| BuiltinError::Failed(format!("malformed PEM: {error}")))?;
        let key = match label {
            "CERTIFICATE" => spki_of_certificate(&der_bytes).and_then(from_spki),
            "PUBLIC KEY" => from_spki(&der_bytes),
            _ => None,
        };
        keys.push(key.ok_or_else(|| {
            BuiltinError::Failed(format!("failed to read the public key of a PEM {label}"))
        })?);
        rest = &body_start[body_end + end_marker.len()..];
    }
    if keys.is_empty() {
        return Err("failed to find a PEM certificate, a PEM public key or a JWK".into());
    }
    Ok(keys)
}

/// Whether the token's signature checks out under any key of the operand.
fn verify_public(args: &[Value], kind: KeyKind) -> Outcome {
    use ring::signature;
    let token = string(args, 0)?;
    let keys = public_keys(string(args, 1)?)?;
    let parts = parts(token)?;
    let signature_bytes = base64url(parts.signature, "signature")?;
    let message = format!("{}.{}", parts.header, parts.payload);
    let verified = keys.iter().any(|key| match (key, kind) {
        (PublicKey::Der(KeyKind::Rsa, der), KeyKind::Rsa) => {
            signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, der)
                .verify(message.as_bytes(), &signature_bytes)
                .is_ok()
        }
        (PublicKey::RsaComponents { n, e }, KeyKind::Rsa) => {
            signature::RsaPublicKeyComponents { n, e }
                .verify(
                    &signature::RSA_PKCS1_2048_8192_SHA256,
                    message.as_bytes(),
                    &signature_bytes,
                )
                .is_ok()
        }
        (PublicKey::Der(KeyKind::P256, point), KeyKind::P256) => {
            signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(message.as_bytes(), &signature_bytes)
                .is_ok()
        }
        _ => false,
    });
    Ok(Value::Bool(verified))
}

/// Whether `token`'s signature verifies under `key` with `algorithm`: the checks of
/// `io.jwt.verify_rs256`, `io.jwt.verify_es256` and `io.jwt.verify_hs256`, for hosts that
/// verify tokens themselves (signed bundles). `Err` says why the token or the key cannot be
/// read.
pub(crate) fn verify_signature(token: &str, algorithm: &str, key: &str) -> Result<bool, String> {
    let args = [Value::from(token), Value::from(key)];
    let outcome = match algorithm {
        "RS256" => verify_public(&args, KeyKind::Rsa),
        "ES256" => verify_public(&args, KeyKind::P256),
        "HS256" => verify::<Hmac<sha2::Sha256>>(&args),
        other => return Err(format!("unsupported signing algorithm `{other}`")),
    };
    match outcome {
        Ok(Value::Bool(verified)) => Ok(verified),
        Ok(_) => Ok(false),
        Err(BuiltinError::Failed(message) | BuiltinError::MemoryLimit(message)) => Err(message),
        Err(other) => Err(format!("{other:?}")),
    }
}

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
    Ok(Value::from(vec![
        header,
        payload,
        Value::from(hex(&signature)),
    ]))
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

    // A key pair and tokens made with `openssl` for these tests.
    const RS256: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ2VudC03IiwiaXNzIjoicG9ydGN1bGxpcyJ9.ecHUAv8acX2mBF5tMo-mgkGejR_7tWasy6LglzI_NS1TwhitzvMP6ujznHyhVL3oTL8rvpIcOoKMzNYKsNHfJOfo4799vJZ_zZgP9bjm9iJbvdxS_AtwuL4ThRtE2Wm_xRvKJnCOXR8zlWg-uVXEynLC4bH79kIcBBew4Vnz7NP-5GOtiC-zd_Tg45sHzomP-v544FWzG5fHAhwM5SXBjQSTjtBkmvhf2FIB9xr2pA6QbPzdhOmjVSEgxM89ckNKEF0l2VfVF6XH8LVhIJDdOBI4MNWJMf5OZ6kMsXPQ_14YAKY0cGH_Xxa9btguwpGuFjIA40AtVcFQU0xZY1yDGQ";
    const ES256: &str = "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ2VudC03IiwiaXNzIjoicG9ydGN1bGxpcyJ9.Ppe6vr1wT9WbNYmGp7iyd-f-p-7Pp9BjwKIVGxUbRYJlqMKM9mzISCM45xQ2IvD_USaKSPeJo_p6fyeyz3gghg";
    const RSA_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAk0MC+ElXJi7Xl1GWau4f
zxfnhwwXiAJ9dRNpxkgNprpsX6ffQD/hEVZgb4TjeV4oTY+HQag1YgRqF8DC9mYj
S2f78ZCNwv6yPDUOgS1jOv5sof9JwttE5S1sT4NgawxsRtbQA5gDkvX2y4F3jAL6
9M1poPhVchUBmdCCtWf0rI/hGXtlTZgvNR3WPeRdnDCilUG0osiK7PV++Hoko+oT
TMgsjhvSWxRw7yHxqJgJSbLSbRRAMXq5w5LrbDHEigC+M+8fnX37ba88Q22aJ+uq
F0AlfRk50d2aLVgFIbl7ZaIC5cxh1wEhfPUS5YteRZGo5WSAVosiPurDi8BHOhgZ
6QIDAQAB
-----END PUBLIC KEY-----";
    const RSA_CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIDFTCCAf2gAwIBAgIUAoG/JcDLabE6kEY8FL6VLeulKZowDQYJKoZIhvcNAQEL
BQAwGjEYMBYGA1UEAwwPcG9ydGN1bGxpcy10ZXN0MB4XDTI2MTEyNDAyNDU1NVoX
DTM2MTEyMTAyNDU1NVowGjEYMBYGA1UEAwwPcG9ydGN1bGxpcy10ZXN0MIIBIjAN
BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAk0MC+ElXJi7Xl1GWau4fzxfnhwwX
iAJ9dRNpxkgNprpsX6ffQD/hEVZgb4TjeV4oTY+HQag1YgRqF8DC9mYjS2f78ZCN
wv6yPDUOgS1jOv5sof9JwttE5S1sT4NgawxsRtbQA5gDkvX2y4F3jAL69M1poPhV
chUBmdCCtWf0rI/hGXtlTZgvNR3WPeRdnDCilUG0osiK7PV++Hoko+oTTMgsjhvS
WxRw7yHxqJgJSbLSbRRAMXq5w5LrbDHEigC+M+8fnX37ba88Q22aJ+uqF0AlfRk5
0d2aLVgFIbl7ZaIC5cxh1wEhfPUS5YteRZGo5WSAVosiPurDi8BHOhgZ6QIDAQAB
o1MwUTAdBgNVHQ4EFgQULtVuJqDP7rEEY+HNi4PGxfIBEWQwHwYDVR0jBBgwFoAU
LtVuJqDP7rEEY+HNi4PGxfIBEWQwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0B
AQsFAAOCAQEAQ7rTsHNdCR9HXKcr0DwZ0MOp7yLAF1ps4vkdPgdGLAYWhO1t3P3w
NJpSEOsCJEPNDHDtwugruPIhJ2jA6Qk+QV9SnLXkA8BpK/u6CIer6Sww5M5tP6cd
wLz9o0craxpqdofxW1kaag6Xp8Ds0bSDKsoLFjVPUmKqc8kcSoP/09BC+uMzHA+k
S+vaF1vlr5o6E5U15Ok9pfrGKDF6F2AyYb0UA4iPx3KLBp9SJrpE82Kf+zJKomPE
JFB6zgFrTtvMhNvigtUytz0tCeOWYxQgSbTl0RZDZ6wWQt0wXiYjdama9r6Bix0J
7Pw+pVtv8HcwROIVH6bYeqXJT1R/XoE6+Q==
-----END CERTIFICATE-----";
    const RSA_JWK: &str = r#"{"kty": "RSA", "n": "k0MC-ElXJi7Xl1GWau4fzxfnhwwXiAJ9dRNpxkgNprpsX6ffQD_hEVZgb4TjeV4oTY-HQag1YgRqF8DC9mYjS2f78ZCNwv6yPDUOgS1jOv5sof9JwttE5S1sT4NgawxsRtbQA5gDkvX2y4F3jAL69M1poPhVchUBmdCCtWf0rI_hGXtlTZgvNR3WPeRdnDCilUG0osiK7PV--Hoko-oTTMgsjhvSWxRw7yHxqJgJSbLSbRRAMXq5w5LrbDHEigC-M-8fnX37ba88Q22aJ-uqF0AlfRk50d2aLVgFIbl7ZaIC5cxh1wEhfPUS5YteRZGo5WSAVosiPurDi8BHOhgZ6Q", "e": "AQAB"}"#;
    const EC_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEBHO/6kFsjZEMyKWeYG416eHqFVV
W754HsxW2mVL6oh/iEj50tUDvMI1bY4TAUHEDqUtM1VZOHt34amy1QFrLQ==
-----END PUBLIC KEY-----";
    const EC_JWK: &str = r#"{"kty": "EC", "crv": "P-256", "x": "EBHO_6kFsjZEMyKWeYG416eHqFVVW754HsxW2mVL6og", "y": "f4hI-dLVA7zCNW2OEwFBxA6lLTNVWTh7d-GpstUBay0"}"#;

    #[test]
    fn public_key_signatures_verify() {
        let verify = |name: &str, token: &str, key: &str| call(name, json!([token, key]));
        for key in [RSA_PUBLIC_KEY, RSA_CERTIFICATE, RSA_JWK] {
            assert_eq!(
                verify("io.jwt.verify_rs256", RS256, key),
                Ok(json!(true)),
                "{key}"
            );
        }
        let set = format!(r#"{{"keys": [{EC_JWK}, {RSA_JWK}]}}"#);
        assert_eq!(verify("io.jwt.verify_rs256", RS256, &set), Ok(json!(true)));
        for key in [EC_PUBLIC_KEY, EC_JWK] {
            assert_eq!(
                verify("io.jwt.verify_es256", ES256, key),
                Ok(json!(true)),
                "{key}"
            );
        }
        // The wrong key, the wrong algorithm, a tampered payload.
        assert_eq!(
            verify("io.jwt.verify_rs256", RS256, EC_PUBLIC_KEY),
            Ok(json!(false))
        );
        assert_eq!(
            verify("io.jwt.verify_es256", RS256, RSA_PUBLIC_KEY),
            Ok(json!(false))
        );
        let tampered = RS256.replacen(".eyJzdWIi", ".eyJzdWJi", 1);
        assert_eq!(
            verify("io.jwt.verify_rs256", &tampered, RSA_PUBLIC_KEY),
            Ok(json!(false))
        );
        assert!(verify("io.jwt.verify_rs256", RS256, "not a key").is_err());
    }

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
