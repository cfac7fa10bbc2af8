//! The compiled form of a checked rule, as the runtime policies evaluate it.

use portcullis_engine::path::FieldPath;
use portcullis_engine::{PolicyDecision, TransformOperation, Transformation};
use serde_json::Value;

use crate::check::{CheckedCondition, CheckedRule, TemplatePart};
use crate::model::Action;
use crate::ops::{
    Needles, ValueSet, contains, equals, greater_than, has_label, not_in, push_field,
};
use crate::select::Root;

/// A condition with everything precomputed.
#[derive(Debug, Clone)]
enum Compiled {
    Contains {
        path: FieldPath,
        needles: Needles,
    },
    Equals {
        path: FieldPath,
        value: Value,
    },
    NotIn {
        path: FieldPath,
        values: ValueSet,
    },
    GreaterThan {
        path: FieldPath,
        threshold: f64,
    },
    HasLabel {
        path: FieldPath,
        labels: Vec<String>,
    },
    Always,
    All(Vec<Compiled>),
    Any(Vec<Compiled>),
    Not(Box<Compiled>),
}

impl Compiled {
    fn new(checked: &CheckedCondition) -> Self {
        match checked {
            CheckedCondition::Contains { path, needles } => Compiled::Contains {
                path: path.clone(),
                needles: Needles::from_lowercase(needles),
            },
            CheckedCondition::Equals { path, value } => Compiled::Equals {
                path: path.clone(),
                value: value.clone(),
            },
            CheckedCondition::NotIn { path, values } => Compiled::NotIn {
                path: path.clone(),
                values: ValueSet::new(values.iter().cloned()),
            },
            CheckedCondition::GreaterThan { path, threshold } => Compiled::GreaterThan {
                path: path.clone(),
                threshold: *threshold,
            },
            CheckedCondition::HasLabel { path, labels } => Compiled::HasLabel {
                path: path.clone(),
                labels: labels.clone(),
            },
            CheckedCondition::Always => Compiled::Always,
            CheckedCondition::All(items) => {
                Compiled::All(items.iter().map(Compiled::new).collect())
            }
            CheckedCondition::Any(items) => {
                Compiled::Any(items.iter().map(Compiled::new).collect())
            }
            CheckedCondition::Not(item) => Compiled::Not(Box::new(Compiled::new(item))),
        }
    }

    fn holds<C: Root>(&self, context: &C) -> bool {
        match self {
            Compiled::Contains { path, needles } => contains(context, path.segments(), needles),
            Compiled::Equals { path, value } => equals(context, path.segments(), value),
            Compiled::NotIn { path, values } => not_in(context, path.segments(), values),
            Compiled::GreaterThan { path, threshold } => {
                greater_than(context, path.segments(), *threshold)
            }
            Compiled::HasLabel { path, labels } => has_label(context, path.segments(), labels),
            Compiled::Always => true,
            Compiled::All(items) => items.iter().all(|item| item.holds(context)),
            Compiled::Any(items) => items.iter().any(|item| item.holds(context)),
            Compiled::Not(item) => !item.holds(context),
        }
    }
}

/// What a rule decides when its condition holds.
#[derive(Debug, Clone)]
enum RuleEffect {
    /// A decision that does not depend on the context.
    Fixed(PolicyDecision),
    /// `set` operations whose values are rendered templates.
    Transform(Vec<(String, Vec<TemplatePart>)>, Vec<String>),
}

/// A checked rule, compiled for evaluation.
#[derive(Debug, Clone)]
pub(crate) struct CompiledRule {
    condition: Compiled,
    effect: RuleEffect,
}

impl CompiledRule {
    pub(crate) fn new(rule: &CheckedRule) -> Self {
        // The checker compiled the redaction patterns through the engine's pattern cache, so
        // the first redaction does not compile them again.
        let reason = rule.rule.reason.clone();
        let labels = rule.rule.labels.clone();
        let effect = match rule.rule.action {
            Action::Allow => RuleEffect::Fixed(PolicyDecision::allow().with_labels(labels)),
            Action::Deny => RuleEffect::Fixed(PolicyDecision::Deny {
                reason,
                policy_id: None,
            }),
            Action::Audit => RuleEffect::Fixed(PolicyDecision::Audit { reason, labels }),
            Action::Escalate => RuleEffect::Fixed(PolicyDecision::Escalate { reason, labels }),
            Action::Redact => RuleEffect::Fixed(PolicyDecision::Redact {
                redactions: rule.redactions.clone(),
                labels,
            }),
            Action::Transform => RuleEffect::Transform(rule.transformation.clone(), labels),
        };
        CompiledRule {
            condition: Compiled::new(&rule.condition),
            effect,
        }
    }

    pub(crate) fn evaluate<C: Root>(&self, context: &C) -> PolicyDecision {
        if !self.condition.holds(context) {
            return PolicyDecision::allow();
        }
        match &self.effect {
            RuleEffect::Fixed(decision) => decision.clone(),
            RuleEffect::Transform(templates, labels) => PolicyDecision::Transform {
                transformation: Transformation {
                    operations: templates
                        .iter()
                        .map(|(field, parts)| {
                            TransformOperation::set(field.clone(), render(context, parts))
                        })
                        .collect(),
                },
                labels: labels.clone(),
            },
        }
    }
}

fn render<C: Root>(context: &C, parts: &[TemplatePart]) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            TemplatePart::Text(text) => out.push_str(text),
            TemplatePart::Field(path) => push_field(&mut out, context, path.segments()),
        }
    }
    out
}
