//! Stage 3: the compiled rule as an expression, with the file tracked.

use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::check::LoadedRule;
use super::parse::Invocation;
use crate::{Point, paths};

/// `const _: &str = include_str!("<file>");`, which makes the compiler rebuild the crate when
/// the file changes. `None` when the path is not valid UTF-8 (then it cannot be tracked).
fn track(file: &Path, invocation: &Invocation) -> Option<TokenStream> {
    let file = file.to_str()?;
    let span = invocation.path.span();
    Some(quote_spanned!(span=> const _: &str = ::core::include_str!(#file);))
}

/// The compiled rule: a block holding the tracking constant and the policy expression.
pub(crate) fn expand(invocation: &Invocation, loaded: &LoadedRule) -> TokenStream {
    let track = track(&loaded.file, invocation);
    let policy = portcullis_dsl::codegen::expand(&loaded.rule, &loaded.id);
    quote!({
        #track
        #policy
    })
}

/// What stands for the policy next to errors: a policy of the right point that allows
/// everything, with the file tracked when it exists so that fixing it rebuilds.
pub(crate) fn expand_dummy(invocation: &Invocation, file: Option<&PathBuf>) -> TokenStream {
    let track = file.and_then(|file| track(file, invocation));
    let policy = match invocation.point {
        Point::Input => quote!(GeneratedInputPolicy),
        Point::ToolCall => quote!(GeneratedToolCallPolicy),
        Point::Output => quote!(GeneratedOutputPolicy),
    };
    let context = invocation.point.context_path();
    let decision = paths::policy_decision();
    let support = paths::dsl_support();
    let mode = paths::policy_mode();
    quote!({
        #track
        #support::#policy::new(
            "invalid_rule",
            #mode::Enforce,
            |_: &#context| -> #decision { #decision::allow() },
        )
    })
}
