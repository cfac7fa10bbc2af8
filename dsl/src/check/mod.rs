//! The checker: rule source → a [`CheckedRule`], or every problem at once.
//!
//! The runtime policies and the `dsl_policy!` macro both load rules through
//! [`check_source`], so a rule one accepts the other accepts, with the same messages.
//!
//! One module per part: `problems` holds what the checker reports; this module the entry
//! points, the checked rule and the rule's frame (keys, action, paths); `conditions` checks
//! conditions, `actions` checks redactions and transformations.

mod actions;
mod conditions;
mod locate;
mod problems;

use std::fmt;

use portcullis_engine::path::FieldPath;
use portcullis_engine::{InterceptionPoint, PolicyMode, Redaction};
use serde_json::{Map, Value};

pub use problems::{Location, Problem, Problems, Severity, Warning};

use crate::json_kind::JsonKind;
use crate::model::{Action, Rule, RuleMode};
use crate::schema::{Kind, Typed, Use, type_path};
use crate::suggest::closest;

/// A rule that passed the checker for one interception point, with its paths parsed, its
/// needles lower-cased and its templates split.
#[derive(Debug, Clone)]
pub struct CheckedRule {
    pub(crate) rule: Rule,
    pub(crate) point: InterceptionPoint,
    pub(crate) origin: String,
    pub(crate) condition: CheckedCondition,
    pub(crate) redactions: Vec<Redaction>,
    pub(crate) transformation: Vec<(String, Vec<TemplatePart>)>,
    pub(crate) warnings: Vec<Warning>,
}

impl CheckedRule {
    /// What the checker found beyond the schema without refusing the rule, in the order of
    /// the rule's parts: a condition that can never hold, a change that breaks the context
    /// when applied (an evaluation error at run time), a part the action ignores, a
    /// redaction pattern that can never match. Empty for a clean rule.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Strict loading: the rule itself when it has no warning, otherwise every warning as an
    /// error.
    ///
    /// ```
    /// use portcullis_dsl::check_source;
    /// use portcullis_engine::InterceptionPoint;
    ///
    /// let rule = check_source(
    ///     r#"{ "condition": { "field": "messages.0.role", "equals": "USER" }, "action": "deny" }"#,
    ///     "rules/roles.json",
    ///     InterceptionPoint::Input,
    /// )
    /// .unwrap();
    /// assert_eq!(rule.warnings().len(), 1);
    /// let problems = rule.deny_warnings().unwrap_err();
    /// assert!(problems.to_string().contains("can never match"));
    /// ```
    pub fn deny_warnings(self) -> Result<CheckedRule, Problems> {
        if self.warnings.is_empty() {
            return Ok(self);
        }
        Err(Problems::errors(
            self.warnings
                .into_iter()
                .map(|mut warning| {
                    warning.severity = Severity::Error;
                    warning
                })
                .collect(),
        ))
    }

    /// The rule as written.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The interception point it was checked for.
    pub fn point(&self) -> InterceptionPoint {
        self.point
    }

    /// Where it came from, as given to the checker.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Whether its decisions are enforced or only monitored (the `mode` extension).
    pub fn mode(&self) -> PolicyMode {
        match self.rule.mode.unwrap_or_default() {
            RuleMode::Enforce => PolicyMode::Enforce,
            RuleMode::Monitor => PolicyMode::Monitor,
        }
    }

    /// The redactions of a `redact` rule, as the decision carries them.
    pub fn redactions(&self) -> &[Redaction] {
        &self.redactions
    }
}

/// A checked condition: paths parsed, needles lower-cased.
#[derive(Debug, Clone)]
pub(crate) enum CheckedCondition {
    Contains {
        path: FieldPath,
        needles: Vec<String>,
    },
    Equals {
        path: FieldPath,
        value: Value,
    },
    NotIn {
        path: FieldPath,
        values: Vec<Value>,
    },
    GreaterThan {
        path: FieldPath,
        threshold: f64,
    },
    /// `contains` on `metadata.session.labels`: a label equals one of `labels`, exactly.
    HasLabel {
        path: FieldPath,
        labels: Vec<String>,
    },
    Always,
    All(Vec<CheckedCondition>),
    Any(Vec<CheckedCondition>),
    Not(Box<CheckedCondition>),
}

/// A piece of a transformation template.
#[derive(Debug, Clone)]
pub(crate) enum TemplatePart {
    Text(String),
    Field(FieldPath),
}

/// Parses `source` as a rule file and checks it for `point`.
///
/// `origin` names the source in messages (usually the file's path). On failure, every problem
/// is returned: a JSON syntax error (with line and column) stops the check, any other problem
/// does not.
///
/// ```
/// use portcullis_dsl::check_source;
/// use portcullis_engine::InterceptionPoint;
///
/// let problems = check_source(
///     r#"{ "condition": { "field": "tool_name", "contians": ["rm"] } }"#,
///     "rules/shell.json",
///     InterceptionPoint::Input,
/// )
/// .unwrap_err();
/// let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
/// assert_eq!(messages, [
///     r#"rules/shell.json:1:40: at condition.contians: unknown condition operator "contians"; did you mean "contains"?"#,
///     r#"rules/shell.json: the rule has no "action"; add "action": one of allow, deny, audit, redact, transform, escalate"#,
/// ]);
/// ```
pub fn check_source(
    source: &str,
    origin: &str,
    point: InterceptionPoint,
) -> Result<CheckedRule, Problems> {
    match serde_json::from_str::<Value>(source) {
        Ok(value) => {
            // Where each part of the rule starts is worked out only when a finding needs it:
            // a clean rule loads without the scan.
            let mut positions = None;
            let mut place = |findings: &mut [Problem]| {
                if findings.is_empty() {
                    return;
                }
                let positions = positions.get_or_insert_with(|| locate::positions(source));
                for finding in findings {
                    if let Some(path) = finding.json_path() {
                        finding.position = positions.get(path).copied();
                    }
                }
            };
            // Only a rule with a transformation needs its text read again for the key order.
            let order = value
                .get("transformation")
                .and_then(|_| transformation_order(source));
            match check_ordered(&value, origin, point, order) {
                Ok(mut rule) => {
                    place(&mut rule.warnings);
                    Ok(rule)
                }
                Err(mut problems) => {
                    place(&mut problems.problems);
                    place(&mut problems.warnings);
                    Err(problems)
                }
            }
        }
        Err(error) => {
            let mut message = error.to_string();
            // serde_json appends " at line L column C"; the location says it already.
            if let Some(at) = message.rfind(" at line ") {
                message.truncate(at);
            }
            Err(Problems::errors(vec![Problem::new(
                origin,
                Location::Text {
                    line: error.line().max(1),
                    column: error.column().max(1),
                },
                format!("invalid JSON: {message}"),
                Some("a rule file holds one JSON object".to_owned()),
            )]))
        }
    }
}

/// Checks a rule already parsed as JSON for `point`.
///
/// `transformation` entries come in the order the map iterates them: sorted by key, unless
/// `serde_json` is built with its `preserve_order` feature. [`check_source`] reads the order
/// from the text, and [`check_rule`] from the typed rule.
pub fn check_value(
    value: &Value,
    origin: &str,
    point: InterceptionPoint,
) -> Result<CheckedRule, Problems> {
    check_ordered(value, origin, point, None)
}

/// The keys of the rule's `transformation` object in the order the text writes them, when the
/// text is an object whose `transformation` is an object.
fn transformation_order(source: &str) -> Option<Vec<String>> {
    use serde::Deserialize;
    use serde::de::{IgnoredAny, MapAccess, Visitor};

    struct Keys(Vec<String>);

    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct KeysVisitor;
            impl<'de> Visitor<'de> for KeysVisitor {
                type Value = Keys;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let mut keys: Vec<String> = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<IgnoredAny>()?;
                        if !keys.contains(&key) {
                            keys.push(key);
                        }
                    }
                    Ok(Keys(keys))
                }
            }
            deserializer.deserialize_map(KeysVisitor)
        }
    }

    #[derive(Deserialize)]
    struct Outline {
        transformation: Option<Keys>,
    }

    serde_json::from_str::<Outline>(source)
        .ok()?
        .transformation
        .map(|keys| keys.0)
}

/// [`check_value`], with the `transformation` keys in `order` when it is given.
fn check_ordered(
    value: &Value,
    origin: &str,
    point: InterceptionPoint,
    order: Option<Vec<String>>,
) -> Result<CheckedRule, Problems> {
    let mut checker = Checker {
        origin,
        point,
        problems: Vec::new(),
        warnings: Vec::new(),
        transformation_order: order,
    };
    let checked = checker.rule(value);
    match checked {
        Some(mut rule) if checker.problems.is_empty() => {
            rule.warnings = checker.warnings;
            Ok(rule)
        }
        _ => {
            if checker.problems.is_empty() {
                // Defensive: a part was rejected without a message.
                checker.report("", "the rule is invalid".to_owned(), None);
            }
            Err(Problems {
                problems: checker.problems,
                warnings: checker.warnings,
            })
        }
    }
}

/// Checks a typed rule for `point` (for rules built in Rust).
pub fn check_rule(
    rule: &Rule,
    origin: &str,
    point: InterceptionPoint,
) -> Result<CheckedRule, Problems> {
    let order = rule
        .transformation
        .as_ref()
        .map(|templates| templates.iter().map(|(field, _)| field.clone()).collect());
    match serde_json::to_value(rule) {
        Ok(value) => check_ordered(&value, origin, point, order),
        Err(error) => Err(Problems::errors(vec![Problem::new(
            origin,
            Location::Path(String::new()),
            format!("the rule cannot be written as JSON: {error}"),
            None,
        )])),
    }
}

const RULE_KEYS: [&str; 7] = [
    "condition",
    "action",
    "reason",
    "redactions",
    "transformation",
    "mode",
    "labels",
];

fn child(at: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !plain {
        format!("{at}[{}]", Value::String(key.to_owned()))
    } else if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

fn element(at: &str, index: usize) -> String {
    format!("{at}[{index}]")
}

fn list(names: &[&str]) -> String {
    names.join(", ")
}

fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    closest(word, candidates).map(|name| format!("did you mean \"{name}\"?"))
}

struct Checker<'o> {
    origin: &'o str,
    point: InterceptionPoint,
    problems: Vec<Problem>,
    warnings: Vec<Warning>,
    /// The keys of `transformation` in the order the rule writes them, when known.
    transformation_order: Option<Vec<String>>,
}

impl Checker<'_> {
    fn report(&mut self, at: &str, message: String, help: Option<String>) {
        self.problems.push(Problem::new(
            self.origin,
            Location::Path(at.to_owned()),
            message,
            help,
        ));
    }

    /// Notes a warning: the rule still loads.
    fn warn(&mut self, at: &str, message: String, help: Option<String>) {
        let mut warning = Problem::new(self.origin, Location::Path(at.to_owned()), message, help);
        warning.severity = Severity::Warning;
        self.warnings.push(warning);
    }

    fn rule(&mut self, value: &Value) -> Option<CheckedRule> {
        let Value::Object(map) = value else {
            self.report(
                "",
                format!("a rule is a JSON object, found {}", JsonKind::of(value)),
                Some("write { \"condition\": ..., \"action\": ... }".to_owned()),
            );
            return None;
        };
        for key in map.keys() {
            if !RULE_KEYS.contains(&key.as_str()) {
                let help = did_you_mean(key, RULE_KEYS)
                    .unwrap_or_else(|| format!("a rule has the keys {}", list(&RULE_KEYS)));
                self.report(key, format!("unknown key \"{key}\""), Some(help));
            }
        }

        let condition = match map.get("condition") {
            Some(condition) => self.condition(condition, "condition"),
            None => {
                self.report(
                    "",
                    "the rule has no \"condition\"".to_owned(),
                    Some("add one, for example \"condition\": { \"always\": true }".to_owned()),
                );
                None
            }
        };
        let action = self.action(map);
        let reason = match map.get("reason") {
            None => None,
            Some(Value::String(reason)) => Some(reason.clone()),
            Some(other) => {
                self.report(
                    "reason",
                    format!("\"reason\" must be a string, found {}", JsonKind::of(other)),
                    None,
                );
                None
            }
        };
        let mode = match map.get("mode") {
            None => None,
            Some(Value::String(mode)) if mode == "enforce" => Some(RuleMode::Enforce),
            Some(Value::String(mode)) if mode == "monitor" => Some(RuleMode::Monitor),
            Some(other) => {
                self.report(
                    "mode",
                    format!("unknown mode {other}"),
                    Some("use \"enforce\" (the default) or \"monitor\"".to_owned()),
                );
                None
            }
        };
        let labels = self.labels(map, action);
        let (redactions, engine_redactions) = self.redactions(map, action);
        let (transformation, templates) = self.transformation(map, action);

        let rule = Rule {
            condition: condition.as_ref()?.0.clone(),
            action: action?,
            reason,
            redactions,
            transformation,
            mode,
            labels,
        };
        Some(CheckedRule {
            rule,
            point: self.point,
            origin: self.origin.to_owned(),
            condition: condition?.1,
            redactions: engine_redactions,
            transformation: templates,
            // Filled in by `check_ordered` once every part is checked.
            warnings: Vec::new(),
        })
    }

    /// The `labels` extension: a list of non-empty strings. On a `deny` they are a warning:
    /// a denied call changes no session, so they would never be added.
    fn labels(&mut self, map: &Map<String, Value>, action: Option<Action>) -> Vec<String> {
        let Some(value) = map.get("labels") else {
            return Vec::new();
        };
        let Value::Array(items) = value else {
            self.report(
                "labels",
                format!(
                    "\"labels\" must be a list of strings, found {}",
                    JsonKind::of(value)
                ),
                Some("write \"labels\": [\"untrusted\"]".to_owned()),
            );
            return Vec::new();
        };
        let mut labels = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match item {
                Value::String(label) if !label.is_empty() => labels.push(label.clone()),
                Value::String(_) => {
                    self.report(
                        &element("labels", index),
                        "a label cannot be empty".to_owned(),
                        None,
                    );
                }
                other => {
                    self.report(
                        &element("labels", index),
                        format!("a label is a string, found {}", JsonKind::of(other)),
                        None,
                    );
                }
            }
        }
        if action == Some(Action::Deny) && !labels.is_empty() {
            self.warn(
                "labels",
                "a deny rule's labels are never added: a denied call changes no session".to_owned(),
                Some(
                    "remove \"labels\", or put them on a rule that lets the call proceed"
                        .to_owned(),
                ),
            );
        }
        labels
    }

    fn action(&mut self, map: &Map<String, Value>) -> Option<Action> {
        let names: Vec<&str> = Action::ALL.iter().map(|action| action.as_str()).collect();
        match map.get("action") {
            None => {
                self.report(
                    "",
                    "the rule has no \"action\"".to_owned(),
                    Some(format!("add \"action\": one of {}", list(&names))),
                );
                None
            }
            Some(Value::String(name)) => {
                match Action::ALL
                    .into_iter()
                    .find(|action| action.as_str() == name)
                {
                    Some(action) => Some(action),
                    None => {
                        let help = did_you_mean(name, names.iter().copied())
                            .unwrap_or_else(|| format!("use one of {}", list(&names)));
                        self.report("action", format!("unknown action \"{name}\""), Some(help));
                        None
                    }
                }
            }
            Some(other) => {
                self.report(
                    "action",
                    format!("\"action\" must be a string, found {}", JsonKind::of(other)),
                    Some(format!("use one of {}", list(&names))),
                );
                None
            }
        }
    }

    fn field(
        &mut self,
        map: &Map<String, Value>,
        at: &str,
        operator: &str,
        usage: Use,
    ) -> Option<(FieldPath, Kind)> {
        let field_at = child(at, "field");
        let text = match map.get("field") {
            Some(Value::String(text)) => text,
            Some(other) => {
                self.report(
                    &field_at,
                    format!("\"field\" must be a string, found {}", JsonKind::of(other)),
                    Some("write a dotted path such as \"messages.-1.content\"".to_owned()),
                );
                return None;
            }
            None => {
                self.report(
                    at,
                    format!("\"{operator}\" needs a \"field\""),
                    Some(format!(
                        "add \"field\": a dotted path such as \"{}\"",
                        example_path(self.point)
                    )),
                );
                return None;
            }
        };
        self.path(text, &field_at, usage)
            .map(|(path, typed)| (path, typed.kind))
    }

    fn path(&mut self, text: &str, at: &str, usage: Use) -> Option<(FieldPath, Typed)> {
        let path = match FieldPath::parse(text) {
            Ok(path) => path,
            Err(error) => {
                self.report(
                    at,
                    error.to_string(),
                    Some(format!(
                        "write a dotted path such as \"{}\"",
                        example_path(self.point)
                    )),
                );
                return None;
            }
        };
        match type_path(self.point, &path, usage) {
            Ok(typed) => Some((path, typed)),
            Err(problem) => {
                self.report(at, problem.message, problem.help);
                None
            }
        }
    }
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn example_path(point: InterceptionPoint) -> &'static str {
    match point {
        InterceptionPoint::Input => "messages.-1.content",
        InterceptionPoint::ToolCall => "arguments.query",
        InterceptionPoint::ToolResult => "content",
        InterceptionPoint::Output => "response.content",
    }
}
