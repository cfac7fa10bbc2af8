//! JSON rules for Portcullis: policies for people who do not write Rust.
//!
//! A rule is one JSON file; its stem is the policy id. When the condition holds, the action's
//! decision is returned; otherwise the rule allows.
//!
//! ```json
//! {
//!   "condition": { "field": "messages.*.content", "contains": ["password", "api key"] },
//!   "action": "deny",
//!   "reason": "secrets must not reach the model"
//! }
//! ```
//!
//! [`DslInputPolicy`], [`DslToolCallPolicy`] and [`DslOutputPolicy`] read `<dir>/<id>.json`
//! once, when constructed, check it for their point and compile it; evaluation never touches
//! the file system and never fails.
//!
//! ```
//! use portcullis_dsl::DslInputPolicy;
//! use portcullis_engine::{EngineError, InputContext, Message, Metadata, PolicyEngine, PolicySet};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/rules");
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().input(DslInputPolicy::new("block_secrets", rules).unwrap()).build())
//!     .build();
//! let context = InputContext::new(
//!     vec![Message::user("here is my API key: sk-123")],
//!     Metadata::new("agent", "session"),
//! );
//! let error = engine.evaluate_input(&context).await.unwrap_err();
//! assert!(matches!(error, EngineError::Denied(_)));
//! # }
//! ```
//!
//! # Conditions
//!
//! | condition | holds when |
//! |---|---|
//! | `{"field": p, "contains": [s, ...]}` | the field's text contains one of the strings, ignoring case (Unicode lower-casing) |
//! | `{"field": p, "equals": v}` | the field equals `v` (JSON equality; numbers compare by value, `1` equals `1.0`) |
//! | `{"field": p, "not_in": [v, ...]}` | the field's value is none of the values |
//! | `{"field": p, "greater_than": n}` | the field is a number (or a `length`) greater than `n` |
//! | `{"always": true}` | always |
//!
//! Paths are dotted: a name selects an object key, a number selects a list element
//! (`messages.0.content`), and a final `length` gives a list's length (`messages.length`).
//! A path that does not resolve makes the condition false.
//!
//! # Extensions (beyond the schema)
//!
//! - `*` selects every element of a list or value of an open map: `messages.*.content`.
//!   A condition on a path that selects several values holds when it holds for **one** of
//!   them (for `not_in`: when one of them is none of the values).
//! - A negative index counts from the end: `messages.-1.content` is the latest message.
//! - A final `length` on a text gives its length in characters
//!   (`messages.-1.content.length`).
//! - `{"all": [c, ...]}`, `{"any": [c, ...]}` and `{"not": c}` combine conditions.
//! - `"mode": "monitor"` (or `"enforce"`, the default) on a rule: a monitored rule is evaluated
//!   and audited but its decisions take no effect (the policy's `mode()` is
//!   [`PolicyMode::Monitor`](portcullis_engine::PolicyMode::Monitor)).
//!
//! # Actions
//!
//! `allow`, `deny` (with `reason`), `audit` (with `reason`), `redact` (with `redactions`, as
//! in the schema) and `transform`: each `"field": "template"` pair of `transformation` becomes
//! a `set` operation whose value is the template with every `{{path}}` replaced by that path's
//! value (a string as it is, anything else as JSON text, nothing when the path does not
//! resolve). The operations come in the file's key order. A placeholder shows one value, so its
//! path cannot contain `*`.
//!
//! # Streaming
//!
//! [`DslOutputPolicy`] gives the engine's streaming output guard a streaming form when the
//! rule can run exactly as the answer arrives: `deny` when `response.content` contains one of
//! ASCII needles (a `contains`, or an `any` of them), and `always`-`redact` with `replace`
//! redactions of `response.content`. Other output rules are evaluated on the whole text.
//!
//! # The checker: errors and warnings
//!
//! [`check_source`] parses and checks a rule for one interception point and reports every
//! finding at once, each with where it is — line and column for JSON syntax, the JSON path of
//! the offending part (`condition.all[1].field`) otherwise — and what to do.
//!
//! **Errors** refuse the rule ([`Problems`]): bad JSON; a shape the rule schema rejects
//! (unknown keys, operators, actions and strategies, with "did you mean"; a missing action or
//! condition; an operand of the wrong type); a `field` that cannot exist in the point's
//! context (`tool_name` in an input rule, `messages.0.contnet`); an invalid regular
//! expression; a bad path in a template placeholder. Below `arguments` and the extra keys of
//! `metadata` any key is allowed.
//!
//! **Warnings** are what the checker knows beyond the schema. A rule that is valid under the
//! schema loads and decides as written (as the reference implementation decides), and its
//! warnings are kept on the loaded rule ([`CheckedRule::warnings`], and `warnings()` on each
//! policy), each a [`Warning`] with the file, the place in the rule and a hint:
//! - a condition that can never hold (`messages.0.role` equals `"USER"`: roles are lower
//!   case; `greater_than` on text; `contains` on a list);
//! - a change that breaks the context when applied (a `remove` of `messages.0.content`, a
//!   `mask` of a whole message, a template written to a list): the rule loads, and applying
//!   its decision is an evaluation error at run time;
//! - a redaction pattern that can never match, and parts the action ignores (`redactions` on
//!   a `deny` rule, a `pattern` on a `mask`, a `redact` rule without redactions);
//! - template text that is not a placeholder (an unclosed `{{`, kept as text; an empty
//!   `{{ }}`, which shows nothing).
//!
//! Strict loading turns warnings into errors: [`CheckedRule::deny_warnings`],
//! `DslInputPolicy::new_strict` and `from_source_strict` (and their twins). [`Problems`]
//! also carries the warnings found next to the errors ([`Problems::warnings`]), so a tool
//! can show everything at once. Each finding has its file ([`Problem::origin`]), its place
//! ([`Problem::line_column`] in the text, [`Problem::json_path`] in the rule), its message
//! and hint, and its [`Severity`]; `Display` writes it all as a compiler would:
//!
//! ```
//! use portcullis_dsl::check_source;
//! use portcullis_engine::InterceptionPoint;
//!
//! let source = r#"{
//!   "condition": { "field": "messages.0.role", "equals": "USER" },
//!   "action": "deny"
//! }"#;
//! let findings: Vec<String> = match check_source(source, "rules/roles.json", InterceptionPoint::Input) {
//!     Ok(rule) => rule.warnings().iter().map(|w| format!("{}: {w}", w.severity())).collect(),
//!     Err(problems) => problems
//!         .iter()
//!         .chain(problems.warnings())
//!         .map(|p| format!("{}: {p}", p.severity()))
//!         .collect(),
//! };
//! assert_eq!(findings, [
//!     r#"warning: rules/roles.json:2:46: at condition.equals: "messages.0.role" is a message role (text), so equals "USER" can never match; a role is "system", "user" or "assistant""#,
//! ]);
//! ```
//!
//! The `dsl_policy!` macro uses the same checker at build time: errors are compile errors,
//! warnings are compiler warnings (carried by the `deprecated` lint, so `#[deny(deprecated)]`
//! or `-D warnings` make them errors). It uses the `codegen` module (feature `codegen`) to
//! turn a checked rule into Rust.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod check;
mod eval;
mod json_kind;
mod model;
mod ops;
mod policy;
mod schema;
mod select;
mod stream;
mod suggest;

#[cfg(feature = "codegen")]
#[cfg_attr(docsrs, doc(cfg(feature = "codegen")))]
pub mod codegen;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use check::{
    CheckedRule, Location, Problem, Problems, Severity, Warning, check_rule, check_source,
    check_value,
};
pub use json_kind::JsonKind;
pub use model::{Action, Condition, Rule, RuleMode, RuleRedaction, RuleStrategy};
pub use policy::{
    DslError, DslInputPolicy, DslOutputPolicy, DslPolicy, DslToolCallPolicy, load, validate_id,
};
