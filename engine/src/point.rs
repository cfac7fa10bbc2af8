//! What the engine needs to know of each interception point's context: [`PolicyContext`].
//!
//! Code generic over the points (the policy trait, the engine's evaluation loop, the changes a
//! decision makes, a policy set's points) goes through this trait; it ties a context type to its
//! point. [`ByPoint`] holds one value per point, typed by the point's context, so that a list
//! of the points is written once.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::audit::AuditContext;
use crate::context::{InputContext, InterceptionPoint, Metadata, OutputContext, ToolCallContext};
use crate::error::InvalidContext;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::InputContext {}
    impl Sealed for super::ToolCallContext {}
    impl Sealed for super::OutputContext {}
}

/// The contexts of the interception points, for code that is generic over them.
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

    /// This point's value in `values`.
    fn of<M: PointMap>(values: &ByPoint<M>) -> &M::Of<Self>;

    /// This point's value in `values`, to change.
    fn of_mut<M: PointMap>(values: &mut ByPoint<M>) -> &mut M::Of<Self>;

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

/// A family of types with one member per point: [`ByPoint<M>`] holds `M::Of<C>` for each
/// point's context `C`.
pub trait PointMap {
    /// The member of the family for the point of `C`.
    type Of<C: PolicyContext>;
}

/// One value per interception point, the value of each point typed by the point's context
/// (see [`PointMap`]); [`PolicyContext::of`] picks a point's value in code generic over the
/// points.
pub struct ByPoint<M: PointMap> {
    /// The input point's value.
    pub input: M::Of<InputContext>,
    /// The tool-call point's value.
    pub tool_call: M::Of<ToolCallContext>,
    /// The output point's value.
    pub output: M::Of<OutputContext>,
}

impl<M: PointMap> Clone for ByPoint<M>
where
    M::Of<InputContext>: Clone,
    M::Of<ToolCallContext>: Clone,
    M::Of<OutputContext>: Clone,
{
    fn clone(&self) -> Self {
        ByPoint {
            input: self.input.clone(),
            tool_call: self.tool_call.clone(),
            output: self.output.clone(),
        }
    }
}

impl<M: PointMap> Default for ByPoint<M>
where
    M::Of<InputContext>: Default,
    M::Of<ToolCallContext>: Default,
    M::Of<OutputContext>: Default,
{
    fn default() -> Self {
        ByPoint {
            input: Default::default(),
            tool_call: Default::default(),
            output: Default::default(),
        }
    }
}

impl<M: PointMap> ByPoint<M> {
    /// The value of point `C`.
    pub fn get<C: PolicyContext>(&self) -> &M::Of<C> {
        C::of(self)
    }

    /// The value of point `C`, to change.
    pub fn get_mut<C: PolicyContext>(&mut self) -> &mut M::Of<C> {
        C::of_mut(self)
    }
}

impl PolicyContext for InputContext {
    const POINT: InterceptionPoint = InterceptionPoint::Input;

    fn of<M: PointMap>(values: &ByPoint<M>) -> &M::Of<Self> {
        &values.input
    }

    fn of_mut<M: PointMap>(values: &mut ByPoint<M>) -> &mut M::Of<Self> {
        &mut values.input
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
    const POINT: InterceptionPoint = InterceptionPoint::ToolCall;

    fn of<M: PointMap>(values: &ByPoint<M>) -> &M::Of<Self> {
        &values.tool_call
    }

    fn of_mut<M: PointMap>(values: &mut ByPoint<M>) -> &mut M::Of<Self> {
        &mut values.tool_call
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
    const POINT: InterceptionPoint = InterceptionPoint::Output;

    fn of<M: PointMap>(values: &ByPoint<M>) -> &M::Of<Self> {
        &values.output
    }

    fn of_mut<M: PointMap>(values: &mut ByPoint<M>) -> &mut M::Of<Self> {
        &mut values.output
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
