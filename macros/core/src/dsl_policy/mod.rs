//! `dsl_policy!(input, "rules/x.json")`: a JSON DSL rule compiled into Rust at build time.
//!
//! The rule file is read relative to `CARGO_MANIFEST_DIR` (the crate being compiled) and
//! checked by the runtime DSL's own checker, `portcullis_dsl::check_source`, so a rule the
//! macro accepts is a rule `DslInputPolicy::new` accepts, with the same messages. The checked
//! rule is expanded with `portcullis_dsl::codegen` into an expression of a type
//! implementing the point's policy trait, with the file stem as its id. The expansion also
//! holds `const _: &str = include_str!("<file>");`, so editing the file rebuilds the crate.
//!
//! Stages: [`parse`] reads `point, "path"`, [`check`] reads and checks the rule file into a
//! [`check::LoadedRule`], [`expand`] writes the expression.

pub mod check;
pub mod expand;
pub mod parse;

use proc_macro2::TokenStream;

use crate::diagnostics::Errors;

/// Expands `dsl_policy!(point, "path")` into a policy expression.
///
/// Every problem of the rule is a compile error naming the file (and, for JSON syntax, the
/// line and column), spanned on the path literal. Next to the errors the expansion is a
/// policy of the right point that allows everything, so the code around the macro does not
/// add errors of its own.
pub fn expand_macro(input: TokenStream) -> TokenStream {
    let invocation = match parse::parse(input) {
        Ok(invocation) => invocation,
        Err(error) => return error.to_compile_error(),
    };
    let mut errors = Errors::default();
    let loaded = check::load(&invocation, check::manifest_dir().as_deref(), &mut errors);
    let expansion = match &loaded {
        Ok(rule) => expand::expand(&invocation, rule),
        Err(file) => expand::expand_dummy(&invocation, file.as_deref()),
    };
    if errors.is_empty() {
        expansion
    } else {
        let errors = errors.to_compile_errors();
        quote::quote!({ #errors #expansion })
    }
}
