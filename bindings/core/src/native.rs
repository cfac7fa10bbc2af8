//! The native policies of a binding, built for one point: each backend's constructor is
//! written once and called on the type of the point (the `for_point!` macro).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use portcullis_dsl::{DslError, DslPolicy};
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    BoxError, InputContext, InputPolicy, InterceptionPoint, OutputContext, OutputPolicy, Policy,
    PolicyContext, PolicyDecision, PolicySetBuilder, ToolCallContext, ToolCallPolicy,
    ToolResultContext, ToolResultPolicy, async_trait,
};
use portcullis_http::{HttpClientOptions, HttpPolicy};
use portcullis_rego::RegoPolicy;
use portcullis_rego::server::RegoServerPolicy;
use serde_json::Value;

/// A policy of one point, as a policy set holds it.
#[derive(Clone)]
pub enum PointPolicy {
    /// An input policy.
    Input(Arc<dyn InputPolicy>),
    /// A tool-call policy.
    ToolCall(Arc<dyn ToolCallPolicy>),
    /// A tool-result policy.
    ToolResult(Arc<dyn ToolResultPolicy>),
    /// An output policy.
    Output(Arc<dyn OutputPolicy>),
}

impl PointPolicy {
    /// `policy` as a policy of `point`, for a type that serves every point.
    pub fn at<P>(point: InterceptionPoint, policy: P) -> PointPolicy
    where
        P: InputPolicy + ToolCallPolicy + ToolResultPolicy + OutputPolicy + 'static,
    {
        match point {
            InterceptionPoint::Input => PointPolicy::Input(Arc::new(policy)),
            InterceptionPoint::ToolCall => PointPolicy::ToolCall(Arc::new(policy)),
            InterceptionPoint::ToolResult => PointPolicy::ToolResult(Arc::new(policy)),
            InterceptionPoint::Output => PointPolicy::Output(Arc::new(policy)),
        }
    }

    /// The point the policy decides at.
    pub fn point(&self) -> InterceptionPoint {
        match self {
            PointPolicy::Input(_) => InterceptionPoint::Input,
            PointPolicy::ToolCall(_) => InterceptionPoint::ToolCall,
            PointPolicy::ToolResult(_) => InterceptionPoint::ToolResult,
            PointPolicy::Output(_) => InterceptionPoint::Output,
        }
    }

    /// Adds the policy to `builder`, at its point.
    pub fn add_to(self, builder: PolicySetBuilder) -> PolicySetBuilder {
        match self {
            PointPolicy::Input(policy) => builder.input(policy),
            PointPolicy::ToolCall(policy) => builder.tool_call(policy),
            PointPolicy::ToolResult(policy) => builder.tool_result(policy),
            PointPolicy::Output(policy) => builder.output(policy),
        }
    }
}

/// Builds the policy of `point` with that point's type of one backend family
/// (`for_point!(point, RegoPolicy, |P| P::new(..), |built| ())`): the constructor, written
/// once, is called on the type of the point, and the policy is wrapped with what `$keep`
/// takes from it.
macro_rules! for_point {
    ($point:expr, $family:ident, |$policy:ident| $make:expr, |$built:ident| $keep:expr $(,)?) => {
        match $point {
            InterceptionPoint::Input => {
                type $policy = $family<InputContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::Input(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::ToolCall => {
                type $policy = $family<ToolCallContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::ToolCall(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::ToolResult => {
                type $policy = $family<ToolResultContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::ToolResult(Arc::new($built)), kept)
                })
            }
            InterceptionPoint::Output => {
                type $policy = $family<OutputContext>;
                $make.map(|$built| {
                    let kept = $keep;
                    (PointPolicy::Output(Arc::new($built)), kept)
                })
            }
        }
    };
}

/// Reads a point's wire name (`input`, `tool_call`, `tool_result`, `output`); the error says
/// which names there are.
pub fn parse_point(point: &str) -> Result<InterceptionPoint, String> {
    InterceptionPoint::from_name(point).ok_or_else(|| {
        format!(
            "unknown interception point {point:?}: expected \"input\", \"tool_call\", \"tool_result\" or \"output\""
        )
    })
}

/// What a constructor reports when it fails: what failed, with its cause chain.
pub fn construction_error(what: &str, error: &(dyn std::error::Error + 'static)) -> String {
    format!("{what}: {}", error_chain(error))
}

/// A native policy as a binding holds it: the policy, why it could not be loaded (empty when
/// it loaded), and what the rule checker warns about.
pub struct Loaded {
    /// The policy (one that fails each evaluation when `problems` is not empty).
    pub policy: PointPolicy,
    /// Why the policy could not be loaded: each evaluation fails with these.
    pub problems: Vec<String>,
    /// What the rule checker warns about in a rule that loaded.
    pub warnings: Vec<String>,
}

/// A DSL policy of `point` from `<dir>/<id>.json`. A rule that cannot be loaded gives a policy
/// whose every evaluation fails with why (as in the seed's TypeScript packages), listed in
/// [`Loaded::problems`].
pub fn dsl(point: InterceptionPoint, id: &str, dir: &Path) -> Loaded {
    let loaded = for_point!(point, DslPolicy, |Policy| Policy::new(id, dir), |policy| {
        policy
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    },);
    match loaded {
        Ok((policy, warnings)) => Loaded {
            policy,
            problems: Vec::new(),
            warnings,
        },
        Err(error) => failed_dsl(point, id, &error),
    }
}

/// The policy a DSL rule that cannot be loaded gives: every evaluation fails with why.
fn failed_dsl(point: InterceptionPoint, id: &str, error: &DslError) -> Loaded {
    let problems: Vec<String> = match error.problems() {
        Some(problems) => problems.iter().map(ToString::to_string).collect(),
        None => vec![error_chain(error)],
    };
    Loaded {
        policy: PointPolicy::at(point, FailedPolicy::new(id.to_owned(), problems.join("\n"))),
        problems,
        warnings: Vec::new(),
    }
}

/// A Rego policy of `point` evaluating the OPA WebAssembly bundle at `bundle` in process; the
/// error says why the bundle cannot be opened.
pub fn rego(point: InterceptionPoint, id: &str, bundle: &str) -> Result<PointPolicy, String> {
    for_point!(
        point,
        RegoPolicy,
        |Policy| Policy::new(id, bundle),
        |policy| (),
    )
    .map(|(policy, ())| policy)
    .map_err(|error| construction_error(&format!("cannot load the Rego bundle {bundle}"), &error))
}

/// A policy of `point` whose decision is the document at `package` on a Rego policy server
/// (the OPA REST API); no request is made until the first evaluation.
pub fn rego_server(
    point: InterceptionPoint,
    id: &str,
    options: &HttpClientOptions,
    package: &str,
) -> Result<PointPolicy, String> {
    for_point!(
        point,
        RegoServerPolicy,
        |Policy| Policy::new(id, options.clone(), package),
        |policy| (),
    )
    .map(|(policy, ())| policy)
    .map_err(|error| construction_error("invalid Rego server policy", &error))
}

/// A policy of `point` evaluated by a remote endpoint (`POST {base_url}/engine/evaluate`); no
/// request is made until the first evaluation.
pub fn http(
    point: InterceptionPoint,
    id: &str,
    options: &HttpClientOptions,
) -> Result<PointPolicy, String> {
    for_point!(
        point,
        HttpPolicy,
        |Policy| Policy::new(id, options.clone()),
        |policy| (),
    )
    .map(|(policy, ())| policy)
    .map_err(|error| construction_error("invalid HTTP policy", &error))
}

/// The longest description of a value an error message carries.
const MAX_DESCRIBED: usize = 200;

/// A value as JSON for an error message, cut at 200 bytes (on a character boundary).
pub fn describe(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > MAX_DESCRIBED {
        let mut end = MAX_DESCRIBED;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A policy that could not be built (a DSL rule file that is missing or invalid): building it
/// does not fail, and every evaluation fails with why.
pub struct FailedPolicy {
    id: String,
    problem: String,
}

/// Why a [`FailedPolicy`] cannot decide.
#[derive(Debug)]
pub struct NotLoaded(String);

impl fmt::Display for NotLoaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotLoaded {}

impl FailedPolicy {
    /// A policy with `id` whose every evaluation fails with `problem`.
    pub fn new(id: String, problem: String) -> FailedPolicy {
        FailedPolicy { id, problem }
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for FailedPolicy {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, _context: &C) -> Result<PolicyDecision, BoxError> {
        Err(Box::new(NotLoaded(self.problem.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_long_values_on_a_character_boundary() {
        let value = Value::String("é".repeat(300));
        let text = describe(&value);
        assert!(text.ends_with('…'));
        assert!(text.len() <= MAX_DESCRIBED + '…'.len_utf8());
    }

    #[test]
    fn names_the_points_there_are() {
        assert_eq!(
            parse_point("tool_result"),
            Ok(InterceptionPoint::ToolResult)
        );
        assert!(
            parse_point("nowhere")
                .unwrap_err()
                .contains("\"tool_result\"")
        );
    }

    #[tokio::test]
    async fn a_rule_that_cannot_be_loaded_fails_each_evaluation() {
        let loaded = dsl(
            InterceptionPoint::Input,
            "missing",
            Path::new("/nonexistent"),
        );
        assert!(!loaded.problems.is_empty());
        let PointPolicy::Input(policy) = loaded.policy else {
            panic!("an input policy");
        };
        let context: InputContext = serde_json::from_value(serde_json::json!({
            "messages": [],
            "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        assert!(policy.evaluate(&context).await.is_err());
        assert_eq!(policy.id(), "missing");
    }
}
