//! The names a macro needs for an interception point.
//!
//! The point itself is the engine's [`InterceptionPoint`] (its `as_str()` is the wire name, the
//! key in `policy_set!` and the first argument of `dsl_policy!`); [`PointNames`] adds what only
//! the macros need: the names of the point's context type, policy trait and attribute, prose
//! for messages, and the absolute paths generated code uses.

use portcullis_engine::InterceptionPoint;
use proc_macro2::TokenStream;
use quote::quote;

use crate::paths;

/// What the macros call each interception point.
pub trait PointNames: Sized {
    /// The name of the point's context type: `InputContext`, ...
    fn context_name(self) -> &'static str;

    /// The point whose context type has this name.
    fn from_context_name(name: &str) -> Option<Self>;

    /// The name of the point's policy trait: `Policy<InputContext>`, ...
    fn trait_name(self) -> String;

    /// The attribute that makes a function a policy of this point: `input_policy`, ...
    fn attribute(self) -> &'static str;

    /// How prose names a policy of this point: "an input policy", ...
    fn policy_noun(self) -> &'static str;

    /// How prose names the policies of this point: "input policies", ...
    fn policies_noun(self) -> &'static str;

    /// The absolute path of the point's context type.
    fn context_path(self) -> TokenStream;

    /// The absolute path of the point's policy trait: `::portcullis::Policy<::portcullis::InputContext>`, ...
    fn trait_path(self) -> TokenStream;
}

impl PointNames for InterceptionPoint {
    fn context_name(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "InputContext",
            InterceptionPoint::ToolCall => "ToolCallContext",
            InterceptionPoint::Output => "OutputContext",
        }
    }

    fn from_context_name(name: &str) -> Option<InterceptionPoint> {
        InterceptionPoint::ALL
            .into_iter()
            .find(|point| point.context_name() == name)
    }

    fn trait_name(self) -> String {
        format!("Policy<{}>", self.context_name())
    }

    fn attribute(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "input_policy",
            InterceptionPoint::ToolCall => "tool_call_policy",
            InterceptionPoint::Output => "output_policy",
        }
    }

    fn policy_noun(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "an input policy",
            InterceptionPoint::ToolCall => "a tool-call policy",
            InterceptionPoint::Output => "an output policy",
        }
    }

    fn policies_noun(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "input policies",
            InterceptionPoint::ToolCall => "tool-call policies",
            InterceptionPoint::Output => "output policies",
        }
    }

    fn context_path(self) -> TokenStream {
        match self {
            InterceptionPoint::Input => paths::input_context(),
            InterceptionPoint::ToolCall => paths::tool_call_context(),
            InterceptionPoint::Output => paths::output_context(),
        }
    }

    fn trait_path(self) -> TokenStream {
        let policy = paths::policy();
        let context = self.context_path();
        quote!(#policy<#context>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for point in InterceptionPoint::ALL {
            assert_eq!(InterceptionPoint::from_name(point.as_str()), Some(point));
            assert_eq!(
                InterceptionPoint::from_context_name(point.context_name()),
                Some(point)
            );
        }
        assert_eq!(InterceptionPoint::from_name("tool-call"), None);
        assert_eq!(InterceptionPoint::from_context_name("Context"), None);
    }
}
