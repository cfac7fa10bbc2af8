//! The one table of absolute paths generated code uses.
//!
//! Everything goes through the facade crate, `::portcullis` (which says
//! `extern crate self as portcullis;`, so the paths work inside the facade's own tests too).
//! Support items that are not public API live in `::portcullis::__private`.

use proc_macro2::TokenStream;
use quote::quote;

/// `::portcullis::InputContext`.
pub fn input_context() -> TokenStream {
    quote!(::portcullis::InputContext)
}

/// `::portcullis::ToolCallContext`.
pub fn tool_call_context() -> TokenStream {
    quote!(::portcullis::ToolCallContext)
}

/// `::portcullis::OutputContext`.
pub fn output_context() -> TokenStream {
    quote!(::portcullis::OutputContext)
}

/// `::portcullis::Policy`, the policy trait of every point.
pub fn policy() -> TokenStream {
    quote!(::portcullis::Policy)
}

/// `::portcullis::PolicyDecision`.
pub fn policy_decision() -> TokenStream {
    quote!(::portcullis::PolicyDecision)
}

/// `::portcullis::BoxError`.
pub fn box_error() -> TokenStream {
    quote!(::portcullis::BoxError)
}

/// `::portcullis::PolicySet`.
pub fn policy_set() -> TokenStream {
    quote!(::portcullis::PolicySet)
}

/// `::portcullis::OnError`.
pub fn on_error() -> TokenStream {
    quote!(::portcullis::OnError)
}

/// `::portcullis::async_trait`, the attribute the policy traits are written with.
pub fn async_trait() -> TokenStream {
    quote!(::portcullis::async_trait)
}

/// `::portcullis::__private::into_policy_result`, which turns what a policy function returns
/// into what a policy's `evaluate` returns.
pub fn into_policy_result() -> TokenStream {
    quote!(::portcullis::__private::into_policy_result)
}

/// `::portcullis::PolicyMode`.
pub fn policy_mode() -> TokenStream {
    quote!(::portcullis::PolicyMode)
}

/// `::portcullis::__private::dsl`, the DSL's support items for compiled rules.
pub fn dsl_support() -> TokenStream {
    quote!(::portcullis::__private::dsl)
}

/// `::portcullis::StreamingRule`.
pub fn streaming_rule() -> TokenStream {
    quote!(::portcullis::StreamingRule)
}
