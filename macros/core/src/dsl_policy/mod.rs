//! `dsl_policy!(input, "rules/x.json")`: a JSON DSL rule compiled into Rust at build time.
//!
//! The rule file is read relative to `CARGO_MANIFEST_DIR` (the crate being compiled) and
//! checked by the runtime DSL's own checker, `portcullis_dsl::check_source`, so a rule the
//! macro accepts is a rule `DslInputPolicy::new` accepts, with the same messages and the
//! same warnings. The expansion is the one code generator of compile-time rules: a unit struct
//! named after the file stem, implementing the point's policy trait around the decision
//! function and streaming form of `portcullis_dsl::codegen`, with the stem as its id. It also
//! holds `const _: &str = include_str!("<file>");`, so editing the file rebuilds the crate,
//! and one deprecated constant per warning, so the compiler prints it. What it gives for each
//! rule file of the repository is pinned in `tests/expanded/`.
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
/// Every error of the rule is a compile error naming the file, line and column, spanned on
/// the path literal. Next to the errors the expansion is a policy of the right point that
/// allows everything, so the code around the macro does not add errors of its own. A rule
/// without errors expands to the compiled policy, with each of its warnings as a compiler
/// warning (see `expand`).
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
