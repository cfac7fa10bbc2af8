//! Evaluating one policy of a point through the engine: the remote policy protocol's server
//! side asks for one policy's decision, and it must be audited, monitored, bounded and
//! recorded in the session store as any other evaluation is.

use std::sync::Arc;

use async_trait::async_trait;

use crate::decision::PolicyDecision;
use crate::engine::{Evaluation, PolicyEngine};
use crate::error::{BoxError, EngineError};
use crate::point::PolicyContext;
use crate::policy::Policy;
use crate::set::{Entry, PointPolicies, PolicySet};

impl PolicyEngine {
    /// Runs only the policy `policy_id` of `C`'s point on `context`, as
    /// [`evaluate`](Self::evaluate) runs a whole point: the policy sees the session's facts,
    /// its decisions are audited, its mode (monitor), its deadlines and the point's call
    /// deadline apply, the set's `on_error` decides what a failure does, an escalation goes
    /// to the approval step, and a call that proceeds is recorded in the session store.
    ///
    /// `None` when the set new evaluations start on has no policy with that id at that point
    /// (the first one is run when several share it).
    pub async fn evaluate_only<'a, C: PolicyContext>(
        &'a self,
        policy_id: &str,
        context: &'a C,
    ) -> Option<Result<Evaluation<'a, C>, EngineError>> {
        let set = self.policy_set();
        let only = Arc::new(only::<C>(&set, policy_id)?);
        Some(self.evaluate_recorded(only, context).await)
    }
}

/// A set holding one policy of `C`'s point of `set` (the first with id `policy_id`), with that
/// policy's mode and deadline, the point's settings (its call deadline) and the set's
/// `on_error`.
fn only<C: PolicyContext>(set: &Arc<PolicySet>, policy_id: &str) -> Option<PolicySet> {
    let point = set.point::<C>();
    let index = point
        .entries
        .iter()
        .position(|entry| entry.policy.id() == policy_id)?;
    let entry = &point.entries[index];
    let mut only = PolicySet {
        on_error: set.on_error,
        ..PolicySet::default()
    };
    *only.points.get_mut::<C>() = PointPolicies {
        entries: vec![Entry {
            policy: Box::new(Chosen::new(set, index)),
            monitor: entry.monitor,
            deadline: entry.deadline,
        }],
        settings: point.settings,
    };
    Some(only)
}

/// The policy at `index` of a point of a shared set (the set in use stays whole; the one
/// policy is reached through it).
struct Chosen {
    set: Arc<PolicySet>,
    index: usize,
}

impl Chosen {
    fn new(set: &Arc<PolicySet>, index: usize) -> Chosen {
        Chosen {
            set: Arc::clone(set),
            index,
        }
    }

    /// The chosen policy of `C`'s point (`index` was found in that point of this set).
    fn policy<C: PolicyContext>(&self) -> Option<&dyn Policy<C>> {
        self.set
            .point::<C>()
            .entries
            .get(self.index)
            .map(|entry| &*entry.policy)
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for Chosen {
    fn id(&self) -> &str {
        self.policy::<C>().map_or("", |policy| policy.id())
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        match self.policy::<C>() {
            Some(policy) => policy.evaluate(context).await,
            None => Err("the chosen policy is not in its set".into()),
        }
    }
}
