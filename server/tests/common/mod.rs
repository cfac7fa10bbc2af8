//! A service on 127.0.0.1 with a free port, and the policies the tests use.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{
    BoxError, InputContext, Policy, PolicyDecision, PolicyEngine, PolicyEngineBuilder, PolicySet,
    async_trait,
};
use portcullis_server::{DecisionService, DecisionServiceBuilder, ServeOptions, serve};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running service; stops (gracefully) when dropped or with [`Running::stop`].
pub struct Running {
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub service: DecisionService,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn start(builder: DecisionServiceBuilder, set: Option<PolicySet>) -> Running {
    start_with(builder, set, ServeOptions::new()).await
}

pub async fn start_with(
    builder: DecisionServiceBuilder,
    set: Option<PolicySet>,
    options: ServeOptions,
) -> Running {
    let (builder, engine) = match set {
        Some(set) => (builder, PolicyEngine::builder().policy_set(set)),
        None => (builder.unloaded(), PolicyEngine::builder()),
    };
    start_engine(builder, engine, options).await
}

/// A service on the engine `engine` builds (its sessions, approvals), served with `options`
/// (its open connections counted in the service's `/metrics`).
pub async fn start_engine(
    builder: DecisionServiceBuilder,
    engine: PolicyEngineBuilder,
    options: ServeOptions,
) -> Running {
    let service = builder.build(engine);
    let options = options.metrics_of(&service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port on 127.0.0.1");
    let addr = listener.local_addr().expect("a bound address");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service.clone(), options, async {
        let _ = stopped.await;
    }));
    Running {
        url: format!("http://{addr}"),
        addr,
        service,
        stop: Some(stop),
        task: Some(task),
    }
}

/// Three DSL rules at input (a denial, a redaction, an audit), one at tool_call, and two code
/// policies: one that fails and one that takes its time.
pub fn policies() -> PolicySet {
    rules_set("no secrets")
}

/// The same set, whose denial gives `reason`.
pub fn rules_set(reason: &str) -> PolicySet {
    let deny = json!({
        "condition": {"field": "messages.0.content", "contains": ["secret"]},
        "action": "deny",
        "reason": reason,
    });
    let redact = json!({
        "condition": {"field": "messages.0.content", "contains": ["card"]},
        "action": "redact",
        "redactions": [{"field": "messages.0.content", "strategy": "replace", "pattern": "[0-9]{4}", "replacement": "####"}],
    });
    let audit = json!({"condition": {"always": true}, "action": "audit", "reason": "seen"});
    let rm = json!({
        "condition": {"field": "tool_name", "equals": "rm"},
        "action": "deny",
        "reason": "no rm",
    });
    PolicySet::builder()
        .input(dsl_input("block_secret", &deny))
        .input(dsl_input("mask_card", &redact))
        .input(dsl_input("audit_all", &audit))
        .tool_call(
            DslToolCallPolicy::from_source("no_rm", &rm.to_string(), "no_rm.json")
                .expect("a valid rule"),
        )
        .build()
}

pub fn dsl_input(id: &str, rule: &Value) -> DslInputPolicy {
    DslInputPolicy::from_source(id, &rule.to_string(), &format!("{id}.json")).expect("a valid rule")
}

/// Fails every evaluation.
pub struct Failing;

#[async_trait]
impl Policy<InputContext> for Failing {
    fn id(&self) -> &str {
        "failing"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        Err("the policy store is unreachable".into())
    }
}

/// Allows after a while.
pub struct Slow(pub Duration);

#[async_trait]
impl Policy<InputContext> for Slow {
    fn id(&self) -> &str {
        "slow"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        tokio::time::sleep(self.0).await;
        Ok(PolicyDecision::allow())
    }
}

/// Says when it starts (on its `Notify`), then allows after a while.
pub struct Signalling(pub Duration, pub std::sync::Arc<tokio::sync::Notify>);

#[async_trait]
impl Policy<InputContext> for Signalling {
    fn id(&self) -> &str {
        "signalling"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        self.1.notify_one();
        tokio::time::sleep(self.0).await;
        Ok(PolicyDecision::allow())
    }
}

pub fn input(content: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": content}],
        "metadata": {"agent_id": "agent", "session_id": "s1", "timestamp": "2026-01-01T00:00:00Z"},
    })
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client")
}

/// POSTs `text` as it is, as JSON, and returns the status and the body as JSON (Null when not
/// JSON).
pub async fn post_text(url: &str, text: impl Into<reqwest::Body>) -> (u16, Value) {
    answer(
        client()
            .post(url)
            .header("content-type", "application/json")
            .body(text),
    )
    .await
}

/// POSTs `body` (JSON) and returns the status and the body as JSON (Null when not JSON).
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    answer(client().post(url).json(body)).await
}

/// [`post`] with a bearer token.
pub async fn post_as(url: &str, token: &str, body: &Value) -> (u16, Value) {
    answer(client().post(url).bearer_auth(token).json(body)).await
}

async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub async fn get(url: &str) -> (u16, String) {
    let response = client().get(url).send().await.expect("an answer");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// [`get`] with a bearer token.
pub async fn get_as(url: &str, token: &str) -> (u16, String) {
    let response = client()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}
