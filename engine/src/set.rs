//! Policy sets: which policies run at each point, and how.

use std::fmt;
use std::time::Duration;

use crate::context::{InputContext, InterceptionPoint, OutputContext, ToolCallContext};
use crate::point::{ByPoint, PointMap, PolicyContext};
use crate::policy::{InputPolicy, OutputPolicy, Policy, PolicyMode, ToolCallPolicy};
use crate::stream::rule::StreamingRule;

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

/// The policies of one point, in declared order, and how they run. `P` is the point's policy
/// trait object, `dyn Policy<C>`.
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
    pub(crate) points: ByPoint<Points>,
    pub(crate) on_error: OnError,
    /// The streaming forms of the output policies, read when each was added. The engine
    /// compiles them into its stream plan when a stream is first asked for.
    pub(crate) output_streaming: Vec<Option<Vec<StreamingRule>>>,
    pub(crate) stream_checkpoint: Option<usize>,
    pub(crate) stream_batch: usize,
}

/// The [`PointMap`] of a set's points: each point's policies.
pub(crate) struct Points;

impl PointMap for Points {
    type Of<C: PolicyContext> = PointPolicies<dyn Policy<C>>;
}

impl PolicySet {
    /// A builder for a policy set.
    pub fn builder() -> PolicySetBuilder {
        PolicySetBuilder {
            set: PolicySet::default(),
        }
    }

    /// The policies of the point of `C`.
    pub fn point<C: PolicyContext>(&self) -> &PointPolicies<dyn Policy<C>> {
        self.points.get::<C>()
    }

    /// The input policies.
    pub fn input(&self) -> &PointPolicies<dyn Policy<InputContext>> {
        self.point()
    }

    /// The tool-call policies.
    pub fn tool_call(&self) -> &PointPolicies<dyn Policy<ToolCallContext>> {
        self.point()
    }

    /// The output policies.
    pub fn output(&self) -> &PointPolicies<dyn Policy<OutputContext>> {
        self.point()
    }

    /// What happens when a policy cannot be evaluated.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// The settings of one point.
    pub fn settings(&self, point: InterceptionPoint) -> &PointSettings {
        match point {
            InterceptionPoint::Input => &self.input().settings,
            InterceptionPoint::ToolCall => &self.tool_call().settings,
            InterceptionPoint::Output => &self.output().settings,
        }
    }
}

impl Default for PolicySet {
    /// An empty set: every call is allowed unchanged.
    fn default() -> Self {
        PolicySet {
            points: ByPoint {
                input: PointPolicies::new(),
                tool_call: PointPolicies::new(),
                output: PointPolicies::new(),
            },
            on_error: OnError::Deny,
            output_streaming: Vec::new(),
            stream_checkpoint: None,
            stream_batch: 0,
        }
    }
}

impl fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn ids<C: PolicyContext>(set: &PolicySet) -> Vec<&str> {
            set.point::<C>().policies().map(|p| p.id()).collect()
        }
        f.debug_struct("PolicySet")
            .field("input", &ids::<InputContext>(self))
            .field("tool_call", &ids::<ToolCallContext>(self))
            .field("output", &ids::<OutputContext>(self))
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
    /// Adds a policy of the point of `C`, after the ones already added there.
    pub fn policy<C: PolicyContext>(mut self, policy: impl Policy<C> + 'static) -> Self {
        let (mode, deadline) = (policy.mode(), policy.deadline());
        if C::POINT == InterceptionPoint::Output {
            self.set.output_streaming.push(policy.streaming());
        }
        self.set
            .points
            .get_mut::<C>()
            .push(Box::new(policy), mode, deadline);
        self
    }

    /// Adds an input policy.
    pub fn input(self, policy: impl InputPolicy + 'static) -> Self {
        self.policy::<InputContext>(policy)
    }

    /// Adds a tool-call policy.
    pub fn tool_call(self, policy: impl ToolCallPolicy + 'static) -> Self {
        self.policy::<ToolCallContext>(policy)
    }

    /// Adds an output policy.
    pub fn output(self, policy: impl OutputPolicy + 'static) -> Self {
        self.policy::<OutputContext>(policy)
    }

    /// Sets what happens when a policy cannot be evaluated (default [`OnError::Deny`]).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.set.on_error = on_error;
        self
    }

    /// Gives every policy of `point` that sets no deadline of its own this one. A policy still
    /// running at its deadline is cancelled (its future is dropped) and counts as an
    /// evaluation error; so does an answer that arrives after the deadline.
    ///
    /// A deadline can interrupt a policy only where it yields (awaits): a policy that blocks
    /// its thread (synchronous I/O, a long loop) runs until it returns, and only then is its
    /// late answer refused. Wrap such a policy in [`blocking`](crate::PolicyExt::blocking) to
    /// run it off the executor, so the call fails at the deadline itself.
    pub fn policy_deadline(mut self, point: InterceptionPoint, deadline: Duration) -> Self {
        self.settings_mut(point).policy_deadline = Some(deadline);
        self
    }

    /// Bounds the whole evaluation of `point`: every policy not finished at the deadline is
    /// cancelled and counts as an evaluation error, as does an answer that arrives after it
    /// (see [`policy_deadline`](Self::policy_deadline) for what a deadline can interrupt).
    pub fn call_deadline(mut self, point: InterceptionPoint, deadline: Duration) -> Self {
        self.settings_mut(point).call_deadline = Some(deadline);
        self
    }

    /// Runs every policy of `point` in monitor mode: evaluated and audited, but a `deny` does
    /// not block, changes are not applied and errors do not fail the call. A redaction or
    /// transform is still tried on a scratch copy: one that would fail is audited as the
    /// evaluation error it would be, so the records show what enforcing would do.
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
    ///
    /// Every policy that ran is audited: each policy after the winner in declared order gets an
    /// `evaluation_error` record whose reason says why its outcome was not taken,
    /// ``cancelled after `<winner>` denied`` when it was still running (or `failed` when the
    /// winner was an evaluation error), or ``discarded after `<winner>` denied: …`` when it had
    /// already decided. These records come after the winner's, in declared order.
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
        let points = &mut self.set.points;
        match point {
            InterceptionPoint::Input => &mut points.input.settings,
            InterceptionPoint::ToolCall => &mut points.tool_call.settings,
            InterceptionPoint::Output => &mut points.output.settings,
        }
    }

    /// The policy set.
    pub fn build(mut self) -> PolicySet {
        let points = &mut self.set.points;
        points.input.finish();
        points.tool_call.finish();
        points.output.finish();
        self.set
    }
}
