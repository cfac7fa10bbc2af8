//! Resolving an escalation: stored grants ([`GrantStore`], [`MemoryGrantStore`]), the
//! application's [`ApprovalResolver`], and the [`Approvals`] handle that holds both.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use crate::approval::ApprovalRequest;
use crate::error::BoxError;
use crate::timer;

/// How long the engine waits for the resolver's answer unless told otherwise: five minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A resolver's answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// A person approved: the call proceeds.
    Granted {
        /// Who approved (for the audit trail).
        by: String,
    },
    /// A person refused: the call fails as a denial by the escalating policy.
    Refused {
        /// Why, for the caller and the audit trail.
        reason: Option<String>,
    },
    /// No answer yet (a ticket was opened, a message sent): the call fails with
    /// [`EngineError::ApprovalRequired`](crate::EngineError::ApprovalRequired), and the
    /// application retries once a grant is recorded.
    Pending,
}

/// Asks a person about an [`ApprovalRequest`]: a console prompt, a chat message, a ticket.
///
/// The engine waits for the answer up to its approval time-out. A resolver that fails
/// (returns an error or panics) refuses: the call fails as a denial.
///
/// ```
/// use portcullis_engine::{ApprovalAnswer, ApprovalRequest, ApprovalResolver, BoxError, async_trait};
///
/// struct OnlyTheTeam;
///
/// #[async_trait]
/// impl ApprovalResolver for OnlyTheTeam {
///     async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
///         let to = request.context["arguments"]["to"].as_str().unwrap_or_default();
///         Ok(if to.ends_with("@example.com") {
///             ApprovalAnswer::Granted { by: "on-call".into() }
///         } else {
///             ApprovalAnswer::Refused { reason: Some(format!("{to} is outside the team")) }
///         })
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait ApprovalResolver: Send + Sync + 'static {
    /// Answers the request.
    async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError>;
}

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

/// Where grants are kept between the approval and the retried call.
///
/// [`MemoryGrantStore`] keeps them in the process; a store shared by a fleet (Redis, a
/// database) implements this trait. Its contract: [`take`](GrantStore::take) is atomic, so one
/// grant lets exactly one call through however many calls ask at once, and never returns an
/// expired grant.
#[async_trait::async_trait]
pub trait GrantStore: Send + Sync + 'static {
    /// Records a grant for `digest` (grants for one digest add up: two grants, two calls).
    async fn put(&self, digest: &str, grant: Grant) -> Result<(), BoxError>;

    /// Removes and returns one unexpired grant for `digest`, if there is one.
    async fn take(&self, digest: &str) -> Result<Option<Grant>, BoxError>;
}

/// Grants kept in memory, in this process: single use, with an expiry.
#[derive(Debug, Default)]
pub struct MemoryGrantStore {
    grants: Mutex<HashMap<String, Vec<Grant>>>,
}

impl MemoryGrantStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Grant>>> {
        // The map is consistent after every statement: a poisoned lock is still usable.
        self.grants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl GrantStore for MemoryGrantStore {
    async fn put(&self, digest: &str, grant: Grant) -> Result<(), BoxError> {
        let now = SystemTime::now();
        let mut grants = self.lock();
        // Drop what has expired on the way, so the store does not grow with stale grants.
        grants.retain(|_, list| {
            list.retain(|grant| !grant.is_expired_at(now));
            !list.is_empty()
        });
        grants.entry(digest.to_owned()).or_default().push(grant);
        Ok(())
    }

    async fn take(&self, digest: &str) -> Result<Option<Grant>, BoxError> {
        let now = SystemTime::now();
        let mut grants = self.lock();
        let Some(list) = grants.get_mut(digest) else {
            return Ok(None);
        };
        list.retain(|grant| !grant.is_expired_at(now));
        let taken = if list.is_empty() {
            None
        } else {
            Some(list.remove(0))
        };
        if list.is_empty() {
            grants.remove(digest);
        }
        Ok(taken)
    }
}

/// An engine's approval machinery: the resolver, the time-out, the grant store.
///
/// Reached with [`PolicyEngine::approvals`](crate::PolicyEngine::approvals); configured with
/// the builder's `approvals`, `approval_timeout` and `grant_store`.
pub struct Approvals {
    resolver: Option<Arc<dyn ApprovalResolver>>,
    timeout: Duration,
    store: Arc<dyn GrantStore>,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            resolver: None,
            timeout: DEFAULT_APPROVAL_TIMEOUT,
            store: Arc::new(MemoryGrantStore::new()),
        }
    }
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approvals")
            .field("resolver", &self.resolver.is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// How an escalation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Proceed; `by` approved (`from_grant`: through a stored grant).
    Granted { by: String, from_grant: bool },
    /// Fail as a denial.
    Refused { reason: String },
    /// Fail with `ApprovalRequired`.
    Pending { reason: String },
}

impl Approvals {
    pub(crate) fn new(
        resolver: Option<Arc<dyn ApprovalResolver>>,
        timeout: Duration,
        store: Option<Arc<dyn GrantStore>>,
    ) -> Self {
        Approvals {
            resolver,
            timeout,
            store: store.unwrap_or_else(|| Arc::new(MemoryGrantStore::new())),
        }
    }

    /// Records that `by` approved the action whose digest is `digest`, for one call within
    /// `ttl`.
    pub async fn grant(
        &self,
        digest: &str,
        by: impl Into<String>,
        ttl: Duration,
    ) -> Result<(), BoxError> {
        let expires_at = SystemTime::now()
            .checked_add(ttl)
            .ok_or_else(|| BoxError::from(format!("a grant lifetime of {ttl:?} is too long")))?;
        let grant = Grant {
            by: by.into(),
            expires_at,
        };
        self.store.put(digest, grant).await
    }

    /// Whether a resolver is configured.
    pub fn has_resolver(&self) -> bool {
        self.resolver.is_some()
    }

    /// How long the engine waits for the resolver.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The grant store.
    pub fn store(&self) -> &Arc<dyn GrantStore> {
        &self.store
    }

    /// Resolves `request`: a stored grant, else the resolver within the time-out.
    pub(crate) async fn resolve(&self, request: &ApprovalRequest) -> Resolution {
        match self.store.take(&request.action_digest).await {
            Ok(Some(grant)) => {
                return Resolution::Granted {
                    by: grant.by,
                    from_grant: true,
                };
            }
            Ok(None) => {}
            Err(error) => {
                return Resolution::Refused {
                    reason: format!("the grant store failed: {error}"),
                };
            }
        }
        let Some(resolver) = &self.resolver else {
            return Resolution::Pending {
                reason: "no approval resolver is configured".to_owned(),
            };
        };
        let deadline = Instant::now() + self.timeout;
        let answer = timer::until(deadline, catching(resolver.resolve(request))).await;
        match answer {
            None => Resolution::Pending {
                reason: format!("no answer within {:?}", self.timeout),
            },
            Some(Ok(Ok(ApprovalAnswer::Granted { by }))) => Resolution::Granted {
                by,
                from_grant: false,
            },
            Some(Ok(Ok(ApprovalAnswer::Refused { reason }))) => Resolution::Refused {
                reason: reason.unwrap_or_else(|| "the approval was refused".to_owned()),
            },
            Some(Ok(Ok(ApprovalAnswer::Pending))) => Resolution::Pending {
                reason: "the approval is pending".to_owned(),
            },
            Some(Ok(Err(error))) => Resolution::Refused {
                reason: format!("the approval resolver failed: {error}"),
            },
            Some(Err(panic)) => Resolution::Refused {
                reason: format!("the approval resolver panicked: {panic}"),
            },
        }
    }
}

/// `future`, with a panic while polling it turned into an error holding the panic's message.
async fn catching<F: Future>(future: F) -> Result<F::Output, String> {
    let mut future = pin!(future);
    std::future::poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                let message = if let Some(text) = payload.downcast_ref::<&'static str>() {
                    (*text).to_owned()
                } else if let Some(text) = payload.downcast_ref::<String>() {
                    text.clone()
                } else {
                    "a panic without a message".to_owned()
                };
                Poll::Ready(Err(message))
            }
        },
    )
    .await
}
