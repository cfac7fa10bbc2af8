//! Stage 1: `point, "path"`.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token};

use portcullis_engine::InterceptionPoint;

/// `dsl_policy!(point, "path")` as written.
pub struct Invocation {
    /// The interception point.
    pub point: InterceptionPoint,
    /// The point as written, for spans.
    pub point_ident: Ident,
    /// The rule file, relative to `CARGO_MANIFEST_DIR`.
    pub path: LitStr,
}

impl Parse for Invocation {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let usage = "expected `dsl_policy!(input, \"rules/x.json\")` (the point is `input`, \
                     `tool_call` or `output`)";
        if input.is_empty() {
            return Err(input.error(usage));
        }
        let point_ident: Ident = input
            .parse()
            .map_err(|error| syn::Error::new(error.span(), usage))?;
        let point = InterceptionPoint::from_name(&point_ident.to_string()).ok_or_else(|| {
            syn::Error::new(
                point_ident.span(),
                format!(
                    "unknown interception point `{point_ident}`: the points are `input`, \
                     `tool_call` and `output`"
                ),
            )
        })?;
        input
            .parse::<Token![,]>()
            .map_err(|error| syn::Error::new(error.span(), usage))?;
        let path: LitStr = input.parse().map_err(|error| {
            syn::Error::new(
                error.span(),
                "expected the rule file as a string literal, relative to the crate's \
                 manifest directory: `\"rules/x.json\"`",
            )
        })?;
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the rule file"));
        }
        Ok(Invocation {
            point,
            point_ident,
            path,
        })
    }
}

/// Reads the macro's input.
pub(crate) fn parse(input: TokenStream) -> syn::Result<Invocation> {
    syn::parse2(input)
}
