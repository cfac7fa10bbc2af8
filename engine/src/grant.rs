//! Where approvals are kept: the requests waiting for a person ([`ApprovalRecord`]), the
//! grants and refusals people gave, and the [`GrantStore`] that holds them ([`MemoryGrantStore`]
//! in this process; a store shared by a fleet, such as the Redis one, implements the same
//! trait).
//!
//! The life of a request: an escalation nobody answered is [recorded](GrantStore::record) as
//! [`Pending`](ApprovalStatus::Pending) until the approval time-out; a person
//! [decides](GrantStore::decide) it, which marks it [`Granted`](ApprovalStatus::Granted) and
//! puts a single-use [`Grant`] for its action digest, or marks it
//! [`Refused`](ApprovalStatus::Refused) and keeps a [`Refusal`] for the digest; the retried
//! call [takes](GrantStore::take) the grant (once) or meets the refusal (a denial).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::approval::ApprovalRequest;
use crate::error::BoxError;

/// How long a decided request (and a refusal) is kept after the decision: a day. A refused
/// action retried within it is denied at once.
pub const DECIDED_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How many requests a [`MemoryGrantStore`] keeps waiting at once; one more is not recorded
/// (its call still fails, as waiting for an approval).
pub const MAX_PENDING: usize = 10_000;

/// A recorded approval of one action: lets exactly one call with that action digest proceed,
/// until it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Who approved.
    pub by: String,
    /// When the grant stops being valid.
    pub expires_at: SystemTime,
}

impl Grant {
    /// Whether the grant has expired at `now`.
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        now >= self.expires_at
    }
}

/// A person's no to one action: every retry of it is a denial while it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Who refused.
    pub by: String,
    /// Why, when they said.
    pub reason: Option<String>,
}

impl Refusal {
    /// The denial reason a retried call gets: who refused, and why.
    pub fn denial_reason(&self) -> String {
        match &self.reason {
            Some(reason) => format!("refused by {}: {reason}", self.by),
            None => format!("refused by {}", self.by),
        }
    }
}

/// Where a recorded request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    /// A person approved: one call of the action may proceed.
    Granted,
    /// A person refused: the action is denied.
    Refused,
}

impl ApprovalStatus {
    /// `pending`, `granted` or `refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Granted => "granted",
            ApprovalStatus::Refused => "refused",
        }
    }

    /// The status named `name` (`pending`, `granted`, `refused`).
    pub fn from_name(name: &str) -> Option<ApprovalStatus> {
        match name {
            "pending" => Some(ApprovalStatus::Pending),
            "granted" => Some(ApprovalStatus::Granted),
            "refused" => Some(ApprovalStatus::Refused),
            _ => None,
        }
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request as a grant store keeps it: what was asked, when, and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    /// The request (its id names the record).
    pub request: ApprovalRequest,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// When it was recorded.
    pub requested_at: SystemTime,
    /// When the store forgets it: for a pending request, the end of its approval time-out; for
    /// a decided one, [`DECIDED_RETENTION`] after the decision.
    pub expires_at: SystemTime,
    /// Who decided it.
    pub decided_by: Option<String>,
    /// When it was decided.
    pub decided_at: Option<SystemTime>,
    /// The reason a refusal gave.
    pub reason: Option<String>,
}

impl ApprovalRecord {
    /// A new pending record of `request`, kept until `expires_at`.
    pub fn pending(request: ApprovalRequest, expires_at: SystemTime) -> Self {
        ApprovalRecord {
            request,
            status: ApprovalStatus::Pending,
            requested_at: SystemTime::now(),
            expires_at,
            decided_by: None,
            decided_at: None,
            reason: None,
        }
    }

    /// The record as the decision service answers it: `{"id", "status",
    /// "interception_point", "policy_ids", "reasons", "context", "action_digest",
    /// "requested_at", "expires_at", "decided_by", "decided_at", "reason"}`, times in RFC 3339.
    pub fn to_json(&self) -> Value {
        let request = &self.request;
        json!({
            "id": request.id,
            "status": self.status.as_str(),
            "interception_point": request.interception_point,
            "policy_ids": request.policy_ids,
            "reasons": request.reasons,
            "context": request.context,
            "action_digest": request.action_digest,
            "requested_at": crate::time::rfc3339(self.requested_at),
            "expires_at": crate::time::rfc3339(self.expires_at),
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.map(crate::time::rfc3339),
            "reason": self.reason,
        })
    }

    /// Applies `verdict` at `now`: the record as decided, and the grant to put (for a yes).
    pub fn decided(
        mut self,
        verdict: &ApprovalVerdict,
        now: SystemTime,
    ) -> Result<(ApprovalRecord, Option<Grant>), DecideError> {
        if self.status != ApprovalStatus::Pending {
            return Err(DecideError::AlreadyDecided(Box::new(self)));
        }
        let grant = match verdict {
            ApprovalVerdict::Grant { by, ttl } => {
                let expires_at = now.checked_add(*ttl).ok_or_else(|| {
                    DecideError::Invalid(format!("a grant lifetime of {ttl:?} is too long"))
                })?;
                self.status = ApprovalStatus::Granted;
                self.decided_by = Some(by.clone());
                Some(Grant {
                    by: by.clone(),
                    expires_at,
                })
            }
            ApprovalVerdict::Refuse { by, reason } => {
                self.status = ApprovalStatus::Refused;
                self.decided_by = Some(by.clone());
                self.reason.clone_from(reason);
                None
            }
        };
        self.decided_at = Some(now);
        let kept = grant
            .as_ref()
            .map_or(now, |grant| grant.expires_at)
            .max(now + DECIDED_RETENTION);
        self.expires_at = kept;
        Ok((self, grant))
    }
}

/// A person's answer to a recorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// Let one call of the action through within `ttl`.
    Grant {
        /// Who approved.
        by: String,
        /// How long the grant stays valid.
        ttl: Duration,
    },
    /// Deny the action.
    Refuse {
        /// Who refused.
        by: String,
        /// Why.
        reason: Option<String>,
    },
}

/// Why a [`decide`](GrantStore::decide) did not apply.
#[derive(Debug)]
pub enum DecideError {
    /// No request has this id (never recorded, or forgotten since it expired).
    Unknown(String),
    /// The request was decided already: the record as it stands.
    AlreadyDecided(Box<ApprovalRecord>),
    /// The verdict cannot be applied (a lifetime too long).
    Invalid(String),
    /// The store failed.
    Store(BoxError),
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideError::Unknown(id) => write!(f, "no approval request {id:?} is waiting"),
            DecideError::AlreadyDecided(record) => write!(
                f,
                "approval request {:?} was {} already",
                record.request.id, record.status
            ),
            DecideError::Invalid(message) => f.write_str(message),
            DecideError::Store(error) => write!(f, "the grant store failed: {error}"),
        }
    }
}

impl std::error::Error for DecideError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecideError::Store(error) => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// Where approvals are kept between the escalation and the retried call: the requests waiting
/// for a person, and the grants and refusals people gave.
///
/// [`MemoryGrantStore`] keeps them in the process; a store shared by a fleet (Redis, a
/// database) implements this trait. Its contract: [`take`](GrantStore::take) is atomic, so one
/// grant lets exactly one call through however many calls ask at once (in any process), and
/// never returns an expired grant; [`decide`](GrantStore::decide) is atomic too, so a request
/// is decided once. A store that keeps grants only implements [`put`](GrantStore::put) and
/// [`take`](GrantStore::take): the other methods then say they are not supported, and
/// escalations are not recorded for anyone to see.
#[async_trait::async_trait]
pub trait GrantStore: Send + Sync + 'static {
    /// Records a grant for `digest` (grants for one digest add up: two grants, two calls).
    async fn put(&self, digest: &str, grant: Grant) -> Result<(), BoxError>;

    /// Removes and returns one unexpired grant for `digest`, if there is one.
    async fn take(&self, digest: &str) -> Result<Option<Grant>, BoxError>;

    /// The refusal kept for `digest`, if a person refused that action.
    async fn refusal(&self, _digest: &str) -> Result<Option<Refusal>, BoxError> {
        Ok(None)
    }

    /// Records `request` as waiting for a person until `expires_at`, and returns the record.
    /// When a request for the same action digest is waiting already, that one is returned
    /// instead (a retry before anyone answered does not ask twice).
    async fn record(
        &self,
        _request: &ApprovalRequest,
        _expires_at: SystemTime,
    ) -> Result<ApprovalRecord, BoxError> {
        Err(unsupported("record pending approvals"))
    }

    /// The records kept (with `status` only those), newest first.
    async fn approvals(
        &self,
        _status: Option<ApprovalStatus>,
    ) -> Result<Vec<ApprovalRecord>, BoxError> {
        Err(unsupported("list approvals"))
    }

    /// The record of the request `id`, if it is kept.
    async fn approval(&self, _id: &str) -> Result<Option<ApprovalRecord>, BoxError> {
        Err(unsupported("look approvals up"))
    }

    /// Decides the waiting request `id`: a [grant](ApprovalVerdict::Grant) puts a single-use grant for
    /// its digest, a [refusal](ApprovalVerdict::Refuse) keeps a [`Refusal`] for it. Returns the record
    /// as decided.
    async fn decide(
        &self,
        id: &str,
        _verdict: ApprovalVerdict,
    ) -> Result<ApprovalRecord, DecideError> {
        let _ = id;
        Err(DecideError::Store(unsupported("decide approvals")))
    }
}

fn unsupported(what: &str) -> BoxError {
    BoxError::from(format!("this grant store cannot {what}"))
}

/// Approvals kept in memory, in this process: requests (at most [`MAX_PENDING`] waiting),
/// single-use grants with an expiry, refusals.
#[derive(Debug, Default)]
pub struct MemoryGrantStore {
    book: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    grants: HashMap<String, Vec<Grant>>,
    refusals: HashMap<String, (Refusal, SystemTime)>,
    /// Records by id.
    records: HashMap<String, ApprovalRecord>,
    /// The id of the pending record of each digest.
    pending: HashMap<String, String>,
}

impl Book {
    /// Drops what has expired, so the store does not grow with stale entries.
    fn prune(&mut self, now: SystemTime) {
        self.grants.retain(|_, list| {
            list.retain(|grant| !grant.is_expired_at(now));
            !list.is_empty()
        });
        self.refusals.retain(|_, (_, until)| now < *until);
        self.records.retain(|_, record| now < record.expires_at);
        let records = &self.records;
        self.pending.retain(|_, id| {
            records
                .get(id)
                .is_some_and(|record| record.status == ApprovalStatus::Pending)
        });
    }
}

impl MemoryGrantStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // The book is consistent after every statement: a poisoned lock is still usable.
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl GrantStore for MemoryGrantStore {
    async fn put(&self, digest: &str, grant: Grant) -> Result<(), BoxError> {
        let mut book = self.lock();
        book.prune(SystemTime::now());
        book.grants
            .entry(digest.to_owned())
            .or_default()
            .push(grant);
        Ok(())
    }

    async fn take(&self, digest: &str) -> Result<Option<Grant>, BoxError> {
        let now = SystemTime::now();
        let mut book = self.lock();
        let Some(list) = book.grants.get_mut(digest) else {
            return Ok(None);
        };
        list.retain(|grant| !grant.is_expired_at(now));
        let taken = if list.is_empty() {
            None
        } else {
            Some(list.remove(0))
        };
        if list.is_empty() {
            book.grants.remove(digest);
        }
        Ok(taken)
    }

    async fn refusal(&self, digest: &str) -> Result<Option<Refusal>, BoxError> {
        let now = SystemTime::now();
        let book = self.lock();
        Ok(book
            .refusals
            .get(digest)
            .filter(|(_, until)| now < *until)
            .map(|(refusal, _)| refusal.clone()))
    }

    async fn record(
        &self,
        request: &ApprovalRequest,
        expires_at: SystemTime,
    ) -> Result<ApprovalRecord, BoxError> {
        let mut book = self.lock();
        book.prune(SystemTime::now());
        if let Some(id) = book.pending.get(&request.action_digest)
            && let Some(record) = book.records.get(id)
        {
            return Ok(record.clone());
        }
        if book.pending.len() >= MAX_PENDING {
            return Err(BoxError::from(format!(
                "{MAX_PENDING} approval requests are waiting already"
            )));
        }
        let record = ApprovalRecord::pending(request.clone(), expires_at);
        book.pending
            .insert(request.action_digest.clone(), request.id.clone());
        book.records.insert(request.id.clone(), record.clone());
        Ok(record)
    }

    async fn approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<ApprovalRecord>, BoxError> {
        let mut book = self.lock();
        book.prune(SystemTime::now());
        let mut records: Vec<ApprovalRecord> = book
            .records
            .values()
            .filter(|record| status.is_none_or(|status| record.status == status))
            .cloned()
            .collect();
        records.sort_by(|a, b| {
            b.requested_at
                .cmp(&a.requested_at)
                .then_with(|| b.request.id.cmp(&a.request.id))
        });
        Ok(records)
    }

    async fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, BoxError> {
        let now = SystemTime::now();
        let book = self.lock();
        Ok(book
            .records
            .get(id)
            .filter(|record| now < record.expires_at)
            .cloned())
    }

    async fn decide(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
    ) -> Result<ApprovalRecord, DecideError> {
        let now = SystemTime::now();
        let mut book = self.lock();
        book.prune(now);
        let Some(record) = book.records.get(id).cloned() else {
            return Err(DecideError::Unknown(id.to_owned()));
        };
        let (record, grant) = record.decided(&verdict, now)?;
        let digest = record.request.action_digest.clone();
        book.pending.remove(&digest);
        match grant {
            Some(grant) => book.grants.entry(digest).or_default().push(grant),
            None => {
                if let ApprovalVerdict::Refuse { by, reason } = verdict {
                    let refusal = Refusal { by, reason };
                    book.refusals.insert(digest, (refusal, record.expires_at));
                }
            }
        }
        book.records.insert(id.to_owned(), record.clone());
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InterceptionPoint;

    fn request(to: &str) -> ApprovalRequest {
        ApprovalRequest::new(
            InterceptionPoint::ToolCall,
            vec!["ask".into()],
            vec!["why".into()],
            json!({"tool_name": "send_email", "arguments": {"to": to}}),
        )
    }

    fn later(seconds: u64) -> SystemTime {
        SystemTime::now() + Duration::from_secs(seconds)
    }

    #[tokio::test]
    async fn a_retry_before_an_answer_finds_the_waiting_request() {
        let store = MemoryGrantStore::new();
        let first = store.record(&request("a"), later(60)).await.unwrap();
        let again = store.record(&request("a"), later(60)).await.unwrap();
        assert_eq!(again.request.id, first.request.id);
        let other = store.record(&request("b"), later(60)).await.unwrap();
        assert_ne!(other.request.id, first.request.id);
        let listed = store
            .approvals(Some(ApprovalStatus::Pending))
            .await
            .unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].request.id, other.request.id, "newest first");
    }

    #[tokio::test]
    async fn a_grant_is_decided_once_and_taken_once() {
        let store = MemoryGrantStore::new();
        let record = store.record(&request("a"), later(60)).await.unwrap();
        let id = record.request.id.clone();
        let verdict = ApprovalVerdict::Grant {
            by: "erin".into(),
            ttl: Duration::from_secs(60),
        };
        let decided = store.decide(&id, verdict.clone()).await.unwrap();
        assert_eq!(decided.status, ApprovalStatus::Granted);
        assert_eq!(decided.decided_by.as_deref(), Some("erin"));
        assert!(matches!(
            store.decide(&id, verdict).await,
            Err(DecideError::AlreadyDecided(_))
        ));
        let digest = &record.request.action_digest;
        assert_eq!(store.take(digest).await.unwrap().unwrap().by, "erin");
        assert_eq!(store.take(digest).await.unwrap(), None);
        // A new escalation of the same action waits anew.
        let next = store.record(&request("a"), later(60)).await.unwrap();
        assert_ne!(next.request.id, id);
        assert!(matches!(
            store
                .decide(
                    "missing",
                    ApprovalVerdict::Refuse {
                        by: "x".into(),
                        reason: None
                    }
                )
                .await,
            Err(DecideError::Unknown(_))
        ));
    }

    #[tokio::test]
    async fn a_refusal_is_kept_for_the_digest() {
        let store = MemoryGrantStore::new();
        let record = store.record(&request("a"), later(60)).await.unwrap();
        let verdict = ApprovalVerdict::Refuse {
            by: "erin".into(),
            reason: Some("not today".into()),
        };
        let decided = store.decide(&record.request.id, verdict).await.unwrap();
        assert_eq!(decided.status, ApprovalStatus::Refused);
        assert_eq!(decided.reason.as_deref(), Some("not today"));
        let refusal = store
            .refusal(&record.request.action_digest)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(refusal.denial_reason(), "refused by erin: not today");
        assert_eq!(
            store.take(&record.request.action_digest).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn an_expired_request_is_forgotten() {
        let store = MemoryGrantStore::new();
        let record = store
            .record(&request("a"), SystemTime::now())
            .await
            .unwrap();
        assert_eq!(store.approval(&record.request.id).await.unwrap(), None);
        assert!(matches!(
            store
                .decide(
                    &record.request.id,
                    ApprovalVerdict::Grant {
                        by: "x".into(),
                        ttl: Duration::from_secs(1)
                    }
                )
                .await,
            Err(DecideError::Unknown(_))
        ));
    }
}
