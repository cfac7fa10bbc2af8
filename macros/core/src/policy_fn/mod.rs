//! `#[input_policy]`, `#[tool_call_policy]` and `#[output_policy]`.
//!
//! The attribute goes on a plain function, sync or async, that takes the point's context by
//! reference and returns `PolicyDecision` or `Result<PolicyDecision, E>` with
//! `E: Into<BoxError>`. It becomes a unit struct of the same name, so the name is both a type
//! and a value (`.input(no_ssn)`, `input: [no_ssn]`), with:
//! - an inherent `decide` function that is the user's function unchanged (`no_ssn::decide(&context)`),
//! - an implementation of the point's policy trait whose `id` is the function name (or
//!   `id = "..."`) and whose `evaluate` calls `decide`.
//!
//! Stages: [`parse`] reads the attribute arguments and the function, [`check`] validates the
//! signature into a [`check::PolicyFn`], [`expand`] writes the struct and impls.

pub mod check;
pub mod expand;
pub mod parse;

use proc_macro2::TokenStream;

use crate::diagnostics::Errors;
use portcullis_engine::InterceptionPoint;

/// Expands `#[<point>_policy(attribute)] item`.
///
/// On any error the output holds every error, spanned on the offending token, plus the user's
/// function and a dummy policy of the same name, so uses of the policy elsewhere do not add
/// unrelated errors.
pub fn expand_attribute(
    point: InterceptionPoint,
    attribute: TokenStream,
    item: TokenStream,
) -> TokenStream {
    let mut errors = Errors::default();
    let arguments = parse::parse_arguments(point, attribute, &mut errors);
    let function = match parse::parse_function(point, item.clone()) {
        Ok(function) => function,
        Err(error) => {
            errors.push(error);
            let mut output = errors.to_compile_errors();
            output.extend(item);
            return output;
        }
    };
    // A usable signature is expanded in full even when the attribute's arguments had
    // errors: the rest of the crate then type-checks against the real policy.
    let expansion = match check::check(point, &arguments, &function, &mut errors) {
        Some(policy) => expand::expand(&policy, &function),
        None => expand::expand_dummy(point, &function),
    };
    let mut output = errors.to_compile_errors();
    output.extend(expansion);
    output
}
