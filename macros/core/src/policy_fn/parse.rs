//! Stage 1: the attribute's arguments and the annotated function, as syntax.

use proc_macro2::TokenStream;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ItemFn, LitStr, Token};

use crate::diagnostics::Errors;
use crate::point::PointNames;
use portcullis_engine::InterceptionPoint;

/// The attribute's arguments: `#[input_policy]` or `#[input_policy(id = "...")]`.
#[derive(Default)]
pub struct Arguments {
    /// `id = "..."`, when given.
    pub id: Option<LitStr>,
}

/// Reads the attribute's arguments. Every unknown, repeated or malformed argument is an error
/// added to `errors`; reading goes on after each so all of them are reported.
pub(crate) fn parse_arguments(
    point: InterceptionPoint,
    attribute: TokenStream,
    errors: &mut Errors,
) -> Arguments {
    let mut arguments = Arguments::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("id") {
            let value: Expr = meta.value()?.parse()?;
            match value {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(id),
                    ..
                }) => {
                    if id.value().is_empty() {
                        errors.spanned(&id, "a policy id cannot be empty");
                    } else if arguments.id.is_some() {
                        errors.spanned(
                            &meta.path,
                            format!("`id` is given twice in `#[{}]`", point.attribute()),
                        );
                    } else {
                        arguments.id = Some(id);
                    }
                }
                other => {
                    errors.spanned(other, "`id` takes a string literal, e.g. `id = \"no_ssn\"`")
                }
            }
        } else {
            let path = &meta.path;
            let name = quote::quote!(#path).to_string().replace(' ', "");
            errors.spanned(
                &meta.path,
                format!(
                    "unknown argument `{name}` of `#[{}]`: the only argument is `id = \"...\"`",
                    point.attribute()
                ),
            );
            skip_value(meta.input)?;
        }
        Ok(())
    });
    if let Err(error) = parser.parse2(attribute) {
        errors.push(error);
    }
    arguments
}

/// Skips what follows an unknown argument's name (`= expr` or `(...)`), so reading can go on.
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        input.parse::<Expr>()?;
    } else if input.peek(syn::token::Paren) {
        input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}

/// Reads the annotated item, which must be a function.
pub(crate) fn parse_function(point: InterceptionPoint, item: TokenStream) -> syn::Result<ItemFn> {
    syn::parse2::<ItemFn>(item.clone()).map_err(|_| {
        syn::Error::new_spanned(
            item,
            format!(
                "`#[{}]` goes on a function taking `&{}` and returning `PolicyDecision`",
                point.attribute(),
                point.context_name()
            ),
        )
    })
}
