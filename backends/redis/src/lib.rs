//! Redis stores for Portcullis: sessions ([`RedisSessionStore`]) and approvals
//! ([`RedisGrantStore`], see [`grants`]), each shared by a fleet.
//!
//! With the in-memory store each process has its own view of a session; with this one, every
//! agent process of a fleet reads and records the same facts. Give it to the engine with
//! `PolicyEngine::builder().sessions(store)` (see the engine's `session` module for the flow).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use portcullis_engine::PolicyEngine;
//! use portcullis_redis::RedisSessionStore;
//!
//! let store = RedisSessionStore::builder("redis://127.0.0.1:6379/0")
//!     .ttl(Duration::from_secs(24 * 60 * 60))
//!     .timeout(Duration::from_millis(200))
//!     .connect()
//!     .await?;
//! let engine = PolicyEngine::builder().sessions(store).build();
//! # let _ = engine; Ok(()) }
//! ```
//!
//! # How sessions are kept
//!
//! - One Redis hash per session, at `<prefix><length of agent_id>:<agent_id>:<session_id>`
//!   (default prefix `portcullis:session:`): a field per counter (`c:input`, `c:output`,
//!   `c:tool_call`, `c:tool_result`, `t:<tool>` for a tool's calls, `r:<tool>` for its results)
//!   and per label (`l:<label>`, whose value orders the labels).
//! - A record is one Lua script, so Redis applies it atomically: the counters go up, the
//!   labels are added, and the key's time to live starts again. Concurrent records from any
//!   number of processes all count, none twice.
//! - A load is one `HGETALL`. A session not updated for the TTL expires in Redis itself.
//! - `rediss://` URLs connect over TLS (rustls), verifying the server against the system's
//!   roots or [`root_certificates`](RedisSessionStoreBuilder::root_certificates). A password
//!   is best given with [`password`](RedisSessionStoreBuilder::password) (from the
//!   environment) rather than in the URL; errors and `Debug` never show it, nor the URL's
//!   query ([`redact_url`]).
//! - One multiplexed connection, re-established after a failure
//!   ([`redis::aio::ConnectionManager`]), shared by every clone of the store and every call.
//!
//! # Failures
//!
//! Every operation is bounded by the time-out (default 200 ms): a Redis that is down, that
//! cannot be reached, or that answers slowly is an error within that time, which the engine
//! turns into an evaluation error (the policy set's `on_error` decides). A record that timed
//! out may still have been applied by Redis: the script runs once or not at all, never twice.

use std::fmt;
use std::time::Duration;

pub mod grants;
pub use grants::{RedisGrantStore, RedisGrantStoreBuilder};

use portcullis_engine::session::{SessionFacts, SessionKey, SessionStore, SessionUpdate};
use portcullis_engine::{BoxError, InterceptionPoint};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The default prefix of session keys.
pub const DEFAULT_PREFIX: &str = "portcullis:session:";
/// The default time-out of each operation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);
/// The default time a session is kept after its last update (24 hours).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The record script: `KEYS[1]` the session, `ARGV[1]` the TTL in milliseconds, `ARGV[2]` the
/// point's counter field, `ARGV[3]` the tool's field or `""`, then the label fields.
const RECORD: &str = r"
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if ARGV[3] ~= '' then redis.call('HINCRBY', KEYS[1], ARGV[3], 1) end
for i = 4, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    local order = redis.call('HINCRBY', KEYS[1], 'n', 1)
    redis.call('HSET', KEYS[1], ARGV[i], order)
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
";

/// Why a [`RedisSessionStore`] could not be built or an operation failed.
#[derive(Debug)]
pub struct RedisStoreError {
    what: String,
    source: Option<redis::RedisError>,
}

impl RedisStoreError {
    pub(crate) fn new(what: impl Into<String>, source: Option<redis::RedisError>) -> Self {
        RedisStoreError {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|error| error as &(dyn std::error::Error + 'static))
    }
}

/// Builds a Redis store: a [`RedisSessionStore`] ([`RedisSessionStoreBuilder`]) or a
/// [`RedisGrantStore`] ([`RedisGrantStoreBuilder`]); `S` is the store it builds.
#[must_use]
pub struct RedisStoreBuilder<S> {
    url: String,
    password: Option<String>,
    root_certificates: Option<Vec<u8>>,
    prefix: String,
    ttl: Duration,
    timeout: Duration,
    store: std::marker::PhantomData<fn() -> S>,
}

/// Builds a [`RedisSessionStore`].
pub type RedisSessionStoreBuilder = RedisStoreBuilder<RedisSessionStore>;

impl<S> RedisStoreBuilder<S> {
    pub(crate) fn new(url: String, prefix: &str) -> Self {
        RedisStoreBuilder {
            url,
            password: None,
            root_certificates: None,
            prefix: prefix.to_owned(),
            ttl: DEFAULT_TTL,
            timeout: DEFAULT_TIMEOUT,
            store: std::marker::PhantomData,
        }
    }

    /// Prefixes every key of the store with `prefix` (default [`DEFAULT_PREFIX`] for
    /// sessions, [`grants::DEFAULT_GRANT_PREFIX`] for approvals).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bounds every operation, connecting included (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Authenticates with `password` (Redis `AUTH`, with the URL's user name when it has
    /// one), in place of a password in the URL: keep it out of files and take it from the
    /// environment (the manifest's `password_env`).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// For a `rediss://` URL: trust the certificate authorities of `pem` (PEM certificates)
    /// instead of the system's.
    pub fn root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates = Some(pem.into());
        self
    }

    /// The connection the store will use (within the time-out). A `rediss://` URL connects
    /// over TLS (rustls; the server's certificate is verified against the system's roots, or
    /// those of [`root_certificates`](Self::root_certificates)). Errors name the URL without
    /// its credentials or query ([`redact_url`]).
    pub(crate) async fn connection(self) -> Result<(ConnectionManager, Self), RedisStoreError> {
        let connection = connect(
            &self.url,
            self.password.as_deref(),
            self.root_certificates.clone(),
            self.timeout,
        )
        .await?;
        Ok((connection, self))
    }
}

impl<S> Clone for RedisStoreBuilder<S> {
    fn clone(&self) -> Self {
        RedisStoreBuilder {
            url: self.url.clone(),
            password: self.password.clone(),
            root_certificates: self.root_certificates.clone(),
            prefix: self.prefix.clone(),
            ttl: self.ttl,
            timeout: self.timeout,
            store: std::marker::PhantomData,
        }
    }
}

impl<S> fmt::Debug for RedisStoreBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("root_certificates", &self.root_certificates.is_some())
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `url` as errors and logs show it: without its credentials (`user:password@` becomes
/// `<redacted>@`), query and fragment.
///
/// ```
/// use portcullis_redis::redact_url;
///
/// assert_eq!(
///     redact_url("rediss://app:s3cret@cache.internal:6380/2?protocol=resp3"),
///     "rediss://<redacted>@cache.internal:6380/2"
/// );
/// assert_eq!(redact_url("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
/// ```
pub fn redact_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<redacted>@{host}"),
        None => authority.to_owned(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{path}"),
        None => format!("{authority}{path}"),
    }
}

impl RedisSessionStoreBuilder {
    /// Keeps a session `ttl` after its last update (default [`DEFAULT_TTL`]; at least 1 ms).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_millis(1));
        self
    }

    /// Connects (within the time-out) and returns the store.
    ///
    /// A `rediss://` URL connects over TLS (rustls; the server's certificate is verified
    /// against the system's roots, or those of
    /// [`root_certificates`](Self::root_certificates)). Errors name the URL without its
    /// credentials or query ([`redact_url`]).
    pub async fn connect(self) -> Result<RedisSessionStore, RedisStoreError> {
        let (connection, this) = self.connection().await?;
        Ok(RedisSessionStore {
            connection,
            script: redis::Script::new(RECORD),
            prefix: this.prefix,
            ttl_millis: u64::try_from(this.ttl.as_millis()).unwrap_or(u64::MAX),
            timeout: this.timeout,
        })
    }
}

/// A connection to the Redis at `url` (with `password`, and `root_certificates` for a
/// `rediss://` one), within `timeout`.
pub(crate) async fn connect(
    url: &str,
    password: Option<&str>,
    root_certificates: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<ConnectionManager, RedisStoreError> {
    let shown = redact_url(url);
    let invalid = |error: redis::RedisError| {
        RedisStoreError::new(format!("invalid Redis URL {shown}: {error}"), Some(error))
    };
    let mut info = redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?;
    if let Some(password) = password {
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
    if tls {
        // The client's TLS configuration takes the process's default provider.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    }
    let client = match root_certificates {
        Some(root_cert) if tls => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            },
        ),
        Some(_) => {
            return Err(RedisStoreError::new(
                format!("root certificates are given for {shown}, which is not a rediss:// URL"),
                None,
            ));
        }
        None => redis::Client::open(info),
    }
    .map_err(invalid)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(timeout);
    let connecting = ConnectionManager::new_with_config(client, config);
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(RedisStoreError::new(
            format!("cannot connect to Redis at {shown}: {error}"),
            Some(error),
        )),
        Err(_) => Err(RedisStoreError::new(
            format!("cannot connect to Redis at {shown}: no answer within {timeout:?}"),
            None,
        )),
    }
}

/// `operation`, within `timeout`: its error, or the time-out, as a [`RedisStoreError`] that
/// says what was asked.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    what: &str,
    operation: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    match tokio::time::timeout(timeout, operation).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(RedisStoreError::new(
            format!("Redis failed to {what}: {error}"),
            Some(error),
        )),
        Err(_) => Err(RedisStoreError::new(
            format!("Redis did not answer within {timeout:?} when asked to {what}"),
            None,
        )),
    }
}

/// Session facts in Redis, shared by every process that uses the same server and prefix.
/// Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct RedisSessionStore {
    connection: ConnectionManager,
    script: redis::Script,
    prefix: String,
    ttl_millis: u64,
    timeout: Duration,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("prefix", &self.prefix)
            .field("ttl_millis", &self.ttl_millis)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisSessionStore {
    /// A builder for a store on the Redis at `url` (`redis://host:port/db`, or
    /// `rediss://host:port/db` over TLS).
    pub fn builder(url: impl Into<String>) -> RedisSessionStoreBuilder {
        RedisStoreBuilder::new(url.into(), DEFAULT_PREFIX)
    }

    /// The Redis key of a session.
    pub fn key(&self, key: SessionKey<'_>) -> String {
        format!(
            "{}{}:{}:{}",
            self.prefix,
            key.agent_id.len(),
            key.agent_id,
            key.session_id
        )
    }
}

fn facts_from(fields: Vec<(String, u64)>) -> SessionFacts {
    let mut facts = SessionFacts::default();
    let mut labels = Vec::new();
    for (field, value) in fields {
        if let Some(label) = field.strip_prefix("l:") {
            labels.push((value, label.to_owned()));
        } else if let Some(tool) = field.strip_prefix("t:") {
            facts
                .counters
                .tool_call
                .by_tool
                .insert(tool.to_owned(), value);
        } else if let Some(tool) = field.strip_prefix("r:") {
            facts
                .counters
                .tool_result
                .by_tool
                .insert(tool.to_owned(), value);
        } else {
            match field.as_str() {
                "c:input" => facts.counters.input.total = value,
                "c:output" => facts.counters.output.total = value,
                "c:tool_call" => facts.counters.tool_call.total = value,
                "c:tool_result" => facts.counters.tool_result.total = value,
                _ => {}
            }
        }
    }
    labels.sort();
    facts.labels = labels.into_iter().map(|(_, label)| label).collect();
    facts
}

#[async_trait::async_trait]
impl SessionStore for RedisSessionStore {
    async fn load(&self, key: SessionKey<'_>) -> Result<SessionFacts, BoxError> {
        let mut connection = self.connection.clone();
        let name = self.key(key);
        let fields: Vec<(String, u64)> =
            bounded(self.timeout, "read the session", connection.hgetall(name)).await?;
        Ok(facts_from(fields))
    }

    async fn record(&self, key: SessionKey<'_>, update: SessionUpdate<'_>) -> Result<(), BoxError> {
        let mut connection = self.connection.clone();
        // The point's counter field, and the prefix of its per-tool fields.
        let (point, tool) = match update.point {
            InterceptionPoint::Input => ("c:input", None),
            InterceptionPoint::Output => ("c:output", None),
            InterceptionPoint::ToolCall => ("c:tool_call", Some("t:")),
            InterceptionPoint::ToolResult => ("c:tool_result", Some("r:")),
        };
        let mut invocation = self.script.key(self.key(key));
        invocation.arg(self.ttl_millis).arg(point);
        invocation.arg(
            tool.zip(update.tool)
                .map(|(prefix, tool)| format!("{prefix}{tool}"))
                .unwrap_or_default(),
        );
        for label in update.labels {
            invocation.arg(format!("l:{label}"));
        }
        let _: i64 = bounded(
            self.timeout,
            "record the call",
            invocation.invoke_async(&mut connection),
        )
        .await?;
        Ok(())
    }
}
