//! Procedural macros of Portcullis. Use them through the `portcullis` crate (feature
//! `macros`, on by default), which documents them; generated code names `::portcullis`.
//!
//! Each macro is a few lines forwarding to `portcullis-macros-core`, where the parsing,
//! checking and expansion live as ordinary, tested code.

use portcullis_macros_core::{Point, dsl_policy, policy_fn, policy_set};
use proc_macro::TokenStream;

/// Makes a function taking `&InputContext` an input policy. See the `portcullis` crate.
#[proc_macro_attribute]
pub fn input_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(Point::Input, attribute.into(), item.into()).into()
}

/// Makes a function taking `&ToolCallContext` a tool-call policy. See the `portcullis` crate.
#[proc_macro_attribute]
pub fn tool_call_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(Point::ToolCall, attribute.into(), item.into()).into()
}

/// Makes a function taking `&OutputContext` an output policy. See the `portcullis` crate.
#[proc_macro_attribute]
pub fn output_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(Point::Output, attribute.into(), item.into()).into()
}

/// Builds a `PolicySet` from lists of policies per point. See the `portcullis` crate.
#[proc_macro]
pub fn policy_set(input: TokenStream) -> TokenStream {
    policy_set::expand_macro(input.into()).into()
}

/// Compiles a JSON DSL rule into Rust at build time. See the `portcullis` crate.
#[proc_macro]
pub fn dsl_policy(input: TokenStream) -> TokenStream {
    dsl_policy::expand_macro(input.into()).into()
}
