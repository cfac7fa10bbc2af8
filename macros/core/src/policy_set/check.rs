//! Stage 2: known keys, each once, with a value of the right shape.

use std::collections::HashMap;

use proc_macro2::Span;
use syn::Expr;

use super::parse::Entry;
use crate::diagnostics::Errors;
use crate::point::PointNames;
use portcullis_engine::InterceptionPoint;

/// `on_error`'s value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// `deny`: fail closed.
    Deny,
    /// `allow`: fail open.
    Allow,
}

/// A checked `policy_set!`.
#[derive(Default)]
pub struct PolicySetModel {
    /// `on_error`, with the span of its value.
    pub on_error: Option<(OnError, Span)>,
    /// The policies of each point, in declared order.
    pub policies: Vec<(InterceptionPoint, Vec<Expr>)>,
}

const KEYS: &str = "`on_error`, `input`, `tool_call` and `output`";

/// Checks the entries, adding one error per problem to `errors`; keeps what is valid.
pub(crate) fn check(entries: Vec<Entry>, errors: &mut Errors) -> PolicySetModel {
    let mut model = PolicySetModel::default();
    let mut seen: HashMap<String, Span> = HashMap::new();
    for Entry { key, value } in entries {
        let name = key.to_string();
        let is_known = name == "on_error" || InterceptionPoint::from_name(&name).is_some();
        if !is_known {
            let hint = suggestion(&name)
                .map(|known| format!(" (did you mean `{known}`?)"))
                .unwrap_or_default();
            errors.spanned(
                &key,
                format!("unknown key `{name}` in `policy_set!`{hint}: the keys are {KEYS}"),
            );
            continue;
        }
        if seen.insert(name.clone(), key.span()).is_some() {
            errors.spanned(
                &key,
                format!("`{name}` is given twice in `policy_set!`: give each key once"),
            );
            continue;
        }
        match InterceptionPoint::from_name(&name) {
            Some(point) => match value {
                Expr::Array(array) => {
                    model
                        .policies
                        .push((point, array.elems.into_iter().collect()));
                }
                other => errors.spanned(
                    other,
                    format!(
                        "`{name}` takes a list of {}: `{name}: [..]`",
                        point.policies_noun()
                    ),
                ),
            },
            None => match on_error_value(&value) {
                Some(on_error) => {
                    model.on_error = Some((on_error, syn::spanned::Spanned::span(&value)))
                }
                None => errors.spanned(
                    &value,
                    "`on_error` is `deny` (a failing policy fails the call) or `allow` \
                     (a failing policy is skipped)",
                ),
            },
        }
    }
    model
}

fn on_error_value(value: &Expr) -> Option<OnError> {
    let Expr::Path(path) = value else {
        return None;
    };
    if path.qself.is_some() || !path.attrs.is_empty() {
        return None;
    }
    let ident = path.path.get_ident()?;
    if ident == "deny" {
        Some(OnError::Deny)
    } else if ident == "allow" {
        Some(OnError::Allow)
    } else {
        None
    }
}

/// The known key a typo most likely meant: the one at the smallest edit distance, if close.
fn suggestion(name: &str) -> Option<&'static str> {
    ["on_error", "input", "tool_call", "output"]
        .into_iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, known)| *distance <= known.len() / 3 + 1)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_keys_only() {
        assert_eq!(suggestion("inptu"), Some("input"));
        assert_eq!(suggestion("toolcall"), Some("tool_call"));
        assert_eq!(suggestion("on_eror"), Some("on_error"));
        assert_eq!(suggestion("policies"), None);
    }
}
