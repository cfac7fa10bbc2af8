//! Stage 3: the unit struct, the user's function as its `decide`, and the policy trait impl.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{Attribute, Ident, ItemFn};

use super::check::PolicyFn;
use crate::paths;
use crate::point::PointNames;
use portcullis_engine::InterceptionPoint;

/// The attributes of the user's function, sorted by where they go.
struct SortedAttributes<'a> {
    /// `#[doc]`: on the struct, which is what users see.
    docs: Vec<&'a Attribute>,
    /// `#[cfg]` and `#[cfg_attr]`: on every generated item, so they come and go together.
    cfgs: Vec<&'a Attribute>,
    /// Everything else (`#[allow]`, `#[tracing::instrument]`, ...): on `decide`.
    rest: Vec<&'a Attribute>,
}

fn sort_attributes(attributes: &[Attribute]) -> SortedAttributes<'_> {
    let mut sorted = SortedAttributes {
        docs: Vec::new(),
        cfgs: Vec::new(),
        rest: Vec::new(),
    };
    for attribute in attributes {
        if attribute.path().is_ident("doc") {
            sorted.docs.push(attribute);
        } else if attribute.path().is_ident("cfg") || attribute.path().is_ident("cfg_attr") {
            sorted.cfgs.push(attribute);
        } else {
            sorted.rest.push(attribute);
        }
    }
    sorted
}

/// The struct standing for the policy, and the inherent impl holding the user's function.
fn struct_and_function(function: &ItemFn, attributes: &SortedAttributes<'_>) -> TokenStream {
    let ItemFn {
        vis, sig, block, ..
    } = function;
    let name = &sig.ident;
    let mut decide = sig.clone();
    decide.ident = Ident::new("decide", sig.ident.span());
    let SortedAttributes { docs, cfgs, rest } = attributes;
    let decide_doc = format!(
        " The policy function `{name}` as written: the engine calls it through the policy trait, \
         tests and other code may call it directly."
    );
    quote! {
        #(#docs)*
        #(#cfgs)*
        #[allow(non_camel_case_types)]
        #[derive(
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::fmt::Debug,
            ::core::default::Default,
            ::core::cmp::PartialEq,
            ::core::cmp::Eq,
            ::core::hash::Hash,
        )]
        #vis struct #name;

        #(#cfgs)*
        impl #name {
            #[doc = #decide_doc]
            #(#rest)*
            #vis #decide #block
        }
    }
}

/// The full expansion of a checked policy function.
pub(crate) fn expand(policy: &PolicyFn, function: &ItemFn) -> TokenStream {
    let attributes = sort_attributes(&function.attrs);
    let items = struct_and_function(function, &attributes);
    let name = &function.sig.ident;
    let cfgs = &attributes.cfgs;
    let id = &policy.id;
    let context_type = policy.point.context_path();
    let trait_path = policy.point.trait_path();
    let decision = paths::policy_decision();
    let box_error = paths::box_error();
    let async_trait = paths::async_trait();
    let into_policy_result = paths::into_policy_result();

    let context = Ident::new("context", Span::call_site().located_at(policy.context_span));
    let output_span = Span::call_site().located_at(policy.output_span);
    let call = quote_spanned!(output_span=> Self::decide(#context));
    let call = if policy.is_async {
        quote_spanned!(output_span=> #call.await)
    } else {
        call
    };
    let result = quote_spanned!(output_span=> #into_policy_result(#call));

    quote! {
        #items

        #(#cfgs)*
        #[#async_trait]
        impl #trait_path for #name {
            fn id(&self) -> &str {
                #id
            }

            async fn evaluate(
                &self,
                #context: &#context_type,
            ) -> ::core::result::Result<#decision, #box_error> {
                #result
            }
        }
    }
}

/// What is emitted next to the errors: the user's function (so its body is still checked and
/// its name still resolves) and a policy of the same name (so `.input(name)` and
/// `policy_set!` elsewhere do not add errors of their own).
pub(crate) fn expand_dummy(point: InterceptionPoint, function: &ItemFn) -> TokenStream {
    let attributes = sort_attributes(&function.attrs);
    let items = struct_and_function(function, &attributes);
    let name = &function.sig.ident;
    let cfgs = &attributes.cfgs;
    let id = name.to_string();
    let context_type = point.context_path();
    let trait_path = point.trait_path();
    let decision = paths::policy_decision();
    let box_error = paths::box_error();
    let async_trait = paths::async_trait();
    quote! {
        #items

        #(#cfgs)*
        #[#async_trait]
        impl #trait_path for #name {
            fn id(&self) -> &str {
                #id
            }

            async fn evaluate(
                &self,
                _: &#context_type,
            ) -> ::core::result::Result<#decision, #box_error> {
                ::core::result::Result::Err(::core::convert::From::from(
                    "this policy function did not compile",
                ))
            }
        }
    }
}
