//! Collecting every error of one macro input before failing.

use proc_macro2::TokenStream;
use quote::ToTokens;

/// The errors found so far in one macro input, combined into one `syn::Error` so a single
/// build shows every mistake.
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
    count: usize,
}

impl Errors {
    /// Adds an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.count += 1;
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Adds an error spanned on `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// How many errors were found.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether no error was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// The errors as `compile_error!` invocations, each on its own span (nothing when there
    /// is no error).
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.combined
            .as_ref()
            .map(syn::Error::to_compile_error)
            .unwrap_or_default()
    }
}
