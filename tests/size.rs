//! Size and shape: a 10 MiB message goes through a DSL, a Rego and a remote policy, and
//! arguments nested 10,000 levels deep are a clear error through each of them (not a stack
//! overflow). The timings are in `benches/size.rs`; these tests only check the outcomes.
#![cfg(all(feature = "dsl", feature = "rego", feature = "http"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::bundle;
use portcullis::dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis::http::{HttpClientOptions, HttpInputPolicy, HttpToolCallPolicy};
use portcullis::rego::{RegoInputPolicy, RegoToolCallPolicy};
use portcullis::{
    CONTEXT_CHECK_ID, EngineError, InputContext, InputPolicy, Message, Metadata, Policy,
    PolicyEngine, PolicySet, Role, ToolCallContext,
};
use portcullis_testing::{EvaluateServer, Reply};
use serde_json::{Map, Value};

const MIB: usize = 1024 * 1024;

/// A message of `bytes` bytes of ordinary text with `tail` at its very end.
fn big_message(bytes: usize, tail: &str) -> InputContext {
    let line = "the quick brown fox jumps over the lazy dog 0123456789.\n";
    let mut text = line.repeat((bytes - tail.len()) / line.len() + 1);
    text.truncate(bytes - tail.len());
    text.push_str(tail);
    assert_eq!(text.len(), bytes);
    InputContext::new(
        vec![Message::new(Role::User, text)],
        Metadata::new("agent", "session"),
    )
}

/// An engine with one input policy.
fn engine_with(policy: impl InputPolicy + 'static) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(PolicySet::builder().input(policy).build())
        .build()
}

const SSN_RULE: &str = r#"{
  "condition": { "always": true },
  "action": "redact",
  "redactions": [
    {
      "field": "messages.*.content",
      "strategy": "replace",
      "pattern": "\\b\\d{3}-\\d{2}-\\d{4}\\b",
      "replacement": "[SSN]"
    }
  ]
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_mib_message_goes_through_dsl_rego_and_remote_policies() {
    let with_ssn = big_message(10 * MIB, " my ssn is 123-45-6789");
    let clean = big_message(10 * MIB, " nothing to see here");

    // DSL: the SSN at the very end is redacted, the rest is kept.
    let dsl = engine_with(DslInputPolicy::from_source("ssn", SSN_RULE, "ssn.json").expect("dsl"));
    let evaluation = dsl.evaluate_input(&with_ssn).await.expect("redacted");
    let content = &evaluation.context().messages[0].content;
    assert!(
        content.ends_with(" my ssn is [SSN]"),
        "{}",
        &content[content.len() - 40..]
    );
    assert_eq!(
        content.len(),
        10 * MIB - "123-45-6789".len() + "[SSN]".len()
    );
    assert_eq!(
        dsl.evaluate_input(&clean).await.expect("clean").context(),
        &clean
    );

    // Rego (real OPA WebAssembly): the SSN at the end is found in 10 MiB; the default memory
    // limit (64 MiB) holds a 10 MiB input.
    let rego = engine_with(
        RegoInputPolicy::from_bundle("rego-ssn", bundle("rego-wasm/no-ssn-input.tar.gz"))
            .expect("rego"),
    );
    match rego.evaluate_input(&with_ssn).await {
        Err(EngineError::Denied(denial)) => {
            assert_eq!(denial.reason(), Some("Message contains a potential SSN."));
        }
        other => panic!(
            "expected a denial, got {:?}",
            other.map(|e| e.is_modified())
        ),
    }
    assert_eq!(
        rego.evaluate_input(&clean).await.expect("clean").context(),
        &clean
    );

    // Remote: the service receives the whole 10 MiB context and decides on it.
    let server = EvaluateServer::scripted(|request| {
        let body = String::from_utf8_lossy(&request.body);
        let decision = if body.contains("123-45-6789") {
            portcullis::PolicyDecision::deny("remote: SSN")
        } else {
            portcullis::PolicyDecision::allow()
        };
        Reply::decision(&decision)
    })
    .await
    .expect("server");
    let options = HttpClientOptions::new(server.url()).timeout(Duration::from_secs(60));
    let remote = engine_with(HttpInputPolicy::new("remote-ssn", options).expect("remote"));
    match remote.evaluate_input(&with_ssn).await {
        Err(EngineError::Denied(denial)) => assert_eq!(denial.reason(), Some("remote: SSN")),
        other => panic!(
            "expected a denial, got {:?}",
            other.map(|e| e.is_modified())
        ),
    }
    assert_eq!(
        remote
            .evaluate_input(&clean)
            .await
            .expect("clean")
            .context(),
        &clean
    );
    let sent = server.requests()[0].json().expect("JSON");
    assert_eq!(
        sent["context"]["messages"][0]["content"]
            .as_str()
            .map(str::len),
        Some(10 * MIB)
    );
    server.shutdown().await;
}

/// `{"a": {"a": ... {"a": 1}}}`, `depth` objects deep, built without recursion.
fn nested(depth: usize) -> Value {
    let mut value = Value::from(1);
    for _ in 0..depth {
        let mut map = Map::new();
        map.insert("a".into(), value);
        value = Value::Object(map);
    }
    value
}

/// Takes a value apart without recursion (serde_json drops nested values recursively, which a
/// 10,000-level value would turn into a stack overflow of the test itself).
fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
}

fn deep_call() -> ToolCallContext {
    let mut arguments = Map::new();
    arguments.insert("query".into(), nested(10_000));
    ToolCallContext::new(
        "web_search",
        arguments,
        Message::new(Role::Assistant, "calling"),
        Metadata::new("agent", "session"),
    )
}

fn dismantle_call(call: ToolCallContext) {
    for (_, value) in call.arguments {
        dismantle(value);
    }
}

#[tokio::test]
async fn arguments_nested_ten_thousand_levels_deep_are_a_clear_error() {
    // As JSON text (what arrives from a model): serde_json's recursion limit refuses it.
    let text = format!(
        r#"{{"tool_name": "web_search", "arguments": {{"q": {}1{}}}, "calling_message": {{"role": "assistant", "content": ""}}, "metadata": {{"agent_id": "a", "session_id": "s"}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let error = serde_json::from_str::<ToolCallContext>(&text).expect_err("too deep");
    assert!(
        error.to_string().contains("recursion limit exceeded"),
        "{error}"
    );

    // As a value built in code: the engine refuses it before any policy runs, whatever kind
    // the policy is; the remote service is never called.
    let server = EvaluateServer::start().await.expect("server");
    let engines = [
        (
            "dsl",
            PolicySet::builder()
                .tool_call(
                    DslToolCallPolicy::from_source("dsl", common::TOOL_RULE, "rm.json")
                        .expect("dsl"),
                )
                .build(),
        ),
        (
            "rego",
            PolicySet::builder()
                .tool_call(
                    RegoToolCallPolicy::from_bundle(
                        "rego",
                        bundle("rego-wasm/approved-tools.tar.gz"),
                    )
                    .expect("rego"),
                )
                .build(),
        ),
        (
            "remote",
            PolicySet::builder()
                .tool_call(
                    HttpToolCallPolicy::new("remote", HttpClientOptions::new(server.url()))
                        .expect("remote"),
                )
                .build(),
        ),
    ];
    for (kind, set) in engines {
        let engine = PolicyEngine::builder().policy_set(set).build();
        let call = deep_call();
        let error = engine.evaluate_tool_call(&call).await.expect_err(kind);
        assert_eq!(error.policy_id(), CONTEXT_CHECK_ID, "{kind}: {error}");
        let text = portcullis::error::error_chain(&error);
        assert!(
            text.contains("nested deeper than 128 levels"),
            "{kind}: {text}"
        );
        dismantle_call(call);
    }
    assert!(server.requests().is_empty());
    server.shutdown().await;
}

#[test]
fn policies_called_directly_on_deep_arguments_fail_cleanly() {
    // Without the engine's check in front, each kind of policy still ends in a decision or an
    // error. Serializing 10,000 levels is recursive in serde_json itself, so this runs on a
    // thread with room for it; what is shown is that nothing of ours overflows or panics.
    std::thread::Builder::new()
        .stack_size(256 * MIB)
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let call = deep_call();
                let dsl = DslToolCallPolicy::from_source("dsl", common::TOOL_RULE, "rm.json")
                    .expect("dsl");
                assert_eq!(
                    dsl.evaluate(&call).await.expect("a DSL rule decides"),
                    portcullis::PolicyDecision::allow()
                );

                let rego = RegoToolCallPolicy::from_bundle(
                    "rego",
                    bundle("rego-wasm/approved-tools.tar.gz"),
                )
                .expect("rego");
                // OPA's JSON parser in the guest refuses (or the guest runs out of stack):
                // an evaluation error either way, never a crash of the host.
                let outcome = rego.evaluate(&call).await;
                if let Err(error) = &outcome {
                    assert!(!error.to_string().is_empty());
                }

                let server = EvaluateServer::start().await.expect("server");
                let remote =
                    HttpToolCallPolicy::new("remote", HttpClientOptions::new(server.url()))
                        .expect("remote");
                // The service gets the deep JSON; its answer decides.
                let decision = remote.evaluate(&call).await.expect("the service answers");
                assert_eq!(decision, portcullis::PolicyDecision::allow());
                server.shutdown().await;
                dismantle_call(call);
            });
        })
        .expect("thread")
        .join()
        .expect("no panic");
}
