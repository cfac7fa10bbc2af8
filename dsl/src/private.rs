//! Support for the code `dsl_policy!` generates. Not public API: it may change in any release.
//!
//! Generated code reaches these items as `::portcullis::__private::dsl::...`. The operators
//! are the very functions the runtime policies call, so both decide alike.

use std::fmt;

use async_trait::async_trait;
use portcullis_engine::{
    BoxError, InputContext, InputPolicy, OutputContext, OutputPolicy, PolicyDecision, PolicyMode,
    StreamingRule, ToolCallContext, ToolCallPolicy,
};

pub use crate::ops::{
    Needles, ValueSet, contains, equals, greater_than, json_equal, node_equals, not_in, push_field,
};
pub use crate::select::{Node, PathSegment, Root, Seg, SegmentRef, Walk, any, select};
pub use serde_json;

/// A JSON number from an `f64` known to be finite (generated code writes the bits).
pub fn number(value: f64) -> serde_json::Value {
    serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// A JSON object from its entries, in order.
pub fn object<const N: usize>(entries: [(&str, serde_json::Value); N]) -> serde_json::Value {
    serde_json::Value::Object(
        entries
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect(),
    )
}

macro_rules! generated_policy {
    ($(#[$doc:meta])* $name:ident, $trait:ident, $context:ty) => {
        $(#[$doc])*
        pub struct $name<F> {
            id: &'static str,
            mode: PolicyMode,
            decide: F,
        }

        impl<F> $name<F>
        where
            F: Fn(&$context) -> PolicyDecision + Send + Sync,
        {
            /// A policy with this id and mode deciding with `decide`.
            pub const fn new(id: &'static str, mode: PolicyMode, decide: F) -> Self {
                $name { id, mode, decide }
            }

            /// Decides on `context`.
            pub fn decide(&self, context: &$context) -> PolicyDecision {
                (self.decide)(context)
            }
        }

        impl<F> fmt::Debug for $name<F> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("id", &self.id)
                    .field("mode", &self.mode)
                    .finish_non_exhaustive()
            }
        }

        #[async_trait]
        impl<F> $trait for $name<F>
        where
            F: Fn(&$context) -> PolicyDecision + Send + Sync,
        {
            fn id(&self) -> &str {
                self.id
            }

            async fn evaluate(&self, context: &$context) -> Result<PolicyDecision, BoxError> {
                Ok((self.decide)(context))
            }

            fn mode(&self) -> PolicyMode {
                self.mode
            }
        }
    };
}

generated_policy! {
    /// An input policy compiled from a rule by `dsl_policy!`.
    GeneratedInputPolicy, InputPolicy, InputContext
}

generated_policy! {
    /// A tool-call policy compiled from a rule by `dsl_policy!`.
    GeneratedToolCallPolicy, ToolCallPolicy, ToolCallContext
}

/// An output policy compiled from a rule by `dsl_policy!`, with the rule's streaming form
/// when it has one (see `DslOutputPolicy`'s `streaming`).
pub struct GeneratedOutputPolicy<F> {
    id: &'static str,
    mode: PolicyMode,
    decide: F,
    streaming: Option<Vec<StreamingRule>>,
}

impl<F> GeneratedOutputPolicy<F>
where
    F: Fn(&OutputContext) -> PolicyDecision + Send + Sync,
{
    /// A policy with this id and mode deciding with `decide`, without a streaming form.
    pub const fn new(id: &'static str, mode: PolicyMode, decide: F) -> Self {
        GeneratedOutputPolicy {
            id,
            mode,
            decide,
            streaming: None,
        }
    }

    /// The same policy with a streaming form.
    pub fn with_streaming(mut self, rules: Vec<StreamingRule>) -> Self {
        self.streaming = Some(rules);
        self
    }

    /// Decides on `context`.
    pub fn decide(&self, context: &OutputContext) -> PolicyDecision {
        (self.decide)(context)
    }
}

impl<F> fmt::Debug for GeneratedOutputPolicy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratedOutputPolicy")
            .field("id", &self.id)
            .field("mode", &self.mode)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<F> OutputPolicy for GeneratedOutputPolicy<F>
where
    F: Fn(&OutputContext) -> PolicyDecision + Send + Sync,
{
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        Ok((self.decide)(context))
    }

    fn mode(&self) -> PolicyMode {
        self.mode
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        self.streaming.clone()
    }
}
