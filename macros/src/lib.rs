//! Procedural macros of Portcullis: code-first policies, policy sets and compile-time DSL
//! rules. Use them through the `portcullis` crate (feature `macros`, on by default), which
//! re-exports them at its root; the code they generate names `::portcullis`.
//!
//! Each macro is a few lines forwarding to `portcullis-macros-core`, where parsing, checking
//! and expansion live as ordinary, tested code.

use portcullis_macros_core::{InterceptionPoint, dsl_policy, policy_fn, policy_set};
use proc_macro::TokenStream;

/// Makes a function an input policy.
///
/// The function is sync or `async`, takes `&InputContext` and returns `PolicyDecision` or
/// `Result<PolicyDecision, E>` with `E: Into<BoxError>` (an `Err` is an evaluation error; the
/// policy set's `on_error` decides what follows). After annotation the function's name is a
/// policy value of a unit struct of the same name: it goes in `.input(name)` and in
/// `policy_set! { input: [name] }`, and `name.id()` is the function's name, or the `id`
/// argument: `#[input_policy(id = "no-ssn")]`. The function itself stays callable as
/// `name::decide(&context)`.
///
/// ```
/// use portcullis::{InputContext, Policy, PolicyDecision, PolicySet, input_policy};
///
/// /// Denies any message mentioning a social security number.
/// #[input_policy]
/// fn no_ssn(context: &InputContext) -> PolicyDecision {
///     let mentions = |text: &str| text.to_lowercase().contains("social security");
///     if context.messages.iter().any(|message| mentions(&message.content)) {
///         PolicyDecision::deny("no social security numbers")
///     } else {
///         PolicyDecision::allow()
///     }
/// }
///
/// assert_eq!(no_ssn.id(), "no_ssn");
/// let set = PolicySet::builder().input(no_ssn).build();
/// assert_eq!(set.input().len(), 1);
/// ```
///
/// A wrong signature is a compile error on the offending token: a context of another point
/// (the message names the attribute to use), a context taken by value or `&mut`, another
/// return type, generics, `self`, an unknown attribute argument.
///
/// ```compile_fail
/// use portcullis::{PolicyDecision, ToolCallContext, input_policy};
///
/// #[input_policy] // error: `#[input_policy]` takes `&InputContext`, but `ToolCallContext` ...
/// fn approved_tools(context: &ToolCallContext) -> PolicyDecision {
///     PolicyDecision::allow()
/// }
/// ```
#[proc_macro_attribute]
pub fn input_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(InterceptionPoint::Input, attribute.into(), item.into()).into()
}

/// Makes a function a tool-call policy: like [`input_policy`](macro@input_policy), with
/// `&ToolCallContext`.
///
/// ```
/// use portcullis::{Policy, PolicyDecision, ToolCallContext, tool_call_policy};
///
/// #[derive(Debug)]
/// struct MissingAmount;
/// impl std::fmt::Display for MissingAmount {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("a refund needs an amount")
///     }
/// }
/// impl std::error::Error for MissingAmount {}
///
/// #[tool_call_policy(id = "refund-limit")]
/// async fn refund_limit(context: &ToolCallContext) -> Result<PolicyDecision, MissingAmount> {
///     if context.tool_name != "refund" {
///         return Ok(PolicyDecision::allow());
///     }
///     let amount = context.arguments.get("amount").and_then(|a| a.as_f64()).ok_or(MissingAmount)?;
///     Ok(if amount > 100.0 { PolicyDecision::deny("refund too large") } else { PolicyDecision::allow() })
/// }
///
/// assert_eq!(refund_limit.id(), "refund-limit");
/// ```
#[proc_macro_attribute]
pub fn tool_call_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(InterceptionPoint::ToolCall, attribute.into(), item.into()).into()
}

/// Makes a function an output policy: like [`input_policy`](macro@input_policy), with
/// `&OutputContext`.
///
/// ```
/// use portcullis::{OutputContext, Policy, PolicyDecision, Redaction, output_policy};
///
/// #[output_policy]
/// fn mask_keys(context: &OutputContext) -> PolicyDecision {
///     if context.response.content.contains("sk-") {
///         PolicyDecision::redact([Redaction::replace("response.content", r"sk-\w+")])
///     } else {
///         PolicyDecision::allow()
///     }
/// }
///
/// assert_eq!(mask_keys.id(), "mask_keys");
/// ```
#[proc_macro_attribute]
pub fn output_policy(attribute: TokenStream, item: TokenStream) -> TokenStream {
    policy_fn::expand_attribute(InterceptionPoint::Output, attribute.into(), item.into()).into()
}

/// Builds a `PolicySet`: `policy_set! { on_error: deny, input: [..], tool_call: [..], output: [..] }`.
///
/// Every key is optional and given at most once; `on_error` is `deny` (the default: a failing
/// policy fails the call) or `allow` (a failing policy is skipped); each list holds any
/// expressions whose values are policies of that point, run in the order written. A policy
/// in the wrong list is a compile error that says so ("`approved_tools` is not an input
/// policy"); an unknown or repeated key is a compile error on the key.
///
/// ```
/// use portcullis::{InputContext, OnError, PolicyDecision, PolicyExt, input_policy, policy_set};
///
/// #[input_policy]
/// fn always_allow(_: &InputContext) -> PolicyDecision {
///     PolicyDecision::allow()
/// }
///
/// let set = policy_set! {
///     on_error: allow,
///     input: [always_allow, always_allow.monitored()],
/// };
/// assert_eq!(set.on_error(), OnError::Allow);
/// assert_eq!(set.input().len(), 2);
/// ```
#[proc_macro]
pub fn policy_set(input: TokenStream) -> TokenStream {
    policy_set::expand_macro(input.into()).into()
}

/// Compiles a JSON DSL rule into Rust at build time: `dsl_policy!(input, "rules/x.json")`
/// (or `tool_call`, `output`) is an expression of a type implementing that point's policy
/// trait, with the file stem (`x`) as its id.
///
/// The path is relative to the crate's manifest directory (`CARGO_MANIFEST_DIR`). The rule is
/// checked by the same checker as the runtime `DslInputPolicy::new` (and twins), so every
/// error is a compile error naming the file, line and column, spanned on the path: invalid
/// JSON, an unknown key or operator, a field that does not exist in the point's context, an
/// invalid regular expression. What the checker knows beyond the rule schema (a condition that
/// can never hold, an operator applied to a field of the wrong type, a `remove` of a field the
/// context requires, `redact` without `redactions`) is a compiler warning instead, carried by
/// the `deprecated` lint (`#[deny(deprecated)]` or `-D warnings` make it an error), and the
/// rule compiles as written. The compiled rule decides exactly like the runtime one, parses no
/// JSON and reads no file at run time; the file is tracked, so editing it rebuilds the crate.
///
/// ```
/// use portcullis::{Policy, PolicySet, dsl_policy};
///
/// // In the portcullis repository, `examples/rules/no_ssn.json` redacts social security numbers.
/// let no_ssn = dsl_policy!(input, "../examples/rules/no_ssn.json");
/// assert_eq!(no_ssn.id(), "no_ssn");
/// let set = PolicySet::builder().input(no_ssn).build();
/// # drop(set);
/// ```
#[proc_macro]
pub fn dsl_policy(input: TokenStream) -> TokenStream {
    dsl_policy::expand_macro(input.into()).into()
}
