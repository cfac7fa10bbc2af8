//! What a Java object holds a handle to: a policy set being built, an engine, a native policy.
//! Each is boxed, given to Java as a `long`, and freed once by Java's `Cleaner`.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use portcullis_bindings::{Loaded, PointPolicy, RecordContexts, audit_handler};
use portcullis_engine::error::error_chain;
use portcullis_engine::{
    InputContext, InterceptionPoint, OnError, OutputContext, Policy, PolicyContext, PolicyEngine,
    PolicyEngineBuilder, PolicySet, PolicySetBuilder, ToolCallContext, ToolResultContext,
};
use portcullis_http::HttpClientOptions;
use portcullis_manifest::{CodeRegistry, Manifest};
use portcullis_observability::ObservabilityAuditHandler;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::policy::JavaPolicyError;
use crate::runtime::run_blocking;

/// The policies of an engine being built, in the order Java adds them.
pub struct PolicySetHandle {
    builder: Mutex<Option<PolicySetBuilder>>,
}

impl PolicySetHandle {
    /// An empty set whose evaluation errors are handled as `on_error` says (`deny`, `allow`).
    pub fn new(on_error: &str) -> Result<PolicySetHandle, String> {
        let on_error = match on_error {
            "deny" => OnError::Deny,
            "allow" => OnError::Allow,
            other => return Err(format!("onError must be DENY or ALLOW, not {other:?}")),
        };
        Ok(PolicySetHandle {
            builder: Mutex::new(Some(PolicySet::builder().on_error(on_error))),
        })
    }

    /// Adds a policy at its point.
    pub fn add(&self, policy: PointPolicy) -> Result<(), String> {
        let mut builder = self.builder.lock().map_err(|_| already_built())?;
        let taken = builder.take().ok_or_else(already_built)?;
        *builder = Some(policy.add_to(taken));
        Ok(())
    }

    /// The set, built (it cannot be used again).
    pub fn build(&self) -> Result<PolicySet, String> {
        let mut builder = self.builder.lock().map_err(|_| already_built())?;
        Ok(builder.take().ok_or_else(already_built)?.build())
    }
}

fn already_built() -> String {
    "this policy set already went into an engine".to_owned()
}

/// An engine, and whether its outcomes carry their audit records for Java's `onAudit`.
pub struct EngineHandle {
    engine: PolicyEngine,
    audit: bool,
}

impl EngineHandle {
    /// An engine on `set`; with `audit`, each outcome carries the call's audit records, and
    /// `sink` receives every record too.
    pub fn new(
        set: &PolicySetHandle,
        audit: bool,
        sink: Option<ObservabilityAuditHandler>,
    ) -> Result<EngineHandle, String> {
        let builder = PolicyEngine::builder().policy_set(set.build()?);
        let builder = match audit_handler(audit, sink) {
            Some(handler) => builder.on_audit(handler),
            None => builder,
        };
        Ok(EngineHandle::built(builder, audit))
    }

    /// The engine of the manifest at `path` (§10); with `audit`, each outcome carries the
    /// call's audit records, and `sink` receives every record (the manifest's own sinks do
    /// too). The error lists every problem of the manifest.
    pub fn from_manifest(
        path: &str,
        audit: bool,
        sink: Option<ObservabilityAuditHandler>,
    ) -> Result<EngineHandle, String> {
        let handler = audit_handler(audit, sink);
        let builder = run_blocking(async move {
            let loaded =
                Manifest::load(path, &CodeRegistry::new()).map_err(|errors| errors.to_string())?;
            match handler {
                Some(handler) => loaded.into_engine_builder_with_audit(handler).await,
                None => loaded.into_engine_builder().await,
            }
            .map_err(|errors| errors.to_string())
        })??;
        Ok(EngineHandle::built(builder, audit))
    }

    fn built(builder: PolicyEngineBuilder, audit: bool) -> EngineHandle {
        EngineHandle {
            engine: builder.build(),
            audit,
        }
    }

    /// Evaluates `point` on the context `context_json` on this thread: the outcome as JSON
    /// (see `portcullis_bindings::outcome`; `thrown` is `true` when the cause is an exception
    /// a Java policy threw, which is returned beside it).
    pub fn evaluate(
        &self,
        point: InterceptionPoint,
        context_json: &str,
    ) -> Result<(String, Option<crate::Thrown>), String> {
        let mut thrown = None;
        // Pinned where it is made, on this thread's stack: the evaluation's future is large (a
        // few KiB), and only a pointer to it is handed on, so it is neither copied at each
        // step of the call nor allocated and freed on the heap each call.
        let outcome = {
            let call = std::pin::pin!(portcullis_bindings::outcome(
                &self.engine,
                // Records share the call's context: the Java layer reads it once for all of them.
                self.audit.then_some(RecordContexts::CallContextOnce),
                point,
                context_json,
                |cause| {
                    thrown = JavaPolicyError::thrown(cause);
                    Value::Bool(thrown.is_some())
                },
            ));
            run_blocking(call)?
        };
        Ok((outcome, thrown))
    }

    /// Records that `by` approved the action whose digest is `digest`, for one call within
    /// `ttl` (the engine's grant store; the error is why the store refused it).
    pub fn grant(&self, digest: &str, by: &str, ttl: Duration) -> Result<(), String> {
        run_blocking(self.engine.approvals().grant(digest, by, ttl))?
            .map_err(|error| error_chain(&*error))
    }
}

/// A policy evaluated by the Rust engine (not by Java): what `DslInputPolicy`,
/// `RegoInputPolicy`, `RegoServerInputPolicy`, `HttpInputPolicy` and their twins hold.
pub struct NativePolicy {
    id: String,
    /// The policy, at its point.
    pub policy: PointPolicy,
    problems: Vec<String>,
    warnings: Vec<String>,
}

/// How to reach a server, as the Java options classes give it (JSON): `base_url`, and
/// optionally `timeout_ms` and `headers`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientOptions {
    base_url: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    headers: Vec<(String, String)>,
}

fn client_options(json: &str) -> Result<HttpClientOptions, String> {
    let read: ClientOptions =
        serde_json::from_str(json).map_err(|error| format!("invalid client options: {error}"))?;
    let mut options = HttpClientOptions::new(read.base_url.as_str());
    if let Some(timeout) = read.timeout_ms {
        options = options.timeout(Duration::from_millis(timeout));
    }
    for (name, value) in &read.headers {
        options = options.header(name.as_str(), value.as_str());
    }
    Ok(options)
}

impl NativePolicy {
    fn loaded(id: &str, loaded: Loaded) -> NativePolicy {
        NativePolicy {
            id: id.to_owned(),
            policy: loaded.policy,
            problems: loaded.problems,
            warnings: loaded.warnings,
        }
    }

    fn built(id: &str, built: Result<PointPolicy, String>) -> Result<NativePolicy, String> {
        let policy = built?;
        Ok(NativePolicy::loaded(
            id,
            Loaded {
                policy,
                problems: Vec::new(),
                warnings: Vec::new(),
            },
        ))
    }

    /// A DSL policy of `point` from `<dir>/<id>.json`; a rule that cannot be loaded gives a
    /// policy that lists why in its problems and fails each evaluation with it.
    pub fn dsl(point: InterceptionPoint, id: &str, dir: &str) -> NativePolicy {
        NativePolicy::loaded(id, portcullis_bindings::dsl(point, id, Path::new(dir)))
    }

    /// A Rego policy of `point` on the OPA WebAssembly bundle at `bundle`.
    pub fn rego(point: InterceptionPoint, id: &str, bundle: &str) -> Result<NativePolicy, String> {
        NativePolicy::built(id, portcullis_bindings::rego(point, id, bundle))
    }

    /// A policy of `point` whose decision is the document at `package` on a Rego policy
    /// server reached with `options` (JSON).
    pub fn rego_server(
        point: InterceptionPoint,
        id: &str,
        options: &str,
        package: &str,
    ) -> Result<NativePolicy, String> {
        let options = client_options(options)?;
        NativePolicy::built(
            id,
            portcullis_bindings::rego_server(point, id, &options, package),
        )
    }

    /// A policy of `point` evaluated by the remote endpoint reached with `options` (JSON).
    pub fn http(point: InterceptionPoint, id: &str, options: &str) -> Result<NativePolicy, String> {
        let options = client_options(options)?;
        NativePolicy::built(id, portcullis_bindings::http(point, id, &options))
    }

    /// Its id, point, problems and warnings, as JSON.
    pub fn info(&self) -> String {
        json!({
            "id": self.id,
            "point": self.policy.point(),
            "problems": self.problems,
            "warnings": self.warnings,
        })
        .to_string()
    }

    /// The policy's decision alone on a context given as JSON: `{"decision": ..}`, or
    /// `{"error": ..}` with what went wrong.
    pub fn evaluate(&self, context_json: &str) -> Result<String, String> {
        let policy = self.policy.clone();
        let decided = run_blocking(async move {
            match &policy {
                PointPolicy::Input(policy) => decide::<InputContext>(&**policy, context_json).await,
                PointPolicy::ToolCall(policy) => {
                    decide::<ToolCallContext>(&**policy, context_json).await
                }
                PointPolicy::ToolResult(policy) => {
                    decide::<ToolResultContext>(&**policy, context_json).await
                }
                PointPolicy::Output(policy) => {
                    decide::<OutputContext>(&**policy, context_json).await
                }
            }
        })?;
        Ok(match decided {
            Ok(decision) => json!({ "decision": decision }),
            Err(error) => json!({ "error": error }),
        }
        .to_string())
    }
}

/// One policy's decision on a context given as JSON.
async fn decide<C: PolicyContext>(
    policy: &dyn Policy<C>,
    context_json: &str,
) -> Result<Value, String> {
    let context: C = portcullis_bindings::read_context(context_json)?;
    let decision = policy
        .evaluate(&context)
        .await
        .map_err(|error| error_chain(&*error))?;
    serde_json::to_value(&decision).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTEXT: &str = r#"{"messages":[{"role":"user","content":"My SSN is 1"}],"metadata":{"agent_id":"a","session_id":"s","timestamp":"2026-01-01T00:00:00Z"}}"#;

    fn fixtures() -> String {
        format!("{}/../../fixtures/dsl/input", env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn an_engine_denies_and_keeps_its_records() {
        let set = PolicySetHandle::new("deny").unwrap();
        let policy = NativePolicy::dsl(InterceptionPoint::Input, "no_ssn", &fixtures());
        assert!(policy.problems.is_empty(), "{:?}", policy.problems);
        set.add(policy.policy.clone()).unwrap();
        let engine = EngineHandle::new(&set, true, None).unwrap();
        let (outcome, thrown) = engine.evaluate(InterceptionPoint::Input, CONTEXT).unwrap();
        assert!(thrown.is_none());
        let outcome: Value = serde_json::from_str(&outcome).unwrap();
        assert_eq!(outcome["outcome"], "denied");
        assert_eq!(outcome["policy_id"], "no_ssn");
        assert_eq!(outcome["records"][0]["decision"], "deny");
        assert!(set.add(policy.policy).unwrap_err().contains("already went"));
    }

    #[test]
    fn a_grant_lets_one_escalated_call_through() {
        let dir =
            std::env::temp_dir().join(format!("portcullis-java-grant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("ask.json"),
            r#"{"condition": {"field": "tool_name", "equals": "send_email"}, "action": "escalate", "reason": "email leaves the company"}"#,
        )
        .unwrap();
        let policy = NativePolicy::dsl(InterceptionPoint::ToolCall, "ask", dir.to_str().unwrap());
        assert!(policy.problems.is_empty(), "{:?}", policy.problems);
        let set = PolicySetHandle::new("deny").unwrap();
        set.add(policy.policy).unwrap();
        let engine = EngineHandle::new(&set, false, None).unwrap();
        let call = r#"{"tool_name":"send_email","arguments":{"to":"a@b.c"},"calling_message":{"role":"assistant","content":"sending"},"metadata":{"agent_id":"a","session_id":"s","timestamp":"2026-01-01T00:00:00Z"}}"#;
        let evaluate = || -> Value {
            let (outcome, _) = engine.evaluate(InterceptionPoint::ToolCall, call).unwrap();
            serde_json::from_str(&outcome).unwrap()
        };
        let first = evaluate();
        assert_eq!(first["outcome"], "approval_required", "{first}");
        let digest = first["request"]["action_digest"]
            .as_str()
            .unwrap()
            .to_owned();
        engine
            .grant(&digest, "erin", Duration::from_secs(60))
            .unwrap();
        assert_eq!(evaluate()["outcome"], "forward");
        assert_eq!(evaluate()["outcome"], "approval_required");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A grant store that cannot keep anything.
    struct Broken;

    #[async_trait::async_trait]
    impl portcullis_engine::GrantStore for Broken {
        async fn put(
            &self,
            _digest: &str,
            _grant: portcullis_engine::Grant,
        ) -> Result<(), portcullis_engine::BoxError> {
            Err("the grant store is down".into())
        }

        async fn take(
            &self,
            _digest: &str,
        ) -> Result<Option<portcullis_engine::Grant>, portcullis_engine::BoxError> {
            Ok(None)
        }
    }

    #[test]
    fn a_grant_the_store_refuses_is_an_error() {
        let engine = EngineHandle::built(
            PolicyEngine::builder().shared_grant_store(std::sync::Arc::new(Broken)),
            false,
        );
        let refused = engine
            .grant("d", "erin", Duration::from_secs(60))
            .unwrap_err();
        assert!(refused.contains("the grant store is down"), "{refused}");
        assert!(
            engine
                .grant("d", "erin", Duration::MAX)
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(
            PolicySetHandle::new("maybe")
                .err()
                .unwrap()
                .contains("DENY")
        );
        let set = PolicySetHandle::new("allow").unwrap();
        let engine = EngineHandle::new(&set, false, None).unwrap();
        let (outcome, _) = engine
            .evaluate(InterceptionPoint::Input, "{\"messages\": 3}")
            .unwrap();
        assert!(outcome.contains("invalid_context"), "{outcome}");
        assert!(
            NativePolicy::http(InterceptionPoint::Input, "h", "{}")
                .err()
                .unwrap()
                .contains("invalid client options")
        );
        let missing = NativePolicy::dsl(InterceptionPoint::Input, "none", "/nonexistent");
        let decided = missing.evaluate(CONTEXT).unwrap();
        assert!(decided.contains("\"error\""), "{decided}");
        assert!(EngineHandle::from_manifest("/nonexistent.yaml", false, None).is_err());
    }
}
