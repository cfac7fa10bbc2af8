//! The ordinary code behind Portcullis' procedural macros.
//!
//! `portcullis-macros` is a thin `proc-macro` crate: each macro forwards its tokens to one
//! function of this crate, which parses them into a typed model, checks the model and expands
//! it. Keeping the work here means it is plain Rust that ordinary tests reach, and that the
//! compile-time DSL checks are the runtime DSL's own parser and checker.
//!
//! One module per macro, one file per stage:
//! - [`policy_fn`]: `#[input_policy]`, `#[tool_call_policy]`, `#[output_policy]`;
//! - [`policy_set`]: `policy_set! { .. }`;
//! - [`dsl_policy`]: `dsl_policy!(point, "rules/x.json")`.
//!
//! Every function returns the tokens to emit. Errors are never panics: they are spanned
//! `compile_error!`s, all errors of one input together, next to a best-effort expansion (the
//! user's function, a dummy policy) so that one mistake does not cascade into unrelated ones.
//!
//! Generated code names everything by absolute path through the facade crate (`::portcullis`),
//! from the one table in [`paths`].
//!
//! ```
//! use quote::quote;
//!
//! let tokens = portcullis_macros_core::policy_fn::expand_attribute(
//!     portcullis_macros_core::InterceptionPoint::Input,
//!     quote!(),
//!     quote! {
//!         fn no_ssn(context: &InputContext) -> PolicyDecision {
//!             PolicyDecision::allow()
//!         }
//!     },
//! );
//! assert!(tokens.to_string().contains("impl :: portcullis :: Policy < :: portcullis :: InputContext > for no_ssn"));
//! ```

mod diagnostics;
pub mod dsl_policy;
pub mod paths;
pub mod point;
pub mod policy_fn;
pub mod policy_set;

pub use point::PointNames;
/// The interception points, as the engine names them (re-exported for the proc-macro crate).
pub use portcullis_engine::InterceptionPoint;
