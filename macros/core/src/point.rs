//! The three interception points, as the macros name them.

use proc_macro2::TokenStream;

use crate::paths;

/// An interception point, with the names a macro needs to talk about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// Before the request is sent to the model.
    Input,
    /// Before a tool runs.
    ToolCall,
    /// After the model has answered.
    Output,
}

impl Point {
    /// Every point, in the order the engine documents them.
    pub const ALL: [Point; 3] = [Point::Input, Point::ToolCall, Point::Output];

    /// The wire name, which is also the key in `policy_set!` and the first argument of
    /// `dsl_policy!`: `input`, `tool_call`, `output`.
    pub const fn key(self) -> &'static str {
        match self {
            Point::Input => "input",
            Point::ToolCall => "tool_call",
            Point::Output => "output",
        }
    }

    /// The point from its wire name.
    pub fn from_key(key: &str) -> Option<Point> {
        Point::ALL.into_iter().find(|point| point.key() == key)
    }

    /// The name of the point's context type: `InputContext`, ...
    pub const fn context_name(self) -> &'static str {
        match self {
            Point::Input => "InputContext",
            Point::ToolCall => "ToolCallContext",
            Point::Output => "OutputContext",
        }
    }

    /// The point whose context type has this name.
    pub fn from_context_name(name: &str) -> Option<Point> {
        Point::ALL
            .into_iter()
            .find(|point| point.context_name() == name)
    }

    /// The name of the point's policy trait: `InputPolicy`, ...
    pub const fn trait_name(self) -> &'static str {
        match self {
            Point::Input => "InputPolicy",
            Point::ToolCall => "ToolCallPolicy",
            Point::Output => "OutputPolicy",
        }
    }

    /// The attribute that makes a function a policy of this point: `input_policy`, ...
    pub const fn attribute(self) -> &'static str {
        match self {
            Point::Input => "input_policy",
            Point::ToolCall => "tool_call_policy",
            Point::Output => "output_policy",
        }
    }

    /// How prose names a policy of this point: "an input policy", ...
    pub const fn policy_noun(self) -> &'static str {
        match self {
            Point::Input => "an input policy",
            Point::ToolCall => "a tool-call policy",
            Point::Output => "an output policy",
        }
    }

    /// How prose names the policies of this point: "input policies", ...
    pub const fn policies_noun(self) -> &'static str {
        match self {
            Point::Input => "input policies",
            Point::ToolCall => "tool-call policies",
            Point::Output => "output policies",
        }
    }

    /// The absolute path of the point's context type.
    pub fn context_path(self) -> TokenStream {
        match self {
            Point::Input => paths::input_context(),
            Point::ToolCall => paths::tool_call_context(),
            Point::Output => paths::output_context(),
        }
    }

    /// The absolute path of the point's policy trait.
    pub fn trait_path(self) -> TokenStream {
        match self {
            Point::Input => paths::input_policy(),
            Point::ToolCall => paths::tool_call_policy(),
            Point::Output => paths::output_policy(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for point in Point::ALL {
            assert_eq!(Point::from_key(point.key()), Some(point));
            assert_eq!(Point::from_context_name(point.context_name()), Some(point));
        }
        assert_eq!(Point::from_key("tool-call"), None);
        assert_eq!(Point::from_context_name("Context"), None);
    }
}
