//! Bundles from a URL: `rego: https://...` entries, fetched from any HTTP server or object
//! store, kept with their `ETag`, and polled with `If-None-Match`.
//!
//! The bundles of a process are kept in one cache, by URL: a reload of the manifest reuses the
//! bundle fetched last (and checks its signature again) instead of fetching it again;
//! [`ManifestWatcher`](crate::ManifestWatcher) asks each URL for a new bundle every `poll`
//! interval. A `304 Not Modified` keeps the bundle in use; a new bundle is verified (when the
//! entry names a key) and opened before it replaces the old one, and one that fails either
//! never replaces it.

use std::time::Duration;

/// How often a bundle URL is polled when its entry sets no `poll`.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(60);

/// The id of a bundle from a URL: its file name without `.tar.gz`, `.tgz` or `.wasm`.
pub(crate) fn url_bundle_id(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let id = crate::bundle_id(std::path::Path::new(name));
    if id.is_empty() || id.contains(':') {
        "bundle".to_owned()
    } else {
        id
    }
}

#[cfg(feature = "rego")]
pub(crate) use fetching::{Refresh, build, refresh};

#[cfg(not(feature = "rego"))]
pub(crate) fn build<C: portcullis_engine::PolicyContext>(
    _: &crate::Manifest,
    _: &crate::PolicySource,
) -> Result<Box<dyn portcullis_engine::Policy<C>>, (String, Option<String>)> {
    Err((
        "this build cannot load `rego` policies".to_owned(),
        Some("build with the `rego` feature".to_owned()),
    ))
}

#[cfg(feature = "rego")]
mod fetching {
    use std::collections::HashMap;
    use std::io::Read;
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};
    use std::time::Duration;

    use portcullis_engine::error::error_chain;
    use portcullis_engine::{Policy, PolicyContext};
    use portcullis_rego::{RegoBundle, RegoPolicy};

    use crate::signing::verify_bundle;
    use crate::{Manifest, PolicySource};

    /// The largest bundle fetched.
    const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;
    /// How long one fetch may take.
    const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

    /// The bundle in use for a URL, with its `ETag`.
    struct Cached {
        etag: Option<String>,
        bytes: Arc<Vec<u8>>,
    }

    fn cache() -> &'static Mutex<HashMap<String, Cached>> {
        static CACHE: OnceLock<Mutex<HashMap<String, Cached>>> = OnceLock::new();
        CACHE.get_or_init(|| Mutex::new(HashMap::new()))
    }

    /// What a URL answered.
    enum Fetched {
        NotModified,
        New {
            etag: Option<String>,
            bytes: Vec<u8>,
        },
    }

    fn client() -> Result<&'static reqwest::blocking::Client, String> {
        static CLIENT: OnceLock<Result<reqwest::blocking::Client, String>> = OnceLock::new();
        CLIENT
            .get_or_init(|| {
                reqwest::blocking::Client::builder()
                    .timeout(FETCH_TIMEOUT)
                    .build()
                    .map_err(|error| format!("no HTTP client: {error}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn fetch(url: &str, token: Option<&str>, etag: Option<&str>) -> Result<Fetched, String> {
        let mut request = client()?.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let response = request
            .send()
            .map_err(|error| format!("GET {url} failed: {}", error_chain(&error)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(Fetched::NotModified);
        }
        if !status.is_success() {
            return Err(format!("GET {url} answered {status}"));
        }
        let etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let mut bytes = Vec::new();
        response
            .take(MAX_BUNDLE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|error| format!("GET {url}: the body cannot be read: {error}"))?;
        if bytes.len() as u64 > MAX_BUNDLE_BYTES {
            return Err(format!(
                "GET {url}: the bundle is larger than {MAX_BUNDLE_BYTES} bytes"
            ));
        }
        Ok(Fetched::New { etag, bytes })
    }

    /// What an entry needs to fetch and check its bundle.
    struct Spec<'a> {
        url: &'a str,
        token: Option<String>,
        key: Option<(crate::BundleKey, String)>,
        scope: Option<&'a str>,
    }

    fn spec<'a>(manifest: &Manifest, source: &'a PolicySource) -> Result<Spec<'a>, String> {
        let PolicySource::RegoUrl {
            url,
            verify,
            scope,
            bearer_token_env,
            ..
        } = source
        else {
            return Err("not a bundle from a URL".to_owned());
        };
        let token = match bearer_token_env {
            Some(variable) => match std::env::var(variable) {
                Ok(token) if !token.is_empty() => Some(token),
                _ => {
                    return Err(format!(
                        "the environment variable {variable} (`bearer_token_env`) is not set"
                    ));
                }
            },
            None => None,
        };
        let key = match verify {
            Some(name) => {
                let key = manifest
                    .keys
                    .iter()
                    .find(|key| &key.name == name)
                    .ok_or_else(|| {
                        format!("`verify` names no key: `{name}` is not under `keys`")
                    })?;
                Some((key.clone(), key.material()?))
            }
            None => None,
        };
        Ok(Spec {
            url,
            token,
            key,
            scope: scope.as_deref(),
        })
    }

    fn check(spec: &Spec<'_>, bytes: &[u8]) -> Result<(), String> {
        let key = spec
            .key
            .as_ref()
            .map(|(key, material)| (key, material.as_str()));
        verify_bundle(bytes, key, spec.scope)
            .map_err(|message| format!("the bundle from {} is refused: {message}", spec.url))
    }

    /// The policy of a `rego: <URL>` entry: its bundle from the cache, or fetched, verified
    /// and cached.
    pub(crate) fn build<C: PolicyContext>(
        manifest: &Manifest,
        source: &PolicySource,
    ) -> Result<Box<dyn Policy<C>>, (String, Option<String>)> {
        let PolicySource::RegoUrl { id, entrypoint, .. } = source else {
            return Err(("not a bundle from a URL".to_owned(), None));
        };
        let spec = spec(manifest, source).map_err(|message| (message, None))?;
        let cached = cache()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(spec.url)
            .map(|cached| Arc::clone(&cached.bytes));
        let bytes = match cached {
            Some(bytes) => {
                check(&spec, &bytes).map_err(|message| (message, None))?;
                bytes
            }
            None => {
                let Fetched::New { etag, bytes } = fetch(spec.url, spec.token.as_deref(), None)
                    .map_err(|message| {
                        (
                            message,
                            Some("the bundle server must answer 200 with a bundle".to_owned()),
                        )
                    })?
                else {
                    return Err((
                        format!("GET {} answered 304 to a request without an ETag", spec.url),
                        None,
                    ));
                };
                check(&spec, &bytes).map_err(|message| (message, None))?;
                let bytes = Arc::new(bytes);
                cache()
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        spec.url.to_owned(),
                        Cached {
                            etag,
                            bytes: Arc::clone(&bytes),
                        },
                    );
                bytes
            }
        };
        let bundle = RegoBundle::from_bytes(&bytes).map_err(|error| {
            (
                format!(
                    "the bundle from {} cannot be used: {}",
                    spec.url,
                    error_chain(&error)
                ),
                None,
            )
        })?;
        let opened = match entrypoint {
            Some(entrypoint) => {
                RegoPolicy::<C>::from_bundle_entrypoint(id.clone(), bundle, entrypoint)
            }
            None => RegoPolicy::<C>::from_bundle(id.clone(), bundle),
        };
        opened
            .map(|policy| Box::new(policy) as Box<dyn Policy<C>>)
            .map_err(|error| {
                (
                    format!(
                        "the bundle from {} cannot be used: {}",
                        spec.url,
                        error_chain(&error)
                    ),
                    None,
                )
            })
    }

    /// What a poll of a bundle URL came to.
    #[derive(Debug)]
    pub(crate) enum Refresh {
        /// `304`, or the same bytes: the bundle in use stays.
        Unchanged,
        /// A new bundle verified, opened and cached: reload to use it.
        Updated,
        /// The URL failed, or its bundle did not verify or open: the bundle in use stays.
        Failed(String),
    }

    /// Asks the entry's URL for a bundle newer than the cached one.
    pub(crate) fn refresh(manifest: &Manifest, source: &PolicySource) -> Refresh {
        let spec = match spec(manifest, source) {
            Ok(spec) => spec,
            Err(message) => return Refresh::Failed(message),
        };
        let (etag, current) = {
            let cache = cache().lock().unwrap_or_else(PoisonError::into_inner);
            match cache.get(spec.url) {
                Some(cached) => (cached.etag.clone(), Some(Arc::clone(&cached.bytes))),
                None => (None, None),
            }
        };
        let (etag, bytes) = match fetch(spec.url, spec.token.as_deref(), etag.as_deref()) {
            Ok(Fetched::NotModified) => return Refresh::Unchanged,
            Ok(Fetched::New { etag, bytes }) => (etag, bytes),
            Err(message) => return Refresh::Failed(message),
        };
        if current.as_deref().is_some_and(|current| *current == bytes) {
            return Refresh::Unchanged;
        }
        if let Err(message) = check(&spec, &bytes) {
            return Refresh::Failed(message);
        }
        if let Err(error) = RegoBundle::from_bytes(&bytes) {
            return Refresh::Failed(format!(
                "the bundle from {} cannot be used: {}",
                spec.url,
                error_chain(&error)
            ));
        }
        cache()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                spec.url.to_owned(),
                Cached {
                    etag,
                    bytes: Arc::new(bytes),
                },
            );
        Refresh::Updated
    }
}
