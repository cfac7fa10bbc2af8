//! The native policies: the Rust backends (DSL rules, Rego bundles, a Rego policy server, a
//! remote HTTP endpoint, built by `portcullis-bindings`) behind one JavaScript class,
//! [`NativePolicy`].

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use napi::bindgen_prelude::{Env, PromiseRaw};
use napi::{Error, Result, Status};
use napi_derive::napi;
use portcullis_bindings::{Loaded, PointPolicy};
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    InputContext, InterceptionPoint, OutputContext, Policy, PolicyContext, ToolCallContext,
    ToolResultContext,
};
use portcullis_http::HttpClientOptions;

use crate::context::read_context;

/// Reads a point's wire name (`input`, `tool_call`, `tool_result`, `output`).
pub fn parse_point(point: &str) -> Result<InterceptionPoint> {
    portcullis_bindings::parse_point(point)
        .map_err(|message| Error::new(Status::InvalidArg, message))
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
    portcullis_engine::json::to_string(&decision).map_err(|error| error.to_string())
}

impl NativePolicy {
    fn loaded(id: String, loaded: Loaded, in_memory: bool) -> NativePolicy {
        NativePolicy {
            id,
            policy: loaded.policy,
            in_memory,
            problems: loaded.problems,
            warnings: loaded.warnings,
        }
    }

    /// A policy that loaded, with nothing to report; the constructor's error as an
    /// `InvalidArg` error.
    fn built(
        id: String,
        built: std::result::Result<PointPolicy, String>,
        in_memory: bool,
    ) -> Result<NativePolicy> {
        let policy = built.map_err(|message| Error::new(Status::InvalidArg, message))?;
        let loaded = Loaded {
            policy,
            problems: Vec::new(),
            warnings: Vec::new(),
        };
        Ok(NativePolicy::loaded(id, loaded, in_memory))
    }
}

/// A DSL policy of `point` from `<dir>/<id>.json`. A rule that cannot be loaded does not
/// throw: the policy lists why in `problems`, and each evaluation fails with it.
#[napi]
pub fn dsl_policy(point: String, id: String, dir: String) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let loaded = portcullis_bindings::dsl(point, &id, Path::new(&dir));
    Ok(NativePolicy::loaded(id, loaded, true))
}

/// A Rego policy of `point` evaluating the OPA WebAssembly bundle at `bundle_path` in
/// process. Throws when the bundle cannot be opened.
#[napi]
pub fn rego_policy(point: String, id: String, bundle_path: String) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let built = portcullis_bindings::rego(point, &id, &bundle_path);
    NativePolicy::built(id, built, true)
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
    let built = portcullis_bindings::rego_server(point, &id, &options.to_rust(), &package_path);
    NativePolicy::built(id, built, false)
}

/// A policy of `point` evaluated by a remote endpoint (`POST {baseUrl}/engine/evaluate`).
/// Throws when the options are invalid; no request is made until the first evaluation.
#[napi]
pub fn http_policy(point: String, id: String, options: ClientOptions) -> Result<NativePolicy> {
    let point = parse_point(&point)?;
    let built = portcullis_bindings::http(point, &id, &options.to_rust());
    NativePolicy::built(id, built, false)
}
