//! Stage 3: a chain on `PolicySet::builder()`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{OnError, PolicySetModel};
use crate::paths;
use portcullis_engine::InterceptionPoint;

/// The builder chain, an expression of type `PolicySet`. No local variable is introduced, so
/// no name can capture one of the user's.
pub(crate) fn expand(model: &PolicySetModel) -> TokenStream {
    let policy_set = paths::policy_set();
    let mut chain = quote!(#policy_set::builder());
    if let Some((on_error, span)) = model.on_error {
        let on_error_type = paths::on_error();
        let variant = match on_error {
            OnError::Deny => quote_spanned!(span=> Deny),
            OnError::Allow => quote_spanned!(span=> Allow),
        };
        chain = quote!(#chain.on_error(#on_error_type::#variant));
    }
    for (point, policies) in &model.policies {
        let method = match point {
            InterceptionPoint::Input => quote!(input),
            InterceptionPoint::ToolCall => quote!(tool_call),
            InterceptionPoint::ToolResult => quote!(tool_result),
            InterceptionPoint::Output => quote!(output),
        };
        for policy in policies {
            // The call is spanned on the element, so an unsatisfied trait bound points at it.
            let span = Span::call_site().located_at(policy.span());
            chain = quote_spanned!(span=> #chain.#method(#policy));
        }
    }
    quote!(#chain.build())
}
