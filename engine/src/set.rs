//! Policy sets: which policies run at each point, and how.

use std::fmt;
use std::time::Duration;

use crate::policy::PolicyMode;
use crate::stream::{StreamPlan, StreamingRule};
use crate::{InputPolicy, InterceptionPoint, OutputPolicy, ToolCallPolicy};

/// What the engine does when a policy cannot be evaluated (it fails, panics, times out, or its
/// decision cannot be applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnError {
    /// Fail the call with a [`PolicyEvaluationError`](crate::PolicyEvaluationError) (fail closed).
    #[default]
    Deny,
    /// Skip the failed policy and go on (fail open).
    Allow,
}

/// How the policies of one point are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PointSettings {
    /// Every policy of the point runs in monitor mode.
    pub monitor: bool,
    /// The policies of the point start at once instead of one after another.
    pub concurrent: bool,
    /// The deadline of each policy that does not set its own.
    pub policy_deadline: Option<Duration>,
    /// The deadline of the whole evaluation of the point.
    pub call_deadline: Option<Duration>,
}

/// One policy of a point, with what was read from it when it was added.
pub(crate) struct Entry<P: ?Sized> {
    pub(crate) policy: Box<P>,
    pub(crate) monitor: bool,
    pub(crate) deadline: Option<Duration>,
}

/// The policies of one point, in declared order, and how they run.
pub struct PointPolicies<P: ?Sized> {
    pub(crate) entries: Vec<Entry<P>>,
    pub(crate) settings: PointSettings,
}

impl<P: ?Sized> PointPolicies<P> {
    fn new() -> Self {
        PointPolicies {
            entries: Vec::new(),
            settings: PointSettings::default(),
        }
    }

    /// How many policies the point has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the point has no policy.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How the point runs.
    pub fn settings(&self) -> &PointSettings {
        &self.settings
    }

    /// The policies, in declared order.
    pub fn policies(&self) -> impl ExactSizeIterator<Item = &P> {
        self.entries.iter().map(|entry| &*entry.policy)
    }

    fn push(&mut self, policy: Box<P>, mode: PolicyMode, deadline: Option<Duration>) {
        self.entries.push(Entry {
            policy,
            monitor: mode == PolicyMode::Monitor,
            deadline,
        });
    }

    /// Folds the point settings into each entry, so an evaluation reads one place.
    fn finish(&mut self) {
        let settings = self.settings;
        for entry in &mut self.entries {
            entry.monitor |= settings.monitor;
            entry.deadline = entry.deadline.or(settings.policy_deadline);
        }
    }
}

/// The policies of every point, in declared order, and what to do when one fails.
///
/// ```
/// use portcullis_engine::{OnError, PolicySet};
///
/// let set = PolicySet::builder().on_error(OnError::Allow).build();
/// assert!(set.input().is_empty());
/// assert_eq!(set.on_error(), OnError::Allow);
/// ```
pub struct PolicySet {
    pub(crate) input: PointPolicies<dyn InputPolicy>,
    pub(crate) tool_call: PointPolicies<dyn ToolCallPolicy>,
    pub(crate) output: PointPolicies<dyn OutputPolicy>,
    pub(crate) on_error: OnError,
    /// The streaming forms of the output policies, read when each was added.
    output_streaming: Vec<Option<Vec<StreamingRule>>>,
    stream_checkpoint: Option<usize>,
    stream_batch: usize,
    pub(crate) stream_plan: std::sync::Arc<StreamPlan>,
}

impl PolicySet {
    /// A builder for a policy set.
    pub fn builder() -> PolicySetBuilder {
        PolicySetBuilder {
            set: PolicySet::default(),
        }
    }

    /// The input policies.
    pub fn input(&self) -> &PointPolicies<dyn InputPolicy> {
        &self.input
    }

    /// The tool-call policies.
    pub fn tool_call(&self) -> &PointPolicies<dyn ToolCallPolicy> {
        &self.tool_call
    }

    /// The output policies.
    pub fn output(&self) -> &PointPolicies<dyn OutputPolicy> {
        &self.output
    }

    /// What happens when a policy cannot be evaluated.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// The settings of one point.
    pub fn settings(&self, point: InterceptionPoint) -> &PointSettings {
        match point {
            InterceptionPoint::Input => &self.input.settings,
            InterceptionPoint::ToolCall => &self.tool_call.settings,
            InterceptionPoint::Output => &self.output.settings,
        }
    }
}

impl Default for PolicySet {
    /// An empty set: every call is allowed unchanged.
    fn default() -> Self {
        PolicySet {
            input: PointPolicies::new(),
            tool_call: PointPolicies::new(),
            output: PointPolicies::new(),
            on_error: OnError::Deny,
            output_streaming: Vec::new(),
            stream_checkpoint: None,
            stream_batch: 0,
            stream_plan: StreamPlan::build(&PointPolicies::new(), &[], None, 0).into(),
        }
    }
}

impl fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicySet")
            .field(
                "input",
                &self.input.policies().map(|p| p.id()).collect::<Vec<_>>(),
            )
            .field(
                "tool_call",
                &self
                    .tool_call
                    .policies()
                    .map(|p| p.id())
                    .collect::<Vec<_>>(),
            )
            .field(
                "output",
                &self.output.policies().map(|p| p.id()).collect::<Vec<_>>(),
            )
            .field("on_error", &self.on_error)
            .finish()
    }
}

/// Builds a [`PolicySet`]; each point method adds one policy after the ones already added.
#[must_use]
pub struct PolicySetBuilder {
    set: PolicySet,
}

impl PolicySetBuilder {
    /// Adds an input policy.
    pub fn input(mut self, policy: impl InputPolicy + 'static) -> Self {
        let (mode, deadline) = (policy.mode(), policy.deadline());
        self.set.input.push(Box::new(policy), mode, deadline);
        self
    }

    /// Adds a tool-call policy.
    pub fn tool_call(mut self, policy: impl ToolCallPolicy + 'static) -> Self {
        let (mode, deadline) = (policy.mode(), policy.deadline());
        self.set.tool_call.push(Box::new(policy), mode, deadline);
        self
    }

    /// Adds an output policy.
    pub fn output(mut self, policy: impl OutputPolicy + 'static) -> Self {
        let (mode, deadline) = (policy.mode(), policy.deadline());
        self.set.output_streaming.push(policy.streaming());
        self.set.output.push(Box::new(policy), mode, deadline);
        self
    }

    /// Sets what happens when a policy cannot be evaluated (default [`OnError::Deny`]).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.set.on_error = on_error;
        self
    }

    /// Gives every policy of `point` that sets no deadline of its own this one. A policy still
    /// running at its deadline is cancelled (its future is dropped) and counts as an
    /// evaluation error.
    pub fn policy_deadline(mut self, point: InterceptionPoint, deadline: Duration) -> Self {
        self.settings_mut(point).policy_deadline = Some(deadline);
        self
    }

    /// Bounds the whole evaluation of `point`: every policy not finished at the deadline is
    /// cancelled and counts as an evaluation error.
    pub fn call_deadline(mut self, point: InterceptionPoint, deadline: Duration) -> Self {
        self.settings_mut(point).call_deadline = Some(deadline);
        self
    }

    /// Runs every policy of `point` in monitor mode: evaluated and audited, but a `deny` does
    /// not block, changes are not applied and errors do not fail the call.
    pub fn monitor(mut self, point: InterceptionPoint) -> Self {
        self.settings_mut(point).monitor = true;
        self
    }

    /// Starts all policies of `point` at once on the same context instead of one after another.
    ///
    /// Results are still applied in declared order: the first `deny` in declared order wins,
    /// changes are applied in declared order and audit records come in declared order. The
    /// outcome equals the sequential one whenever no policy depends on a change made by an
    /// earlier policy of the point (in concurrent mode every policy sees the context as it
    /// was when the call began). Once the winning `deny` (or failing policy) is known, the
    /// policies still running are cancelled.
    pub fn concurrent(mut self, point: InterceptionPoint) -> Self {
        self.settings_mut(point).concurrent = true;
        self
    }

    /// Lets a streamed answer whose output policies cannot all stream be released in steps:
    /// the accumulated text is evaluated every `characters` characters and released up to
    /// that point when the evaluation allows it unchanged (see [`crate::stream`]). Without
    /// it such a stream is buffered whole.
    pub fn stream_checkpoint(mut self, characters: usize) -> Self {
        self.set.stream_checkpoint = Some(characters);
        self
    }

    /// In incremental streaming, runs the rules once at least `bytes` bytes have arrived since
    /// they last ran (and at the end), instead of on every push: less work per byte when an
    /// answer comes in many small deltas, for up to `bytes` more held back before release.
    /// The default, 0, runs them on every push.
    pub fn stream_batch(mut self, bytes: usize) -> Self {
        self.set.stream_batch = bytes;
        self
    }

    fn settings_mut(&mut self, point: InterceptionPoint) -> &mut PointSettings {
        match point {
            InterceptionPoint::Input => &mut self.set.input.settings,
            InterceptionPoint::ToolCall => &mut self.set.tool_call.settings,
            InterceptionPoint::Output => &mut self.set.output.settings,
        }
    }

    /// The policy set.
    pub fn build(mut self) -> PolicySet {
        self.set.input.finish();
        self.set.tool_call.finish();
        self.set.output.finish();
        self.set.stream_plan = StreamPlan::build(
            &self.set.output,
            &self.set.output_streaming,
            self.set.stream_checkpoint,
            self.set.stream_batch,
        )
        .into();
        self.set
    }
}
