//! Stage 2: the function's signature, checked against what a policy of the point accepts.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type, TypePath};

use super::parse::Arguments;
use crate::diagnostics::Errors;
use crate::point::PointNames;
use portcullis_engine::InterceptionPoint;

/// A policy function whose signature was checked.
pub struct PolicyFn {
    /// The point the function is a policy of.
    pub point: InterceptionPoint,
    /// The policy id: `id = "..."`, or the function's name.
    pub id: String,
    /// Whether the function is `async`.
    pub is_async: bool,
    /// Where the context type is written, for errors the compiler finds later.
    pub context_span: Span,
    /// Where the return type is written, for errors the compiler finds later.
    pub output_span: Span,
}

/// Checks `function` as a policy of `point`, adding one error per problem to `errors`.
/// Returns the model when the signature is usable (`errors` may still hold errors about the
/// arguments of the attribute).
pub(crate) fn check(
    point: InterceptionPoint,
    arguments: &Arguments,
    function: &ItemFn,
    errors: &mut Errors,
) -> Option<PolicyFn> {
    let before = errors.len();
    let signature = &function.sig;
    let attribute = point.attribute();

    if let syn::Safety::Unsafe(token) = &signature.safety {
        errors.spanned(token, "a policy function cannot be `unsafe`");
    }
    if let Some(abi) = &signature.abi {
        errors.spanned(abi, "a policy function cannot have an `extern` ABI");
    }
    if !signature.generics.params.is_empty() {
        errors.spanned(
            &signature.generics,
            format!(
                "a policy function cannot be generic: the engine calls it with `&{}` only",
                point.context_name()
            ),
        );
    }
    if let Some(where_clause) = &signature.generics.where_clause {
        errors.spanned(
            where_clause,
            "a policy function cannot have a `where` clause",
        );
    }
    if let Some(variadic) = &signature.variadic {
        errors.spanned(variadic, "a policy function cannot be variadic");
    }

    let mut context_span = None;
    let mut typed_arguments = 0;
    for argument in &signature.inputs {
        match argument {
            FnArg::Receiver(receiver) => errors.spanned(
                receiver,
                format!(
                    "a policy function cannot take `self`: `#[{attribute}]` goes on a free \
                     function taking `&{context}`; for a policy with state, implement `{trait_name}` \
                     on your own type",
                    context = point.context_name(),
                    trait_name = point.trait_name(),
                ),
            ),
            FnArg::Typed(typed) => {
                typed_arguments += 1;
                if typed_arguments > 1 {
                    errors.spanned(
                        typed,
                        format!(
                            "a policy function takes exactly one argument, the context \
                             (`&{}`): remove this one",
                            point.context_name()
                        ),
                    );
                } else if check_context_type(point, &typed.ty, errors) {
                    context_span = Some(typed.ty.span());
                }
            }
        }
    }
    if typed_arguments == 0 {
        errors.push(syn::Error::new(
            signature.paren_token.span.join(),
            format!(
                "a policy function takes the context as its argument: `context: &{}`",
                point.context_name()
            ),
        ));
    }

    let output_span = match &signature.output {
        ReturnType::Default => {
            errors.push(syn::Error::new(
                signature.paren_token.span.close(),
                "a policy function returns `PolicyDecision` or `Result<PolicyDecision, E>`: \
                 add `-> PolicyDecision`",
            ));
            None
        }
        ReturnType::Type(_, output) => {
            if is_policy_result(output) {
                Some(output.span())
            } else {
                errors.spanned(
                    output,
                    format!(
                        "a policy function returns `PolicyDecision` or `Result<PolicyDecision, E>` \
                         with `E: Into<BoxError>`, not `{}`",
                        type_to_string(output)
                    ),
                );
                None
            }
        }
    };

    let id = match &arguments.id {
        Some(id) => id.value(),
        None => unraw(&signature.ident),
    };
    if errors.len() != before {
        return None;
    }
    Some(PolicyFn {
        point,
        id,
        is_async: signature.asyncness.is_some(),
        context_span: context_span?,
        output_span: output_span?,
    })
}

/// Checks that `ty` is `&<InterceptionPoint>Context` (any path ending in that name, shared reference,
/// no named lifetime). Returns whether it is.
fn check_context_type(point: InterceptionPoint, ty: &Type, errors: &mut Errors) -> bool {
    let expected = point.context_name();
    let Type::Reference(reference) = ty else {
        errors.spanned(
            ty,
            format!(
                "a policy function takes its context by reference: `&{expected}`, not `{}`",
                type_to_string(ty)
            ),
        );
        return false;
    };
    let mut ok = true;
    if let Some(mutability) = &reference.mutability {
        errors.spanned(
            mutability,
            format!(
                "a policy reads its context through a shared reference: `&{expected}`, not `&mut`"
            ),
        );
        ok = false;
    }
    if let Some(lifetime) = &reference.lifetime
        && lifetime.ident != "_"
    {
        errors.spanned(
            lifetime,
            format!("remove the lifetime: a policy function takes `&{expected}`"),
        );
        ok = false;
    }
    match context_name_of(&reference.elem) {
        Some(name) if name == expected => ok,
        Some(name) => {
            let message = match InterceptionPoint::from_context_name(&name) {
                Some(other) => format!(
                    "`#[{}]` takes `&{expected}`, but `{name}` is the context of {}: \
                     use `#[{}]`",
                    point.attribute(),
                    other.policies_noun(),
                    other.attribute()
                ),
                None => format!(
                    "`#[{}]` takes `&{expected}`, not `&{}`",
                    point.attribute(),
                    type_to_string(&reference.elem)
                ),
            };
            errors.spanned(&reference.elem, message);
            false
        }
        None => {
            errors.spanned(
                &reference.elem,
                format!(
                    "`#[{}]` takes `&{expected}`, not `&{}`",
                    point.attribute(),
                    type_to_string(&reference.elem)
                ),
            );
            false
        }
    }
}

/// The last segment of a plain path type without generic arguments (`InputContext` for
/// `portcullis::InputContext`).
fn context_name_of(ty: &Type) -> Option<String> {
    let last = last_segment(ty)?;
    matches!(last.arguments, PathArguments::None).then(|| last.ident.to_string())
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(TypePath {
            qself: None, path, ..
        }) => path.segments.last(),
        Type::Group(group) => last_segment(&group.elem),
        Type::Paren(paren) => last_segment(&paren.elem),
        _ => None,
    }
}

/// Whether `ty` reads as a policy result: `PolicyDecision`, or a generic type whose first
/// argument is `PolicyDecision` (`Result<PolicyDecision, E>`, or an alias such as
/// `anyhow::Result<PolicyDecision>`). The rest (that it is a `Result`, that its error converts
/// into `BoxError`) is left to the compiler, spanned on the return type, through the facade's
/// `IntoPolicyResult` trait and its `on_unimplemented` message.
fn is_policy_result(ty: &Type) -> bool {
    let Some(last) = last_segment(ty) else {
        return false;
    };
    let is_decision = |segment: &syn::PathSegment| {
        segment.ident == "PolicyDecision" && segment.arguments.is_none()
    };
    if is_decision(last) {
        return true;
    }
    let PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return false;
    };
    let first_type = arguments.args.iter().find_map(|argument| match argument {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    first_type.and_then(last_segment).is_some_and(is_decision)
}

/// A type as the user wrote it, without the token spacing of `to_string`.
fn type_to_string(ty: &Type) -> String {
    let text = quote::quote!(#ty).to_string();
    tidy(&text)
}

/// Removes the spaces `TokenStream::to_string` puts between tokens where Rust code has none.
fn tidy(text: &str) -> String {
    let mut out = text.to_owned();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        ("& ", "&"),
        ("( ", "("),
        (" )", ")"),
    ] {
        out = out.replace(from, to);
    }
    out
}

/// The identifier without its `r#` prefix.
fn unraw(ident: &syn::Ident) -> String {
    let text = ident.to_string();
    text.strip_prefix("r#").map(str::to_owned).unwrap_or(text)
}
