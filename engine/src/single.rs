//! Evaluating one policy of a point through the engine: the remote policy protocol's server
//! side asks for one policy's decision, and it must be audited, monitored, bounded and
//! recorded in the session store as any other evaluation is.

use std::sync::Arc;

use async_trait::async_trait;

use crate::context::{InputContext, InterceptionPoint, OutputContext, ToolCallContext};
use crate::decision::PolicyDecision;
use crate::engine::{Evaluation, PolicyEngine};
use crate::error::{BoxError, EngineError};
use crate::point::PolicyContext;
use crate::policy::{InputPolicy, OutputPolicy, ToolCallPolicy};
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
        let only = Arc::new(only(&set, C::POINT, policy_id)?);
        Some(self.evaluate_recorded(only, context).await)
    }
}

/// A set holding one policy of `set`'s `point` (by id), with that policy's mode and deadline,
/// the point's call deadline and the set's `on_error`.
fn only(set: &Arc<PolicySet>, point: InterceptionPoint, policy_id: &str) -> Option<PolicySet> {
    let mut only = PolicySet {
        on_error: set.on_error,
        ..PolicySet::default()
    };
    match point {
        InterceptionPoint::Input => {
            only.input = one_of(
                &set.input,
                |p| p.id() == policy_id,
                |index| Box::new(Chosen::new(set, index)),
            )?;
        }
        InterceptionPoint::ToolCall => {
            only.tool_call = one_of(
                &set.tool_call,
                |p| p.id() == policy_id,
                |index| Box::new(Chosen::new(set, index)),
            )?;
        }
        InterceptionPoint::Output => {
            only.output = one_of(
                &set.output,
                |p| p.id() == policy_id,
                |index| Box::new(Chosen::new(set, index)),
            )?;
        }
    }
    Some(only)
}

/// The first policy of `point` that `matches`, as a point of its own (made by `make` from
/// its index), with its mode, its deadline and the point's settings.
fn one_of<P: ?Sized>(
    point: &PointPolicies<P>,
    matches: impl Fn(&P) -> bool,
    make: impl FnOnce(usize) -> Box<P>,
) -> Option<PointPolicies<P>> {
    let index = point
        .entries
        .iter()
        .position(|entry| matches(&entry.policy))?;
    let entry = &point.entries[index];
    Some(PointPolicies {
        entries: vec![Entry {
            policy: make(index),
            monitor: entry.monitor,
            deadline: entry.deadline,
        }],
        settings: point.settings,
    })
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
    fn policy<C: PolicyContext>(&self) -> Option<&C::Policy> {
        C::point_policies(&self.set)
            .entries
            .get(self.index)
            .map(|entry| &*entry.policy)
    }

    fn id<C: PolicyContext>(&self) -> &str {
        self.policy::<C>().map_or("", C::policy_id)
    }

    async fn evaluate<C: PolicyContext>(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        match self.policy::<C>() {
            Some(policy) => C::evaluate_policy(policy, context).await,
            None => Err("the chosen policy is not in its set".into()),
        }
    }
}

#[async_trait]
impl InputPolicy for Chosen {
    fn id(&self) -> &str {
        self.id::<InputContext>()
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        Chosen::evaluate(self, context).await
    }
}

#[async_trait]
impl ToolCallPolicy for Chosen {
    fn id(&self) -> &str {
        self.id::<ToolCallContext>()
    }

    async fn evaluate(&self, context: &ToolCallContext) -> Result<PolicyDecision, BoxError> {
        Chosen::evaluate(self, context).await
    }
}

#[async_trait]
impl OutputPolicy for Chosen {
    fn id(&self) -> &str {
        self.id::<OutputContext>()
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Chosen::evaluate(self, context).await
    }
}
