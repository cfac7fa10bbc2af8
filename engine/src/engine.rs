//! The engine: runs the policies of a point and applies their decisions.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use crate::apply::apply_changes;
use crate::approval::{ApprovalRequest, ApprovalScope};
use crate::audit::{AUDIT_POLICY_ID, AuditDecision, AuditHandler, AuditRecord};
use crate::context::{
    InputContext, InterceptionPoint, OutputContext, ToolCallContext, ToolResultContext,
};
use crate::decision::PolicyDecision;
use crate::error::{
    BoxError, DeadlineScope, EngineError, InvalidContext, PolicyDenialError, PolicyEvaluationError,
    PolicyPanicked, PolicyResult, PolicyTimedOut, error_chain,
};
use crate::grant::GrantStore;
use crate::point::PolicyContext;
use crate::policy::Policy;
use crate::resolve::{ApprovalResolver, Approvals, DEFAULT_APPROVAL_TIMEOUT, Resolution};
use crate::session::flow;
use crate::session::store::{SESSION_POLICY_ID, SessionStore};
use crate::set::{Entry, OnError, PolicySet};
use crate::stream::plan::StreamPlan;
use crate::timer;
use crate::unwind::CatchUnwind;

/// The error of a call whose audit record the handler refused.
fn audit_refused<C: PolicyContext>(refused: BoxError) -> EngineError {
    EngineError::Evaluation(PolicyEvaluationError::new(
        AUDIT_POLICY_ID,
        C::POINT,
        refused,
    ))
}

/// The id under which the engine reports a context it refuses before any policy runs
/// (for example tool arguments nested deeper than [`MAX_NESTING`](crate::MAX_NESTING)).
pub const CONTEXT_CHECK_ID: &str = "portcullis.context";

/// The policy engine: built once at start-up, shared across tasks and threads.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use portcullis_engine::{
///     async_trait, BoxError, InputContext, Message, Metadata, Policy, PolicyDecision,
///     PolicyEngine, PolicySet,
/// };
///
/// struct NoPasswords;
///
/// #[async_trait]
/// impl Policy<InputContext> for NoPasswords {
///     fn id(&self) -> &str {
///         "no_passwords"
///     }
///
///     async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
///         let leaks = context.messages.iter().any(|m| m.content.contains("password"));
///         Ok(if leaks { PolicyDecision::deny("no passwords") } else { PolicyDecision::allow() })
///     }
/// }
///
/// let engine = PolicyEngine::builder()
///     .policy_set(PolicySet::builder().input(NoPasswords).build())
///     .build();
///
/// let context = InputContext::new(vec![Message::user("hello")], Metadata::new("agent", "s1"));
/// let evaluation = engine.evaluate_input(&context).await.unwrap();
/// assert_eq!(evaluation.context(), &context);
///
/// let context = InputContext::new(vec![Message::user("my password is x")], Metadata::new("agent", "s1"));
/// let denial = engine.evaluate_input(&context).await.unwrap_err();
/// assert_eq!(denial.as_denial().unwrap().reason(), Some("no passwords"));
/// # });
/// ```
pub struct PolicyEngine {
    /// The set new evaluations start on, with its stream plan; an evaluation holds its own
    /// handle to the set, so a replacement never changes an evaluation under way.
    active: RwLock<Arc<Active>>,
    /// The stamp of the active set (see [`Active::stamp`]), read without the lock: a thread
    /// that evaluated on this set before finds it in its cache (see [`PolicyEngine::current_set`]).
    stamp: AtomicU64,
    audit: Option<Arc<dyn AuditHandler>>,
    sessions: Option<Arc<dyn SessionStore>>,
    approvals: Approvals,
}

impl fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("set", &self.policy_set())
            .field("audit", &self.audit.is_some())
            .field("sessions", &self.sessions.is_some())
            .field("approvals", &self.approvals)
            .finish()
    }
}

/// A policy set as the engine serves it: the set, and how its output policies stream,
/// compiled when a stream of this set is first asked for, so an engine that never streams never
/// compiles streaming rules.
pub(crate) struct Active {
    pub(crate) set: Arc<PolicySet>,
    /// A number no other set installed in any engine of the process has.
    stamp: u64,
    stream_plan: OnceLock<Arc<StreamPlan>>,
}

/// The next [`Active::stamp`] (0 is never given: it marks an empty cache).
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The set this thread evaluated on last, by stamp: finding it again costs one plain load
    /// of the engine's stamp and an upgrade of the weak handle, instead of taking the engine's
    /// lock. Weak, so a replaced set is not kept alive by a thread that evaluated on it.
    static LAST_SET: RefCell<(u64, Weak<PolicySet>)> = const { RefCell::new((0, Weak::new())) };
}

impl Active {
    fn new(set: PolicySet) -> Arc<Active> {
        Arc::new(Active {
            set: Arc::new(set),
            stamp: NEXT_STAMP.fetch_add(1, Ordering::Relaxed),
            stream_plan: OnceLock::new(),
        })
    }

    /// The set's stream plan, compiled on the first call.
    pub(crate) fn stream_plan(&self) -> Arc<StreamPlan> {
        Arc::clone(
            self.stream_plan
                .get_or_init(|| Arc::new(StreamPlan::build(&self.set))),
        )
    }
}

/// Builds a [`PolicyEngine`].
#[must_use]
#[derive(Default)]
pub struct PolicyEngineBuilder {
    set: Option<PolicySet>,
    audit: Option<Arc<dyn AuditHandler>>,
    sessions: Option<Arc<dyn SessionStore>>,
    resolver: Option<Arc<dyn ApprovalResolver>>,
    approval_timeout: Option<Duration>,
    grant_store: Option<Arc<dyn GrantStore>>,
    approval_scope: ApprovalScope,
}

impl PolicyEngineBuilder {
    /// The policies to run. Without one the engine has no policy and allows everything.
    pub fn policy_set(mut self, set: PolicySet) -> Self {
        self.set = Some(set);
        self
    }

    /// Where audit records go. Optional: without a handler no record is built.
    pub fn on_audit(mut self, handler: impl AuditHandler) -> Self {
        self.audit = Some(Arc::new(handler));
        self
    }

    /// Where the engine keeps per-session facts (labels and counters) that policies read in
    /// `metadata.session`; see [`session`](crate::session). Optional: without a store,
    /// `metadata.session` is whatever the caller sent, and nothing is recorded.
    pub fn sessions(mut self, store: impl SessionStore) -> Self {
        self.sessions = Some(Arc::new(store));
        self
    }

    /// [`sessions`](Self::sessions) with a store that is shared (by several engines, for
    /// example).
    pub fn shared_sessions(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.sessions = Some(store);
        self
    }

    /// Who answers approval requests (a console prompt, a chat message, a ticket). Optional:
    /// without a resolver, an escalation without a stored grant fails the call with
    /// [`EngineError::ApprovalRequired`].
    pub fn approvals(mut self, resolver: impl ApprovalResolver) -> Self {
        self.resolver = Some(Arc::new(resolver));
        self
    }

    /// How long the engine waits for the resolver's answer (default
    /// [`DEFAULT_APPROVAL_TIMEOUT`], five minutes); past it the call fails with
    /// [`EngineError::ApprovalRequired`].
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = Some(timeout);
        self
    }

    /// Where grants are kept (default: a [`MemoryGrantStore`](crate::MemoryGrantStore) of
    /// this engine's own).
    pub fn grant_store(mut self, store: impl GrantStore) -> Self {
        self.grant_store = Some(Arc::new(store));
        self
    }

    /// [`grant_store`](Self::grant_store) with a store that is shared (by several engines,
    /// or with the service that lists and decides its requests).
    pub fn shared_grant_store(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.grant_store = Some(store);
        self
    }

    /// What an action digest covers (default [`ApprovalScope::Context`]: the whole context but
    /// its timestamp). A proxy, whose model invents call ids and words anew on each try, takes
    /// [`ApprovalScope::Action`].
    pub fn approval_scope(mut self, scope: ApprovalScope) -> Self {
        self.approval_scope = scope;
        self
    }

    /// The engine.
    pub fn build(self) -> PolicyEngine {
        let active = Active::new(self.set.unwrap_or_default());
        PolicyEngine {
            stamp: AtomicU64::new(active.stamp),
            active: RwLock::new(active),
            audit: self.audit,
            sessions: self.sessions,
            approvals: Approvals::new(
                self.resolver,
                self.approval_timeout.unwrap_or(DEFAULT_APPROVAL_TIMEOUT),
                self.grant_store,
                self.approval_scope,
            ),
        }
    }
}

/// One decision taken during an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionEntry {
    /// The policy that took it.
    pub policy_id: String,
    /// The decision.
    pub decision: PolicyDecision,
    /// Whether it took effect (`false` in monitor mode).
    pub enforced: bool,
}

/// A successful evaluation: the context to forward and the decisions taken.
///
/// It borrows the context it was given for `'a`, and holds the policy set it ran on.
pub struct Evaluation<'a, C: Clone> {
    context: Cow<'a, C>,
    taken: Mutex<PointDecisions>,
    decisions: OnceLock<Vec<DecisionEntry>>,
    set: Arc<PolicySet>,
    point: InterceptionPoint,
}

/// A decision as the hot path keeps it: the policy is named by its place in the point until
/// someone asks for [`DecisionEntry`] values.
struct IndexedDecision {
    index: usize,
    decision: CompactDecision,
    enforced: bool,
}

/// A decision as [`PointDecisions`] keeps it: a plain `allow` as its audit flag alone, any
/// other decision whole.
enum CompactDecision {
    Allow { audit: bool },
    Other(PolicyDecision),
}

impl CompactDecision {
    fn into_decision(self) -> PolicyDecision {
        match self {
            CompactDecision::Allow { audit } => PolicyDecision::Allow {
                audit,
                labels: Vec::new(),
            },
            CompactDecision::Other(decision) => decision,
        }
    }
}

/// The decisions taken at a point, without a heap allocation when they are plain `allow`s:
/// the `allow`s of the first [`PointDecisions::BITS`] policies are bits, every other decision is
/// in `first` and then `others`, in declared order (the first of them needs no allocation
/// either: a point usually takes at most one decision that is not an allow).
#[derive(Default)]
struct PointDecisions {
    /// Bit `i`: policy `i` allowed (without labels).
    allowed: u64,
    /// Bit `i`: that `allow` asked for an audit record.
    audited: u64,
    /// Bit `i`: that `allow` was enforced (not monitored).
    enforced: u64,
    /// The other decisions (and the `allow`s of policies past the bits).
    first: Option<IndexedDecision>,
    others: Vec<IndexedDecision>,
    /// Why the audit handler refused the record of a plain `allow`: the call fails.
    refused: Option<BoxError>,
}

impl PointDecisions {
    /// Policies whose `allow` is kept as bits.
    const BITS: usize = 64;

    fn push(&mut self, taken: IndexedDecision) {
        match taken {
            IndexedDecision {
                index,
                decision: CompactDecision::Allow { audit },
                enforced,
            } if index < Self::BITS => self.push_allow(index, audit, enforced),
            taken => self.push_other(taken),
        }
    }

    /// Keeps an `allow` without labels.
    #[inline]
    fn push_allow(&mut self, index: usize, audit: bool, enforced: bool) {
        if index >= Self::BITS {
            self.push_other(IndexedDecision {
                index,
                decision: CompactDecision::Allow { audit },
                enforced,
            });
            return;
        }
        let bit = 1 << index;
        self.allowed |= bit;
        self.audited |= u64::from(audit) << index;
        self.enforced |= u64::from(enforced) << index;
    }

    fn push_other(&mut self, taken: IndexedDecision) {
        if self.first.is_none() {
            self.first = Some(taken);
        } else {
            self.others.push(taken);
        }
    }

    /// Whether an enforced decision escalated.
    fn escalates(&self) -> bool {
        self.others().any(|taken| {
            taken.enforced
                && matches!(&taken.decision, CompactDecision::Other(decision) if decision.is_escalate())
        })
    }

    /// The decisions other than plain `allow`s.
    fn others(&self) -> impl Iterator<Item = &IndexedDecision> {
        self.first.iter().chain(&self.others)
    }

    /// Every decision, in declared order.
    fn into_ordered(self) -> impl Iterator<Item = IndexedDecision> {
        let mut bits = self.allowed;
        let (audited, enforced) = (self.audited, self.enforced);
        let mut others = self.first.into_iter().chain(self.others).peekable();
        std::iter::from_fn(move || {
            let next_bit = (bits != 0).then(|| bits.trailing_zeros() as usize);
            let next_other = others.peek().map(|taken| taken.index);
            match (next_bit, next_other) {
                (Some(bit), other) if other.is_none_or(|other| bit < other) => {
                    bits &= bits - 1;
                    Some(IndexedDecision {
                        index: bit,
                        decision: CompactDecision::Allow {
                            audit: audited & (1 << bit) != 0,
                        },
                        enforced: enforced & (1 << bit) != 0,
                    })
                }
                _ => others.next(),
            }
        })
    }
}

impl<'a, C: Clone> Evaluation<'a, C> {
    fn new(
        context: Cow<'a, C>,
        taken: PointDecisions,
        set: Arc<PolicySet>,
        point: InterceptionPoint,
    ) -> Self {
        Evaluation {
            context,
            taken: Mutex::new(taken),
            decisions: OnceLock::new(),
            set,
            point,
        }
    }

    /// What to forward: the original context when nothing changed, otherwise the changed one.
    pub fn context(&self) -> &C {
        &self.context
    }

    /// Takes the context to forward (this copies the original if nothing changed).
    pub fn into_context(self) -> C {
        self.context.into_owned()
    }

    /// Whether an enforced policy escalated (the engine resolved it, or the call would not
    /// have returned this evaluation).
    pub fn escalates(&self) -> bool {
        let taken = match self.taken.lock() {
            Ok(taken) => taken,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.decisions.get().is_some() {
            drop(taken);
            return self
                .decisions()
                .iter()
                .any(|entry| entry.enforced && entry.decision.is_escalate());
        }
        taken.others().any(|taken| {
            taken.enforced
                && matches!(&taken.decision, CompactDecision::Other(decision) if decision.is_escalate())
        })
    }

    /// Whether a redaction or transform changed the context.
    pub fn is_modified(&self) -> bool {
        matches!(self.context, Cow::Owned(_))
    }

    /// The decisions taken, in declared order (evaluation errors skipped under
    /// `on_error: allow` are not decisions and are not listed).
    pub fn decisions(&self) -> &[DecisionEntry] {
        self.decisions.get_or_init(|| {
            let mut taken = match self.taken.lock() {
                Ok(taken) => taken,
                Err(poisoned) => poisoned.into_inner(),
            };
            std::mem::take(&mut *taken)
                .into_ordered()
                .map(|taken| DecisionEntry {
                    policy_id: policy_id_at(&self.set, self.point, taken.index).to_owned(),
                    decision: taken.decision.into_decision(),
                    enforced: taken.enforced,
                })
                .collect()
        })
    }

    /// The context and the decisions.
    pub fn into_parts(self) -> (Cow<'a, C>, Vec<DecisionEntry>) {
        self.decisions();
        let decisions = self.decisions.into_inner().unwrap_or_default();
        (self.context, decisions)
    }
}

impl<C: Clone + fmt::Debug> fmt::Debug for Evaluation<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evaluation")
            .field("context", &self.context)
            .field("modified", &self.is_modified())
            .field("decisions", &self.decisions())
            .finish()
    }
}

impl PolicyEngine {
    /// A builder for an engine.
    pub fn builder() -> PolicyEngineBuilder {
        PolicyEngineBuilder::default()
    }

    /// The engine's policies: the set new evaluations start on.
    pub fn policy_set(&self) -> Arc<PolicySet> {
        Arc::clone(
            &self
                .active
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .set,
        )
    }

    /// The set new evaluations start on, with its stream plan.
    pub(crate) fn active(&self) -> Arc<Active> {
        Arc::clone(&self.active.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// [`policy_set`](Self::policy_set) for an evaluation: the set this thread found last
    /// when it is still the active one, without taking the engine's lock.
    fn current_set(&self) -> Arc<PolicySet> {
        // Acquire: pairs with the release in `replace_policy_set`, so a thread that sees a
        // replacement's stamp finds no older set under it.
        let stamp = self.stamp.load(Ordering::Acquire);
        let cached = LAST_SET.try_with(|last| {
            let last = last.try_borrow().ok()?;
            if last.0 == stamp {
                last.1.upgrade()
            } else {
                None
            }
        });
        if let Ok(Some(set)) = cached {
            return set;
        }
        let (set, stamp) = {
            let active = self.active.read().unwrap_or_else(PoisonError::into_inner);
            (Arc::clone(&active.set), active.stamp)
        };
        let _ = LAST_SET.try_with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                *last = (stamp, Arc::downgrade(&set));
            }
        });
        set
    }

    /// Replaces the policy set while the engine serves: evaluations (and output streams)
    /// under way finish on the set they started with, new ones start on `set`, and none fails
    /// because of the swap. Returns the set that was replaced.
    pub fn replace_policy_set(&self, set: PolicySet) -> Arc<PolicySet> {
        let active = Active::new(set);
        let mut current = self.active.write().unwrap_or_else(PoisonError::into_inner);
        self.stamp.store(active.stamp, Ordering::Release);
        Arc::clone(&std::mem::replace(&mut *current, active).set)
    }

    /// How the output policies of the set new streams start on stream (worked out on the
    /// first stream of that set, then kept).
    pub fn stream_plan(&self) -> Arc<StreamPlan> {
        self.active().stream_plan()
    }

    /// The engine's approval machinery: record a grant with
    /// [`grant`](Approvals::grant) once a person approved an
    /// [`ApprovalRequest`](crate::ApprovalRequest).
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    /// Runs the input policies on `context`.
    pub fn evaluate_input<'a>(
        &'a self,
        context: &'a InputContext,
    ) -> impl Future<Output = Result<Evaluation<'a, InputContext>, EngineError>> + Send + 'a {
        // `evaluate`'s own future: no wrapper to move the evaluation through.
        self.evaluate(context)
    }

    /// Runs the tool-call policies on `context`.
    pub fn evaluate_tool_call<'a>(
        &'a self,
        context: &'a ToolCallContext,
    ) -> impl Future<Output = Result<Evaluation<'a, ToolCallContext>, EngineError>> + Send + 'a
    {
        // `evaluate`'s own future: no wrapper to move the evaluation through.
        self.evaluate(context)
    }

    /// Runs the tool-result policies on `context`: what a tool returned, before the model reads
    /// it.
    pub fn evaluate_tool_result<'a>(
        &'a self,
        context: &'a ToolResultContext,
    ) -> impl Future<Output = Result<Evaluation<'a, ToolResultContext>, EngineError>> + Send + 'a
    {
        // `evaluate`'s own future: no wrapper to move the evaluation through.
        self.evaluate(context)
    }

    /// Runs the output policies on `context`.
    pub fn evaluate_output<'a>(
        &'a self,
        context: &'a OutputContext,
    ) -> impl Future<Output = Result<Evaluation<'a, OutputContext>, EngineError>> + Send + 'a {
        // `evaluate`'s own future: no wrapper to move the evaluation through.
        self.evaluate(context)
    }

    /// Runs the policies of `C`'s point on `context`, then resolves its escalations.
    pub async fn evaluate<'a, C: PolicyContext>(
        &'a self,
        context: &'a C,
    ) -> Result<Evaluation<'a, C>, EngineError> {
        let set = self.current_set();
        if self.sessions.is_some() {
            return self.evaluate_recorded(set, context).await;
        }
        // Without sessions, the point and nothing else, in as few steps as possible (each
        // would move the evaluation).
        if let Err(problem) = context.check_nesting() {
            return Err(self.reject(context, problem));
        }
        // Built first and filled in place: the run's results are not moved through each step.
        let mut evaluation = Evaluation::new(
            Cow::Borrowed(context),
            PointDecisions::default(),
            set,
            C::POINT,
        );
        let taken = evaluation
            .taken
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let (point, on_error) = (evaluation.set.point::<C>(), evaluation.set.on_error);
        // The usual point, policies without deadlines one after another, runs here rather
        // than a step further in `run_point` (each step moves what it returns): plain
        // `allow`s in a row, any other outcome settled between two runs. `run_point` takes
        // over for a call deadline, a concurrent point, or a policy with a deadline.
        let mut rest = Some(0);
        if point.settings.call_deadline.is_none()
            && !(point.settings.concurrent && point.entries.len() > 1)
        {
            let entries = &point.entries[..];
            let mut next = 0;
            let mut stopped_at = None;
            rest = loop {
                // Dropped where it is at the end of the block (moving it to drop it would
                // copy it), and the outcome it stopped at stays in `stopped_at`.
                let stop = Sequence::<C> {
                    engine: self,
                    entries,
                    context: &*evaluation.context,
                    next: &mut next,
                    taken: &mut *taken,
                    running: None,
                    outcome: &mut stopped_at,
                }
                .await;
                if let Some(refused) = taken.refused.take() {
                    return Err(audit_refused::<C>(refused));
                }
                match (&mut stopped_at, stop) {
                    (Some(outcome), _) => {
                        let (entry, current) = (&entries[next], &mut evaluation.context);
                        self.settle(on_error, (next, entry), outcome, None, current, taken)?;
                        stopped_at = None;
                        next += 1;
                        if next == entries.len() {
                            break None;
                        }
                    }
                    (None, Stop::Ran) => break None,
                    (None, Stop::Deadline) => break Some(next),
                }
            };
        }
        if let Some(resume) = rest {
            let (set, current) = (&*evaluation.set, &mut evaluation.context);
            self.run_point(set, context, current, taken, resume).await?;
        }
        if !taken.escalates() {
            return Ok(evaluation);
        }
        // Rare, and a large future: boxed, so it does not make every evaluation's larger.
        Box::pin(self.approve(evaluation)).await
    }

    /// Runs the policies of `C`'s point of `set` on `context` with the session's facts, then
    /// resolves its escalations and records the call in the session store.
    pub(crate) async fn evaluate_recorded<'a, C: PolicyContext>(
        &'a self,
        set: Arc<PolicySet>,
        context: &'a C,
    ) -> Result<Evaluation<'a, C>, EngineError> {
        let on_error = set.on_error;
        let (mut evaluation, labels) = self.evaluate_unrecorded(set, context).await?;
        // Approvals: once the point's policies ran without a denial.
        let taken = evaluation.taken.get_mut();
        if taken.unwrap_or_else(PoisonError::into_inner).escalates() {
            evaluation = Box::pin(self.approve(evaluation)).await?;
        }
        self.record_session(on_error, context, &labels, true)
            .await?;
        Ok(evaluation)
    }

    /// Runs the point with the session's facts when there is a store (session step 1), and
    /// returns the labels its enforced decisions carried, without recording them: the
    /// streaming guard records once, when a stream ends.
    pub(crate) async fn evaluate_unrecorded<'a, C: PolicyContext>(
        &'a self,
        set: Arc<PolicySet>,
        context: &'a C,
    ) -> Result<(Evaluation<'a, C>, Vec<String>), EngineError> {
        if let Err(problem) = context.check_nesting() {
            return Err(self.reject(context, problem));
        }
        let Some(store) = &self.sessions else {
            let (mut current, mut taken) = (Cow::Borrowed(context), PointDecisions::default());
            self.run_point(&set, context, &mut current, &mut taken, 0)
                .await?;
            return Ok((Evaluation::new(current, taken, set, C::POINT), Vec::new()));
        };
        // Session step 1: the facts, in the context the policies see.
        let key = flow::key_of(context).map_err(|problem| self.reject(context, problem))?;
        let loaded = match store.load_now(key) {
            Some(loaded) => loaded,
            None => store.load(key).await,
        };
        let facts = match loaded {
            Ok(facts) => Some(facts),
            Err(error) => {
                self.fail(set.on_error, SESSION_POLICY_ID, true, error, context)?;
                None
            }
        };
        let seen = flow::with_facts(context, facts);
        let (mut current, mut taken) = (Cow::Borrowed(&seen.context), PointDecisions::default());
        self.run_point(&set, &seen.context, &mut current, &mut taken, 0)
            .await?;
        let mut labels = Vec::new();
        for taken in taken.others().filter(|taken| taken.enforced) {
            if let CompactDecision::Other(decision) = &taken.decision {
                flow::gather(&mut labels, decision.labels());
            }
        }
        // Forward the caller's context, or the changed one with the caller's own
        // `metadata.session`.
        let forwarded = match current {
            Cow::Borrowed(_) => Cow::Borrowed(context),
            Cow::Owned(mut changed) => {
                flow::restore(&mut changed, context);
                Cow::Owned(changed)
            }
        };
        flow::give_back(seen);
        Ok((Evaluation::new(forwarded, taken, set, C::POINT), labels))
    }

    /// Session step 2: after a call that proceeds, one atomic record of its point (and tool)
    /// and of the labels its decisions carried. A failing store is an evaluation error of
    /// [`SESSION_POLICY_ID`].
    /// `key_checked` says that step 1 checked the session key of this context already.
    pub(crate) async fn record_session<C: PolicyContext>(
        &self,
        on_error: OnError,
        context: &C,
        labels: &[String],
        key_checked: bool,
    ) -> Result<(), EngineError> {
        let Some(store) = &self.sessions else {
            return Ok(());
        };
        let key = if key_checked {
            flow::checked_key_of(context)
        } else {
            flow::key_of(context).map_err(|problem| self.reject(context, problem))?
        };
        let update = flow::update_of(context, labels);
        let recorded = match store.record_now(key, update) {
            Some(recorded) => recorded,
            None => store.record(key, update).await,
        };
        match recorded {
            Ok(()) => Ok(()),
            Err(error) => self.fail(on_error, SESSION_POLICY_ID, true, error, context),
        }
    }

    /// Runs the policies of `C`'s point on `context`: `current` becomes the context to
    /// forward, `taken` holds the decisions taken (both start as `context` and empty).
    /// `next`: the first policy to run (0 to start; a run that stopped at a policy with a
    /// deadline goes on from there).
    async fn run_point<'c, C: PolicyContext>(
        &self,
        set: &PolicySet,
        context: &'c C,
        current: &mut Cow<'c, C>,
        taken: &mut PointDecisions,
        mut next: usize,
    ) -> Result<(), EngineError> {
        let on_error = set.on_error;
        let point = set.point::<C>();
        let call_deadline = point
            .settings
            .call_deadline
            .map(|deadline| (Instant::now() + deadline, deadline));
        if next == 0 && point.settings.concurrent && point.entries.len() > 1 {
            // Boxed: its future is large, and it allocates per policy anyway.
            (*current, *taken) = Box::pin(self.evaluate_concurrently(
                &point.entries,
                on_error,
                context,
                call_deadline,
            ))
            .await?;
            return Ok(());
        }
        let entries = &point.entries[..];
        loop {
            // The policies without a deadline run in a row, their plain `allow`s kept on
            // the way; the run stops at any other outcome, which is settled here.
            let mut stopped_at = None;
            let stop = if call_deadline.is_none() {
                Sequence::<C> {
                    engine: self,
                    entries,
                    context: &**current,
                    next: &mut next,
                    taken,
                    running: None,
                    outcome: &mut stopped_at,
                }
                .await
            } else {
                Stop::Deadline
            };
            if let Some(refused) = taken.refused.take() {
                return Err(audit_refused::<C>(refused));
            }
            let mut outcome = match (stopped_at, stop) {
                (Some(outcome), _) => outcome,
                (None, Stop::Ran) => break,
                (None, Stop::Deadline) => match entries.get(next) {
                    // Boxed: the timer's future is large, and rarely needed.
                    Some(entry) => {
                        Box::pin(evaluate_entry::<C>(entry, &**current, call_deadline)).await
                    }
                    None => break,
                },
            };
            self.settle(
                on_error,
                (next, &entries[next]),
                &mut outcome,
                None,
                current,
                taken,
            )?;
            next += 1;
        }
        Ok(())
    }

    /// The approval step: when enforced policies escalated, the call proceeds only with a
    /// stored grant or the resolver's yes for this exact action.
    pub(crate) async fn approve<'a, C: PolicyContext>(
        &self,
        mut evaluation: Evaluation<'a, C>,
    ) -> Result<Evaluation<'a, C>, EngineError> {
        let taken = match evaluation.taken.get_mut() {
            Ok(taken) => taken,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut policy_ids = Vec::new();
        let mut reasons = Vec::new();
        for taken in taken.others().filter(|taken| taken.enforced) {
            if let CompactDecision::Other(decision) = &taken.decision
                && let PolicyDecision::Escalate { reason, .. } = decision
            {
                policy_ids.push(policy_id_at(&evaluation.set, C::POINT, taken.index).to_owned());
                reasons.extend(reason.clone());
            }
        }
        if policy_ids.is_empty() {
            return Ok(evaluation);
        }
        let json = serde_json::to_value(evaluation.context()).unwrap_or_default();
        let mut request =
            ApprovalRequest::scoped(self.approvals.scope(), C::POINT, policy_ids, reasons, json);
        let resolution = self.approvals.resolve(&request).await;
        let (decision, reason) = match &resolution {
            Resolution::Granted { by, from_grant } => (
                AuditDecision::ApprovalGranted,
                if *from_grant {
                    format!("granted by {by} (a stored grant)")
                } else {
                    format!("granted by {by}")
                },
            ),
            Resolution::Refused { reason } => (AuditDecision::ApprovalRefused, reason.clone()),
            Resolution::Pending { reason, .. } => (AuditDecision::ApprovalPending, reason.clone()),
        };
        for policy_id in &request.policy_ids {
            self.record(
                policy_id,
                decision,
                Some(Cow::Borrowed(&reason)),
                evaluation.context(),
                true,
                None,
            )
            .map_err(audit_refused::<C>)?;
        }
        match resolution {
            Resolution::Granted { .. } => Ok(evaluation),
            Resolution::Refused { reason } => Err(EngineError::Denied(PolicyDenialError::new(
                request.policy_ids.first().map_or("", String::as_str),
                C::POINT,
                Some(reason),
            ))),
            Resolution::Pending { id, .. } => {
                if let Some(id) = id {
                    request.id = id;
                }
                Err(EngineError::ApprovalRequired(Box::new(request)))
            }
        }
    }

    async fn evaluate_concurrently<'c, C: PolicyContext>(
        &self,
        entries: &[Entry<dyn Policy<C>>],
        on_error: OnError,
        context: &'c C,
        call_deadline: Option<(Instant, Duration)>,
    ) -> Result<(Cow<'c, C>, PointDecisions), EngineError> {
        type Running<'f> = Pin<Box<dyn Future<Output = PolicyResult> + Send + 'f>>;
        let mut running: Vec<Option<Running<'_>>> = entries
            .iter()
            .map(|entry| Some(Box::pin(evaluate_entry::<C>(entry, context, call_deadline)) as _))
            .collect();
        let mut finished: Vec<Option<PolicyResult>> = entries.iter().map(|_| None).collect();
        let mut current = Cow::Borrowed(context);
        let mut decisions = PointDecisions::default();
        let mut next = 0;
        std::future::poll_fn(|cx| {
            for (slot, outcome) in running.iter_mut().zip(finished.iter_mut()).skip(next) {
                if let Some(future) = slot
                    && let Poll::Ready(result) = future.as_mut().poll(cx)
                {
                    *outcome = Some(result);
                    *slot = None;
                }
            }
            // Settle in declared order, as far as the outcomes allow.
            while let Some(mut outcome) = finished.get_mut(next).and_then(Option::take) {
                let settled = self.settle(
                    on_error,
                    (next, &entries[next]),
                    &mut outcome,
                    Some(context),
                    &mut current,
                    &mut decisions,
                );
                if let Err(error) = settled {
                    // Cancel whatever is still running, and audit every policy after the
                    // winner: it ran, and its outcome is not taken.
                    let winner = entries[next].policy.id();
                    let why = match &error {
                        EngineError::Denied(_) => "denied",
                        EngineError::Evaluation(_) | EngineError::ApprovalRequired(_) => "failed",
                    };
                    for (at, entry) in entries.iter().enumerate().skip(next + 1) {
                        let reason = if running[at].is_some() {
                            format!("cancelled after `{winner}` {why}")
                        } else {
                            format!(
                                "discarded after `{winner}` {why}: it had decided, but its \
                                 decision was not applied"
                            )
                        };
                        // The call fails already: a refused record changes nothing.
                        let _ = self.record(
                            entry.policy.id(),
                            AuditDecision::EvaluationError,
                            Some(Cow::Owned(reason)),
                            context,
                            !entry.monitor,
                            None,
                        );
                    }
                    running.clear();
                    return Poll::Ready(Err(error));
                }
                next += 1;
            }
            if next == entries.len() {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        })
        .await?;
        Ok((current, decisions))
    }

    /// Audits one outcome and applies it: a change to `current`, a decision to `taken`, or
    /// the error that stops the evaluation. `evaluated` is the context the policy saw, when it
    /// is not `current` (the one changes apply to).
    ///
    /// The outcome is read where it lies and moved once, into `taken` (each move of a fresh
    /// value costs more than the move itself); it is left a plain `allow`.
    #[inline]
    fn settle<C: PolicyContext>(
        &self,
        on_error: OnError,
        (index, entry): (usize, &Entry<dyn Policy<C>>),
        outcome: &mut PolicyResult,
        evaluated: Option<&C>,
        current: &mut Cow<'_, C>,
        taken: &mut PointDecisions,
    ) -> Result<(), EngineError> {
        // Read only where it is needed (it is a call through the policy's vtable).
        let policy_id = || entry.policy.id();
        let enforced = !entry.monitor;
        let decision = match outcome {
            Ok(decision) => decision,
            Err(_) => {
                // Taken out (it was matched as an error just above), an `allow` left in place.
                let Err(error) = std::mem::replace(outcome, Ok(PolicyDecision::allow())) else {
                    return Ok(());
                };
                let evaluated = evaluated.unwrap_or(current);
                return self.fail(on_error, policy_id(), enforced, error, evaluated);
            }
        };
        // The common case, without moving the decision around.
        if let PolicyDecision::Allow { audit, labels } = decision
            && labels.is_empty()
        {
            let audit = *audit;
            if self.audits() {
                self.record(
                    policy_id(),
                    AuditDecision::from(&*decision),
                    None,
                    evaluated.unwrap_or(current),
                    enforced,
                    Some(decision),
                )
                .map_err(audit_refused::<C>)?;
            }
            taken.push(IndexedDecision {
                index,
                decision: CompactDecision::Allow { audit },
                enforced,
            });
            return Ok(());
        }
        let changes = matches!(
            decision,
            PolicyDecision::Redact { .. } | PolicyDecision::Transform { .. }
        );
        // A monitored change is applied too, to a scratch copy that is then dropped: a change
        // that would fail is audited as the evaluation error it would be.
        let changed = if changes {
            match apply_changes(&**current, decision) {
                // Without records to write, nothing reads the context as it was: the change
                // goes in at once (one move of the context less).
                Ok(Some(changed)) if enforced && !self.audits() => {
                    *current = Cow::Owned(changed);
                    None
                }
                Ok(changed) if enforced => changed,
                Ok(_) => None,
                Err(error) => {
                    let evaluated = evaluated.unwrap_or(current);
                    return self.fail(on_error, policy_id(), enforced, Box::new(error), evaluated);
                }
            }
        } else {
            None
        };
        if self.audits() {
            self.record(
                policy_id(),
                AuditDecision::from(&*decision),
                decision.reason().map(Cow::Borrowed),
                evaluated.unwrap_or(current),
                enforced,
                Some(decision),
            )
            .map_err(audit_refused::<C>)?;
        }
        if enforced
            && let PolicyDecision::Deny {
                reason,
                policy_id: named,
            } = decision
        {
            return Err(EngineError::Denied(PolicyDenialError::new(
                named.as_deref().unwrap_or_else(policy_id),
                C::POINT,
                reason.clone(),
            )));
        }
        // Not a plain `allow` (that returned above): kept as it is, written where it stays.
        let kept = |decision: &mut PolicyDecision| IndexedDecision {
            index,
            decision: CompactDecision::Other(std::mem::take(decision)),
            enforced,
        };
        match &mut taken.first {
            first @ None => *first = Some(kept(decision)),
            Some(_) => taken.others.push(kept(decision)),
        }
        // A change that changed nothing (a redaction that matched nothing) keeps forwarding
        // the context as it was.
        if let Some(changed) = changed {
            *current = Cow::Owned(changed);
        }
        Ok(())
    }

    /// Audits a failed evaluation; the error stops the evaluation unless the policy is
    /// monitored or errors are set to allow.
    fn fail<C: PolicyContext>(
        &self,
        on_error: OnError,
        policy_id: &str,
        enforced: bool,
        error: BoxError,
        evaluated: &C,
    ) -> Result<(), EngineError> {
        if self.audit.is_some() {
            let reason = error_chain(&*error);
            self.record(
                policy_id,
                AuditDecision::EvaluationError,
                Some(Cow::Owned(reason)),
                evaluated,
                enforced,
                None,
            )
            .map_err(audit_refused::<C>)?;
        }
        if enforced && on_error == OnError::Deny {
            Err(EngineError::Evaluation(PolicyEvaluationError::new(
                policy_id,
                C::POINT,
                error,
            )))
        } else {
            Ok(())
        }
    }

    fn record<C: PolicyContext>(
        &self,
        policy_id: &str,
        decision: AuditDecision,
        reason: Option<Cow<'_, str>>,
        context: &C,
        enforced: bool,
        policy_decision: Option<&PolicyDecision>,
    ) -> Result<(), BoxError> {
        if self.audit.is_none() {
            return Ok(());
        }
        self.emit(AuditRecord {
            policy_id,
            decision,
            interception_point: C::POINT,
            reason,
            context: context.audit_context(),
            timestamp: SystemTime::now(),
            enforced,
            policy_decision,
            stream: None,
        })
    }

    /// Refuses a context before any policy runs; audited as an evaluation error of
    /// [`CONTEXT_CHECK_ID`].
    fn reject<C: PolicyContext>(&self, context: &C, problem: InvalidContext) -> EngineError {
        // The call fails already: a refused record changes nothing.
        let _ = self.record(
            CONTEXT_CHECK_ID,
            AuditDecision::EvaluationError,
            Some(Cow::Borrowed(problem.problem())),
            context,
            true,
            None,
        );
        EngineError::Evaluation(PolicyEvaluationError::new(
            CONTEXT_CHECK_ID,
            C::POINT,
            problem,
        ))
    }

    /// Whether a session store is configured.
    pub(crate) fn keeps_sessions(&self) -> bool {
        self.sessions.is_some()
    }

    /// Whether records go anywhere: without a handler, nothing needs to build them.
    pub(crate) fn audits(&self) -> bool {
        self.audit.is_some()
    }

    /// Hands a record to the audit handler, if there is one: `Err` when the handler refused
    /// it ([`AuditHandler::try_handle`]), and the call must fail.
    pub(crate) fn emit(&self, record: AuditRecord<'_>) -> Result<(), BoxError> {
        let Some(handler) = &self.audit else {
            return Ok(());
        };
        // A panicking handler must not take the evaluation down; the panic hook has
        // already reported it.
        catch_unwind(AssertUnwindSafe(|| handler.try_handle(&record))).unwrap_or(Ok(()))
    }

    /// Runs only the monitored output policies of `set` on `context`, for their audit records.
    pub(crate) async fn evaluate_monitored_output(&self, set: &PolicySet, context: &OutputContext) {
        let entries = set.output().entries.iter().enumerate();
        for (index, entry) in entries.filter(|(_, entry)| entry.monitor) {
            let mut outcome = evaluate_entry::<OutputContext>(entry, context, None).await;
            // Monitored: nothing to apply and nothing that stops.
            let _ = self.settle(
                set.on_error,
                (index, entry),
                &mut outcome,
                None,
                &mut Cow::Borrowed(context),
                &mut PointDecisions::default(),
            );
        }
    }
}

/// Why a [`Sequence`] stopped.
enum Stop {
    /// Every policy ran, or the policy at `next` came to the outcome left in
    /// [`Sequence::outcome`] (neither a plain `allow` nor pending). The outcome is not a
    /// field of a variant: moving it out of an enum that shares its tag copies it at odd
    /// offsets, which costs more than the move itself.
    Ran,
    /// The policy at `next` has a deadline: it runs on its own, with a timer.
    Deadline,
}

/// Runs the policies of `entries` from `next` one after another on `context`, keeping their
/// plain `allow`s in `taken`, until one comes to another outcome (or has a deadline).
///
/// One unwind guard covers each poll of the whole run: `in_policy` says whether the panic
/// came from a policy (starting its evaluation or polling it) and so becomes that policy's
/// error, or from the engine's own bookkeeping and goes on unwinding.
struct Sequence<'s, 'c, C: PolicyContext> {
    engine: &'s PolicyEngine,
    entries: &'c [Entry<dyn Policy<C>>],
    context: &'c C,
    next: &'s mut usize,
    taken: &'s mut PointDecisions,
    running: Option<crate::BoxFuture<'c, PolicyResult>>,
    /// The outcome the run stopped at, if it stopped at one.
    outcome: &'s mut Option<PolicyResult>,
}

impl<C: PolicyContext> Sequence<'_, '_, C> {
    #[inline]
    fn run(&mut self, cx: &mut Context<'_>, in_policy: &mut bool) -> Poll<Stop> {
        while let Some(entry) = self.entries.get(*self.next) {
            let running = match &mut self.running {
                Some(running) => running,
                None if entry.deadline.is_some() => return Poll::Ready(Stop::Deadline),
                None => {
                    *in_policy = true;
                    self.running.insert(entry.policy.evaluate(self.context))
                }
            };
            *in_policy = true;
            let polled = running.as_mut().poll(cx);
            *in_policy = false;
            // Read where the policy's future left it: binding the outcome by value would
            // copy it (right after it was written) for each policy.
            let allowed = match &polled {
                Poll::Pending => return Poll::Pending,
                // The common case: nothing to drop, no labels and no room for any.
                Poll::Ready(Ok(PolicyDecision::Allow { audit, labels }))
                    if labels.capacity() == 0 =>
                {
                    Some(*audit)
                }
                Poll::Ready(_) => None,
            };
            self.running = None;
            let Some(audit) = allowed else {
                if let Poll::Ready(outcome) = polled {
                    *self.outcome = Some(outcome);
                }
                return Poll::Ready(Stop::Ran);
            };
            std::mem::forget(polled);
            let enforced = !entry.monitor;
            if self.engine.audit.is_some() {
                let allow = PolicyDecision::Allow {
                    audit,
                    labels: Vec::new(),
                };
                let recorded = self.engine.record(
                    entry.policy.id(),
                    AuditDecision::from(&allow),
                    None,
                    self.context,
                    enforced,
                    Some(&allow),
                );
                if let Err(refused) = recorded {
                    // Settled as an outcome that fails the call whatever `on_error` says.
                    self.taken.refused = Some(refused);
                    return Poll::Ready(Stop::Ran);
                }
            }
            self.taken.push_allow(*self.next, audit, enforced);
            *self.next += 1;
        }
        Poll::Ready(Stop::Ran)
    }
}

impl<C: PolicyContext> Future for Sequence<'_, '_, C> {
    type Output = Stop;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Stop> {
        let this = self.get_mut();
        let mut in_policy = false;
        // After a panic in a policy its future is dropped and never polled again, and the
        // run's state (`next`, `taken`) was left between two steps: asserting unwind safety
        // is sound here.
        match catch_unwind(AssertUnwindSafe(|| this.run(cx, &mut in_policy))) {
            Ok(poll) => poll,
            Err(payload) if in_policy => {
                let panicked = PolicyPanicked::from_payload(&*payload);
                this.running = None;
                *this.outcome = Some(Err(Box::new(panicked)));
                Poll::Ready(Stop::Ran)
            }
            Err(payload) => resume_unwind(payload),
        }
    }
}

/// The id of the policy at `index` of `point` in `set`.
fn policy_id_at(set: &PolicySet, point: InterceptionPoint, index: usize) -> &str {
    let id = match point {
        InterceptionPoint::Input => set.input().entries.get(index).map(|e| e.policy.id()),
        InterceptionPoint::ToolCall => set.tool_call().entries.get(index).map(|e| e.policy.id()),
        InterceptionPoint::ToolResult => {
            set.tool_result().entries.get(index).map(|e| e.policy.id())
        }
        InterceptionPoint::Output => set.output().entries.get(index).map(|e| e.policy.id()),
    };
    id.unwrap_or_default()
}

/// Evaluates one policy, turning a panic or a missed deadline into an error: a policy still
/// running at its deadline is cancelled (its future dropped), and an answer that comes after the
/// deadline (from a policy that blocked its thread) counts as a time-out too.
async fn evaluate_entry<C: PolicyContext>(
    entry: &Entry<dyn Policy<C>>,
    context: &C,
    call_deadline: Option<(Instant, Duration)>,
) -> PolicyResult {
    let future = CatchUnwind::<C>::new(&entry.policy, context);
    let policy_deadline = entry
        .deadline
        .map(|deadline| (Instant::now() + deadline, deadline));
    let (deadline, timed_out) = match (policy_deadline, call_deadline) {
        (None, None) => return future.await.unwrap_or_else(|panic| Err(Box::new(panic))),
        (Some((at, after)), Some((call, _))) if at <= call => {
            (at, PolicyTimedOut::new(DeadlineScope::Policy, after))
        }
        (Some((at, after)), None) => (at, PolicyTimedOut::new(DeadlineScope::Policy, after)),
        (_, Some((call, after))) => (call, PolicyTimedOut::new(DeadlineScope::Call, after)),
    };
    match timer::until(deadline, future).await {
        // A policy that blocked instead of yielding may answer after its deadline: the
        // deadline could not interrupt it, but its answer is too late to be taken.
        Some(_) if Instant::now() > deadline => Err(Box::new(timed_out)),
        Some(outcome) => outcome.unwrap_or_else(|panic| Err(Box::new(panic))),
        None => Err(Box::new(timed_out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Message, Metadata};
    use crate::stream::StreamingRule;

    struct Streams;

    #[async_trait::async_trait]
    impl crate::policy::Policy<OutputContext> for Streams {
        fn id(&self) -> &str {
            "streams"
        }

        async fn evaluate(&self, _: &OutputContext) -> Result<PolicyDecision, BoxError> {
            Ok(PolicyDecision::allow())
        }

        fn streaming(&self) -> Option<Vec<StreamingRule>> {
            Some(vec![StreamingRule::deny_on_any(&["secret"], None)])
        }
    }

    #[test]
    fn taken_decisions_come_back_in_declared_order() {
        let mut list = PointDecisions::default();
        let other = |index, enforced| IndexedDecision {
            index,
            decision: CompactDecision::Other(PolicyDecision::audit("noted")),
            enforced,
        };
        list.push_allow(0, false, true);
        list.push(other(1, true));
        list.push_allow(2, true, false);
        list.push(other(3, false));
        list.push(other(4, true));
        list.push_allow(63, false, true);
        list.push_allow(64, true, true);
        list.push(other(65, true));
        assert_eq!(list.others().count(), 5);
        let ordered: Vec<_> = list
            .into_ordered()
            .map(|taken| {
                let allow = matches!(taken.decision, CompactDecision::Allow { .. });
                let audit = matches!(taken.decision, CompactDecision::Allow { audit: true });
                (taken.index, allow, audit, taken.enforced)
            })
            .collect();
        assert_eq!(
            ordered,
            [
                (0, true, false, true),
                (1, false, false, true),
                (2, true, true, false),
                (3, false, false, false),
                (4, false, false, true),
                (63, true, false, true),
                (64, true, true, true),
                (65, false, false, true),
            ]
        );
    }

    #[test]
    fn the_stream_plan_is_compiled_only_when_a_stream_is_asked_for() {
        let engine = PolicyEngine::builder()
            .policy_set(PolicySet::builder().output(Streams).build())
            .build();
        let context = OutputContext::new(Message::assistant("hi"), Metadata::new("a", "s"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            assert!(engine.evaluate_output(&context).await.is_ok());
        });
        assert!(engine.active().stream_plan.get().is_none());
        let _ = engine.output_stream(Metadata::new("a", "s"));
        assert!(engine.active().stream_plan.get().is_some());
    }
}
