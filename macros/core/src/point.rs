//! The names a macro needs for an interception point.
//!
//! The point itself is the engine's [`InterceptionPoint`] (its `as_str()` is the wire name, the
//! key in `policy_set!` and the first argument of `dsl_policy!`); [`PointNames`] adds what only
//! the macros need: the names of the point's context type, policy trait and attribute, prose
//! for messages, and the absolute paths generated code uses.

use portcullis_engine::InterceptionPoint;
use proc_macro2::TokenStream;

use crate::paths;

/// What the macros call each interception point.
pub trait PointNames: Sized {
    /// Every point, in the order the engine documents them.
    const ALL: [Self; 3];

    /// The point from its wire name (`input`, `tool_call`, `output`).
    fn from_key(key: &str) -> Option<Self>;

    /// The name of the point's context type: `InputContext`, ...
    fn context_name(self) -> &'static str;

    /// The point whose context type has this name.
    fn from_context_name(name: &str) -> Option<Self>;

    /// The name of the point's policy trait: `InputPolicy`, ...
    fn trait_name(self) -> &'static str;

    /// The attribute that makes a function a policy of this point: `input_policy`, ...
    fn attribute(self) -> &'static str;

    /// How prose names a policy of this point: "an input policy", ...
    fn policy_noun(self) -> &'static str;

    /// How prose names the policies of this point: "input policies", ...
    fn policies_noun(self) -> &'static str;

    /// The absolute path of the point's context type.
    fn context_path(self) -> TokenStream;

    /// The absolute path of the point's policy trait.
    fn trait_path(self) -> TokenStream;
}

impl PointNames for InterceptionPoint {
    const ALL: [InterceptionPoint; 3] = [
        InterceptionPoint::Input,
        InterceptionPoint::ToolCall,
        InterceptionPoint::Output,
    ];

    fn from_key(key: &str) -> Option<InterceptionPoint> {
        Self::ALL.into_iter().find(|point| point.as_str() == key)
    }

    fn context_name(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "InputContext",
            InterceptionPoint::ToolCall => "ToolCallContext",
            InterceptionPoint::Output => "OutputContext",
        }
    }

    fn from_context_name(name: &str) -> Option<InterceptionPoint> {
        Self::ALL
            .into_iter()
            .find(|point| point.context_name() == name)
    }

    fn trait_name(self) -> &'static str {
        match self {
            InterceptionPoint::Input => "InputPolicy",
            InterceptionPoint::ToolCall => "ToolCallPolicy",
            InterceptionPoint::Output => "OutputPolicy",
        }
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
        match self {
            InterceptionPoint::Input => paths::input_policy(),
            InterceptionPoint::ToolCall => paths::tool_call_policy(),
            InterceptionPoint::Output => paths::output_policy(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for point in InterceptionPoint::ALL {
            assert_eq!(InterceptionPoint::from_key(point.as_str()), Some(point));
            assert_eq!(
                InterceptionPoint::from_context_name(point.context_name()),
                Some(point)
            );
        }
        assert_eq!(InterceptionPoint::from_key("tool-call"), None);
        assert_eq!(InterceptionPoint::from_context_name("Context"), None);
    }
}
