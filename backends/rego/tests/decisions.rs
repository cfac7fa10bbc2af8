//! The same Rego decides the same way in process and on a policy server: both backends read a
//! document with one reader. Each case is a Rego package evaluated for real by the
//! OPA-compatible test server (the `server` feature), and in process as a module whose
//! entrypoint evaluates to the same package document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use portcullis_engine::{InputContext, Message, Metadata, Policy, PolicyDecision};
use portcullis_rego::server::{RegoServerClient, RegoServerClientOptions, RegoServerInputPolicy};
use portcullis_rego::{RegoBundle, RegoInputPolicy};
use portcullis_testing::RegoServer;
use serde_json::Value;

/// A package, the document it evaluates to, and the decision both backends read from it.
struct Case {
    package: &'static str,
    rules: &'static str,
    document: &'static str,
    decision: fn(name: &str) -> PolicyDecision,
}

const CASES: &[Case] = &[
    Case {
        package: "falsy",
        rules: "decision := false\nreason := \"not today\"\nhelper := [1, 2]",
        document: r#"{"decision":false,"reason":"not today","helper":[1,2]}"#,
        decision: |_| PolicyDecision::deny("not today"),
    },
    Case {
        package: "bare_false",
        rules: "decision := false",
        document: r#"{"decision":false}"#,
        decision: |name| PolicyDecision::deny(format!("denied by {name}")),
    },
    Case {
        package: "truthy",
        rules: "decision := true\nreason := \"ignored\"",
        document: r#"{"decision":true,"reason":"ignored"}"#,
        decision: |_| PolicyDecision::allow(),
    },
    Case {
        package: "named",
        rules: "decision := \"deny\"\nreason := \"r\"\npolicy_id := \"other\"",
        document: r#"{"decision":"deny","policy_id":"other","reason":"r"}"#,
        decision: |_| PolicyDecision::Deny {
            reason: Some("r".into()),
            policy_id: Some("other".into()),
        },
    },
    Case {
        package: "object",
        rules: "decision := {\"decision\": \"audit\", \"reason\": \"look\"}\nreason := \"ignored\"",
        document: r#"{"decision":{"decision":"audit","reason":"look"},"reason":"ignored"}"#,
        decision: |_| PolicyDecision::audit("look"),
    },
];

fn context() -> InputContext {
    InputContext::new(
        vec![Message::user("hello")],
        Metadata::new("agent", "session"),
    )
}

#[tokio::test]
async fn both_backends_read_a_package_the_same_way() {
    let server = RegoServer::start().await.expect("the test server starts");
    let options = RegoServerClientOptions::new(server.url());
    let client = RegoServerClient::new(options.clone()).expect("client");
    let entrypoints: Vec<&str> = CASES.iter().map(|case| case.package).collect();
    let documents: Vec<&str> = CASES.iter().map(|case| case.document).collect();
    let bundle = RegoBundle::from_bytes(&common::document_module(&entrypoints, &documents))
        .expect("the document module opens");
    for case in CASES {
        let source = format!("package {}\n\n{}\n", case.package, case.rules);
        client
            .put_policy(case.package, &source)
            .await
            .expect("policy loads");
        // The server's document is the one the module stands in for.
        let served = client
            .evaluate(case.package, &context())
            .await
            .expect("evaluates");
        let expected: Value = serde_json::from_str(case.document).expect("json");
        assert_eq!(served, Some(expected), "{}", case.package);

        let remote = RegoServerInputPolicy::new("remote", options.clone(), case.package)
            .expect("remote policy");
        let local = RegoInputPolicy::from_bundle_entrypoint("local", bundle.clone(), case.package)
            .expect("local policy");
        let remote_decision = remote.evaluate(&context()).await;
        let local_decision = local.evaluate(&context()).await;
        assert_eq!(
            remote_decision.as_ref().ok(),
            Some(&(case.decision)(&format!("data.{}", case.package))),
            "{} through the server: {remote_decision:?}",
            case.package
        );
        assert_eq!(
            local_decision.as_ref().ok(),
            Some(&(case.decision)(case.package)),
            "{} in process: {local_decision:?}",
            case.package
        );
    }
    server.shutdown().await;
}
