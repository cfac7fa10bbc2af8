//! Resolving an escalation: stored grants and refusals (a [`GrantStore`]), the application's
//! [`ApprovalResolver`], and the [`Approvals`] handle that holds both and records the requests
//! nobody answered.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use crate::approval::{ApprovalRequest, ApprovalScope};
use crate::error::BoxError;
use crate::grant::{
    ApprovalRecord, ApprovalStatus, ApprovalVerdict, DecideError, Grant, GrantStore,
    MemoryGrantStore,
};
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

/// An engine's approval machinery: the resolver, the time-out, the grant store, and what a
/// digest covers.
///
/// Reached with [`PolicyEngine::approvals`](crate::PolicyEngine::approvals); configured with
/// the builder's `approvals`, `approval_timeout`, `grant_store` and `approval_scope`.
pub struct Approvals {
    resolver: Option<Arc<dyn ApprovalResolver>>,
    timeout: Duration,
    store: Arc<dyn GrantStore>,
    scope: ApprovalScope,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals::new(
            None,
            DEFAULT_APPROVAL_TIMEOUT,
            None,
            ApprovalScope::default(),
        )
    }
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approvals")
            .field("resolver", &self.resolver.is_some())
            .field("timeout", &self.timeout)
            .field("scope", &self.scope)
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
    /// Fail with `ApprovalRequired`; `id` is the recorded request's (a retry of a waiting
    /// action keeps the first request's id).
    Pending { reason: String, id: Option<String> },
}

impl Approvals {
    pub(crate) fn new(
        resolver: Option<Arc<dyn ApprovalResolver>>,
        timeout: Duration,
        store: Option<Arc<dyn GrantStore>>,
        scope: ApprovalScope,
    ) -> Self {
        Approvals {
            resolver,
            timeout,
            store: store.unwrap_or_else(|| Arc::new(MemoryGrantStore::new())),
            scope,
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

    /// Decides the recorded request `id` (see [`GrantStore::decide`]): a grant lets its
    /// action through once, a refusal denies it.
    pub async fn decide(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
    ) -> Result<ApprovalRecord, DecideError> {
        self.store.decide(id, verdict).await
    }

    /// The recorded requests (with `status` only those), newest first.
    pub async fn list(
        &self,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<ApprovalRecord>, BoxError> {
        self.store.approvals(status).await
    }

    /// The record of the request `id`, if it is kept.
    pub async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, BoxError> {
        self.store.approval(id).await
    }

    /// Whether a resolver is configured.
    pub fn has_resolver(&self) -> bool {
        self.resolver.is_some()
    }

    /// How long the engine waits for the resolver, and how long a request nobody answered
    /// waits in the store.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What an action digest covers.
    pub fn scope(&self) -> ApprovalScope {
        self.scope
    }

    /// The grant store.
    pub fn store(&self) -> &Arc<dyn GrantStore> {
        &self.store
    }

    /// Resolves `request`: a stored grant, else a stored refusal, else the resolver within the
    /// time-out; a request still unanswered is recorded as pending.
    pub(crate) async fn resolve(&self, request: &ApprovalRequest) -> Resolution {
        let digest = &request.action_digest;
        match self.store.take(digest).await {
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
        match self.store.refusal(digest).await {
            Ok(Some(refusal)) => {
                return Resolution::Refused {
                    reason: refusal.denial_reason(),
                };
            }
            Ok(None) => {}
            Err(error) => {
                return Resolution::Refused {
                    reason: format!("the grant store failed: {error}"),
                };
            }
        }
        let reason = match &self.resolver {
            None => "no approval resolver is configured".to_owned(),
            Some(resolver) => {
                let deadline = Instant::now() + self.timeout;
                match timer::until(deadline, catching(resolver.resolve(request))).await {
                    None => format!("no answer within {:?}", self.timeout),
                    Some(Ok(Ok(ApprovalAnswer::Granted { by }))) => {
                        return Resolution::Granted {
                            by,
                            from_grant: false,
                        };
                    }
                    Some(Ok(Ok(ApprovalAnswer::Refused { reason }))) => {
                        return Resolution::Refused {
                            reason: reason.unwrap_or_else(|| "the approval was refused".to_owned()),
                        };
                    }
                    Some(Ok(Ok(ApprovalAnswer::Pending))) => "the approval is pending".to_owned(),
                    Some(Ok(Err(error))) => {
                        return Resolution::Refused {
                            reason: format!("the approval resolver failed: {error}"),
                        };
                    }
                    Some(Err(panic)) => {
                        return Resolution::Refused {
                            reason: format!("the approval resolver panicked: {panic}"),
                        };
                    }
                }
            }
        };
        self.pending(request, reason).await
    }

    /// Records `request` as waiting for a person (the call fails all the same when the store
    /// cannot: the escalation is held back either way).
    async fn pending(&self, request: &ApprovalRequest, reason: String) -> Resolution {
        let until = SystemTime::now()
            .checked_add(self.timeout)
            .unwrap_or_else(|| SystemTime::now() + DEFAULT_APPROVAL_TIMEOUT);
        match self.store.record(request, until).await {
            Ok(record) => Resolution::Pending {
                reason,
                id: Some(record.request.id),
            },
            Err(error) => Resolution::Pending {
                reason: format!("{reason}; the request is not recorded: {error}"),
                id: None,
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
