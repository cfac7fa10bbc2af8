//! What the engine needs to know of each interception point's context: [`PolicyContext`].
//!
//! Code generic over the three points (the engine's evaluation loop, the changes a decision
//! makes) goes through this trait; it ties a context type to its point, its policy trait and
//! the policies of that point in a set.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::BoxFuture;
use crate::audit::AuditContext;
use crate::context::{InputContext, InterceptionPoint, Metadata, OutputContext, ToolCallContext};
use crate::decision::PolicyDecision;
use crate::error::{BoxError, InvalidContext};
use crate::policy::{InputPolicy, OutputPolicy, ToolCallPolicy};
use crate::set::{PointPolicies, PolicySet};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::InputContext {}
    impl Sealed for super::ToolCallContext {}
    impl Sealed for super::OutputContext {}
}

/// The contexts of the three interception points, for code that is generic over them.
///
/// This trait is sealed: [`InputContext`], [`ToolCallContext`] and [`OutputContext`] are the only
/// implementations.
pub trait PolicyContext:
    sealed::Sealed
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The interception point this context belongs to.
    const POINT: InterceptionPoint;

    /// The object-safe policy trait of this point (`dyn InputPolicy` for [`InputContext`], …).
    type Policy: ?Sized + Send + Sync;

    /// The policies of this point in a set.
    #[doc(hidden)]
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy>;

    /// The id of a policy of this point.
    fn policy_id(policy: &Self::Policy) -> &str;

    /// Evaluates a policy of this point on `self`.
    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>>;

    /// The context's metadata.
    fn metadata(&self) -> &Metadata;

    /// The context's metadata, to change.
    fn metadata_mut(&mut self) -> &mut Metadata;

    /// The tool a tool-call context calls; `None` for the other points.
    fn tool_name(&self) -> Option<&str> {
        None
    }

    /// A borrowed view of this context, as audit records hold it.
    fn audit_context(&self) -> AuditContext<'_>;

    /// Checks that no open JSON value of the context (tool arguments, extra metadata) is
    /// nested deeper than [`MAX_NESTING`](crate::MAX_NESTING) levels. The engine runs this before any policy, so
    /// no policy, serializer or matcher ever recurses into a hostile depth.
    fn check_nesting(&self) -> Result<(), InvalidContext>;

    /// Checks the rules the type system cannot express (for example that a tool call's
    /// `calling_message` has the `assistant` role). Used after redactions and transforms.
    fn check(&self) -> Result<(), InvalidContext>;
}

impl PolicyContext for InputContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.input
    }

    const POINT: InterceptionPoint = InterceptionPoint::Input;
    type Policy = dyn InputPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::Input(self)
    }

    fn check_nesting(&self) -> Result<(), InvalidContext> {
        self.check_nesting_depth()
    }

    fn check(&self) -> Result<(), InvalidContext> {
        self.check_rules()
    }
}

impl PolicyContext for ToolCallContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.tool_call
    }

    const POINT: InterceptionPoint = InterceptionPoint::ToolCall;
    type Policy = dyn ToolCallPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    fn tool_name(&self) -> Option<&str> {
        Some(&self.tool_name)
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::ToolCall(self)
    }

    fn check_nesting(&self) -> Result<(), InvalidContext> {
        self.check_nesting_depth()
    }

    fn check(&self) -> Result<(), InvalidContext> {
        self.check_rules()
    }
}

impl PolicyContext for OutputContext {
    fn point_policies(set: &PolicySet) -> &PointPolicies<Self::Policy> {
        &set.output
    }

    const POINT: InterceptionPoint = InterceptionPoint::Output;
    type Policy = dyn OutputPolicy;

    fn policy_id(policy: &Self::Policy) -> &str {
        policy.id()
    }

    fn evaluate_policy<'a>(
        policy: &'a Self::Policy,
        context: &'a Self,
    ) -> BoxFuture<'a, Result<PolicyDecision, BoxError>> {
        policy.evaluate(context)
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    fn audit_context(&self) -> AuditContext<'_> {
        AuditContext::Output(self)
    }

    fn check_nesting(&self) -> Result<(), InvalidContext> {
        self.check_nesting_depth()
    }

    fn check(&self) -> Result<(), InvalidContext> {
        self.check_rules()
    }
}
