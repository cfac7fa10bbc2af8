//! Approvals in Redis: [`RedisGrantStore`], shared by every replica of a service and every proxy
//! that names the same server and prefix.
//!
//! # How approvals are kept
//!
//! Under the prefix (default [`DEFAULT_GRANT_PREFIX`]):
//! - `r:<id>`: a hash per request (`request` as JSON, `digest`, `status`, `requested_at`,
//!   `expires_at`, `decided_by`, `decided_at`, `reason`; times in milliseconds since the
//!   epoch), expiring with the request;
//! - `index`: a sorted set of request ids by the time they were asked (entries whose request
//!   expired are removed as a listing meets them);
//! - `d:<digest>`: the id of the request waiting for that action, so that a retry before
//!   anyone answered finds it;
//! - `g:<digest>`: a list of grants (`<expiry ms> <approver>`), taken from the front;
//! - `x:<digest>`: the refusal of that action (`by`, `reason`).
//!
//! Recording, deciding and taking are each one Lua script, which Redis runs atomically: two
//! replicas asked to decide one request at once decide it once, and one grant taken by two
//! calls at once lets exactly one of them through.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use portcullis_engine::grant::{
    ApprovalRecord, ApprovalStatus, ApprovalVerdict, DECIDED_RETENTION, DecideError, Grant,
    GrantStore, Refusal,
};
use portcullis_engine::{ApprovalRequest, BoxError};
use redis::aio::ConnectionManager;

use crate::{RedisStoreBuilder, RedisStoreError, bounded};

/// The default prefix of approval keys.
pub const DEFAULT_GRANT_PREFIX: &str = "portcullis:approval:";

/// Records a request unless one for its digest is waiting: `ARGV` the prefix, the time, the
/// expiry, the id, the digest, the request's JSON. Returns the waiting record's fields.
const RECORD: &str = r"
local prefix, now, expires, id, digest = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local waiting = redis.call('GET', prefix .. 'd:' .. digest)
if waiting then
  local key = prefix .. 'r:' .. waiting
  if redis.call('HGET', key, 'status') == 'pending' then
    return redis.call('HGETALL', key)
  end
end
local key = prefix .. 'r:' .. id
redis.call('HSET', key, 'request', ARGV[6], 'digest', digest, 'status', 'pending',
  'requested_at', now, 'expires_at', expires)
redis.call('PEXPIREAT', key, expires)
redis.call('SET', prefix .. 'd:' .. digest, id, 'PXAT', expires)
redis.call('ZADD', prefix .. 'index', now, id)
return redis.call('HGETALL', key)
";

/// Decides a waiting request: `ARGV` the prefix, the id, the time, `granted` or `refused`,
/// who, the time the record is kept until, then the grant's expiry (a grant) or the reason (a
/// refusal, `''` for none). Returns `{'unknown'}`, `{'decided', fields}` or `{'ok', fields}`.
const DECIDE: &str = r"
local prefix, id, now, status, by, kept = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local key = prefix .. 'r:' .. id
if redis.call('EXISTS', key) == 0 then return {'unknown'} end
if redis.call('HGET', key, 'status') ~= 'pending' then
  return {'decided', redis.call('HGETALL', key)}
end
local digest = redis.call('HGET', key, 'digest')
redis.call('HSET', key, 'status', status, 'decided_by', by, 'decided_at', now, 'expires_at', kept)
redis.call('PEXPIREAT', key, kept)
if redis.call('GET', prefix .. 'd:' .. digest) == id then
  redis.call('DEL', prefix .. 'd:' .. digest)
end
if status == 'granted' then
  local grants = prefix .. 'g:' .. digest
  redis.call('RPUSH', grants, ARGV[7] .. ' ' .. by)
  if redis.call('PTTL', grants) < tonumber(ARGV[7]) - tonumber(now) then
    redis.call('PEXPIREAT', grants, ARGV[7])
  end
else
  local refusal = prefix .. 'x:' .. digest
  redis.call('DEL', refusal)
  redis.call('HSET', refusal, 'by', by, 'reason', ARGV[7])
  redis.call('PEXPIREAT', refusal, kept)
  if ARGV[7] ~= '' then redis.call('HSET', key, 'reason', ARGV[7]) end
end
return {'ok', redis.call('HGETALL', key)}
";

/// Takes one unexpired grant: `KEYS[1]` the grants of a digest, `ARGV[1]` the time.
const TAKE: &str = r"
while true do
  local entry = redis.call('LPOP', KEYS[1])
  if not entry then return false end
  local space = string.find(entry, ' ', 1, true)
  if space and tonumber(string.sub(entry, 1, space - 1)) > tonumber(ARGV[1]) then
    return entry
  end
end
";

/// Puts a grant: `KEYS[1]` the grants of a digest, `ARGV[1]` the entry, `ARGV[2]` its expiry,
/// `ARGV[3]` the time.
const PUT: &str = r"
redis.call('RPUSH', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) - tonumber(ARGV[3]) then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return 1
";

/// Builds a [`RedisGrantStore`].
pub type RedisGrantStoreBuilder = RedisStoreBuilder<RedisGrantStore>;

impl RedisGrantStoreBuilder {
    /// Connects (within the time-out) and returns the store.
    ///
    /// A `rediss://` URL connects over TLS (rustls; the server's certificate is verified
    /// against the system's roots, or those of
    /// [`root_certificates`](Self::root_certificates)). Errors name the URL without its
    /// credentials or query ([`redact_url`](crate::redact_url)).
    pub async fn connect(self) -> Result<RedisGrantStore, RedisStoreError> {
        let (connection, this) = self.connection().await?;
        Ok(RedisGrantStore {
            connection,
            record: redis::Script::new(RECORD),
            decide: redis::Script::new(DECIDE),
            take: redis::Script::new(TAKE),
            put: redis::Script::new(PUT),
            prefix: this.prefix,
            timeout: this.timeout,
        })
    }
}

/// Approvals in Redis: pending requests, single-use grants and refusals, shared by every
/// process that uses the same server and prefix. Cheap to clone: clones share the connection.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use portcullis_engine::PolicyEngine;
/// use portcullis_redis::RedisGrantStore;
///
/// let store = RedisGrantStore::builder("redis://127.0.0.1:6379/0").connect().await?;
/// let engine = PolicyEngine::builder().grant_store(store).build();
/// # let _ = engine; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisGrantStore {
    connection: ConnectionManager,
    record: redis::Script,
    decide: redis::Script,
    take: redis::Script,
    put: redis::Script,
    prefix: String,
    timeout: Duration,
}

impl fmt::Debug for RedisGrantStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisGrantStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the epoch.
fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn from_millis(text: &str) -> Option<SystemTime> {
    let millis: u64 = text.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(millis))
}

fn broken(what: &str) -> BoxError {
    BoxError::from(format!("a stored approval is malformed: {what}"))
}

/// A record from its hash's fields (`HGETALL`, as name, value pairs).
fn record_from(fields: &[String]) -> Result<ApprovalRecord, BoxError> {
    let field = |name: &str| {
        fields
            .chunks_exact(2)
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1].clone())
    };
    let request: ApprovalRequest =
        serde_json::from_str(&field("request").ok_or_else(|| broken("it holds no request"))?)
            .map_err(|error| broken(&error.to_string()))?;
    let status = field("status")
        .as_deref()
        .and_then(ApprovalStatus::from_name)
        .ok_or_else(|| broken("its status is unknown"))?;
    let time = |value: Option<String>, what: &str| {
        value
            .as_deref()
            .and_then(from_millis)
            .ok_or_else(|| broken(what))
    };
    let requested_at = time(field("requested_at"), "its request time")?;
    let expires_at = time(field("expires_at"), "its expiry")?;
    let decided_at = field("decided_at").as_deref().and_then(from_millis);
    Ok(ApprovalRecord {
        request,
        status,
        requested_at,
        expires_at,
        decided_by: field("decided_by"),
        decided_at,
        reason: field("reason"),
    })
}

impl RedisGrantStore {
    /// A builder for a store on the Redis at `url` (`redis://host:port/db`, or
    /// `rediss://host:port/db` over TLS).
    pub fn builder(url: impl Into<String>) -> RedisGrantStoreBuilder {
        RedisStoreBuilder::new(url.into(), DEFAULT_GRANT_PREFIX)
    }
}

#[async_trait::async_trait]
impl GrantStore for RedisGrantStore {
    async fn put(&self, digest: &str, grant: Grant) -> Result<(), BoxError> {
        if grant.is_expired_at(SystemTime::now()) {
            return Ok(());
        }
        let mut connection = self.connection.clone();
        let expires = millis(grant.expires_at);
        let mut invocation = self.put.key(format!("{}g:{digest}", self.prefix));
        invocation
            .arg(format!("{expires} {}", grant.by))
            .arg(expires)
            .arg(millis(SystemTime::now()));
        let _: i64 = bounded(
            self.timeout,
            "put a grant",
            invocation.invoke_async(&mut connection),
        )
        .await?;
        Ok(())
    }

    async fn take(&self, digest: &str) -> Result<Option<Grant>, BoxError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.take.key(format!("{}g:{digest}", self.prefix));
        invocation.arg(millis(SystemTime::now()));
        let entry: Option<String> = bounded(
            self.timeout,
            "take a grant",
            invocation.invoke_async(&mut connection),
        )
        .await?;
        let Some(entry) = entry else {
            return Ok(None);
        };
        let (expires, by) = entry
            .split_once(' ')
            .ok_or_else(|| broken("a grant is not `<expiry> <approver>`"))?;
        let expires_at = from_millis(expires).ok_or_else(|| broken("a grant's expiry"))?;
        Ok(Some(Grant {
            by: by.to_owned(),
            expires_at,
        }))
    }

    async fn refusal(&self, digest: &str) -> Result<Option<Refusal>, BoxError> {
        let mut connection = self.connection.clone();
        let key = format!("{}x:{digest}", self.prefix);
        let fields: Vec<String> = bounded(
            self.timeout,
            "read a refusal",
            redis::cmd("HGETALL").arg(key).query_async(&mut connection),
        )
        .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let field = |name: &str| {
            fields
                .chunks_exact(2)
                .find(|pair| pair[0] == name)
                .map(|pair| pair[1].clone())
        };
        Ok(Some(Refusal {
            by: field("by").unwrap_or_default(),
            reason: field("reason").filter(|reason| !reason.is_empty()),
        }))
    }

    async fn record(
        &self,
        request: &ApprovalRequest,
        expires_at: SystemTime,
    ) -> Result<ApprovalRecord, BoxError> {
        let mut connection = self.connection.clone();
        let json = serde_json::to_string(request)?;
        let mut invocation = self.record.prepare_invoke();
        invocation
            .arg(&self.prefix)
            .arg(millis(SystemTime::now()))
            .arg(millis(expires_at))
            .arg(&request.id)
            .arg(&request.action_digest)
            .arg(json);
        let fields: Vec<String> = bounded(
            self.timeout,
            "record an approval request",
            invocation.invoke_async(&mut connection),
        )
        .await?;
        record_from(&fields)
    }

    async fn approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<ApprovalRecord>, BoxError> {
        let mut connection = self.connection.clone();
        let index = format!("{}index", self.prefix);
        let ids: Vec<String> = bounded(
            self.timeout,
            "list approval requests",
            redis::cmd("ZRANGE")
                .arg(&index)
                .arg(0)
                .arg(-1)
                .arg("REV")
                .query_async(&mut connection),
        )
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipeline = redis::pipe();
        for id in &ids {
            pipeline
                .cmd("HGETALL")
                .arg(format!("{}r:{id}", self.prefix));
        }
        let all: Vec<Vec<String>> = bounded(
            self.timeout,
            "read approval requests",
            pipeline.query_async(&mut connection),
        )
        .await?;
        let mut records = Vec::new();
        let mut gone = Vec::new();
        for (id, fields) in ids.iter().zip(all) {
            if fields.is_empty() {
                gone.push(id.clone());
                continue;
            }
            let record = record_from(&fields)?;
            if status.is_none_or(|status| record.status == status) {
                records.push(record);
            }
        }
        if !gone.is_empty() {
            let _: i64 = bounded(
                self.timeout,
                "forget expired approval requests",
                redis::cmd("ZREM")
                    .arg(&index)
                    .arg(gone)
                    .query_async(&mut connection),
            )
            .await?;
        }
        Ok(records)
    }

    async fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, BoxError> {
        let mut connection = self.connection.clone();
        let fields: Vec<String> = bounded(
            self.timeout,
            "read an approval request",
            redis::cmd("HGETALL")
                .arg(format!("{}r:{id}", self.prefix))
                .query_async(&mut connection),
        )
        .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        record_from(&fields).map(Some)
    }

    async fn decide(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
    ) -> Result<ApprovalRecord, DecideError> {
        let mut connection = self.connection.clone();
        let now = SystemTime::now();
        let kept_from = now + DECIDED_RETENTION;
        let mut invocation = self.decide.prepare_invoke();
        invocation.arg(&self.prefix).arg(id).arg(millis(now));
        match &verdict {
            ApprovalVerdict::Grant { by, ttl } => {
                let expires = now.checked_add(*ttl).ok_or_else(|| {
                    DecideError::Invalid(format!("a grant lifetime of {ttl:?} is too long"))
                })?;
                invocation
                    .arg("granted")
                    .arg(by)
                    .arg(millis(expires.max(kept_from)))
                    .arg(millis(expires));
            }
            ApprovalVerdict::Refuse { by, reason } => {
                invocation
                    .arg("refused")
                    .arg(by)
                    .arg(millis(kept_from))
                    .arg(reason.as_deref().unwrap_or_default());
            }
        }
        let answer: redis::Value = bounded(
            self.timeout,
            "decide an approval request",
            invocation.invoke_async(&mut connection),
        )
        .await
        .map_err(|error| DecideError::Store(Box::new(error)))?;
        let (outcome, fields) = decided_answer(answer).map_err(DecideError::Store)?;
        match outcome.as_str() {
            "unknown" => Err(DecideError::Unknown(id.to_owned())),
            "decided" => Err(DecideError::AlreadyDecided(Box::new(
                record_from(&fields).map_err(DecideError::Store)?,
            ))),
            _ => record_from(&fields).map_err(DecideError::Store),
        }
    }
}

/// The decide script's answer: its outcome and the record's fields.
fn decided_answer(answer: redis::Value) -> Result<(String, Vec<String>), BoxError> {
    let redis::Value::Array(mut parts) = answer else {
        return Err(broken("the decide script answered no list"));
    };
    let fields = if parts.len() > 1 {
        redis::from_redis_value(parts.remove(1))?
    } else {
        Vec::new()
    };
    let outcome: String = redis::from_redis_value(parts.remove(0))?;
    Ok((outcome, fields))
}
