//! The checker: rule source → a [`CheckedRule`], or every problem at once.
//!
//! The runtime policies and the `dsl_policy!` macro both load rules through
//! [`check_source`], so a rule one accepts the other accepts, with the same messages.

use std::fmt;

use portcullis_engine::apply::cached_regex;
use portcullis_engine::path::FieldPath;
use portcullis_engine::{InterceptionPoint, PolicyMode, Redaction, RedactionStrategy};
use serde_json::{Map, Value};

use crate::json_kind::JsonKind;
use crate::model::{Action, Condition, Rule, RuleMode, RuleRedaction, RuleStrategy};
use crate::schema::{Kind, Typed, Use, type_path};
use crate::suggest::closest;

/// Where a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// In the JSON text (syntax errors): 1-based line and column.
    Text {
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
    },
    /// At a part of the rule, as a JSON path from the rule's root (`condition.all[1].field`);
    /// empty for the rule as a whole.
    Path(String),
}

/// How serious a finding of the checker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The rule cannot be loaded: bad JSON, a shape the schema rejects, a path that cannot
    /// exist in the point's context, an invalid regular expression.
    Error,
    /// The rule loads and decides as written, but something in it is surely not meant: a
    /// condition that can never hold, a change that breaks the context when applied (an
    /// evaluation error at run time), a part the action ignores, a pattern that never matches.
    /// Strict loading ([`CheckedRule::deny_warnings`], `DslInputPolicy::new_strict`) turns
    /// warnings into errors.
    Warning,
}

impl Severity {
    /// `"error"` or `"warning"`, as compilers print them.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding of the checker about a rule: where it is, what is wrong, what to do, and how
/// serious it is ([`severity`](Self::severity)). Errors come in [`Problems`]; warnings of a
/// rule that loads come from [`CheckedRule::warnings`] (and from the policies' `warnings()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    origin: String,
    location: Location,
    message: String,
    help: Option<String>,
    severity: Severity,
}

/// A finding that does not stop a rule from loading: a [`Problem`] whose
/// [`severity`](Problem::severity) is [`Severity::Warning`].
///
/// ```
/// use portcullis_dsl::{DslInputPolicy, Severity};
///
/// // Valid under the schema, so it loads, but a role is lower case: it can never hold.
/// let policy = DslInputPolicy::from_source(
///     "roles",
///     r#"{ "condition": { "field": "messages.0.role", "equals": "USER" }, "action": "deny" }"#,
///     "rules/roles.json",
/// )?;
/// let warning = &policy.warnings()[0];
/// assert_eq!(warning.severity(), Severity::Warning);
/// assert_eq!(warning.json_path(), Some("condition.equals"));
/// assert!(warning.message().contains("can never match"));
///
/// // Strict loading refuses it.
/// assert!(DslInputPolicy::from_source_strict(
///     "roles",
///     r#"{ "condition": { "field": "messages.0.role", "equals": "USER" }, "action": "deny" }"#,
///     "rules/roles.json",
/// ).is_err());
/// # Ok::<(), portcullis_dsl::DslError>(())
/// ```
pub type Warning = Problem;

impl Problem {
    fn new(origin: &str, location: Location, message: String, help: Option<String>) -> Self {
        Problem {
            origin: origin.to_owned(),
            location,
            message,
            help,
            severity: Severity::Error,
        }
    }

    /// Whether this is an error or a warning.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// The file (or other origin) the rule came from, as given to the checker.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Where the problem is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Line and column (1-based) of a JSON syntax error.
    pub fn line_column(&self) -> Option<(usize, usize)> {
        match self.location {
            Location::Text { line, column } => Some((line, column)),
            Location::Path(_) => None,
        }
    }

    /// The JSON path of the offending part (empty for the whole rule); `None` for syntax errors.
    pub fn json_path(&self) -> Option<&str> {
        match &self.location {
            Location::Path(path) => Some(path),
            Location::Text { .. } => None,
        }
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What to do about it.
    pub fn help(&self) -> Option<&str> {
        self.help.as_deref()
    }
}

/// `origin:line:column: message` for syntax errors, `origin: at path: message` otherwise,
/// followed by `; help` when there is one.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Location::Text { line, column } => {
                write!(f, "{}:{line}:{column}: {}", self.origin, self.message)?;
            }
            Location::Path(path) if path.is_empty() => {
                write!(f, "{}: {}", self.origin, self.message)?;
            }
            Location::Path(path) => write!(f, "{}: at {path}: {}", self.origin, self.message)?,
        }
        if let Some(help) = &self.help {
            write!(f, "; {help}")?;
        }
        Ok(())
    }
}

/// Every error found in one rule (never empty), and the warnings found along.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    problems: Vec<Problem>,
    warnings: Vec<Warning>,
}

impl Problems {
    fn errors(problems: Vec<Problem>) -> Self {
        Problems {
            problems,
            warnings: Vec::new(),
        }
    }

    /// The warnings the checker found besides the errors (what would remain once they are
    /// fixed), for tools that show everything at once.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The problems, in the order of the rule's parts.
    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.problems.iter()
    }

    /// How many there are (at least one).
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// Always `false`: there is at least one problem.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems.
    pub fn into_vec(self) -> Vec<Problem> {
        self.problems
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a Problem;
    type IntoIter = std::slice::Iter<'a, Problem>;

    fn into_iter(self) -> Self::IntoIter {
        self.problems.iter()
    }
}

/// One error per line (the warnings are not shown: see [`Problems::warnings`]).
impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, problem) in self.problems.iter().enumerate() {
            if at > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

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
                .map(|warning| Problem {
                    severity: Severity::Error,
                    ..warning
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
///     r#"rules/shell.json: at condition.contians: unknown condition operator "contians"; did you mean "contains"?"#,
///     r#"rules/shell.json: the rule has no "action"; add "action": one of allow, deny, audit, redact, transform"#,
/// ]);
/// ```
pub fn check_source(
    source: &str,
    origin: &str,
    point: InterceptionPoint,
) -> Result<CheckedRule, Problems> {
    match serde_json::from_str::<Value>(source) {
        Ok(value) => check_ordered(&value, origin, point, transformation_order(source)),
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

const RULE_KEYS: [&str; 6] = [
    "condition",
    "action",
    "reason",
    "redactions",
    "transformation",
    "mode",
];
const FIELD_OPERATORS: [&str; 4] = ["contains", "equals", "not_in", "greater_than"];
const OPERATORS: [&str; 8] = [
    "contains",
    "equals",
    "not_in",
    "greater_than",
    "always",
    "all",
    "any",
    "not",
];
const REDACTION_KEYS: [&str; 4] = ["field", "strategy", "replacement", "pattern"];

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
        let (redactions, engine_redactions) = self.redactions(map, action);
        let (transformation, templates) = self.transformation(map, action);

        let rule = Rule {
            condition: condition.as_ref()?.0.clone(),
            action: action?,
            reason,
            redactions,
            transformation,
            mode,
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

    fn condition(&mut self, value: &Value, at: &str) -> Option<(Condition, CheckedCondition)> {
        let Value::Object(map) = value else {
            self.report(
                at,
                format!("a condition is an object, found {}", JsonKind::of(value)),
                Some("write for example { \"field\": \"messages.-1.content\", \"contains\": [\"password\"] }".to_owned()),
            );
            return None;
        };
        let mut operators = Vec::new();
        let mut unknown = false;
        for key in map.keys() {
            if OPERATORS.contains(&key.as_str()) {
                operators.push(key.as_str());
            } else if key != "field" {
                unknown = true;
                let help = did_you_mean(key, OPERATORS)
                    .unwrap_or_else(|| format!("the operators are {}", list(&OPERATORS)));
                self.report(
                    &child(at, key),
                    format!("unknown condition operator \"{key}\""),
                    Some(help),
                );
            }
        }
        let operator = match operators.as_slice() {
            [] if unknown => return None,
            [] => {
                self.report(
                    at,
                    "the condition has no operator".to_owned(),
                    Some(format!("use one of {}", list(&OPERATORS))),
                );
                return None;
            }
            [operator] => *operator,
            several => {
                self.report(
                    at,
                    format!(
                        "the condition has several operators ({}); a condition has exactly one",
                        several
                            .iter()
                            .map(|name| format!("\"{name}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Some(
                        "combine conditions with { \"all\": [...] } or { \"any\": [...] }"
                            .to_owned(),
                    ),
                );
                return None;
            }
        };
        let operand = &map[operator];
        let operand_at = child(at, operator);
        if FIELD_OPERATORS.contains(&operator) {
            let field = self.field(map, at, operator, Use::Read);
            let checked = match operator {
                "contains" => self.contains(operand, &operand_at, field.as_ref(), at),
                "equals" => self.equals(operand, &operand_at, field.as_ref()),
                "not_in" => self.not_in(operand, &operand_at, field.as_ref()),
                _ => self.greater_than(operand, &operand_at, field.as_ref(), at),
            };
            if unknown {
                return None;
            }
            let (path, _) = field?;
            let checked = checked?;
            let (condition, checked) = match checked {
                Operand::Contains(needles, lowered) => (
                    Condition::Contains {
                        field: path.to_string(),
                        contains: needles,
                    },
                    CheckedCondition::Contains {
                        path,
                        needles: lowered,
                    },
                ),
                Operand::Equals(value) => (
                    Condition::Equals {
                        field: path.to_string(),
                        equals: value.clone(),
                    },
                    CheckedCondition::Equals { path, value },
                ),
                Operand::NotIn(values) => (
                    Condition::NotIn {
                        field: path.to_string(),
                        not_in: values.clone(),
                    },
                    CheckedCondition::NotIn { path, values },
                ),
                Operand::GreaterThan(number, threshold) => (
                    Condition::GreaterThan {
                        field: path.to_string(),
                        greater_than: number,
                    },
                    CheckedCondition::GreaterThan { path, threshold },
                ),
            };
            return Some((condition, checked));
        }
        if map.contains_key("field") {
            self.report(
                &child(at, "field"),
                format!("\"{operator}\" takes no \"field\""),
                Some("remove it".to_owned()),
            );
            return None;
        }
        let result = match operator {
            "always" => match operand {
                Value::Bool(true) => {
                    Some((Condition::Always { always: true }, CheckedCondition::Always))
                }
                other => {
                    self.report(
                        &operand_at,
                        format!("\"always\" must be true, found {other}"),
                        Some("a rule that never applies does nothing: delete the rule, or write \"always\": true".to_owned()),
                    );
                    None
                }
            },
            "not" => self
                .condition(operand, &operand_at)
                .map(|(condition, checked)| {
                    (
                        Condition::Not {
                            not: Box::new(condition),
                        },
                        CheckedCondition::Not(Box::new(checked)),
                    )
                }),
            _ => {
                let Value::Array(items) = operand else {
                    self.report(
                        &operand_at,
                        format!(
                            "\"{operator}\" takes a list of conditions, found {}",
                            JsonKind::of(operand)
                        ),
                        None,
                    );
                    return None;
                };
                if items.is_empty() {
                    self.report(
                        &operand_at,
                        format!("\"{operator}\" needs at least one condition"),
                        Some("add conditions to the list".to_owned()),
                    );
                    return None;
                }
                let mut conditions = Vec::new();
                let mut checked = Vec::new();
                let mut failed = false;
                for (index, item) in items.iter().enumerate() {
                    match self.condition(item, &element(&operand_at, index)) {
                        Some((condition, compiled)) => {
                            conditions.push(condition);
                            checked.push(compiled);
                        }
                        None => failed = true,
                    }
                }
                if failed {
                    return None;
                }
                if operator == "all" {
                    Some((
                        Condition::All { all: conditions },
                        CheckedCondition::All(checked),
                    ))
                } else {
                    Some((
                        Condition::Any { any: conditions },
                        CheckedCondition::Any(checked),
                    ))
                }
            }
        };
        if unknown { None } else { result }
    }

    fn contains(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
        condition_at: &str,
    ) -> Option<Operand> {
        let mut ok = true;
        if let Some((path, kind)) = field
            && !matches!(kind, Kind::Text | Kind::Role | Kind::Any)
        {
            let help = match kind {
                Kind::List => format!(
                    "to look in every element, use \"{path}.*.content\" or another path to the text"
                ),
                Kind::Object if path.segments().len() == 1 && path.as_str() == "metadata" => {
                    format!("name a key, such as \"{path}.agent_id\"")
                }
                Kind::Object => format!("to look in its text, use \"{path}.content\""),
                Kind::Map => format!(
                    "name a key, such as \"{path}.query\", or use \"{path}.*\" for any value"
                ),
                _ => "\"contains\" applies to text".to_owned(),
            };
            self.warn(
                &child(condition_at, "field"),
                format!(
                    "\"contains\" looks in text, but \"{path}\" is {}, so the condition never holds",
                    kind.describe()
                ),
                Some(help),
            );
        }
        let Value::Array(items) = operand else {
            self.report(
                at,
                format!(
                    "\"contains\" takes a list of strings, found {}",
                    JsonKind::of(operand)
                ),
                Some(match operand {
                    Value::String(text) => format!("write [{}]", Value::String(text.clone())),
                    _ => "write for example [\"password\", \"secret\"]".to_owned(),
                }),
            );
            return None;
        };
        if items.is_empty() {
            self.report(
                at,
                "\"contains\" needs at least one string".to_owned(),
                Some("add the strings to look for".to_owned()),
            );
            return None;
        }
        let mut needles = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match item {
                Value::String(text) if text.is_empty() => {
                    self.warn(
                        &element(at, index),
                        "an empty string is in every text, so the condition holds whenever the field exists"
                            .to_owned(),
                        Some("remove it, or use { \"always\": true } if that is meant".to_owned()),
                    );
                    needles.push(text.clone());
                }
                Value::String(text) => needles.push(text.clone()),
                other => {
                    self.report(
                        &element(at, index),
                        format!("\"contains\" takes strings, found {}", JsonKind::of(other)),
                        Some(format!("write it as a string: \"{}\"", plain(other))),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let mut lowered: Vec<String> = needles.iter().map(|needle| needle.to_lowercase()).collect();
        lowered.sort();
        lowered.dedup();
        Some(Operand::Contains(needles, lowered))
    }

    /// Whether a value can be what a field of `kind` holds.
    fn fits(
        &mut self,
        kind: Kind,
        path: &FieldPath,
        value: &Value,
        at: &str,
        operator: &str,
    ) -> bool {
        let (fits, help) = match (kind, value) {
            (Kind::Any, _) => (true, None),
            (Kind::Text, Value::String(_)) => (true, None),
            (Kind::Role, Value::String(role)) => (
                ["system", "user", "assistant"].contains(&role.as_str()),
                Some("a role is \"system\", \"user\" or \"assistant\"".to_owned()),
            ),
            (Kind::Text | Kind::Role, other) => (
                false,
                Some(format!("write the value as a string: \"{}\"", plain(other))),
            ),
            (Kind::Number, Value::Number(_)) => (true, None),
            (Kind::Number, _) => (false, Some("compare it with a number".to_owned())),
            (Kind::List, Value::Array(_)) => (true, None),
            (Kind::Object | Kind::Map, Value::Object(_)) => (true, None),
            (Kind::List | Kind::Object | Kind::Map, _) => {
                (false, Some("compare a field inside it instead".to_owned()))
            }
        };
        if !fits {
            self.warn(
                at,
                format!(
                    "\"{path}\" is {}, so {operator} {value} can never match",
                    kind.describe()
                ),
                help,
            );
        }
        fits
    }

    fn equals(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
    ) -> Option<Operand> {
        if let Some((path, kind)) = field {
            // A value the field can never equal is a warning: the condition never holds.
            self.fits(*kind, path, operand, at, "equals");
        }
        Some(Operand::Equals(operand.clone()))
    }

    fn not_in(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
    ) -> Option<Operand> {
        let Value::Array(items) = operand else {
            self.report(
                at,
                format!(
                    "\"not_in\" takes a list of values, found {}",
                    JsonKind::of(operand)
                ),
                Some(format!("write [{operand}]")),
            );
            return None;
        };
        if let Some((path, kind)) = field {
            // A value the field can never be is a warning: it excludes nothing.
            for (index, item) in items.iter().enumerate() {
                self.fits(*kind, path, item, &element(at, index), "the value");
            }
        }
        Some(Operand::NotIn(items.clone()))
    }

    fn greater_than(
        &mut self,
        operand: &Value,
        at: &str,
        field: Option<&(FieldPath, Kind)>,
        condition_at: &str,
    ) -> Option<Operand> {
        if let Some((path, kind)) = field
            && !matches!(kind, Kind::Number | Kind::Any)
        {
            let help = match kind {
                Kind::Text | Kind::Role | Kind::List => {
                    format!("to compare its length, use \"field\": \"{path}.length\"")
                }
                _ => "name a numeric field".to_owned(),
            };
            self.warn(
                &child(condition_at, "field"),
                format!(
                    "\"greater_than\" compares numbers, but \"{path}\" is {}, so the condition never holds",
                    kind.describe()
                ),
                Some(help),
            );
        }
        let (number, threshold) = match (operand, operand.as_f64()) {
            (Value::Number(number), Some(threshold)) => (number.clone(), threshold),
            _ => {
                self.report(
                    at,
                    format!(
                        "\"greater_than\" takes a number, found {}",
                        JsonKind::of(operand)
                    ),
                    Some(match operand {
                        Value::String(text) => format!("write it without quotes: {text}"),
                        _ => "write a number such as 4000".to_owned(),
                    }),
                );
                return None;
            }
        };
        Some(Operand::GreaterThan(number, threshold))
    }

    fn redactions(
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
    fn transformation(
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

enum Operand {
    Contains(Vec<String>, Vec<String>),
    Equals(Value),
    NotIn(Vec<Value>),
    GreaterThan(serde_json::Number, f64),
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
        InterceptionPoint::Output => "response.content",
    }
}
