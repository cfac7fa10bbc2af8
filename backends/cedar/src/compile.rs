//! The texts of a Cedar policy → what an evaluation needs, built once: the parsed and
//! validated policy set, the schema, the entities, what each policy's annotations say, and
//! which attributes of the context the request carries.

use std::collections::HashMap;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Effect, Entities, EntityTypeName, EntityUid, PolicyId, PolicySet, Schema,
    ValidationMode, Validator,
};
use portcullis_engine::InterceptionPoint;
use serde_json::Value;

use crate::error::{CedarError, CedarProblem, CedarSource, diagnostics, line_column, with_causes};
use crate::request::{Shape, context_use};

/// The texts a Cedar policy is built from.
#[derive(Debug, Clone, Copy, Default)]
pub struct CedarSources<'a> {
    /// The policies, in Cedar's policy language.
    pub policies: &'a str,
    /// The schema, in Cedar's schema language (`.cedarschema`) or its JSON format (a text
    /// that starts with `{`), when requests and policies are to be validated.
    pub schema: Option<&'a str>,
    /// The entities, in Cedar's JSON entity format (an array of `{"uid", "attrs",
    /// "parents"}`).
    pub entities: Option<&'a str>,
}

/// What an `@decision` annotation makes of a policy's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// No annotation: a permit allows, a forbid denies.
    Plain,
    /// `@decision("audit")`: the call proceeds, audited.
    Audit,
    /// `@decision("escalate")`: the call proceeds only with a person's approval.
    Escalate,
}

/// What the decision needs to know of one policy.
#[derive(Debug, Clone)]
pub(crate) struct PolicyInfo {
    /// Its place in the policies' text (Cedar numbers them `policy0`, `policy1`, ...).
    pub(crate) order: usize,
    pub(crate) kind: Kind,
    /// Its `@reason`, else its `@id`, else Cedar's id for it.
    pub(crate) reason: String,
}

/// A Cedar policy, ready to evaluate.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) policies: PolicySet,
    /// The policies without the forbids that `@decision` softens: asked what the call would
    /// be without them, when only such forbids deny.
    pub(crate) without_soft_forbids: Option<PolicySet>,
    pub(crate) schema: Option<Schema>,
    pub(crate) entities: Entities,
    pub(crate) info: HashMap<PolicyId, PolicyInfo>,
    /// Whether any policy has an `@decision`.
    pub(crate) annotated: bool,
    /// The attributes of the context the request carries.
    pub(crate) shape: Shape,
    pub(crate) agent_type: EntityTypeName,
    pub(crate) tool_type: EntityTypeName,
    pub(crate) session_type: EntityTypeName,
    pub(crate) action: EntityUid,
    pub(crate) authorizer: Authorizer,
    pub(crate) warnings: Vec<CedarProblem>,
}

/// A name the crate writes itself, parsed once.
fn type_name(name: &str) -> Result<EntityTypeName, CedarError> {
    EntityTypeName::from_str(name).map_err(|error| {
        CedarError::new(
            vec![CedarProblem::new(
                CedarSource::Policies,
                None,
                format!("internal: {name} is not a Cedar type name: {error}"),
            )],
            Vec::new(),
        )
    })
}

pub(crate) fn compile(
    point: InterceptionPoint,
    sources: CedarSources<'_>,
) -> Result<Compiled, CedarError> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let policies = parse_policies(sources.policies, &mut problems, &mut warnings);
    let info = policies
        .as_ref()
        .map(|policies| read_annotations(policies, sources.policies, &mut problems))
        .unwrap_or_default();

    let action_type = type_name("Action")?;
    let action =
        EntityUid::from_type_name_and_id(action_type, cedar_policy::EntityId::new(point.as_str()));
    let schema = sources.schema.and_then(|text| {
        let schema = parse_schema(text, &mut problems, &mut warnings)?;
        if !schema.actions().any(|declared| *declared == action) {
            problems.push(
                CedarProblem::new(
                    CedarSource::Schema,
                    None,
                    format!(
                        "the schema declares no action {action}: this policy runs at `{point}`"
                    ),
                )
                .with_help(format!(
                    "declare it, for example `action \"{point}\" appliesTo {{ principal: Agent, resource: {}, context: {{}} }};`",
                    resource_type(point)
                )),
            );
        }
        Some(schema)
    });
    if let (Some(policies), Some(schema)) = (&policies, &schema) {
        let result = Validator::new(schema.clone()).validate(policies, ValidationMode::Strict);
        for error in result.validation_errors() {
            diagnostics(
                error,
                CedarSource::Policies,
                sources.policies,
                &mut problems,
            );
        }
        for warning in result.validation_warnings() {
            diagnostics(
                warning,
                CedarSource::Policies,
                sources.policies,
                &mut warnings,
            );
        }
    }
    let entities = match sources.entities {
        Some(text) => parse_entities(text, schema.as_ref(), &mut problems),
        None => match &schema {
            Some(schema) => action_entities(schema, &mut problems),
            None => Some(Entities::empty()),
        },
    };

    let (Some(policies), Some(entities), true) = (policies, entities, problems.is_empty()) else {
        return Err(CedarError::new(problems, warnings));
    };
    let shape = match &schema {
        Some(schema) => context_shape(schema, &action),
        None => context_use(policies.policies()),
    };
    let annotated = info.values().any(|policy| policy.kind != Kind::Plain);
    let softens_a_forbid = policies
        .policies()
        .any(|policy| policy.effect() == Effect::Forbid && is_soft(&info, policy.id()));
    let without_soft_forbids = if softens_a_forbid {
        let kept = policies
            .policies()
            .filter(|policy| policy.effect() == Effect::Permit || !is_soft(&info, policy.id()))
            .cloned();
        let set = PolicySet::from_policies(kept).map_err(|error| {
            CedarError::new(
                vec![CedarProblem::new(
                    CedarSource::Policies,
                    None,
                    format!("internal: the policies without softened forbids: {error}"),
                )],
                Vec::new(),
            )
        })?;
        Some(set)
    } else {
        None
    };
    Ok(Compiled {
        policies,
        without_soft_forbids,
        schema,
        entities,
        info,
        annotated,
        shape,
        agent_type: type_name("Agent")?,
        tool_type: type_name("Tool")?,
        session_type: type_name("Session")?,
        action,
        authorizer: Authorizer::new(),
        warnings,
    })
}

fn is_soft(info: &HashMap<PolicyId, PolicyInfo>, id: &PolicyId) -> bool {
    info.get(id)
        .is_some_and(|policy| policy.kind != Kind::Plain)
}

/// The entity type of the resource at `point`.
pub(crate) fn resource_type(point: InterceptionPoint) -> &'static str {
    match point {
        InterceptionPoint::ToolCall | InterceptionPoint::ToolResult => "Tool",
        _ => "Session",
    }
}

fn parse_policies(
    text: &str,
    problems: &mut Vec<CedarProblem>,
    warnings: &mut Vec<CedarProblem>,
) -> Option<PolicySet> {
    match PolicySet::from_str(text) {
        Ok(policies) => {
            if policies.num_of_templates() > 0 {
                warnings.push(CedarProblem::new(
                    CedarSource::Policies,
                    None,
                    "templates (policies with `?principal` or `?resource`) are never linked here: they apply to no request",
                ));
            }
            if policies.num_of_policies() == 0 {
                warnings.push(CedarProblem::new(
                    CedarSource::Policies,
                    None,
                    "no policy: Cedar denies every request",
                ));
            }
            Some(policies)
        }
        Err(errors) => {
            diagnostics(&errors, CedarSource::Policies, text, problems);
            None
        }
    }
}

/// Reads each policy's `@decision`, `@reason` and `@id`; an `@decision` that is not `audit` or
/// `escalate` is a problem at its place.
fn read_annotations(
    policies: &PolicySet,
    text: &str,
    problems: &mut Vec<CedarProblem>,
) -> HashMap<PolicyId, PolicyInfo> {
    let mut info = HashMap::new();
    for policy in policies.policies() {
        let id = policy.id();
        let order = AsRef::<str>::as_ref(id)
            .strip_prefix("policy")
            .and_then(|number| number.parse().ok())
            .unwrap_or(usize::MAX);
        let kind = match policy.annotation("decision") {
            None => Kind::Plain,
            Some("audit") => Kind::Audit,
            Some("escalate") => Kind::Escalate,
            Some(other) => {
                let ast: &cedar_policy_core::ast::Policy = policy.as_ref();
                let position = ast
                    .annotations()
                    .find(|(key, _)| key.as_ref() == "decision")
                    .and_then(|(_, annotation)| annotation.loc.as_ref())
                    .or_else(|| ast.loc())
                    .map(|loc| line_column(text, loc.start()));
                problems.push(
                    CedarProblem::new(
                        CedarSource::Policies,
                        position,
                        format!("`@decision(\"{other}\")` is not a decision a Cedar policy can take"),
                    )
                    .with_help("`@decision(\"audit\")` or `@decision(\"escalate\")`; without it a permit allows and a forbid denies"),
                );
                continue;
            }
        };
        let reason = policy
            .annotation("reason")
            .or_else(|| policy.annotation("id"))
            .unwrap_or(AsRef::<str>::as_ref(id))
            .to_owned();
        info.insert(
            id.clone(),
            PolicyInfo {
                order,
                kind,
                reason,
            },
        );
    }
    info
}

fn parse_schema(
    text: &str,
    problems: &mut Vec<CedarProblem>,
    warnings: &mut Vec<CedarProblem>,
) -> Option<Schema> {
    if text.trim_start().starts_with('{') {
        return match Schema::from_json_str(text) {
            Ok(schema) => Some(schema),
            Err(error) => {
                diagnostics(&error, CedarSource::Schema, text, problems);
                None
            }
        };
    }
    match Schema::from_cedarschema_str(text) {
        Ok((schema, found)) => {
            for warning in found {
                diagnostics(&warning, CedarSource::Schema, text, warnings);
            }
            Some(schema)
        }
        Err(error) => {
            diagnostics(&error, CedarSource::Schema, text, problems);
            None
        }
    }
}

/// The context attributes the schema declares for `action`; the whole context when it
/// declares none (the request then fails, as it must).
fn context_shape(schema: &Schema, action: &EntityUid) -> Shape {
    use cedar_policy_core::entities::ContextSchema;
    match cedar_policy_core::validator::context_schema_for_action(schema.as_ref(), action.as_ref())
    {
        Some(context) => Shape::of_schema_type(&context.context_type()),
        None => Shape::Any,
    }
}

/// The schema's actions as entities (their groups are what `action in ..` reads).
fn action_entities(schema: &Schema, problems: &mut Vec<CedarProblem>) -> Option<Entities> {
    match schema.action_entities() {
        Ok(entities) => Some(entities),
        Err(error) => {
            problems.push(CedarProblem::new(
                CedarSource::Schema,
                None,
                format!("the schema's actions cannot be entities: {error}"),
            ));
            None
        }
    }
}

/// Parses the entities; a problem is placed at the entity it is about when Cedar says which.
fn parse_entities(
    text: &str,
    schema: Option<&Schema>,
    problems: &mut Vec<CedarProblem>,
) -> Option<Entities> {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => {
            problems.push(CedarProblem::new(
                CedarSource::Entities,
                Some((error.line(), error.column())),
                format!("not JSON: {error}"),
            ));
            return None;
        }
    };
    let Value::Array(items) = &value else {
        problems.push(
            CedarProblem::new(
                CedarSource::Entities,
                Some(first_character(text)),
                "the entities must be a JSON array",
            )
            .with_help(r#"Cedar's entity format: [{"uid": {"type": "Agent", "id": "a"}, "attrs": {}, "parents": [{"type": "Group", "id": "trusted"}]}]"#),
        );
        return None;
    };
    match Entities::from_json_value(value.clone(), schema) {
        Ok(entities) => {
            let Some(schema) = schema else {
                return Some(entities);
            };
            // The schema's actions (their groups) join the entities, as Cedar's own tools do.
            let actions = action_entities(schema, problems)?;
            let missing: Vec<_> = actions
                .iter()
                .filter(|action| entities.get(&action.uid()).is_none())
                .cloned()
                .collect();
            match entities.add_entities(missing, Some(schema)) {
                Ok(entities) => Some(entities),
                Err(error) => {
                    problems.push(CedarProblem::new(
                        CedarSource::Entities,
                        None,
                        format!("the schema's actions cannot join the entities: {error}"),
                    ));
                    None
                }
            }
        }
        Err(error) => {
            // The first entity that fails alone is the one the error is about; otherwise
            // (a duplicate, a cycle of parents) the error is about the whole list.
            let starts = element_starts(text);
            let position = items
                .iter()
                .position(|item| {
                    cedar_policy::Entity::from_json_value(item.clone(), schema).is_err()
                })
                .and_then(|index| starts.get(index).copied())
                .map(|offset| line_column(text, offset))
                .unwrap_or_else(|| first_character(text));
            problems.push(CedarProblem::new(
                CedarSource::Entities,
                Some(position),
                with_causes(&error),
            ));
            None
        }
    }
}

/// The place of the first character that is not white space.
fn first_character(text: &str) -> (usize, usize) {
    let offset = text.len() - text.trim_start().len();
    line_column(text, offset)
}

/// The byte offsets where the elements of a top-level JSON array start.
fn element_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut expecting = false;
    for (offset, byte) in text.bytes().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if expecting && !byte.is_ascii_whitespace() && byte != b']' {
            starts.push(offset);
            expecting = false;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth == 1 && byte == b'[' {
                    expecting = true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expecting = true,
            _ => {}
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_starts_skip_nested_values_and_strings() {
        let text = "[\n {\"a\": [1, 2], \"b\": \"x,]\"},\n  {\"c\": {}}\n]";
        let starts = element_starts(text);
        assert_eq!(starts.len(), 2);
        assert_eq!(line_column(text, starts[0]), (2, 2));
        assert_eq!(line_column(text, starts[1]), (3, 3));
    }
}
