//! Stage 1: `key: value` entries, separated by commas.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

/// One `key: value` entry, as written.
pub struct Entry {
    /// The key (any identifier; checked later).
    pub key: Ident,
    /// The value (any expression; checked later).
    pub value: Expr,
}

impl Parse for Entry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let key = Ident::parse_any(input)?;
        input.parse::<Token![:]>().map_err(|error| {
            syn::Error::new(
                error.span(),
                format!("expected `:` after `{key}`, as in `{key}: [..]`"),
            )
        })?;
        let value = input.parse()?;
        Ok(Entry { key, value })
    }
}

/// Reads the macro's input.
pub(crate) fn parse(input: TokenStream) -> syn::Result<Vec<Entry>> {
    let entries = Punctuated::<Entry, Token![,]>::parse_terminated.parse2(input)?;
    Ok(entries.into_iter().collect())
}
