//! Stage 3: the compiled rule as an expression, with the file tracked.
//!
//! The expression is a value of a unit struct named after the file stem (`no_ssn` for
//! `rules/no_ssn.json`), declared in a block next to the tracking constant. The struct
//! implements the point's policy trait by calling the DSL's generated decision closure
//! (`portcullis_dsl::codegen::decide_closure`) in place, and, for output rules, returns the
//! DSL's streaming form (`portcullis_dsl::codegen::streaming_rules`).
//! The name is for people: a compiled rule in the wrong `policy_set!` slot reads
//! "`approved_tools` is not an input policy".

use std::path::Path;

use portcullis_engine::PolicyMode;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;

use super::check::LoadedRule;
use super::parse::Invocation;
use crate::paths;
use crate::point::PointNames;

/// `const _: &str = include_str!("<file>");`, which makes the compiler rebuild the crate when
/// the file changes. `None` when the path is not valid UTF-8 (then it cannot be tracked).
fn track(file: &Path, invocation: &Invocation) -> Option<TokenStream> {
    let file = file.to_str()?;
    let span = invocation.path.span();
    Some(quote_spanned!(span=> const _: &str = ::core::include_str!(#file);))
}

/// The struct's name: the file stem when it is an identifier (`max-length` becomes
/// `max_length`), `dsl_rule` otherwise.
fn type_name(stem: &str, span: Span) -> Ident {
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    match syn::parse_str::<Ident>(&name) {
        Ok(_) if name != "_" && name != "Self" && name != "self" => Ident::new(&name, span),
        // Keywords and empty stems have no struct name of their own.
        _ => Ident::new("dsl_rule", span),
    }
}

/// The checker's warnings as compiler warnings: there is no warning API for procedural macros
/// on stable Rust, so each warning is a deprecated constant, spanned on the rule file's path,
/// whose use makes the compiler print the warning's text as the deprecation note (a
/// `warning: use of deprecated constant`, which `#[deny(deprecated)]` or `-D warnings` turn
/// into an error, like any warning).
fn warnings(invocation: &Invocation, loaded: &LoadedRule) -> TokenStream {
    let span = invocation.path.span();
    loaded
        .rule
        .warnings()
        .iter()
        .map(|warning| {
            let note = format!("{warning}");
            quote_spanned! {span=>
                {
                    #[deprecated(note = #note)]
                    #[allow(non_upper_case_globals)]
                    const dsl_rule_warning: () = ();
                    let () = dsl_rule_warning;
                }
            }
        })
        .collect()
}

/// The policy struct, its trait impl, and the expression building it.
/// `preamble` comes first in the block: the file tracking and the warnings.
fn policy_block(
    invocation: &Invocation,
    preamble: TokenStream,
    name: &Ident,
    id: &str,
    mode: PolicyMode,
    decide: TokenStream,
    streaming: Option<TokenStream>,
) -> TokenStream {
    let point = invocation.point;
    let trait_path = point.trait_path();
    let context = point.context_path();
    let decision = paths::policy_decision();
    let box_error = paths::box_error();
    let async_trait = paths::async_trait();
    let policy_mode = paths::policy_mode();
    let mode = match mode {
        PolicyMode::Enforce => quote!(#policy_mode::Enforce),
        PolicyMode::Monitor => quote!(#policy_mode::Monitor),
    };
    quote!({
        #preamble

        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
        struct #name;

        impl #name {
            /// Decides on `context`, as `evaluate` does, without the `async` and the `Result`.
            #[allow(dead_code)]
            fn decide(&self, context: &#context) -> #decision {
                #decide
            }
        }

        #[#async_trait]
        impl #trait_path for #name {
            fn id(&self) -> &str {
                #id
            }

            async fn evaluate(
                &self,
                context: &#context,
            ) -> ::core::result::Result<#decision, #box_error> {
                ::core::result::Result::Ok(self.decide(context))
            }

            fn mode(&self) -> #policy_mode {
                #mode
            }

            #streaming
        }

        #name
    })
}

/// The compiled rule.
pub(crate) fn expand(invocation: &Invocation, loaded: &LoadedRule) -> TokenStream {
    let track = track(&loaded.file, invocation);
    let closure = portcullis_dsl::codegen::decide_closure(&loaded.rule);
    let name = type_name(&loaded.id, invocation.path.span());
    let decide = quote!((#closure)(context));
    // Output rules with a streaming form keep it, so the streaming guard runs them
    // incrementally exactly as it runs the runtime `DslOutputPolicy`.
    let streaming = portcullis_dsl::codegen::streaming_rules(&loaded.rule).map(|rules| {
        let rule_type = paths::streaming_rule();
        quote! {
            fn streaming(&self) -> ::core::option::Option<::std::vec::Vec<#rule_type>> {
                ::core::option::Option::Some(#rules)
            }
        }
    });
    let warnings = warnings(invocation, loaded);
    policy_block(
        invocation,
        quote!(#track #warnings),
        &name,
        &loaded.id,
        loaded.rule.mode(),
        decide,
        streaming,
    )
}

/// What stands for the policy next to errors: a policy of the right point that allows
/// everything (it never runs: the crate does not compile), with the file tracked when it
/// exists so that fixing it rebuilds.
pub(crate) fn expand_dummy(invocation: &Invocation, file: Option<&Path>) -> TokenStream {
    let track = file.and_then(|file| track(file, invocation));
    let stem = Path::new(&invocation.path.value())
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default()
        .to_owned();
    let name = type_name(&stem, invocation.path.span());
    let decision = paths::policy_decision();
    policy_block(
        invocation,
        quote!(#track),
        &name,
        &stem,
        PolicyMode::Enforce,
        quote!({
            let _ = context;
            #decision::allow()
        }),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_identifiers() {
        let span = Span::call_site();
        assert_eq!(type_name("no_ssn", span), "no_ssn");
        assert_eq!(type_name("max-length", span), "max_length");
        assert_eq!(type_name("1st", span), "_1st");
        assert_eq!(type_name("type", span), "dsl_rule");
        assert_eq!(type_name("", span), "dsl_rule");
    }
}
