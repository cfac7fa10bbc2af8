//! `policy_set! { on_error: deny, input: [..], tool_call: [..], output: [..] }`.
//!
//! Every key is optional and appears at most once; each list element is any expression whose
//! value is a policy of that point. The expansion is a chain on `PolicySet::builder()`, each
//! element passed to the point's builder method, so a policy in the wrong list fails the
//! trait bound of that method, which the policy traits' `#[diagnostic::on_unimplemented]`
//! turns into "`x` is not an input policy".
//!
//! Stages: [`parse`] reads `key: value` entries, [`check`] validates keys and values into a
//! [`check::PolicySetModel`], [`expand`] writes the builder chain.

pub mod check;
pub mod expand;
pub mod parse;

use proc_macro2::TokenStream;

use crate::diagnostics::Errors;

/// Expands `policy_set! { .. }` into an expression of type `PolicySet`.
///
/// Errors (unknown or repeated keys, a value of the wrong shape) are reported together; the
/// valid entries are still expanded so the compiler checks their policies too.
pub fn expand_macro(input: TokenStream) -> TokenStream {
    let entries = match parse::parse(input) {
        Ok(entries) => entries,
        Err(error) => return error.to_compile_error(),
    };
    let mut errors = Errors::default();
    let model = check::check(entries, &mut errors);
    let mut output = errors.to_compile_errors();
    output.extend(expand::expand(&model));
    if errors.is_empty() {
        output
    } else {
        // The errors are statements, the set an expression: a block holds both.
        quote::quote!({ #output })
    }
}
