//! The engine as JavaScript reaches it: [`NativePolicySet`] gathers the policies,
//! [`NativeEngine`] evaluates contexts off the JavaScript thread and reports each outcome, with
//! the call's audit records, as one JSON document the package's layer turns into a value or
//! one of its error classes.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use napi::bindgen_prelude::{Either, Env, PromiseRaw};
use napi::{Error, Result, Status};
use napi_derive::napi;
use portcullis_bindings::{PointPolicy, RecordContexts};
use portcullis_engine::{
    InterceptionPoint, OnError, PolicyEngine, PolicyEngineBuilder, PolicySet, PolicySetBuilder,
};
use portcullis_manifest::{CodeRegistry, Manifest};
use serde_json::json;

use crate::audit::{NativeAuditSink, audit_handler};
use crate::native::{NativePolicy, parse_point};
use crate::policy::{HostEvaluate, HostPolicyError, js_policy, on_js_thread};

/// The policies of an engine being built: the package's layer adds each policy of the
/// JavaScript policy set, in order, then builds the engine with [`create_engine`].
#[napi]
pub struct NativePolicySet {
    builder: Option<PolicySetBuilder>,
    /// The points with a native policy that waits on the network (an OPA server, an HTTP
    /// endpoint): their evaluations run on the runtime from the start.
    waits: Vec<InterceptionPoint>,
}

#[napi]
impl NativePolicySet {
    /// An empty set whose evaluation errors are handled as `on_error` says (`"deny"` or
    /// `"allow"`).
    #[napi(constructor)]
    pub fn new(on_error: String) -> Result<NativePolicySet> {
        let on_error = match on_error.as_str() {
            "deny" => OnError::Deny,
            "allow" => OnError::Allow,
            other => {
                return Err(Error::new(
                    Status::InvalidArg,
                    format!("on_error must be \"deny\" or \"allow\", not {other:?}"),
                ));
            }
        };
        Ok(NativePolicySet {
            builder: Some(PolicySet::builder().on_error(on_error)),
            waits: Vec::new(),
        })
    }

    /// Adds a policy written in JavaScript at `point`: `evaluate` is the package's dispatcher
    /// for it, `deadline_ms` how long one evaluation may take.
    #[napi(
        ts_args_type = "point: string, id: string, evaluate: (context: string | null) => true | string | Promise<string>, deadlineMs?: number"
    )]
    pub fn add_js(
        &mut self,
        env: &Env,
        point: String,
        id: String,
        evaluate: HostEvaluate<'_>,
        deadline_ms: Option<f64>,
    ) -> Result<()> {
        let point = parse_point(&point)?;
        let deadline = match deadline_ms {
            Some(ms) if ms.is_finite() && ms > 0.0 => Some(Duration::from_secs_f64(ms / 1000.0)),
            Some(ms) => {
                return Err(Error::new(
                    Status::InvalidArg,
                    format!(
                        "the deadline of policy {id:?} must be a positive number of milliseconds, not {ms}"
                    ),
                ));
            }
            None => None,
        };
        let policy = js_policy(env, id, &evaluate, deadline)?;
        self.add(PointPolicy::at(point, policy))
    }

    /// Adds a native policy at `point`; throws when it is a policy of another point.
    #[napi]
    pub fn add_native(&mut self, point: String, policy: &NativePolicy) -> Result<()> {
        let point = parse_point(&point)?;
        if policy.policy.point() != point {
            return Err(Error::new(
                Status::InvalidArg,
                format!(
                    "policy {:?} is a {} policy; it cannot go in {}",
                    policy.id(),
                    policy.policy.point(),
                    point
                ),
            ));
        }
        if !policy.in_memory {
            self.waits.push(point);
        }
        self.add(policy.policy.clone())
    }
}

impl NativePolicySet {
    fn add(&mut self, policy: PointPolicy) -> Result<()> {
        let builder = self.builder.take().ok_or_else(|| {
            Error::new(
                Status::GenericFailure,
                "this policy set already went into an engine",
            )
        })?;
        self.builder = Some(policy.add_to(builder));
        Ok(())
    }
}

/// Builds an engine on `set` (which cannot be used again); with `audit`, each outcome carries
/// the call's audit records; `sink` receives every record too.
#[napi]
pub fn create_engine(
    set: &mut NativePolicySet,
    audit: bool,
    sink: Option<&NativeAuditSink>,
) -> Result<NativeEngine> {
    let builder = set.builder.take().ok_or_else(|| {
        Error::new(
            Status::GenericFailure,
            "this policy set already went into an engine",
        )
    })?;
    let builder = PolicyEngine::builder().policy_set(builder.build());
    let builder = match audit_handler(audit, sink) {
        Some(handler) => builder.on_audit(handler),
        None => builder,
    };
    let starts_here = InterceptionPoint::ALL
        .into_iter()
        .filter(|point| !set.waits.contains(point))
        .collect();
    Ok(NativeEngine::new(builder, audit, starts_here))
}

/// Loads the manifest at `path` (§10) off the JavaScript thread and builds its engine; with
/// `audit`, each outcome carries the call's audit records, and `sink` receives every record
/// (the manifest's own sinks receive them too). Rejects with every problem of the manifest.
#[napi(ts_return_type = "Promise<NativeEngine>")]
pub fn engine_from_manifest<'env>(
    env: &'env Env,
    path: String,
    audit: bool,
    sink: Option<&NativeAuditSink>,
) -> Result<PromiseRaw<'env, NativeEngine>> {
    let handler = audit_handler(audit, sink);
    env.spawn_future(async move {
        let loaded =
            tokio::task::spawn_blocking(move || Manifest::load(&path, &CodeRegistry::new()))
                .await
                .map_err(|error| Error::new(Status::GenericFailure, error.to_string()))?
                .map_err(|errors| Error::new(Status::InvalidArg, errors.to_string()))?;
        let builder = match handler {
            Some(handler) => loaded.into_engine_builder_with_audit(handler).await,
            None => loaded.into_engine_builder().await,
        }
        .map_err(|errors| Error::new(Status::InvalidArg, errors.to_string()))?;
        // What a manifest's policies do is not looked into: every point runs on the runtime.
        Ok(NativeEngine::new(builder, audit, Vec::new()))
    })
}

/// A policy engine: evaluates contexts given as JSON off the JavaScript thread.
#[napi]
pub struct NativeEngine {
    engine: Arc<PolicyEngine>,
    audit: bool,
    /// The points whose policies all evaluate in memory or in JavaScript, without the
    /// addon's I/O: their evaluations start on the calling thread.
    starts_here: Vec<InterceptionPoint>,
}

#[napi]
impl NativeEngine {
    /// Evaluates the policies of `point` on the context (JSON) and resolves to the outcome as
    /// JSON: `{"outcome":"forward","context":<changed context or null>}`, `"denied"`,
    /// `"evaluation_error"`, `"approval_required"` or `"invalid_context"`, with `"records"`
    /// when the engine audits.
    ///
    /// A point whose policies all evaluate in memory or in JavaScript (DSL rules, Rego
    /// bundles, JavaScript policies) is evaluated on the calling thread, its JavaScript
    /// policies called there and then; when it finishes without waiting (no JavaScript policy
    /// returned a promise), the outcome itself is returned, with no round trip through the
    /// runtime. Any other point, or one that waits, goes on on the addon's runtime and returns
    /// a promise.
    #[napi(ts_return_type = "string | Promise<string>")]
    pub fn evaluate<'env>(
        &self,
        env: &'env Env,
        point: String,
        context_json: String,
    ) -> Result<Either<String, PromiseRaw<'env, String>>> {
        let point = parse_point(&point)?;
        let mut outcome = Box::pin(outcome(
            Arc::clone(&self.engine),
            self.audit,
            point,
            context_json,
        ));
        if self.starts_here.contains(&point) {
            let mut context = Context::from_waker(Waker::noop());
            let polled = on_js_thread(env, || outcome.as_mut().poll(&mut context));
            if let Poll::Ready(outcome) = polled {
                return Ok(Either::A(outcome));
            }
        }
        env.spawn_future(async move { Ok(outcome.await) })
            .map(Either::B)
    }

    /// Records that `by` approved the action whose digest is `digest` (an approval request's
    /// `action_digest`), usable once within `ttl_seconds`: the retried call proceeds. Resolves
    /// when the grant is stored; rejects when the grant store fails or `ttl_seconds` is not a
    /// positive number of seconds of at most 30 days.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn grant<'env>(
        &self,
        env: &'env Env,
        digest: String,
        by: String,
        ttl_seconds: f64,
    ) -> Result<PromiseRaw<'env, ()>> {
        const MAX_SECONDS: f64 = 30.0 * 24.0 * 60.0 * 60.0;
        if !(ttl_seconds.is_finite() && ttl_seconds > 0.0 && ttl_seconds <= MAX_SECONDS) {
            return Err(Error::new(
                Status::InvalidArg,
                format!(
                    "ttl must be a positive number of seconds of at most 30 days, not {ttl_seconds}"
                ),
            ));
        }
        let ttl = Duration::from_secs_f64(ttl_seconds);
        let engine = Arc::clone(&self.engine);
        env.spawn_future(async move {
            engine
                .approvals()
                .grant(&digest, by, ttl)
                .await
                .map_err(|error| {
                    Error::new(
                        Status::GenericFailure,
                        format!("the grant was not stored: {error}"),
                    )
                })
        })
    }
}

/// The outcome of one call, as JSON text: see [`NativeEngine::evaluate`].
async fn outcome(
    engine: Arc<PolicyEngine>,
    audit: bool,
    point: InterceptionPoint,
    context_json: String,
) -> String {
    // Records share the call's context: the package's layer reads it once for all of them.
    let records = audit.then_some(RecordContexts::CallContextOnce);
    portcullis_bindings::outcome(&engine, records, point, &context_json, |cause| {
        json!(HostPolicyError::thrown_token(cause))
    })
    .await
}

impl NativeEngine {
    fn new(
        builder: PolicyEngineBuilder,
        audit: bool,
        starts_here: Vec<InterceptionPoint>,
    ) -> NativeEngine {
        NativeEngine {
            engine: Arc::new(builder.build()),
            audit,
            starts_here,
        }
    }
}
