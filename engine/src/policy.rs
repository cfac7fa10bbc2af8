//! The policy trait, one for every interception point, and the wrappers that change how a
//! policy runs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::BoxFuture;
use crate::context::{InputContext, OutputContext, ToolCallContext};
use crate::decision::PolicyDecision;
use crate::error::BoxError;
use crate::point::PolicyContext;
use crate::stream::rule::StreamingRule;

/// A policy of the point whose context is `C`: it decides on each call at that point.
///
/// [`InputPolicy`], [`ToolCallPolicy`] and [`OutputPolicy`] name the policies of each point
/// (every `Policy<InputContext>` is an `InputPolicy`, and so on); a type implements this
/// trait once for each point it serves.
///
/// ```
/// use portcullis_engine::{async_trait, BoxError, InputContext, Policy, PolicyDecision};
///
/// struct MaxMessages(usize);
///
/// #[async_trait]
/// impl Policy<InputContext> for MaxMessages {
///     fn id(&self) -> &str {
///         "max_messages"
///     }
///
///     async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
///         Ok(if context.messages.len() > self.0 {
///             PolicyDecision::deny("conversation too long")
///         } else {
///             PolicyDecision::allow()
///         })
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a policy of the point of `{C}`",
    label = "not a policy of the point of `{C}`",
    note = "a policy of the point of `{C}` implements `Policy<{C}>`: annotate a function taking `&{C}` with the point's attribute (`#[input_policy]`, `#[tool_call_policy]` or `#[output_policy]`)"
)]
#[async_trait]
pub trait Policy<C: PolicyContext>: Send + Sync {
    /// The policy's id, as it appears in decisions, errors and audit records.
    fn id(&self) -> &str;

    /// Decides on `context`. An `Err` is an evaluation error; the policy set's `on_error`
    /// decides what follows.
    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError>;

    /// Whether the policy's decisions are enforced or only observed. Read once, when the
    /// policy is added to a policy set. Default: [`PolicyMode::Enforce`].
    fn mode(&self) -> PolicyMode {
        PolicyMode::Enforce
    }

    /// How long one evaluation may take. Read once, when the policy is added to a policy set.
    /// Default: none (the point's policy deadline, if any, applies).
    fn deadline(&self) -> Option<Duration> {
        None
    }

    /// The policy's streaming form, if it has one: rules over `response.content` that decide
    /// exactly as [`evaluate`](Policy::evaluate) does, and that the streaming output guard can
    /// run incrementally as the answer arrives (see
    /// [`OutputStream`](crate::stream::OutputStream)). Read once, when an output policy is
    /// added to a policy set; the other points do not stream. Default: none (the guard
    /// evaluates the whole text).
    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        None
    }
}

/// Names the policies of one point: a trait every `Policy<$context>` implements, with the
/// message a policy of another point gets when it is given here.
macro_rules! point_policy {
    (
        $(#[$doc:meta])*
        trait $name:ident: Policy<$context:ident>,
        message = $message:literal, label = $label:literal, note = $note:literal
    ) => {
        $(#[$doc])*
        #[diagnostic::on_unimplemented(message = $message, label = $label, note = $note)]
        pub trait $name: Policy<$context> {}

        impl<P: Policy<$context> + ?Sized> $name for P {}
    };
}

point_policy! {
    /// A policy of the input point: it sees the messages before they are sent to the model.
    ///
    /// Every [`Policy<InputContext>`] is one; implement that trait (or annotate a function with
    /// `#[input_policy]`) to write one.
    trait InputPolicy: Policy<InputContext>,
    message = "`{Self}` is not an input policy",
    label = "not an input policy: it cannot go in `input`",
    note = "an input policy implements `Policy<InputContext>`: annotate a function taking `&InputContext` with `#[input_policy]`; a tool-call or output policy belongs in `tool_call` or `output`"
}

point_policy! {
    /// A policy of the tool-call point: it sees the tool the model wants to run and its
    /// arguments, before the tool runs.
    ///
    /// Every [`Policy<ToolCallContext>`] is one; implement that trait (or annotate a function
    /// with `#[tool_call_policy]`) to write one.
    trait ToolCallPolicy: Policy<ToolCallContext>,
    message = "`{Self}` is not a tool-call policy",
    label = "not a tool-call policy: it cannot go in `tool_call`",
    note = "a tool-call policy implements `Policy<ToolCallContext>`: annotate a function taking `&ToolCallContext` with `#[tool_call_policy]`; an input or output policy belongs in `input` or `output`"
}

point_policy! {
    /// A policy of the output point: it sees the model's answer.
    ///
    /// Every [`Policy<OutputContext>`] is one; implement that trait (or annotate a function with
    /// `#[output_policy]`) to write one.
    trait OutputPolicy: Policy<OutputContext>,
    message = "`{Self}` is not an output policy",
    label = "not an output policy: it cannot go in `output`",
    note = "an output policy implements `Policy<OutputContext>`: annotate a function taking `&OutputContext` with `#[output_policy]`; an input or tool-call policy belongs in `input` or `tool_call`"
}

/// Whether a policy's decisions take effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PolicyMode {
    /// Decisions take effect: a `deny` blocks, changes are applied, errors follow `on_error`.
    #[default]
    Enforce,
    /// Decisions are evaluated and audited (with `enforced: false`) but take no effect: a
    /// `deny` does not block, redactions and transforms are not applied, and an error does not
    /// fail the call. The records show what enforcing would do: a redaction or transform is
    /// tried on a scratch copy of the context, and one that would fail is audited as the
    /// evaluation error it would be. This is how a new policy is rolled out safely.
    Monitor,
}

/// A policy run in monitor mode (see [`PolicyMode::Monitor`]); made by [`PolicyExt::monitored`].
#[derive(Debug, Clone)]
pub struct Monitored<P>(pub P);

/// A policy with its own deadline; made by [`PolicyExt::with_deadline`].
#[derive(Debug, Clone)]
pub struct WithDeadline<P> {
    /// The policy.
    pub policy: P,
    /// How long one evaluation may take before it is cancelled and counts as an evaluation
    /// error.
    pub deadline: Duration,
}

/// A policy whose evaluation runs on a thread of its own, off the async executor; made by
/// [`PolicyExt::blocking`].
///
/// Use it for a policy that blocks (synchronous I/O, a long computation, a plain `fn`
/// policy doing real work): on the executor, such a policy holds the executor's thread until
/// it returns, and a deadline cannot stop it (its late answer is still refused, but the call
/// waits for it). Wrapped, the policy runs on a pool thread, the executor stays free, and at
/// its deadline the call fails with a time-out at once; the thread finishes on its own and its
/// answer is dropped.
///
/// Each evaluation works on a copy of the context. The inner policy's future is driven by a
/// minimal executor on that thread: a policy that needs an async runtime's services (timers,
/// sockets of tokio) should not be wrapped.
#[derive(Debug)]
pub struct Blocking<P> {
    policy: Arc<P>,
}

impl<P> Blocking<P> {
    /// Runs `policy` off the executor.
    pub fn new(policy: P) -> Self {
        Blocking {
            policy: Arc::new(policy),
        }
    }

    /// The wrapped policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

impl<P> Clone for Blocking<P> {
    fn clone(&self) -> Self {
        Blocking {
            policy: Arc::clone(&self.policy),
        }
    }
}

/// Wrappers that change how a policy of any point runs.
///
/// ```
/// use std::time::Duration;
/// use portcullis_engine::{PolicyExt, PolicySet, InputContext, PolicyDecision, BoxError};
/// # use portcullis_engine::{async_trait, Policy};
/// # struct Pii;
/// # #[async_trait]
/// # impl Policy<InputContext> for Pii {
/// #     fn id(&self) -> &str { "pii" }
/// #     async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
/// #         Ok(PolicyDecision::allow())
/// #     }
/// # }
///
/// let set = PolicySet::builder()
///     .input(Pii.monitored().with_deadline(Duration::from_millis(20)))
///     .build();
/// # drop(set);
/// ```
pub trait PolicyExt: Sized {
    /// Runs the policy in monitor mode.
    fn monitored(self) -> Monitored<Self> {
        Monitored(self)
    }

    /// Gives the policy its own deadline.
    fn with_deadline(self, deadline: Duration) -> WithDeadline<Self> {
        WithDeadline {
            policy: self,
            deadline,
        }
    }

    /// Runs the policy on a thread of its own, so that a deadline bounds it even when it
    /// blocks (see [`Blocking`]).
    fn blocking(self) -> Blocking<Self> {
        Blocking::new(self)
    }
}

impl<P> PolicyExt for P {}

/// Implements [`Policy`] for a wrapper of one policy: each method goes to the policy wrapped
/// (`$inner`, reached from `self`), `evaluate` handing back its future as it is (no second boxed
/// future), but for `mode` and `deadline`, which the wrapper says.
macro_rules! forwarding_policy {
    ($(
        impl<P $(: ?$sized:ident)?> for $wrapper:ident<P> {
            inner: |$this:ident| $inner:expr,
            mode: $mode:expr,
            deadline: $deadline:expr $(,)?
        }
    )*) => {$(
        #[async_trait]
        impl<C: PolicyContext, P: Policy<C> $(+ ?$sized)?> Policy<C> for $wrapper<P> {
            fn id(&$this) -> &str {
                $inner.id()
            }

            fn evaluate<'life0, 'life1, 'async_trait>(
                &'life0 $this,
                context: &'life1 C,
            ) -> BoxFuture<'async_trait, Result<PolicyDecision, BoxError>>
            where
                'life0: 'async_trait,
                'life1: 'async_trait,
                Self: 'async_trait,
            {
                $inner.evaluate(context)
            }

            fn mode(&$this) -> PolicyMode {
                $mode
            }

            fn deadline(&$this) -> Option<Duration> {
                $deadline
            }

            fn streaming(&$this) -> Option<Vec<StreamingRule>> {
                $inner.streaming()
            }
        }
    )*};
}

forwarding_policy! {
    impl<P: ?Sized> for Arc<P> {
        inner: |self| (**self),
        mode: (**self).mode(),
        deadline: (**self).deadline(),
    }
    impl<P: ?Sized> for Box<P> {
        inner: |self| (**self),
        mode: (**self).mode(),
        deadline: (**self).deadline(),
    }
    impl<P> for Monitored<P> {
        inner: |self| self.0,
        mode: PolicyMode::Monitor,
        deadline: self.0.deadline(),
    }
    impl<P> for WithDeadline<P> {
        inner: |self| self.policy,
        mode: self.policy.mode(),
        deadline: Some(self.deadline),
    }
}

#[async_trait]
impl<C: PolicyContext, P: Policy<C> + 'static> Policy<C> for Blocking<P> {
    fn id(&self) -> &str {
        self.policy.id()
    }

    // Runs the inner policy on a pool thread, on a copy of the context.
    fn evaluate<'life0, 'life1, 'async_trait>(
        &'life0 self,
        context: &'life1 C,
    ) -> BoxFuture<'async_trait, Result<PolicyDecision, BoxError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let policy = Arc::clone(&self.policy);
        let context = context.clone();
        Box::pin(crate::blocking::run(move || async move {
            policy.evaluate(&context).await
        }))
    }

    fn mode(&self) -> PolicyMode {
        self.policy.mode()
    }

    fn deadline(&self) -> Option<Duration> {
        self.policy.deadline()
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        self.policy.streaming()
    }
}
