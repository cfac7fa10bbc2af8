//! Bundles from URLs: fetched from a static HTTP server on 127.0.0.1 (ETag, 304), polled,
//! and verified when signed (OPA's `.signatures.json`), with keys made for these tests.

#![cfg(feature = "rego")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use base64::Engine as _;
use common::Scratch;
use hmac::Mac as _;
use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine};
use portcullis_manifest::{CodeRegistry, Manifest, ManifestWatcher, ReloadOutcome};
use serde_json::{Value, json};
use sha2::Digest as _;

/// A test key pair made with `openssl genpkey -algorithm RSA` for these tests only.
const RSA_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC1ClaFO9q9Wj/b\nCx/LSQHsOABx7+4AoC8tGtV4t2jfgK9qtEOyoty+LVSRR6jH+yXwmkEB/Il+C8nQ\nycinzXRLW+j9ZO2uldDljYEd+YhoayFf2nhI/Rqh2ENB0DbMlq3vSLIvMMTFvGMY\nKcO/S8I8GhkTaUw88lJttHp2FVlMaQQyUHztuS1SJVQVo5+BgPdK+jMuI8bDb60o\nlZlUMoB4gVtqHLhOEwlSUQITf+97huSEbrBKCQ3bYDZq1Tf/YD8oqpQbFZGIGx9g\nwrp53MTTXeeGikjnXCNE9KBAUd/HJRGx1zXCLU1aOb8P/ErtfhBa/QgKY9Dz/vu/\nGMghQaAxAgMBAAECggEAOvh8mVaXWFGC9lNHznxgA3V0c6ifQpXq+ArDGVjI8PCm\ncx/340LYm5wBbXdFm6qLv7VHUqHTmXq2iOuJkFtEs91i5dNP9qv3SSbQNZbYH4cx\n7lqoDsJfP/PFaLUtfHPigUyROfztQ6mrL64/BFtlkBVCMMf+XOXkArckor0ugsww\nHIFc31W+HOcwo/li96oizvnQh9BB1GBq81pVIcuqHG2B/EvPP0LlNUiNPA4qCaTp\nlNLMR/Qaa7SaFC9lSHQ1MUgB7Si9d8hrIVDOlyJ7YHAXG8D3d+RfMvA2l+aoW9SP\n5NW4blTuWib2St+qBWbpsUAX0tHAejLGyg3YL1db3wKBgQDawJ/krv6odfWYvUfU\n0RzGm774kKkcQVc2F0o4aCFGcl99GmRIVctEII6emaFrcpBmjDlkwV0zjBOQngSS\n0nabRt0cIB72q/lrRYQ1HcKWaH5ylWRE68GT5YsfVsykl46R+XOD/h0MV4eBqdCt\nsaVjqau6V4SyA5uXL49v2j7n7wKBgQDT3dowyAewOLgooGmSQP8AbuYLIAn8tkUb\nh3LWrSjVh5KqolL10viu5J4QggNUh+YvqivkXQWMeMSBMOB7KDrZNfRO8pQw1P9s\n449ZMBQhlkKtqQJuucNthX5vbrNzjfpoajxnwaMCogli+mYBMtdWGikZbS3PHVfm\nCm3l7+TZ3wKBgF2zNMoXyy0Nme2a5jHagKDyBZMjI8zekCSzRS90Kwyp4Q0NSPdT\nCIZeC7kTxXjo0cGbPtpRmUKDNb40cXEShYtthziM6bZvY573X/IAlWEn0UHzi8eZ\n1IktQbJi07WM1ZzhZQGcz4SB2aFIxAIind1ayBxBcK1vri3MSXx314oxAoGBAIor\nQMRXb0wpcVBtbOwIn0S1DilrN5grdl5Bs071lo/K3oeRXPEcKTpFth+l6m4SQrgL\nDpzbXWcCy4RFT+CBl/9YBIAIC0TdY8arkSzlAfv1dn6ynfeABkdCq/YYB8fwa8H0\npngz/A8XhW+bRTK66Vwpq2v9m8ZaqJxJaOpvzJuZAoGBALHHA721qmC+7yD9oIZb\nUYvbnEUIog6wAsY0RDI3eUuScuC3EmK9Zw6wTLtMnJ0NAhbmq6FRf5MXHv/wA9xf\ng2DWs037I5T4Hd6CvR9yb+gMxeOapdxeS7htbr/ZC9zAWy10eDI2IhqPF4Zby+lY\nq9k6Tf2eqnhu1tynhd3GUqYI\n-----END PRIVATE KEY-----";
const RSA_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAtQpWhTvavVo/2wsfy0kB\n7DgAce/uAKAvLRrVeLdo34CvarRDsqLcvi1UkUeox/sl8JpBAfyJfgvJ0MnIp810\nS1vo/WTtrpXQ5Y2BHfmIaGshX9p4SP0aodhDQdA2zJat70iyLzDExbxjGCnDv0vC\nPBoZE2lMPPJSbbR6dhVZTGkEMlB87bktUiVUFaOfgYD3SvozLiPGw2+tKJWZVDKA\neIFbahy4ThMJUlECE3/ve4bkhG6wSgkN22A2atU3/2A/KKqUGxWRiBsfYMK6edzE\n013nhopI51wjRPSgQFHfxyURsdc1wi1NWjm/D/xK7X4QWv0ICmPQ8/77vxjIIUGg\nMQIDAQAB\n-----END PUBLIC KEY-----";

// ---- a static bundle server ----

#[derive(Clone)]
enum Answer {
    Bundle(Vec<u8>),
    Status(u16),
}

/// (path, If-None-Match) of every request a bundle server received.
type Requests = Arc<Mutex<Vec<(String, Option<String>)>>>;

struct BundleServer {
    addr: SocketAddr,
    answer: Arc<Mutex<(Answer, u32)>>,
    /// (path, If-None-Match) of every request.
    requests: Requests,
}

impl BundleServer {
    fn start(answer: Answer) -> BundleServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("an address");
        let state = Arc::new(Mutex::new((answer, 1)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (shared, seen) = (Arc::clone(&state), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream.try_clone().expect("a stream"));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                let mut if_none_match = None;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("if-none-match")
                    {
                        if_none_match = Some(value.trim().to_owned());
                    }
                }
                seen.lock().unwrap().push((path, if_none_match.clone()));
                let (answer, version) = shared.lock().unwrap().clone();
                let etag = format!("\"v{version}\"");
                let (head, body) = match answer {
                    Answer::Bundle(_) if if_none_match.as_deref() == Some(etag.as_str()) => (
                        format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\n"),
                        Vec::new(),
                    ),
                    Answer::Bundle(bytes) => (
                        format!(
                            "HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Type: application/gzip\r\n"
                        ),
                        bytes,
                    ),
                    Answer::Status(code) => (format!("HTTP/1.1 {code} Oops\r\n"), b"oops".to_vec()),
                };
                let head = format!(
                    "{head}Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        BundleServer {
            addr,
            answer: state,
            requests,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/bundles/pii.tar.gz", self.addr)
    }

    /// Serves `answer` from now on, under a new ETag.
    fn set(&self, answer: Answer) {
        let mut state = self.answer.lock().unwrap();
        state.0 = answer;
        state.1 += 1;
    }

    fn requests(&self) -> Vec<(String, Option<String>)> {
        self.requests.lock().unwrap().clone()
    }
}

// ---- bundles and signatures ----

fn fixture_wasm() -> Vec<u8> {
    let path = std::env::var_os("PORTCULLIS_OPA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"))
        .join("rego-wasm/no-ssn-input.tar.gz");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    for entry in archive.entries().expect("a tar archive") {
        let mut entry = entry.expect("an entry");
        if entry.path().expect("a path").ends_with("policy.wasm") {
            let mut wasm = Vec::new();
            entry.read_to_end(&mut wasm).expect("the module");
            return wasm;
        }
    }
    panic!("the fixture has no policy.wasm");
}

/// The files of a bundle deciding as the no-SSN fixture, at `revision`; JSON in canonical form.
fn files(revision: u32) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            ".manifest".to_owned(),
            format!(r#"{{"rego_version":0,"revision":"{revision}","roots":[""],"wasm":[{{"entrypoint":"aps/input/decision","module":"/policy.wasm"}}]}}"#).into_bytes(),
        ),
        ("data.json".to_owned(), format!(r#"{{"revision":{revision}}}"#).into_bytes()),
        ("policy.wasm".to_owned(), fixture_wasm()),
    ]
}

fn tar_gz(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, name, &bytes[..])
            .expect("appended");
    }
    builder
        .into_inner()
        .expect("a tar")
        .finish()
        .expect("a gzip")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

enum Signer<'a> {
    Rsa,
    Ec(&'a ring::signature::EcdsaKeyPair),
    Hmac(&'a str),
}

/// A JWT over `payload` signed as OPA signs bundles.
fn token(signer: &Signer<'_>, payload: &Value) -> String {
    let alg = match signer {
        Signer::Rsa => "RS256",
        Signer::Ec(_) => "ES256",
        Signer::Hmac(_) => "HS256",
    };
    let message = format!(
        "{}.{}",
        b64(json!({"alg": alg, "typ": "JWT"}).to_string().as_bytes()),
        b64(payload.to_string().as_bytes())
    );
    let rng = ring::rand::SystemRandom::new();
    let signature = match signer {
        Signer::Rsa => {
            let der = pem_body(RSA_PRIVATE);
            let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).expect("an RSA key");
            let mut signature = vec![0; pair.public().modulus_len()];
            pair.sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &rng,
                message.as_bytes(),
                &mut signature,
            )
            .expect("signed");
            signature
        }
        Signer::Ec(pair) => pair
            .sign(&rng, message.as_bytes())
            .expect("signed")
            .as_ref()
            .to_vec(),
        Signer::Hmac(secret) => {
            let mut mac =
                hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("a key");
            mac.update(message.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
    };
    format!("{message}.{}", b64(&signature))
}

fn pem_body(pem: &str) -> Vec<u8> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM")
}

fn listing(files: &[(String, Vec<u8>)]) -> Value {
    Value::from(
        files
            .iter()
            .map(|(name, bytes)| json!({"name": name, "hash": sha256_hex(bytes), "algorithm": "SHA-256"}))
            .collect::<Vec<_>>(),
    )
}

/// A bundle with `.signatures.json` holding `token`.
fn signed(files: &[(String, Vec<u8>)], token: &str) -> Vec<u8> {
    let mut all = files.to_vec();
    all.push((
        ".signatures.json".to_owned(),
        json!({"signatures": [token]}).to_string().into_bytes(),
    ));
    tar_gz(&all)
}

fn ec_pair() -> (ring::signature::EcdsaKeyPair, String) {
    use ring::signature::KeyPair as _;
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("a key");
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("a key");
    // The SubjectPublicKeyInfo of a P-256 point.
    let mut spki = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    spki.extend_from_slice(pair.public_key().as_ref());
    let body = base64::engine::general_purpose::STANDARD.encode(spki);
    (
        pair,
        format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"),
    )
}

// ---- helpers ----

fn manifest(scratch: &Scratch, url: &str, extra: &str) -> PathBuf {
    std::fs::write(scratch.path("rsa.pem"), RSA_PUBLIC).unwrap();
    scratch.write(
        "portcullis.yaml",
        &format!("input:\n  - rego: {url}\n    poll: 100ms\n{extra}"),
    )
}

fn keys_section(scratch: &Scratch, ec_public: &str) -> String {
    std::fs::write(scratch.path("ec.pem"), ec_public).unwrap();
    "keys:\n  rsa: { algorithm: RS256, file: rsa.pem }\n  ec: { algorithm: ES256, file: ec.pem }\n  shared: { algorithm: HS256, secret_env: PORTCULLIS_TEST_BUNDLE_SECRET }\n".to_owned()
}

fn load(
    path: &PathBuf,
) -> Result<portcullis_manifest::LoadedManifest, portcullis_manifest::ManifestErrors> {
    Manifest::load(path, &CodeRegistry::new())
}

fn decide(engine: &PolicyEngine, content: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let context = InputContext::new(vec![Message::user(content)], Metadata::new("a", "s"));
    runtime
        .block_on(engine.evaluate_input(&context))
        .map(|_| ())
        .map_err(|error| error.to_string())
}

// ---- tests ----

#[test]
fn an_unsigned_bundle_from_a_url_loads_and_decides() {
    let server = BundleServer::start(Answer::Bundle(tar_gz(&files(1))));
    let scratch = Scratch::new("url-plain");
    let path = manifest(&scratch, &server.url(), "");
    let loaded = load(&path).expect("loads");
    assert_eq!(
        loaded
            .policy_set()
            .input()
            .policies()
            .next()
            .map(|p| p.id().to_owned()),
        Some("pii".to_owned())
    );
    let engine = PolicyEngine::builder()
        .policy_set(loaded.into_policy_set())
        .build();
    assert!(decide(&engine, "hello").is_ok());
    assert!(decide(&engine, "my SSN is 123-45-6789").is_err());
    assert_eq!(server.requests()[0].0, "/bundles/pii.tar.gz");
}

/// Loads a bundle signed with `signer`, verified with the key `key`.
fn load_signed(key: &str, signer: &Signer<'_>, ec_public: &str) {
    let files = files(1);
    let bundle = signed(
        &files,
        &token(signer, &json!({"files": listing(&files), "scope": "write"})),
    );
    let server = BundleServer::start(Answer::Bundle(bundle));
    let scratch = Scratch::new("url-signed");
    let extra = format!(
        "    verify: {key}\n    scope: write\n{}",
        keys_section(&scratch, ec_public)
    );
    let path = manifest(&scratch, &server.url(), &extra);
    let loaded = load(&path).unwrap_or_else(|errors| panic!("{key}: {errors}"));
    let engine = PolicyEngine::builder()
        .policy_set(loaded.into_policy_set())
        .build();
    assert!(decide(&engine, "my SSN is 123-45-6789").is_err());
}

#[test]
fn signed_bundles_load_with_their_key_in_each_algorithm() {
    let (ec, ec_public) = ec_pair();
    load_signed("rsa", &Signer::Rsa, &ec_public);
    load_signed("ec", &Signer::Ec(&ec), &ec_public);
    // HS256: its secret comes from the environment, set for a child process only.
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hs256_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SECRET_VAR, SECRET)
        .output()
        .expect("the child test runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "run by signed_bundles_load_with_their_key_in_each_algorithm with its secret set"]
fn hs256_child() {
    assert_eq!(std::env::var(SECRET_VAR).as_deref(), Ok(SECRET));
    let (_, ec_public) = ec_pair();
    load_signed("shared", &Signer::Hmac(SECRET), &ec_public);
}

const SECRET_VAR: &str = "PORTCULLIS_TEST_BUNDLE_SECRET";
const SECRET: &str = "a shared secret for bundle tests";

#[test]
fn a_bundle_that_fails_verification_is_never_loaded() {
    let (ec, ec_public) = ec_pair();
    let (_, other_public) = ec_pair();
    let good = files(1);
    let good_token = token(&Signer::Ec(&ec), &json!({"files": listing(&good)}));
    let mut tampered = good.clone();
    tampered[1].1 = br#"{"revision":666}"#.to_vec();
    let mut extra_file = good.clone();
    extra_file.push(("extra.rego".to_owned(), b"package x".to_vec()));
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "tampered data",
            signed(&tampered, &good_token),
            "ec",
            "data.json does not have the hash",
        ),
        (
            "a file not signed",
            signed(&extra_file, &good_token),
            "ec",
            "extra.rego is in the bundle but not in its signature",
        ),
        (
            "unsigned, a key required",
            tar_gz(&good),
            "ec",
            "has no .signatures.json",
        ),
        (
            "signed with another key",
            signed(&good, &good_token),
            "other",
            "does not verify",
        ),
        (
            "another algorithm",
            signed(&good, &good_token),
            "rsa",
            "signed with `ES256`",
        ),
        (
            "wrong scope",
            signed(&good, &good_token),
            "ec-scoped",
            "scope is missing",
        ),
        (
            "garbage",
            b"this is not a bundle".to_vec(),
            "ec",
            "not a gzip tar archive",
        ),
    ];
    for (what, bundle, key, expected) in cases {
        let server = BundleServer::start(Answer::Bundle(bundle));
        let scratch = Scratch::new("url-refused");
        std::fs::write(scratch.path("other.pem"), &other_public).unwrap();
        let (key_name, scope) = match key {
            "ec-scoped" => ("ec", "    scope: write\n"),
            other => (other, ""),
        };
        let extra = format!(
            "    verify: {key_name}\n{scope}{}  other: {{ algorithm: ES256, file: other.pem }}\n",
            keys_section(&scratch, &ec_public)
        );
        let path = manifest(&scratch, &server.url(), &extra);
        let errors = load(&path).expect_err(what).to_string();
        assert!(errors.contains(expected), "{what}: {errors}");
        assert!(errors.contains("portcullis.yaml:2:5"), "{what}: {errors}");
    }
    // Signed, but the entry names no key: refused too.
    let server = BundleServer::start(Answer::Bundle(signed(&good, &good_token)));
    let scratch = Scratch::new("url-unverified");
    let errors = load(&manifest(&scratch, &server.url(), ""))
        .expect_err("refused")
        .to_string();
    assert!(errors.contains("names no key"), "{errors}");
}

#[test]
fn json_files_are_hashed_in_canonical_form() {
    let (ec, ec_public) = ec_pair();
    let canonical = files(1);
    let signature = token(&Signer::Ec(&ec), &json!({"files": listing(&canonical)}));
    let mut spaced = canonical.clone();
    spaced[0].1 = br#"{ "wasm": [{"module": "/policy.wasm", "entrypoint": "aps/input/decision"}], "roots": [""], "revision": "1", "rego_version": 0 }"#.to_vec();
    let server = BundleServer::start(Answer::Bundle(signed(&spaced, &signature)));
    let scratch = Scratch::new("url-canonical");
    let extra = format!("    verify: ec\n{}", keys_section(&scratch, &ec_public));
    load(&manifest(&scratch, &server.url(), &extra))
        .expect("the same document, other whitespace and key order");
}

#[test]
fn a_server_error_or_garbage_is_a_load_error_with_its_place() {
    for answer in [Answer::Status(500), Answer::Status(404)] {
        let server = BundleServer::start(answer);
        let scratch = Scratch::new("url-500");
        let errors = load(&manifest(&scratch, &server.url(), ""))
            .expect_err("refused")
            .to_string();
        assert!(errors.contains("answered"), "{errors}");
        assert!(errors.contains("portcullis.yaml:2:5"), "{errors}");
    }
    let scratch = Scratch::new("url-down");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/b.tar.gz", listener.local_addr().unwrap());
    drop(listener);
    let errors = load(&manifest(&scratch, &url, ""))
        .expect_err("refused")
        .to_string();
    assert!(errors.contains("failed"), "{errors}");
}

#[test]
fn keys_are_checked_with_their_place() {
    let scratch = Scratch::new("url-keys");
    let path = scratch.write(
        "portcullis.yaml",
        "input:\n  - rego: http://127.0.0.1:9/b.tar.gz\n    verify: relase\nkeys:\n  release: { algorithm: RS265, file: k.pem }\n  hs: { algorithm: HS256, file: k.pem }\n  es: { algorithm: ES256, secret_env: X }\n  none: { algorithm: RS256 }\n  release2: { algorithm: RS256, file: k.pem }\n",
    );
    let errors = Manifest::read(&path).expect_err("invalid").to_string();
    for expected in [
        "portcullis.yaml:3:13: error: `verify` names no key: `relase` is not under `keys`",
        "portcullis.yaml:5:25: error: the key `release`: `algorithm` must be RS256, ES256 or HS256",
        "portcullis.yaml:6:33: error: the key `hs`: an HS256 secret comes from the environment, not a file",
        "portcullis.yaml:7:39: error: the key `es`: `secret_env` is for HS256 keys",
        "portcullis.yaml:8:9: error: the key `none` needs `file`",
    ] {
        assert!(
            errors.contains(expected),
            "missing {expected:?} in\n{errors}"
        );
    }
    // URL-only keys on a file bundle.
    let path = scratch.write("file.yaml", "input:\n  - rego: b.tar.gz\n    poll: 1s\n");
    let errors = Manifest::read(&path).expect_err("invalid").to_string();
    assert!(
        errors
            .contains("file.yaml:3:5: error: `poll` applies to a bundle from a URL, not to a file"),
        "{errors}"
    );
}

#[test]
fn the_watcher_polls_with_the_etag_and_keeps_the_last_good_bundle() {
    let server = BundleServer::start(Answer::Bundle(tar_gz(&files(1))));
    let scratch = Scratch::new("url-watch");
    let path = manifest(&scratch, &server.url(), "");
    let loaded = load(&path).expect("loads");
    let files_watched = loaded.files().to_vec();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(loaded.into_policy_set())
            .build(),
    );
    let (sender, outcomes) = mpsc::channel();
    let sender = Mutex::new(sender);
    let watcher = ManifestWatcher::builder(&path, Arc::clone(&engine))
        .interval(Duration::from_millis(50))
        .files(files_watched)
        .on_reload(move |outcome: &ReloadOutcome| {
            let _ = sender.lock().unwrap().send(match outcome {
                ReloadOutcome::Reloaded { .. } => Ok(()),
                ReloadOutcome::Failed(errors) => Err(errors.to_string()),
            });
        })
        .spawn();
    // Unchanged: 304s, no reload.
    std::thread::sleep(Duration::from_millis(500));
    assert!(outcomes.try_recv().is_err(), "reloaded without a change");
    let asked = server.requests();
    assert!(asked.len() >= 3, "{asked:?}");
    assert!(
        asked[1..]
            .iter()
            .all(|(_, etag)| etag.as_deref() == Some("\"v1\"")),
        "{asked:?}"
    );

    // A new bundle: reloaded.
    let before = engine.policy_set();
    server.set(Answer::Bundle(tar_gz(&files(2))));
    let outcome = outcomes
        .recv_timeout(Duration::from_secs(10))
        .expect("a reload");
    assert_eq!(outcome, Ok(()));
    assert!(!Arc::ptr_eq(&before, &engine.policy_set()));

    // Garbage, then a 500: failed reloads that keep the set in use.
    let kept = engine.policy_set();
    server.set(Answer::Bundle(b"<html>not a bundle</html>".to_vec()));
    let failure = outcomes
        .recv_timeout(Duration::from_secs(10))
        .expect("a failed reload");
    assert!(
        failure
            .as_ref()
            .is_err_and(|e| e.contains("the bundle in use stays")),
        "{failure:?}"
    );
    server.set(Answer::Status(500));
    let failure = outcomes
        .recv_timeout(Duration::from_secs(10))
        .expect("a failed reload");
    assert!(
        failure.as_ref().is_err_and(|e| e.contains("500")),
        "{failure:?}"
    );
    assert!(Arc::ptr_eq(&kept, &engine.policy_set()));
    assert!(decide(&engine, "my SSN is 123-45-6789").is_err());
    watcher.stop();
}

/// Two bundle servers polled in the same rounds; one starts failing, then the other serves a
/// new bundle. The failing URL must not hold the new bundle back: it goes in, the failing
/// entry keeps its last good bundle, and the failure is reported.
#[test]
fn a_failing_url_does_not_hold_back_a_new_bundle_from_another() {
    let first = BundleServer::start(Answer::Bundle(tar_gz(&files(1))));
    let second = BundleServer::start(Answer::Bundle(tar_gz(&files(1))));
    let scratch = Scratch::new("url-two");
    let path = scratch.write(
        "portcullis.yaml",
        &format!(
            "input:\n  - rego: {}\n    id: first\n    poll: 100ms\n  - rego: {}\n    id: second\n    poll: 100ms\n",
            first.url(),
            second.url()
        ),
    );
    let loaded = load(&path).expect("loads");
    let files_watched = loaded.files().to_vec();
    let engine = Arc::new(
        PolicyEngine::builder()
            .policy_set(loaded.into_policy_set())
            .build(),
    );
    let (sender, outcomes) = mpsc::channel();
    let sender = Mutex::new(sender);
    let watcher = ManifestWatcher::builder(&path, Arc::clone(&engine))
        .interval(Duration::from_millis(50))
        .files(files_watched)
        .on_reload(move |outcome: &ReloadOutcome| {
            let _ = sender.lock().unwrap().send(match outcome {
                ReloadOutcome::Reloaded { .. } => Ok(()),
                ReloadOutcome::Failed(errors) => Err(errors.to_string()),
            });
        })
        .spawn();

    // The second server fails: reported, nothing reloaded.
    second.set(Answer::Status(503));
    let failure = outcomes
        .recv_timeout(Duration::from_secs(10))
        .expect("a failed poll");
    assert!(
        failure.as_ref().is_err_and(|e| e.contains("503")),
        "{failure:?}"
    );

    // While it still fails, the first serves a new bundle: it goes in.
    let before = engine.policy_set();
    first.set(Answer::Bundle(tar_gz(&files(2))));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let reloaded = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match outcomes.recv_timeout(left) {
            Ok(Ok(())) => break true,
            Ok(Err(error)) => {
                assert!(error.contains("503"), "only the second URL fails: {error}");
                assert!(!error.contains(&first.url()), "{error}");
            }
            Err(_) => break false,
        }
    };
    assert!(
        reloaded,
        "the first URL's new bundle was held back by the second's failure"
    );
    assert!(!Arc::ptr_eq(&before, &engine.policy_set()));
    // The failure is still reported after the reload, and the second entry is still there,
    // on its last good bundle.
    let failure = outcomes
        .recv_timeout(Duration::from_secs(10))
        .expect("the failure of the second URL");
    assert!(
        failure.as_ref().is_err_and(|e| e.contains("503")),
        "{failure:?}"
    );
    let ids: Vec<String> = engine
        .policy_set()
        .input()
        .policies()
        .map(|policy| policy.id().to_owned())
        .collect();
    assert_eq!(ids, ["first", "second"]);
    assert!(decide(&engine, "my SSN is 123-45-6789").is_err());
    assert!(decide(&engine, "hello").is_ok());
    watcher.stop();
}
