//! `keys:`, and the signatures of bundles in OPA's format (`.signatures.json`), as the crate
//! docs describe them.

use std::path::{Path, PathBuf};

use crate::diagnostic::closest;
use crate::reader::Reader;
use crate::yaml::{Node, NodeValue, Position};

/// A signature algorithm of bundle signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SigningAlgorithm {
    /// RSA PKCS #1 v1.5 with SHA-256.
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// HMAC with SHA-256 (a shared secret).
    Hs256,
}

impl SigningAlgorithm {
    /// The name JSON Web Tokens use (`RS256`, `ES256`, `HS256`).
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::Rs256 => "RS256",
            SigningAlgorithm::Es256 => "ES256",
            SigningAlgorithm::Hs256 => "HS256",
        }
    }
}

/// Where a key's material is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// `file`: a PEM public key or certificate (RS256, ES256), resolved against the manifest's
    /// folder.
    File(PathBuf),
    /// `secret_env`: the environment variable holding the shared secret (HS256).
    Env(String),
}

/// One key under `keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BundleKey {
    /// The key's name (what `verify` names).
    pub name: String,
    /// `algorithm`.
    pub algorithm: SigningAlgorithm,
    /// `file` or `secret_env`.
    pub source: KeySource,
    /// Where the key is in the manifest.
    pub position: Position,
}

impl BundleKey {
    /// The key's material: the PEM text of the file, or the secret from the environment
    /// (read only where bundles are verified, with the `rego` feature).
    #[cfg(feature = "rego")]
    pub(crate) fn material(&self) -> Result<String, String> {
        match &self.source {
            KeySource::File(path) => std::fs::read_to_string(path).map_err(|error| {
                format!(
                    "the key `{}` cannot be read from {}: {error}",
                    self.name,
                    path.display()
                )
            }),
            KeySource::Env(variable) => match std::env::var(variable) {
                Ok(secret) if !secret.is_empty() => Ok(secret),
                _ => Err(format!(
                    "the environment variable {variable} (`secret_env` of the key `{}`) is not set",
                    self.name
                )),
            },
        }
    }
}

const KEY_FIELDS: &[&str] = &["algorithm", "file", "secret_env"];

/// Reads `keys:`; every problem goes to the reader's report.
pub(crate) fn read_keys(reader: &mut Reader<'_>, base: &Path, node: &Node) -> Vec<BundleKey> {
    let NodeValue::Map(entries) = &node.value else {
        let diagnostic = reader
            .error(
                node.position,
                format!("`keys` must be a map of key names, not {}", node.kind()),
            )
            .with_help(
                "for example `keys: { release: { algorithm: RS256, file: keys/release.pem } }`",
            );
        reader.push(diagnostic);
        return Vec::new();
    };
    let mut keys = Vec::new();
    for (name_node, value) in entries {
        let Some(name) = name_node.as_str() else {
            let diagnostic = reader.error(name_node.position, "a key's name must be a string");
            reader.push(diagnostic);
            continue;
        };
        let what = format!("the key `{name}`");
        let Some(fields) = reader.map(value, &what, KEY_FIELDS) else {
            continue;
        };
        let mut algorithm = None;
        let mut file = None;
        let mut secret_env = None;
        let mut ok = true;
        for (field, _, value) in &fields {
            match *field {
                "algorithm" => match value.as_str() {
                    Some("RS256") => algorithm = Some(SigningAlgorithm::Rs256),
                    Some("ES256") => algorithm = Some(SigningAlgorithm::Es256),
                    Some("HS256") => algorithm = Some(SigningAlgorithm::Hs256),
                    other => {
                        let help = other
                            .and_then(|text| closest(text, &["RS256", "ES256", "HS256"]))
                            .map(|suggestion| format!("did you mean `{suggestion}`?"));
                        let diagnostic = reader
                            .error(
                                value.position,
                                format!("{what}: `algorithm` must be RS256, ES256 or HS256"),
                            )
                            .with_optional_help(help);
                        reader.push(diagnostic);
                        ok = false;
                    }
                },
                "file" => match reader.string(value, "`file`") {
                    Some(path) => file = Some((base.join(path), value.position)),
                    None => ok = false,
                },
                _ => match reader.string(value, "`secret_env`") {
                    Some(variable) => secret_env = Some((variable, value.position)),
                    None => ok = false,
                },
            }
        }
        let Some(algorithm) = algorithm else {
            if ok {
                let diagnostic = reader
                    .error(value.position, format!("{what} needs `algorithm`"))
                    .with_help(
                        "RS256 or ES256 with a public key `file`, HS256 with a `secret_env`",
                    );
                reader.push(diagnostic);
            }
            continue;
        };
        let source = match (algorithm, file, secret_env) {
            (SigningAlgorithm::Hs256, None, Some((variable, _))) => KeySource::Env(variable),
            (SigningAlgorithm::Hs256, Some((_, at)), _) => {
                let diagnostic = reader
                    .error(
                        at,
                        format!("{what}: an HS256 secret comes from the environment, not a file"),
                    )
                    .with_help(
                        "write `secret_env: VARIABLE` and export the secret in that variable",
                    );
                reader.push(diagnostic);
                continue;
            }
            (SigningAlgorithm::Rs256 | SigningAlgorithm::Es256, Some((path, _)), None) => {
                KeySource::File(path)
            }
            (_, _, Some((_, at))) => {
                let diagnostic = reader
                    .error(at, format!("{what}: `secret_env` is for HS256 keys"))
                    .with_help(format!(
                        "an {} key is a public key: name its PEM file with `file`",
                        algorithm.as_str()
                    ));
                reader.push(diagnostic);
                continue;
            }
            (_, None, None) => {
                let needs = if algorithm == SigningAlgorithm::Hs256 {
                    "`secret_env`"
                } else {
                    "`file` (a PEM public key or certificate)"
                };
                let diagnostic = reader.error(value.position, format!("{what} needs {needs}"));
                reader.push(diagnostic);
                continue;
            }
        };
        if ok {
            keys.push(BundleKey {
                name: name.to_owned(),
                algorithm,
                source,
                position: name_node.position,
            });
        }
    }
    keys
}

/// Checks the signature of a bundle (`.tar.gz` bytes) as the module docs say. `key` is the
/// configured key with its material, `None` when the entry names none.
#[cfg(feature = "rego")]
pub(crate) fn verify_bundle(
    bytes: &[u8],
    key: Option<(&BundleKey, &str)>,
    scope: Option<&str>,
) -> Result<(), String> {
    use std::collections::BTreeMap;
    use std::io::Read;

    use serde_json::Value;

    const SIGNATURES: &str = ".signatures.json";
    /// A bundle larger than this once unpacked is refused (a zip bomb cannot exhaust memory).
    const MAX_UNPACKED: u64 = 512 * 1024 * 1024;

    if key.is_none() && !bytes.starts_with(&[0x1f, 0x8b]) {
        // Not an archive (a bare module, or garbage): nothing signed; opening it decides.
        return Ok(());
    }
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let decoder = flate2::read::GzDecoder::new(bytes);
    let mut archive = tar::Archive::new(decoder.take(MAX_UNPACKED));
    let entries = archive
        .entries()
        .map_err(|error| format!("not a gzip tar archive: {error}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|error| format!("not a gzip tar archive: {error}"))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry
            .path()
            .map_err(|error| format!("a file name of the archive cannot be read: {error}"))?
            .to_string_lossy()
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_owned();
        let mut content = Vec::new();
        entry
            .read_to_end(&mut content)
            .map_err(|error| format!("{name} cannot be read from the archive: {error}"))?;
        files.insert(name, content);
    }
    let signatures = files.remove(SIGNATURES);
    let (key, material) = match (key, signatures.as_ref()) {
        (None, None) => return Ok(()),
        (None, Some(_)) => {
            return Err(format!(
                "the bundle is signed ({SIGNATURES}) but the entry names no key to verify it: add `verify: <key>`"
            ));
        }
        (Some(_), None) => {
            return Err(format!(
                "the bundle has no {SIGNATURES}: it is not signed, and its entry requires a signature"
            ));
        }
        (Some(key), Some(_)) => key,
    };
    let signatures: Value = signatures
        .as_deref()
        .and_then(|bytes| serde_json::from_slice(bytes).ok())
        .ok_or_else(|| format!("{SIGNATURES} is not JSON"))?;
    let token = match signatures.get("signatures") {
        Some(Value::Array(tokens)) if tokens.len() == 1 => tokens[0].as_str(),
        Some(Value::Array(tokens)) if tokens.len() > 1 => {
            return Err(format!(
                "{SIGNATURES} holds {} signatures; one is expected",
                tokens.len()
            ));
        }
        _ => None,
    }
    .ok_or_else(|| format!("{SIGNATURES} must be {{\"signatures\": [\"<JWT>\"]}}"))?;
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the signature is not a JSON Web Token (three parts)".to_owned());
    };
    let decode = |part: &str, what: &str| -> Result<Value, String> {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .filter(Value::is_object)
            .ok_or_else(|| format!("the signature's {what} is not a JSON object"))
    };
    let header = decode(header, "header")?;
    let algorithm = header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if algorithm != key.algorithm.as_str() {
        return Err(format!(
            "the bundle is signed with `{algorithm}`, the key `{}` is {}",
            key.name,
            key.algorithm.as_str()
        ));
    }
    match portcullis_rego::verify_jwt(token, algorithm, material) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "the signature does not verify with the key `{}`",
                key.name
            ));
        }
        Err(message) => return Err(format!("the signature cannot be checked: {message}")),
    }
    let payload = decode(payload, "payload")?;
    if let Some(expected) = scope {
        let given = payload.get("scope").and_then(Value::as_str);
        if given != Some(expected) {
            return Err(format!(
                "the signature's scope is {}, `{expected}` is required",
                given.map_or_else(|| "missing".to_owned(), |given| format!("`{given}`"))
            ));
        }
    }
    let Some(Value::Array(listed)) = payload.get("files") else {
        return Err("the signature lists no `files`".to_owned());
    };
    let mut seen = std::collections::BTreeSet::new();
    for item in listed {
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a listed file has no `name`")?;
        let name = name.trim_start_matches("./").trim_start_matches('/');
        let hash = item
            .get("hash")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the listed file {name} has no `hash`"))?;
        let algorithm = item
            .get("algorithm")
            .and_then(Value::as_str)
            .unwrap_or("SHA-256");
        let Some(content) = files.get(name) else {
            return Err(format!(
                "the signature lists {name}, which the bundle does not hold"
            ));
        };
        if !seen.insert(name.to_owned()) {
            return Err(format!("the signature lists {name} twice"));
        }
        let digest = file_digest(name, content, algorithm)?;
        if !digest.eq_ignore_ascii_case(hash) {
            return Err(format!("{name} does not have the hash the signature lists"));
        }
    }
    if let Some(unlisted) = files.keys().find(|name| !seen.contains(*name)) {
        return Err(format!(
            "{unlisted} is in the bundle but not in its signature"
        ));
    }
    Ok(())
}

/// The lowercase hex digest of one file: JSON files (`.manifest` included) in canonical form.
#[cfg(feature = "rego")]
fn file_digest(name: &str, content: &[u8], algorithm: &str) -> Result<String, String> {
    use sha2::Digest as _;
    let structured = name.ends_with(".json") || name.rsplit('/').next() == Some(".manifest");
    let canonical;
    let bytes = if structured {
        let value: serde_json::Value = serde_json::from_slice(content)
            .map_err(|error| format!("{name} is not JSON: {error}"))?;
        canonical = canonical_json(&value);
        canonical.as_bytes()
    } else {
        content
    };
    let digest = match algorithm {
        "SHA-256" | "SHA256" => sha2::Sha256::digest(bytes).to_vec(),
        "SHA-384" | "SHA384" => sha2::Sha384::digest(bytes).to_vec(),
        "SHA-512" | "SHA512" => sha2::Sha512::digest(bytes).to_vec(),
        other => {
            return Err(format!(
                "{name} is hashed with `{other}`; SHA-256, SHA-384 or SHA-512 is required"
            ));
        }
    };
    Ok(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// JSON without whitespace, the keys of every object sorted.
#[cfg(feature = "rego")]
fn canonical_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|key| {
                    format!(
                        "{}:{}",
                        Value::String(key.clone()),
                        canonical_json(&map[key.as_str()])
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}
