//! `dsl_policy!(input, "rules/x.json")`.

pub mod parse;

use proc_macro2::TokenStream;

/// Expands `dsl_policy!(point, "path")`.
pub fn expand_macro(input: TokenStream) -> TokenStream {
    match parse::parse(input) {
        Ok(invocation) => syn::Error::new(invocation.path.span(), "not yet").to_compile_error(),
        Err(error) => error.to_compile_error(),
    }
}
