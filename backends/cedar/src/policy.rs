//! [`CedarPolicy`] (named [`CedarInputPolicy`], [`CedarToolCallPolicy`],
//! [`CedarToolResultPolicy`] and [`CedarOutputPolicy`] at each point): a Cedar policy set as a
//! policy of one interception point.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use cedar_policy::{Context, Decision, EntityId, EntityUid, PolicySet, Request, Response, Schema};
use portcullis_engine::{
    BoxError, InputContext, OutputContext, Policy, PolicyContext, PolicyDecision, ToolCallContext,
    ToolResultContext,
};

use crate::compile::{CedarSources, Compiled, Kind, compile};
use crate::error::{CedarError, CedarEvaluationError, CedarProblem};
use crate::request::{Shape, record_pairs};

/// The reason of a denial when no Cedar policy applies to the request.
pub const NO_PERMIT_REASON: &str = "no Cedar policy permits this";

/// A Cedar policy set as a policy of the point of `C`. [`CedarInputPolicy`],
/// [`CedarToolCallPolicy`], [`CedarToolResultPolicy`] and [`CedarOutputPolicy`] name it at
/// each point. Clones share the compiled set.
pub struct CedarPolicy<C> {
    id: String,
    sources: Arc<Sources>,
    compiled: Arc<Compiled>,
    point: PhantomData<fn(&C)>,
}

/// The texts a policy was built from, kept so that a schema or entities added later
/// re-check the whole.
#[derive(Debug, Default)]
struct Sources {
    policies: String,
    schema: Option<String>,
    entities: Option<String>,
}

impl Sources {
    fn borrowed(&self) -> CedarSources<'_> {
        CedarSources {
            policies: &self.policies,
            schema: self.schema.as_deref(),
            entities: self.entities.as_deref(),
        }
    }
}

impl<C> Clone for CedarPolicy<C> {
    fn clone(&self) -> Self {
        CedarPolicy {
            id: self.id.clone(),
            sources: Arc::clone(&self.sources),
            compiled: Arc::clone(&self.compiled),
            point: PhantomData,
        }
    }
}

impl<C: PolicyContext> fmt::Debug for CedarPolicy<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CedarPolicy")
            .field("id", &self.id)
            .field("point", &C::POINT)
            .field("policies", &self.compiled.policies.num_of_policies())
            .field("schema", &self.compiled.schema.is_some())
            .field("entities", &self.compiled.entities.len())
            .finish()
    }
}

/// A Cedar policy set as an input policy (see [`CedarPolicy`]).
pub type CedarInputPolicy = CedarPolicy<InputContext>;

/// A Cedar policy set as a tool-call policy (see [`CedarPolicy`]).
pub type CedarToolCallPolicy = CedarPolicy<ToolCallContext>;

/// A Cedar policy set as a tool-result policy (see [`CedarPolicy`]).
pub type CedarToolResultPolicy = CedarPolicy<ToolResultContext>;

/// A Cedar policy set as an output policy (see [`CedarPolicy`]).
pub type CedarOutputPolicy = CedarPolicy<OutputContext>;

impl<C: PolicyContext> CedarPolicy<C> {
    /// The policies in `policies_source` (Cedar's policy language) as a policy of this point
    /// named `id`, with no schema and no entities.
    ///
    /// # Errors
    /// The policies do not parse, or an `@decision` is neither `audit` nor `escalate`; every
    /// problem is listed with its line and column.
    pub fn new(
        id: impl Into<String>,
        policies_source: impl Into<String>,
    ) -> Result<Self, CedarError> {
        Self::build(
            id.into(),
            Sources {
                policies: policies_source.into(),
                ..Sources::default()
            },
        )
    }

    /// The same policies validated against a schema (Cedar's schema language, or its JSON
    /// format when the text starts with `{`): the policies now, and every request before it
    /// is evaluated (the context keeps only the attributes the schema declares for this
    /// point's action; see the crate docs).
    ///
    /// # Errors
    /// The schema does not parse, does not declare this point's action, or a policy does not
    /// validate against it (strict mode); the entities, if given, do not fit it.
    pub fn with_schema(self, schema_source: impl Into<String>) -> Result<Self, CedarError> {
        let sources = Sources {
            policies: self.sources.policies.clone(),
            schema: Some(schema_source.into()),
            entities: self.sources.entities.clone(),
        };
        Self::build(self.id, sources)
    }

    /// The same policies with entities (Cedar's JSON entity format): agents and their
    /// groups, tools and their attributes.
    ///
    /// # Errors
    /// The text is not JSON, not an array of entities, or (with a schema) does not fit it;
    /// a problem is placed at the entity it is about.
    pub fn with_entities(self, entities_source: impl Into<String>) -> Result<Self, CedarError> {
        let sources = Sources {
            policies: self.sources.policies.clone(),
            schema: self.sources.schema.clone(),
            entities: Some(entities_source.into()),
        };
        Self::build(self.id, sources)
    }

    /// Policies, schema and entities at once, every problem of the three reported together
    /// (what the manifest uses).
    ///
    /// # Errors
    /// As [`new`](Self::new), [`with_schema`](Self::with_schema) and
    /// [`with_entities`](Self::with_entities).
    pub fn from_sources(
        id: impl Into<String>,
        sources: CedarSources<'_>,
    ) -> Result<Self, CedarError> {
        Self::build(
            id.into(),
            Sources {
                policies: sources.policies.to_owned(),
                schema: sources.schema.map(str::to_owned),
                entities: sources.entities.map(str::to_owned),
            },
        )
    }

    fn build(id: String, sources: Sources) -> Result<Self, CedarError> {
        let compiled = compile(C::POINT, sources.borrowed())?;
        Ok(CedarPolicy {
            id,
            sources: Arc::new(sources),
            compiled: Arc::new(compiled),
            point: PhantomData,
        })
    }

    /// What loaded but deserves a look: Cedar's validation warnings, templates that are
    /// never linked, an empty policy set.
    pub fn warnings(&self) -> &[CedarProblem] {
        &self.compiled.warnings
    }

    /// The Cedar policy set evaluated.
    pub fn policy_set(&self) -> &PolicySet {
        &self.compiled.policies
    }

    /// The schema, when one was given.
    pub fn schema(&self) -> Option<&Schema> {
        self.compiled.schema.as_ref()
    }

    /// The entities the requests are evaluated with.
    pub fn entities(&self) -> &cedar_policy::Entities {
        &self.compiled.entities
    }

    /// The Cedar request an evaluation of `context` makes: principal `Agent::"<agent_id>"`,
    /// action `Action::"<point>"`, resource `Tool::"<tool_name>"` or
    /// `Session::"<session_id>"`, and the context as a record (the attributes the policies
    /// can read; see the crate docs). With a schema it is validated against it.
    ///
    /// # Errors
    /// The context cannot be a Cedar record, or the request does not fit the schema.
    pub fn request_for(&self, context: &C) -> Result<Request, CedarEvaluationError> {
        self.request_with(context, &self.compiled.shape)
    }

    /// The request with the whole context, whatever the policies read: for tests that check
    /// that leaving out what no policy reads changes no decision.
    #[doc(hidden)]
    pub fn full_request_for(&self, context: &C) -> Result<Request, CedarEvaluationError> {
        let shape = match (&self.compiled.schema, &self.compiled.shape) {
            (Some(_), shape) => shape,
            (None, _) => &Shape::Any,
        };
        self.request_with(context, shape)
    }

    fn request_with(&self, context: &C, shape: &Shape) -> Result<Request, CedarEvaluationError> {
        let compiled = &*self.compiled;
        let metadata = context.metadata();
        let principal = EntityUid::from_type_name_and_id(
            compiled.agent_type.clone(),
            EntityId::new(&metadata.agent_id),
        );
        let resource = match context.tool_name() {
            Some(tool) => {
                EntityUid::from_type_name_and_id(compiled.tool_type.clone(), EntityId::new(tool))
            }
            None => EntityUid::from_type_name_and_id(
                compiled.session_type.clone(),
                EntityId::new(&metadata.session_id),
            ),
        };
        let record = match shape {
            // No policy reads the context: nothing to serialize.
            Shape::Record(attributes) if attributes.is_empty() => Context::empty(),
            _ => {
                let json = serde_json::to_value(context).map_err(|error| {
                    CedarEvaluationError::Policies(vec![format!(
                        "the context cannot be serialized: {error}"
                    )])
                })?;
                let serde_json::Value::Object(map) = json else {
                    return Err(CedarEvaluationError::Policies(vec![
                        "the context is not a JSON object".to_owned(),
                    ]));
                };
                Context::from_pairs(record_pairs(&map, shape))
                    .map_err(|error| CedarEvaluationError::Context(Box::new(error)))?
            }
        };
        Request::new(
            principal,
            compiled.action.clone(),
            resource,
            record,
            compiled.schema.as_ref(),
        )
        .map_err(|error| CedarEvaluationError::Request(Box::new(error)))
    }

    /// Evaluates the policy without `async` (the trait's `evaluate` does the same work).
    ///
    /// # Errors
    /// See [`CedarEvaluationError`].
    pub fn decide(&self, context: &C) -> Result<PolicyDecision, CedarEvaluationError> {
        let request = self.request_for(context)?;
        self.decide_request(&request)
    }

    /// The decision for a request built by [`request_for`](Self::request_for).
    ///
    /// # Errors
    /// Cedar policies failed while evaluating it (see [`CedarEvaluationError::Policies`]).
    pub fn decide_request(
        &self,
        request: &Request,
    ) -> Result<PolicyDecision, CedarEvaluationError> {
        let compiled = &*self.compiled;
        let response =
            compiled
                .authorizer
                .is_authorized(request, &compiled.policies, &compiled.entities);
        let failed = response.diagnostics().errors().next().is_some();
        match response.decision() {
            Decision::Allow if failed => Err(errors_of(&response)),
            Decision::Allow if !compiled.annotated => Ok(PolicyDecision::allow()),
            Decision::Allow => Ok(self.softened(&response, None)),
            Decision::Deny => {
                let forbids = self.determining(&response);
                if let Some(hard) = forbids.iter().find(|(kind, _, _)| *kind == Kind::Plain) {
                    // A forbid that applies denies whatever the policies that failed would
                    // have said.
                    return Ok(PolicyDecision::Deny {
                        reason: Some(hard.2.to_owned()),
                        policy_id: Some(self.id.clone()),
                    });
                }
                if failed {
                    return Err(errors_of(&response));
                }
                if forbids.is_empty() {
                    return Ok(PolicyDecision::Deny {
                        reason: Some(NO_PERMIT_REASON.to_owned()),
                        policy_id: Some(self.id.clone()),
                    });
                }
                // Only forbids that `@decision` softens deny: the call is what it would be
                // without them, audited or escalated.
                let Some(without) = &compiled.without_soft_forbids else {
                    return Err(CedarEvaluationError::Policies(vec![
                        "internal: a softened forbid without its policy set".to_owned(),
                    ]));
                };
                let underlying =
                    compiled
                        .authorizer
                        .is_authorized(request, without, &compiled.entities);
                if underlying.diagnostics().errors().next().is_some() {
                    return Err(errors_of(&underlying));
                }
                match underlying.decision() {
                    Decision::Deny => Ok(PolicyDecision::Deny {
                        reason: Some(NO_PERMIT_REASON.to_owned()),
                        policy_id: Some(self.id.clone()),
                    }),
                    Decision::Allow => Ok(self.softened(&underlying, Some(&response))),
                }
            }
        }
    }

    /// The determining policies of `response` with their kind and reason, in the order of
    /// the policies' text.
    fn determining<'a>(&'a self, response: &Response) -> Vec<(Kind, usize, &'a str)> {
        let mut found: Vec<_> = response
            .diagnostics()
            .reason()
            .filter_map(|id| self.compiled.info.get(id))
            .map(|info| (info.kind, info.order, info.reason.as_str()))
            .collect();
        found.sort_by_key(|(_, order, _)| *order);
        found
    }

    /// An allow whose determining permits (and the softened forbids that denied first, when
    /// there were some) may audit or escalate: the strongest of them decides, with the reason
    /// of the first policy of that kind.
    fn softened(&self, allowed: &Response, softened_forbids: Option<&Response>) -> PolicyDecision {
        let mut policies = softened_forbids
            .map(|response| self.determining(response))
            .unwrap_or_default();
        policies.extend(self.determining(allowed));
        let strongest = policies.iter().map(|(kind, _, _)| *kind).max();
        let reason = |kind: Kind| {
            policies
                .iter()
                .find(|(found, _, _)| *found == kind)
                .map(|(_, _, reason)| (*reason).to_owned())
        };
        match strongest {
            Some(Kind::Escalate) => PolicyDecision::Escalate {
                reason: reason(Kind::Escalate),
                labels: Vec::new(),
            },
            Some(Kind::Audit) => PolicyDecision::Audit {
                reason: reason(Kind::Audit),
                labels: Vec::new(),
            },
            _ => PolicyDecision::allow(),
        }
    }
}

fn errors_of(response: &Response) -> CedarEvaluationError {
    let mut errors: Vec<String> = response
        .diagnostics()
        .errors()
        .map(ToString::to_string)
        .collect();
    errors.sort();
    CedarEvaluationError::Policies(errors)
}

#[async_trait::async_trait]
impl<C: PolicyContext> Policy<C> for CedarPolicy<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        Ok(self.decide(context)?)
    }
}
