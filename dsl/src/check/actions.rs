//! Checking what a rule does: its redactions and its transformation (with its templates).

use portcullis_engine::apply::cached_regex;
use portcullis_engine::path::FieldPath;
use portcullis_engine::{Redaction, RedactionStrategy};
use serde_json::{Map, Value};

use super::{Checker, TemplatePart, child, did_you_mean, element, example_path, list};
use crate::json_kind::JsonKind;
use crate::model::{Action, RuleRedaction, RuleStrategy};
use crate::schema::{Kind, Use, type_path};

const REDACTION_KEYS: [&str; 4] = ["field", "strategy", "replacement", "pattern"];

/// The gist of a regex error: `compile_pattern` (through `cached_regex`) gives the pattern, a caret line and the cause
/// on several lines.
fn pattern_problem(pattern: &str, problem: &str) -> String {
    match problem
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
    {
        Some(cause) => format!("invalid regular expression {pattern:?}: {cause}"),
        None => problem.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// Whether a valid regular expression can match no text at all (`[^\s\S]`, `a\bb`... as far
/// as the syntax shows: an empty class, or no possible length).
fn never_matches(pattern: &str) -> bool {
    regex_syntax::Parser::new()
        .parse(pattern)
        .is_ok_and(|hir| hir.properties().minimum_len().is_none())
}

impl Checker<'_> {
    pub(super) fn redactions(
        &mut self,
        map: &Map<String, Value>,
        action: Option<Action>,
    ) -> (Option<Vec<RuleRedaction>>, Vec<Redaction>) {
        let Some(value) = map.get("redactions") else {
            if action == Some(Action::Redact) {
                self.warn(
                    "",
                    "a \"redact\" rule without \"redactions\" redacts nothing".to_owned(),
                    Some(format!(
                        "add for example \"redactions\": [{{ \"field\": \"{}\", \"strategy\": \"mask\" }}]",
                        example_path(self.point)
                    )),
                );
            }
            return (None, Vec::new());
        };
        if let Some(action) = action
            && action != Action::Redact
        {
            // Checked all the same (the schema describes them whatever the action), then
            // ignored: only `redact` rules use them.
            self.warn(
                "redactions",
                format!("\"redactions\" are only used by \"redact\" rules, and this rule's action is \"{}\": they are ignored", action.as_str()),
                Some("remove them, or set \"action\": \"redact\"".to_owned()),
            );
        }
        let Value::Array(items) = value else {
            self.report(
                "redactions",
                format!(
                    "\"redactions\" must be a list, found {}",
                    JsonKind::of(value)
                ),
                None,
            );
            return (None, Vec::new());
        };
        if items.is_empty() {
            self.report(
                "redactions",
                "\"redactions\" needs at least one redaction".to_owned(),
                None,
            );
            return (None, Vec::new());
        }
        let mut rule_redactions = Vec::new();
        let mut engine_redactions = Vec::new();
        for (index, item) in items.iter().enumerate() {
            if let Some((rule, engine)) = self.redaction(item, &element("redactions", index)) {
                rule_redactions.push(rule);
                engine_redactions.push(engine);
            }
        }
        (Some(rule_redactions), engine_redactions)
    }

    fn redaction(&mut self, value: &Value, at: &str) -> Option<(RuleRedaction, Redaction)> {
        let Value::Object(map) = value else {
            self.report(
                at,
                format!("a redaction is an object, found {}", JsonKind::of(value)),
                Some("write { \"field\": ..., \"strategy\": \"mask\" }".to_owned()),
            );
            return None;
        };
        let mut ok = true;
        for key in map.keys() {
            if !REDACTION_KEYS.contains(&key.as_str()) {
                let help = did_you_mean(key, REDACTION_KEYS).unwrap_or_else(|| {
                    format!("a redaction has the keys {}", list(&REDACTION_KEYS))
                });
                self.report(
                    &child(at, key),
                    format!("unknown key \"{key}\""),
                    Some(help),
                );
                ok = false;
            }
        }
        let strategy = match map.get("strategy") {
            None => {
                self.report(
                    at,
                    "the redaction has no \"strategy\"".to_owned(),
                    Some("add \"strategy\": \"mask\", \"remove\" or \"replace\"".to_owned()),
                );
                None
            }
            Some(Value::String(name)) => match name.as_str() {
                "mask" => Some(RuleStrategy::Mask),
                "remove" => Some(RuleStrategy::Remove),
                "replace" => Some(RuleStrategy::Replace),
                other => {
                    let help = did_you_mean(other, ["mask", "remove", "replace"])
                        .unwrap_or_else(|| "use \"mask\", \"remove\" or \"replace\"".to_owned());
                    self.report(
                        &child(at, "strategy"),
                        format!("unknown strategy \"{other}\""),
                        Some(help),
                    );
                    None
                }
            },
            Some(other) => {
                self.report(
                    &child(at, "strategy"),
                    format!(
                        "\"strategy\" must be a string, found {}",
                        JsonKind::of(other)
                    ),
                    Some("use \"mask\", \"remove\" or \"replace\"".to_owned()),
                );
                None
            }
        };
        let field = match map.get("field") {
            None => {
                self.report(
                    at,
                    "the redaction has no \"field\"".to_owned(),
                    Some(format!(
                        "add \"field\": a dotted path such as \"{}\"",
                        example_path(self.point)
                    )),
                );
                None
            }
            Some(Value::String(text)) => {
                let field_at = child(at, "field");
                self.path(text, &field_at, Use::Write).map(|(path, typed)| {
                    let kind = typed.kind;
                    match strategy {
                        Some(RuleStrategy::Remove) if !typed.removable => {
                            self.warn(
                                &field_at,
                                format!("\"{path}\" is a required part of the context and cannot be removed: applying this redaction is an evaluation error"),
                                Some("remove a list element, a key of \"arguments\" or an extra key of \"metadata\"; to hide text, use \"mask\"".to_owned()),
                            );
                            path
                        }
                        Some(RuleStrategy::Mask | RuleStrategy::Replace)
                            if !matches!(kind, Kind::Text | Kind::Any) =>
                        {
                            let name = if strategy == Some(RuleStrategy::Mask) { "mask" } else { "replace" };
                            self.warn(
                                &field_at,
                                format!("\"{name}\" changes text, but \"{path}\" is {}: applying this redaction is an evaluation error", kind.describe()),
                                Some(match kind {
                                    Kind::List => format!("redact \"{path}.*.content\""),
                                    Kind::Object => format!("redact \"{path}.content\""),
                                    _ => "redact a text field".to_owned(),
                                }),
                            );
                            path
                        }
                        _ => path,
                    }
                })
            }
            Some(other) => {
                self.report(
                    &child(at, "field"),
                    format!("\"field\" must be a string, found {}", JsonKind::of(other)),
                    None,
                );
                None
            }
        };
        let replacement = match map.get("replacement") {
            None => None,
            Some(Value::String(text)) => {
                if strategy == Some(RuleStrategy::Remove) {
                    self.warn(
                        &child(at, "replacement"),
                        "\"remove\" uses no \"replacement\": it is ignored".to_owned(),
                        Some("remove it, or use \"mask\"".to_owned()),
                    );
                }
                Some(text.clone())
            }
            Some(other) => {
                self.report(
                    &child(at, "replacement"),
                    format!(
                        "\"replacement\" must be a string, found {}",
                        JsonKind::of(other)
                    ),
                    None,
                );
                ok = false;
                None
            }
        };
        let pattern = match map.get("pattern") {
            None => {
                if strategy == Some(RuleStrategy::Replace) {
                    self.warn(
                        at,
                        "the \"replace\" strategy needs a \"pattern\": applying this redaction is an evaluation error".to_owned(),
                        Some("add \"pattern\": a regular expression such as \"\\\\d{3}-\\\\d{2}-\\\\d{4}\"".to_owned()),
                    );
                }
                None
            }
            Some(Value::String(pattern)) => {
                if matches!(strategy, Some(RuleStrategy::Mask | RuleStrategy::Remove)) {
                    self.warn(
                        &child(at, "pattern"),
                        "only the \"replace\" strategy uses a \"pattern\": it is ignored"
                            .to_owned(),
                        Some("remove it, or use \"strategy\": \"replace\"".to_owned()),
                    );
                }
                if let Err(problem) = cached_regex(pattern) {
                    // `cached_regex` compiles with `compile_pattern`'s size limits, and keeps
                    // the result for the engine, which compiles the pattern again when it
                    // applies the redaction.
                    self.report(
                        &child(at, "pattern"),
                        pattern_problem(pattern, &problem),
                        Some("fix the regular expression (Rust `regex` syntax)".to_owned()),
                    );
                    ok = false;
                } else if strategy == Some(RuleStrategy::Replace) && never_matches(pattern) {
                    self.warn(
                        &child(at, "pattern"),
                        format!("the regular expression {pattern:?} can never match, so the redaction changes nothing"),
                        Some("fix the regular expression".to_owned()),
                    );
                }
                Some(pattern.clone())
            }
            Some(other) => {
                self.report(
                    &child(at, "pattern"),
                    format!(
                        "\"pattern\" must be a string, found {}",
                        JsonKind::of(other)
                    ),
                    None,
                );
                ok = false;
                None
            }
        };
        let (strategy, path) = (strategy?, field?);
        if !ok {
            return None;
        }
        let engine_strategy = match strategy {
            RuleStrategy::Mask => RedactionStrategy::Mask,
            RuleStrategy::Remove => RedactionStrategy::Remove,
            RuleStrategy::Replace => RedactionStrategy::Replace,
        };
        Some((
            RuleRedaction {
                field: path.to_string(),
                strategy,
                replacement: replacement.clone(),
                pattern: pattern.clone(),
            },
            Redaction {
                field: path.to_string(),
                strategy: engine_strategy,
                replacement,
                pattern,
            },
        ))
    }

    #[allow(clippy::type_complexity)]
    pub(super) fn transformation(
        &mut self,
        map: &Map<String, Value>,
        action: Option<Action>,
    ) -> (
        Option<Vec<(String, String)>>,
        Vec<(String, Vec<TemplatePart>)>,
    ) {
        let Some(value) = map.get("transformation") else {
            if action == Some(Action::Transform) {
                self.warn(
                    "",
                    "a \"transform\" rule without a \"transformation\" changes nothing".to_owned(),
                    Some(format!(
                        "add for example \"transformation\": {{ \"{}\": \"[checked] {{{{{}}}}}\" }}",
                        example_path(self.point),
                        example_path(self.point)
                    )),
                );
            }
            return (None, Vec::new());
        };
        if let Some(action) = action
            && action != Action::Transform
        {
            // Checked all the same (the schema describes it whatever the action), then
            // ignored: only `transform` rules use it.
            self.warn(
                "transformation",
                format!("\"transformation\" is only used by \"transform\" rules, and this rule's action is \"{}\": it is ignored", action.as_str()),
                Some("remove it, or set \"action\": \"transform\"".to_owned()),
            );
        }
        let Value::Object(entries) = value else {
            self.report(
                "transformation",
                format!(
                    "\"transformation\" must be an object of field paths to templates, found {}",
                    JsonKind::of(value)
                ),
                None,
            );
            return (None, Vec::new());
        };
        if entries.is_empty() {
            self.warn(
                "transformation",
                "the transformation changes nothing".to_owned(),
                Some("add \"<field path>\": \"<template>\" entries".to_owned()),
            );
            return (Some(Vec::new()), Vec::new());
        }
        let mut written = Vec::new();
        let mut templates = Vec::new();
        // In the rule's key order when it is known (the operations keep the file's order, as
        // the reference implementation emits them), else in the map's.
        let entries: Vec<(&String, &Value)> = match &self.transformation_order {
            Some(order) if order.len() == entries.len() => order
                .iter()
                .filter_map(|key| entries.get_key_value(key))
                .collect(),
            _ => entries.iter().collect(),
        };
        for (field, template) in entries {
            let at = child("transformation", field);
            let target = self.path(field, &at, Use::Write).map(|(path, typed)| {
                let kind = typed.kind;
                if matches!(kind, Kind::Text | Kind::Role | Kind::Any) {
                    path
                } else {
                    self.warn(
                        &at,
                        format!(
                            "a template gives text, but \"{path}\" is {}: applying this transformation is an evaluation error",
                            kind.describe()
                        ),
                        Some(match kind {
                            Kind::List => {
                                format!("transform \"{path}.-1.content\" or another text field")
                            }
                            Kind::Object => format!("transform \"{path}.content\""),
                            _ => "transform a text field".to_owned(),
                        }),
                    );
                    path
                }
            });
            let parts = match template {
                Value::String(text) => self.template(text, &at),
                other => {
                    self.report(
                        &at,
                        format!("a template must be a string, found {}", JsonKind::of(other)),
                        None,
                    );
                    None
                }
            };
            if let (Some(path), Some(parts), Value::String(text)) = (target, parts, template) {
                written.push((field.clone(), text.clone()));
                templates.push((path.to_string(), parts));
            }
        }
        (Some(written), templates)
    }

    fn template(&mut self, text: &str, at: &str) -> Option<Vec<TemplatePart>> {
        let mut parts = Vec::new();
        let mut rest = text;
        let mut ok = true;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(TemplatePart::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                // Not a placeholder: the text stays as it is written.
                self.warn(
                    at,
                    format!("template {text:?}: a \"{{{{\" is never closed, so it is kept as text"),
                    Some("close the placeholder with \"}}\"".to_owned()),
                );
                parts.push(TemplatePart::Text(rest[open..].to_owned()));
                rest = "";
                break;
            };
            let inner = after[..close].trim();
            if inner.is_empty() {
                // A placeholder of no field shows nothing.
                self.warn(
                    at,
                    format!("template {text:?}: a placeholder is empty, so it shows nothing"),
                    Some("write a field path between the braces, such as {{tool_name}}".to_owned()),
                );
            } else {
                match FieldPath::parse(inner) {
                    Ok(path) if path.has_wildcard() => {
                        self.report(
                            at,
                            format!("bad template {text:?}: the placeholder \"{inner}\" may select several values"),
                            Some("a placeholder shows one value: use an index such as \"messages.-1.content\" instead of \"*\"".to_owned()),
                        );
                        ok = false;
                    }
                    Ok(path) => match type_path(self.point, &path, Use::Read) {
                        Ok(_) => parts.push(TemplatePart::Field(path)),
                        Err(problem) => {
                            self.report(
                                at,
                                format!("bad template {text:?}: {}", problem.message),
                                problem.help,
                            );
                            ok = false;
                        }
                    },
                    Err(error) => {
                        self.report(at, format!("bad template {text:?}: {error}"), None);
                        ok = false;
                    }
                }
            }
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Text(rest.to_owned()));
        }
        ok.then_some(parts)
    }
}
