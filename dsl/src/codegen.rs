//! Code generation for compile-time rules (feature `codegen`): the pieces of Rust that the
//! `dsl_policy!` macro builds a policy type around.
//!
//! The macro checks the rule with [`check_source`](crate::check_source), then declares a unit
//! struct named after the file and implements the point's policy trait for it: `evaluate`
//! calls the decision function of [`decide_closure`] in place, and an output rule's
//! `streaming` returns [`streaming_rules`]. The generated code:
//! - names everything by absolute path through the facade: `::portcullis::...` for engine
//!   items, `::portcullis::__private::dsl::...` for this crate's support items;
//! - parses no JSON and reads no file at run time: paths are constant segment lists,
//!   `contains` needles are lower-cased at build time, operands are built once, lazily, in a
//!   `static LazyLock` (the multi-pattern matcher of `contains`, the set of `not_in`);
//! - evaluates the condition as one boolean expression calling the same operator functions as
//!   the runtime policies (`contains`, `equals`, `not_in`, `greater_than`), so a compiled rule
//!   and a runtime rule decide alike;
//! - builds the decision in place (`transform` templates with `push_field`).
//!
//! Redaction patterns are checked (compiled with the engine's size limits) at build time; the
//! decision carries them as text and the engine compiles them, once, when applying them.
//!
//! ```
//! use portcullis_dsl::{check_source, codegen};
//! use portcullis_engine::InterceptionPoint;
//!
//! let rule = check_source(
//!     r#"{ "condition": { "field": "tool_name", "not_in": ["search"] }, "action": "deny" }"#,
//!     "rules/approved_tools.json",
//!     InterceptionPoint::ToolCall,
//! ).unwrap();
//! let closure = codegen::decide_closure(&rule).to_string();
//! assert!(closure.starts_with("| context : & :: portcullis :: ToolCallContext |"));
//! assert!(codegen::streaming_rules(&rule).is_none());
//! ```

use portcullis_engine::path::{FieldPath, Segment};
use portcullis_engine::{InterceptionPoint, RedactionStrategy, StreamingRule};
use proc_macro2::{Literal, TokenStream};
use quote::quote;
use serde_json::Value;

use crate::check::{CheckedCondition, CheckedRule, TemplatePart};
use crate::model::Action;

/// The rule's decision function alone: a closure expression
/// `|context: &::portcullis::InputContext| -> ::portcullis::PolicyDecision { .. }` (with the
/// point's context type), for callers that build their own policy type around it. It captures
/// nothing, so it can be called in place: `(#closure)(context)`.
pub fn decide_closure(rule: &CheckedRule) -> TokenStream {
    let context = match rule.point() {
        InterceptionPoint::Input => quote!(InputContext),
        InterceptionPoint::ToolCall => quote!(ToolCallContext),
        InterceptionPoint::ToolResult => quote!(ToolResultContext),
        InterceptionPoint::Output => quote!(OutputContext),
    };
    if rule.rule.action == Action::Allow {
        // Allowed whether the condition holds or not: nothing to evaluate.
        return quote! {
            |_context: &::portcullis::#context| -> ::portcullis::PolicyDecision {
                ::portcullis::PolicyDecision::allow()
            }
        };
    }
    // `always` with a fixed decision does not look at the context.
    let reads_context = !matches!(rule.condition, CheckedCondition::Always)
        || rule.rule.action == Action::Transform;
    let parameter = if reads_context {
        quote!(context)
    } else {
        quote!(_context)
    };
    let condition = condition(&rule.condition);
    let decision = decision(rule);
    quote! {
        |#parameter: &::portcullis::#context| -> ::portcullis::PolicyDecision {
            if #condition {
                #decision
            } else {
                ::portcullis::PolicyDecision::allow()
            }
        }
    }
}

/// The streaming form of an output rule, when it has one: an expression of type
/// `Vec<::portcullis::StreamingRule>` with the same rules `DslOutputPolicy::streaming` gives
/// (return it from `Policy::streaming`). `None` for rules without one.
pub fn streaming_rules(rule: &CheckedRule) -> Option<TokenStream> {
    if rule.point() != InterceptionPoint::Output {
        return None;
    }
    crate::stream::streaming_form(rule).map(|rules| {
        let rules = rules.iter().map(streaming_rule);
        quote!(::std::vec![#(#rules),*])
    })
}

fn optional_size(size: Option<usize>) -> TokenStream {
    match size {
        Some(size) => quote!(::std::option::Option::Some(#size)),
        None => quote!(::std::option::Option::None),
    }
}

fn streaming_rule(rule: &StreamingRule) -> TokenStream {
    match rule {
        StreamingRule::DenyOnMatch {
            pattern,
            reason,
            max_match_len,
        } => {
            let reason = optional_text(reason.as_deref());
            let max = optional_size(*max_match_len);
            quote! {
                ::portcullis::StreamingRule::DenyOnMatch {
                    pattern: ::std::string::String::from(#pattern),
                    reason: #reason,
                    max_match_len: #max,
                }
            }
        }
        StreamingRule::Replace {
            pattern,
            replacement,
            max_match_len,
        } => {
            let max = optional_size(*max_match_len);
            quote! {
                ::portcullis::StreamingRule::Replace {
                    pattern: ::std::string::String::from(#pattern),
                    replacement: ::std::string::String::from(#replacement),
                    max_match_len: #max,
                }
            }
        }
    }
}

fn path(path: &FieldPath) -> TokenStream {
    let segments = path.segments().iter().map(|segment| match segment {
        Segment::Name(name) => quote!(::portcullis::__private::dsl::Segment::Name(#name)),
        Segment::Index { text, index } => {
            let index = Literal::i64_suffixed(*index);
            quote!(::portcullis::__private::dsl::Segment::Index { text: #text, index: #index })
        }
        // Alone in a path, `*` would leave the text's type open.
        Segment::Any => quote!(::portcullis::__private::dsl::Segment::<&'static str>::Any),
    });
    quote!(&[#(#segments),*])
}

fn float(value: f64) -> TokenStream {
    let bits = Literal::u64_suffixed(value.to_bits());
    quote!(::core::primitive::f64::from_bits(#bits))
}

fn value(value: &Value) -> TokenStream {
    match value {
        Value::Null => quote!(::portcullis::__private::dsl::serde_json::Value::Null),
        Value::Bool(flag) => quote!(::portcullis::__private::dsl::serde_json::Value::Bool(#flag)),
        Value::Number(number) => {
            if let Some(unsigned) = number.as_u64() {
                let unsigned = Literal::u64_suffixed(unsigned);
                quote!(::portcullis::__private::dsl::serde_json::Value::from(#unsigned))
            } else if let Some(signed) = number.as_i64() {
                let signed = Literal::i64_suffixed(signed);
                quote!(::portcullis::__private::dsl::serde_json::Value::from(#signed))
            } else {
                let float = float(number.as_f64().unwrap_or(f64::NAN));
                quote!(::portcullis::__private::dsl::number(#float))
            }
        }
        Value::String(text) => quote!(
            ::portcullis::__private::dsl::serde_json::Value::String(::std::string::String::from(#text))
        ),
        Value::Array(items) => {
            let items = items.iter().map(self::value);
            quote!(::portcullis::__private::dsl::serde_json::Value::Array(
                ::std::vec![#(#items),*]
            ))
        }
        Value::Object(entries) => {
            let entries = entries.iter().map(|(key, item)| {
                let item = self::value(item);
                quote!((#key, #item))
            });
            quote!(::portcullis::__private::dsl::object([#(#entries),*]))
        }
    }
}

fn condition(condition: &CheckedCondition) -> TokenStream {
    match condition {
        CheckedCondition::Contains {
            path: field,
            needles,
        } => {
            let field = path(field);
            quote! {
                ::portcullis::__private::dsl::contains(context, #field, {
                    static NEEDLES: ::std::sync::LazyLock<::portcullis::__private::dsl::Needles> =
                        ::std::sync::LazyLock::new(|| {
                            ::portcullis::__private::dsl::Needles::from_lowercase([#(#needles),*])
                        });
                    &NEEDLES
                })
            }
        }
        CheckedCondition::Equals {
            path: field,
            value: operand,
        } => {
            let field = path(field);
            let operand = value(operand);
            quote! {
                ::portcullis::__private::dsl::equals(context, #field, {
                    static VALUE: ::std::sync::LazyLock<::portcullis::__private::dsl::serde_json::Value> =
                        ::std::sync::LazyLock::new(|| #operand);
                    &VALUE
                })
            }
        }
        CheckedCondition::NotIn {
            path: field,
            values,
        } => {
            let field = path(field);
            let values = values.iter().map(value);
            quote! {
                ::portcullis::__private::dsl::not_in(context, #field, {
                    static VALUES: ::std::sync::LazyLock<::portcullis::__private::dsl::ValueSet> =
                        ::std::sync::LazyLock::new(|| {
                            ::portcullis::__private::dsl::ValueSet::new([#(#values),*])
                        });
                    &VALUES
                })
            }
        }
        CheckedCondition::GreaterThan {
            path: field,
            threshold,
        } => {
            let field = path(field);
            let threshold = float(*threshold);
            quote!(::portcullis::__private::dsl::greater_than(context, #field, #threshold))
        }
        CheckedCondition::HasLabel {
            path: field,
            labels,
        } => {
            let field = path(field);
            quote!(::portcullis::__private::dsl::has_label(context, #field, &[#(#labels),*]))
        }
        CheckedCondition::Always => quote!(true),
        CheckedCondition::All(items) => join(items, &quote!(&&)),
        CheckedCondition::Any(items) => join(items, &quote!(||)),
        CheckedCondition::Not(item) => {
            let item = operand(item);
            quote!(!#item)
        }
    }
}

/// `a op b op c`; the checker makes sure there is at least one item.
fn join(items: &[CheckedCondition], operator: &TokenStream) -> TokenStream {
    let mut items = items.iter().map(operand);
    let first = items.next().unwrap_or_else(|| quote!(true));
    items.fold(first, |joined, item| quote!(#joined #operator #item))
}

/// A condition as the operand of `&&`, `||` or `!`: in parentheses when it is itself a
/// combination (and only then, so the generated code has no needless parentheses).
fn operand(item: &CheckedCondition) -> TokenStream {
    let tokens = condition(item);
    match item {
        CheckedCondition::All(items) | CheckedCondition::Any(items) if items.len() > 1 => {
            quote!((#tokens))
        }
        _ => tokens,
    }
}

fn optional_text(text: Option<&str>) -> TokenStream {
    match text {
        Some(text) => quote!(::std::option::Option::Some(::std::string::String::from(#text))),
        None => quote!(::std::option::Option::None),
    }
}

/// The `labels` of a decision: an empty `Vec` (no allocation) when the rule has none.
fn labels(rule: &CheckedRule) -> TokenStream {
    if rule.rule.labels.is_empty() {
        return quote!(::std::vec::Vec::new());
    }
    let labels = rule.rule.labels.iter();
    quote!(::std::vec![#(::std::string::String::from(#labels)),*])
}

fn decision(rule: &CheckedRule) -> TokenStream {
    let reason = optional_text(rule.rule.reason.as_deref());
    let labels = labels(rule);
    match rule.rule.action {
        Action::Allow if rule.rule.labels.is_empty() => {
            quote!(::portcullis::PolicyDecision::allow())
        }
        Action::Allow => quote! {
            ::portcullis::PolicyDecision::Allow {
                audit: false,
                labels: #labels,
            }
        },
        Action::Deny => quote! {
            ::portcullis::PolicyDecision::Deny {
                reason: #reason,
                policy_id: ::std::option::Option::None,
            }
        },
        Action::Audit => quote! {
            ::portcullis::PolicyDecision::Audit {
                reason: #reason,
                labels: #labels,
            }
        },
        Action::Escalate => quote! {
            ::portcullis::PolicyDecision::Escalate {
                reason: #reason,
                labels: #labels,
            }
        },
        Action::Redact => {
            let redactions = rule.redactions.iter().map(|redaction| {
                let field = &redaction.field;
                let strategy = match redaction.strategy {
                    RedactionStrategy::Mask => quote!(Mask),
                    RedactionStrategy::Remove => quote!(Remove),
                    RedactionStrategy::Replace => quote!(Replace),
                };
                let replacement = optional_text(redaction.replacement.as_deref());
                let pattern = optional_text(redaction.pattern.as_deref());
                quote! {
                    ::portcullis::Redaction {
                        field: ::std::string::String::from(#field),
                        strategy: ::portcullis::RedactionStrategy::#strategy,
                        replacement: #replacement,
                        pattern: #pattern,
                    }
                }
            });
            quote! {
                ::portcullis::PolicyDecision::Redact {
                    redactions: ::std::vec![#(#redactions),*],
                    labels: #labels,
                }
            }
        }
        Action::Transform => {
            let operations = rule.transformation.iter().map(|(field, parts)| {
                let pushes = parts.iter().map(|part| match part {
                    TemplatePart::Text(text) => {
                        let mut chars = text.chars();
                        match (chars.next(), chars.next()) {
                            (Some(single), None) => quote!(out.push(#single);),
                            _ => quote!(out.push_str(#text);),
                        }
                    }
                    TemplatePart::Field(field) => {
                        let field = path(field);
                        quote!(::portcullis::__private::dsl::push_field(&mut out, context, #field);)
                    }
                });
                quote! {
                    ::portcullis::TransformOperation::set(
                        ::std::string::String::from(#field),
                        {
                            let mut out = ::std::string::String::new();
                            #(#pushes)*
                            out
                        },
                    )
                }
            });
            quote! {
                ::portcullis::PolicyDecision::Transform {
                    transformation: ::portcullis::Transformation {
                        operations: ::std::vec![#(#operations),*],
                    },
                    labels: #labels,
                }
            }
        }
    }
}
