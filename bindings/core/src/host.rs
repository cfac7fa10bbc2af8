//! A policy whose decisions a host language gives (a JavaScript or Python function): the
//! engine's policy trait, for every point, written once here over each binding's call.

use std::time::Duration;

use portcullis_engine::{BoxError, Policy, PolicyContext, PolicyDecision, async_trait};

/// How a binding asks its host language for a decision on a context.
#[async_trait]
pub trait HostCall: Send + Sync + 'static {
    /// The decision the host's function gives on `context` (awaiting what it returns); an
    /// `Err` is an evaluation error.
    async fn decide<C: PolicyContext>(&self, context: &C) -> Result<PolicyDecision, BoxError>;
}

/// A policy of any point whose decisions `H` asks the host language for, failing after its
/// deadline when it has one.
pub struct HostPolicy<H> {
    id: String,
    deadline: Option<Duration>,
    call: H,
}

impl<H: HostCall> HostPolicy<H> {
    /// A policy with `id` whose decisions `call` gives, each within `deadline`.
    pub fn new(id: String, call: H, deadline: Duration) -> HostPolicy<H> {
        HostPolicy {
            id,
            deadline: Some(deadline),
            call,
        }
    }

    /// A policy with `id` whose decisions `call` gives, with no deadline: for a host whose
    /// policies are called on the caller's thread and cannot be interrupted anyway (Java), so
    /// the engine keeps no timer for them.
    pub fn without_deadline(id: String, call: H) -> HostPolicy<H> {
        HostPolicy {
            id,
            deadline: None,
            call,
        }
    }
}

#[async_trait]
impl<C: PolicyContext, H: HostCall> Policy<C> for HostPolicy<H> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        self.call.decide(context).await
    }

    fn deadline(&self) -> Option<Duration> {
        self.deadline
    }
}
