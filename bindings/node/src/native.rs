//! The native policies: the Rust backends (DSL rules, Rego bundles, a Rego policy server, a
//! remote HTTP endpoint) behind one JavaScript class, [`NativePolicy`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Env, PromiseRaw};
use napi::{Error, Result, Status};
use napi_derive::napi;
use portcullis_dsl::{DslError, DslPolicy};
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    InputContext, InputPolicy, InterceptionPoint, OutputContext, OutputPolicy, Policy,
    PolicyContext, ToolCallContext, ToolCallPolicy, ToolResultContext, ToolResultPolicy,
};
use portcullis_http::{HttpClientOptions, HttpPolicy};
use portcullis_rego::RegoPolicy;
use portcullis_rego_rest::{RegoServerClientOptions, RegoServerPolicy};

use crate::context::read_context;
use crate::policy::FailedPolicy;

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
}

/// Builds the policy of `point` with that point's type of one backend family
/// (`for_point!(point, RegoPolicy, |P| P::new(..))`):
/// the constructor, written once, is called on the type of the point, and the policy is
/// wrapped with what `$keep` takes from it.
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

/// Reads a point's wire name (`input`, `tool_call`, `tool_result`, `output`).
pub fn parse_point(point: &str) -> Result<InterceptionPoint> {
    serde_json::from_value(serde_json::Value::String(point.to_owned())).map_err(|_| {
        Error::new(
            Status::InvalidArg,
            format!("unknown interception point {point:?}: expected \"input\", \"tool_call\", \"tool_result\" or \"output\""),
        )
    })
}

/// A policy evaluated by the Rust engine (not by JavaScript): what `DslInputPolicy`,
/// `RegoInputPolicy`, `RegoServerInputPolicy`, `HttpInputPolicy` and their twins wrap.
#[napi]
pub struct NativePolicy {
    id: String,
    pub(crate) policy: PointPolicy,
    /// Whether it evaluates in memory, without I/O (DSL rules, Rego bundles).
    pub(crate) in_memory: bool,
    problems: Vec<String>,
    warnings: Vec<String>,
}

#[napi]
impl NativePolicy {
    /// The policy's id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// The point it decides at: `input`, `tool_call` or `output`.
    #[napi(getter)]
    pub fn point(&self) -> String {
        self.policy.point().as_str().to_owned()
    }

    /// Why the policy could not be loaded (empty when it loaded): each evaluation fails with
    /// these.
    #[napi(getter)]
    pub fn problems(&self) -> Vec<String> {
        self.problems.clone()
    }

    /// What the rule checker warns about in a rule that loaded.
    #[napi(getter)]
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// Evaluates the policy alone on a context given as JSON, off the JavaScript thread:
    /// resolves to the decision as JSON; rejects with what went wrong.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn evaluate<'env>(
        &self,
        env: &'env Env,
        context_json: String,
    ) -> Result<PromiseRaw<'env, String>> {
        let policy = self.policy.clone();
        env.spawn_future(async move {
            let decision = match policy {
                PointPolicy::Input(policy) => decide::<InputContext>(&*policy, &context_json).await,
                PointPolicy::ToolCall(policy) => {
                    decide::<ToolCallContext>(&*policy, &context_json).await
                }
                PointPolicy::ToolResult(policy) => {
                    decide::<ToolResultContext>(&*policy, &context_json).await
                }
                PointPolicy::Output(policy) => {
                    decide::<OutputContext>(&*policy, &context_json).await
                }
            };
            decision.map_err(|problem| Error::new(Status::GenericFailure, problem))
        })
    }
}

/// One policy's decision on a context given as JSON, as JSON.
async fn decide<C: PolicyContext>(
    policy: &dyn Policy<C>,
    context_json: &str,
) -> std::result::Result<String, String> {
    let context: C = read_context(context_json)?;
    let decision = policy
        .evaluate(&context)
        .await
        .map_err(|error| error_chain(&*error))?;
    serde_json::to_string(&decision).map_err(|error| error.to_string())
}

impl NativePolicy {
    fn loaded(
        id: String,
        policy: PointPolicy,
        in_memory: bool,
        warnings: Vec<String>,
    ) -> NativePolicy {
        NativePolicy {
            id,
            policy,
            in_memory,
            problems: Vec::new(),
            warnings,
        }
    }
}

/// The error a constructor throws: what failed, with its cause chain.
fn construction_error(what: &str, error: &(dyn std::error::Error + 'static)) -> Error {
    Error::new(
        Status::InvalidArg,
        format!("{what}: {}", error_chain(error)),
    )
}

/// A DSL policy of `point` from `<dir>/<id>.json`. A rule that cannot be loaded does not
/// throw: the policy lists why in `problems`, and each evaluation fails with it.
#[napi]
pub fn dsl_policy(point: String, id: String, dir: String) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let loaded = for_point!(
        point,
        DslPolicy,
        |Policy| Policy::new(id.as_str(), &dir),
        |policy| policy
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
    );
    Ok(match loaded {
        Ok((policy, warnings)) => NativePolicy::loaded(id, policy, true, warnings),
        Err(error) => failed_dsl(point, id, &error),
    })
}

/// The policy a DSL rule that cannot be loaded gives: every evaluation fails with why.
fn failed_dsl(point: InterceptionPoint, id: String, error: &DslError) -> NativePolicy {
    let problems: Vec<String> = match error.problems() {
        Some(problems) => problems.iter().map(ToString::to_string).collect(),
        None => vec![error_chain(error)],
    };
    let policy = PointPolicy::at(point, FailedPolicy::new(id.clone(), problems.join("\n")));
    NativePolicy {
        id,
        policy,
        in_memory: true,
        problems,
        warnings: Vec::new(),
    }
}

/// A Rego policy of `point` evaluating the OPA WebAssembly bundle at `bundle_path` in
/// process. Throws when the bundle cannot be opened.
#[napi]
pub fn rego_policy(point: String, id: String, bundle_path: String) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let (policy, ()) = for_point!(
        point,
        RegoPolicy,
        |Policy| Policy::new(id.as_str(), &bundle_path),
        |policy| (),
    )
    .map_err(|error| {
        construction_error(
            &format!("cannot load the Rego bundle {bundle_path}"),
            &error,
        )
    })?;
    Ok(NativePolicy::loaded(id, policy, true, Vec::new()))
}

/// How to reach a server: the seed's `{ baseUrl }`, and what else a client may set.
#[napi(object)]
pub struct ClientOptions {
    /// The server's address (`http://127.0.0.1:8181`).
    pub base_url: String,
    /// How long one request may take, in milliseconds.
    pub timeout_ms: Option<u32>,
    /// Headers sent with every request (an `Authorization` header, for example).
    pub headers: Option<HashMap<String, String>>,
}

impl ClientOptions {
    fn to_rust(&self) -> HttpClientOptions {
        let mut options = HttpClientOptions::new(self.base_url.as_str());
        if let Some(timeout) = self.timeout_ms {
            options = options.timeout(Duration::from_millis(u64::from(timeout)));
        }
        for (name, value) in self.headers.iter().flatten() {
            options = options.header(name.as_str(), value.as_str());
        }
        options
    }
}

/// A policy of `point` whose decision is the document at `package_path` on a Rego policy
/// server (the OPA REST API). Throws when the options or the path are invalid; no request is
/// made until the first evaluation.
#[napi]
pub fn rego_server_policy(
    point: String,
    id: String,
    options: ClientOptions,
    package_path: String,
) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let options: RegoServerClientOptions = options.to_rust();
    let (policy, ()) = for_point!(
        point,
        RegoServerPolicy,
        |Policy| Policy::new(id.as_str(), options.clone(), &package_path),
        |policy| (),
    )
    .map_err(|error| construction_error("invalid Rego server policy", &error))?;
    Ok(NativePolicy::loaded(id, policy, false, Vec::new()))
}

/// A policy of `point` evaluated by a remote endpoint (`POST {baseUrl}/engine/evaluate`).
/// Throws when the options are invalid; no request is made until the first evaluation.
#[napi]
pub fn http_policy(point: String, id: String, options: ClientOptions) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let options = options.to_rust();
    let (policy, ()) = for_point!(
        point,
        HttpPolicy,
        |Policy| Policy::new(id.as_str(), options.clone()),
        |policy| (),
    )
    .map_err(|error| construction_error("invalid HTTP policy", &error))?;
    Ok(NativePolicy::loaded(id, policy, false, Vec::new()))
}
