//! The real OPA-built modules of `../shared/fixtures` through the policy types, a policy engine
//! and `RegoBundle`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};

use portcullis_engine::{
    AuditDecision, EngineError, InputContext, Message, Metadata, OutputContext, Policy,
    PolicyDecision, PolicyEngine, PolicySet, Role, ToolCallContext,
};
use portcullis_rego::{
    RegoBundle, RegoError, RegoEvaluationError, RegoInputPolicy, RegoOutputPolicy,
    RegoToolCallPolicy,
};
use serde_json::{Value, json};

fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-42").with_timestamp("2026-01-01T00:00:00Z")
}

fn input(texts: &[&str]) -> InputContext {
    InputContext::new(
        texts
            .iter()
            .map(|text| Message::new(Role::User, *text))
            .collect(),
        metadata(),
    )
}

fn tool_call(tool: &str) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("query".into(), json!("rust wasm"));
    ToolCallContext::new(
        tool,
        arguments,
        Message::new(Role::Assistant, "let me look that up"),
        metadata(),
    )
}

fn output(text: &str) -> OutputContext {
    OutputContext::new(Message::new(Role::Assistant, text), metadata())
}

fn read_json(relative: &str) -> Value {
    let path = common::fixture(relative);
    let bytes = std::fs::read(&path).expect("readable fixture");
    serde_json::from_slice(&bytes).expect("JSON fixture")
}

#[tokio::test]
async fn approved_tools_as_a_tool_call_policy() {
    common::open("rego-wasm/approved-tools.tar.gz");
    let policy = RegoToolCallPolicy::new(
        "approved-tools",
        common::fixture("rego-wasm/approved-tools.tar.gz"),
    )
    .expect("the bundle opens");
    assert_eq!(policy.id(), "approved-tools");
    assert_eq!(policy.entrypoint(), "aps/tool_call/decision");
    assert_eq!(policy.bundle().abi_version(), (1, 3));
    for tool in ["web_search", "read_file", "summarize"] {
        assert_eq!(
            policy.evaluate(&tool_call(tool)).await.expect("evaluates"),
            PolicyDecision::allow(),
            "{tool}"
        );
    }
    for tool in ["delete_database", "Web_Search", ""] {
        assert_eq!(
            policy.evaluate(&tool_call(tool)).await.expect("evaluates"),
            PolicyDecision::deny("Tool is not in the approved list."),
            "{tool}"
        );
    }
}

#[tokio::test]
async fn no_ssn_as_an_input_policy() {
    common::open("rego-wasm/no-ssn-input.tar.gz");
    let policy = RegoInputPolicy::new("no-ssn", common::fixture("rego-wasm/no-ssn-input.tar.gz"))
        .expect("opens");
    assert_eq!(policy.entrypoint(), "aps/input/decision");
    let allow = [
        &["hello"][..],
        &["call me at 555-1234", "order 12-34-5678"],
        &[],
    ];
    for texts in allow {
        assert_eq!(
            policy.decide(&input(texts)),
            Ok(PolicyDecision::allow()),
            "{texts:?}"
        );
    }
    let deny = [
        &["My SSN is 123-45-6789"][..],
        &["hi", "it is 987-65-4321, ok?"],
    ];
    for texts in deny {
        assert_eq!(
            policy.evaluate(&input(texts)).await.expect("evaluates"),
            PolicyDecision::deny("Message contains a potential SSN."),
            "{texts:?}"
        );
    }
}

#[tokio::test]
async fn no_blocked_domain_as_an_output_policy() {
    common::open("rego-wasm/no-blocked-domain-output.tar.gz");
    let policy = RegoOutputPolicy::new(
        "no-blocked-domain",
        common::fixture("rego-wasm/no-blocked-domain-output.tar.gz"),
    )
    .expect("opens");
    assert_eq!(policy.entrypoint(), "aps/output/decision");
    for text in [
        "see https://example.com",
        "MALICIOUS.EXAMPLE is fine (case-sensitive)",
    ] {
        assert_eq!(
            policy.evaluate(&output(text)).await.expect("evaluates"),
            PolicyDecision::allow(),
            "{text}"
        );
    }
    for text in [
        "go to malicious.example now",
        "log in at https://phishing.example/login",
    ] {
        assert_eq!(
            policy.evaluate(&output(text)).await.expect("evaluates"),
            PolicyDecision::deny("Response references a blocked domain."),
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_three_bundles_in_a_policy_engine() {
    let fixtures = common::fixtures();
    for bundle in ["no-ssn-input", "approved-tools", "no-blocked-domain-output"] {
        common::open(&format!("rego-wasm/{bundle}.tar.gz"));
    }
    let records = Arc::new(Mutex::new(
        Vec::<(String, AuditDecision, Option<String>)>::new(),
    ));
    let sink = Arc::clone(&records);
    let set = PolicySet::builder()
        .input(
            RegoInputPolicy::new("no-ssn", fixtures.join("rego-wasm/no-ssn-input.tar.gz"))
                .expect("opens"),
        )
        .tool_call(
            RegoToolCallPolicy::new(
                "approved-tools",
                fixtures.join("rego-wasm/approved-tools.tar.gz"),
            )
            .expect("opens"),
        )
        .output(
            RegoOutputPolicy::new(
                "no-blocked-domain",
                fixtures.join("rego-wasm/no-blocked-domain-output.tar.gz"),
            )
            .expect("opens"),
        )
        .build();
    let engine = PolicyEngine::builder()
        .policy_set(set)
        .on_audit(move |record: &portcullis_engine::AuditRecord<'_>| {
            if let Ok(mut records) = sink.lock() {
                records.push((
                    record.policy_id.to_string(),
                    record.decision,
                    record.reason.as_deref().map(str::to_owned),
                ));
            }
        })
        .build();

    let clean = input(&["what is the weather?"]);
    let evaluation = engine.evaluate_input(&clean).await.expect("allowed");
    assert_eq!(evaluation.context(), &clean);
    assert_eq!(evaluation.decisions()[0].policy_id, "no-ssn");
    assert_eq!(evaluation.decisions()[0].decision, PolicyDecision::allow());

    match engine.evaluate_input(&input(&["SSN 123-45-6789"])).await {
        Err(EngineError::Denied(denial)) => {
            assert_eq!(denial.policy_id(), "no-ssn");
            assert_eq!(denial.reason(), Some("Message contains a potential SSN."));
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    assert!(
        engine
            .evaluate_tool_call(&tool_call("read_file"))
            .await
            .is_ok()
    );
    match engine.evaluate_tool_call(&tool_call("rm_rf")).await {
        Err(EngineError::Denied(denial)) => {
            assert_eq!(denial.policy_id(), "approved-tools");
            assert_eq!(denial.reason(), Some("Tool is not in the approved list."));
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    assert!(engine.evaluate_output(&output("all good")).await.is_ok());
    match engine
        .evaluate_output(&output("visit phishing.example"))
        .await
    {
        Err(EngineError::Denied(denial)) => {
            assert_eq!(denial.policy_id(), "no-blocked-domain");
            assert_eq!(
                denial.reason(),
                Some("Response references a blocked domain.")
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    let records = records.lock().expect("records").clone();
    let summary: Vec<(&str, AuditDecision)> = records
        .iter()
        .map(|(id, decision, _)| (id.as_str(), *decision))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("no-ssn", AuditDecision::Allow),
            ("no-ssn", AuditDecision::Deny),
            ("approved-tools", AuditDecision::Allow),
            ("approved-tools", AuditDecision::Deny),
            ("no-blocked-domain", AuditDecision::Allow),
            ("no-blocked-domain", AuditDecision::Deny),
        ]
    );
    assert_eq!(
        records[1].2.as_deref(),
        Some("Message contains a potential SSN.")
    );
}

#[tokio::test]
async fn boolean_and_undefined_results_through_the_policy_types() {
    let fixtures = common::fixtures();
    // example/allow is false for a context without user/object/action: a denial naming it.
    let bundle = common::open("opa-wasm-extra/example-allow/policy.wasm")
        .with_data(read_json("opa-wasm-extra/example-allow/data.json"))
        .expect("data");
    let policy = RegoInputPolicy::from_bundle("example", bundle).expect("one entrypoint");
    assert_eq!(
        policy.decide(&input(&["hi"])),
        Ok(PolicyDecision::deny("denied by example/allow"))
    );

    // test/p is undefined unless input.fragment == "moo": the engine reports an evaluation error.
    common::open("opa-wasm-extra/test-p/policy.wasm");
    let policy = RegoInputPolicy::new("test-p", fixtures.join("opa-wasm-extra/test-p/policy.wasm"))
        .expect("opens");
    assert_eq!(
        policy.decide(&input(&["hi"])),
        Err(RegoEvaluationError::NoDecision {
            entrypoint: "test/p".to_owned()
        })
    );
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().input(policy).build())
        .build();
    match engine.evaluate_input(&input(&["hi"])).await {
        Err(EngineError::Evaluation(error)) => {
            assert_eq!(error.policy_id(), "test-p");
            let cause = std::error::Error::source(&error)
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(cause.contains("policy produced no decision"), "{cause}");
        }
        other => panic!("expected an evaluation error, got {other:?}"),
    }
}

#[test]
fn entrypoints_can_be_named_and_wrong_names_are_construction_errors() {
    let path = common::fixture("rego-wasm/approved-tools.tar.gz");
    common::open("rego-wasm/approved-tools.tar.gz");
    let policy = RegoToolCallPolicy::with_entrypoint("tools", &path, "aps/tool_call/decision")
        .expect("exists");
    assert_eq!(policy.entrypoint(), "aps/tool_call/decision");
    let error = RegoToolCallPolicy::with_entrypoint("tools", &path, "aps/tool_call/allow")
        .expect_err("no such");
    assert!(
        matches!(&error, RegoError::Entrypoint { available, .. } if available == &["aps/tool_call/decision"])
    );
    assert!(error.to_string().contains("aps/tool_call/allow"), "{error}");
}

#[tokio::test]
async fn test_p_abi_1_2_boolean_and_undefined() {
    let bundle = common::open("opa-wasm-extra/test-p/policy.wasm");
    assert_eq!(bundle.abi_version(), (1, 2));
    assert_eq!(bundle.entrypoints(), vec!["test/p".to_owned()]);
    assert_eq!(bundle.data(), &json!({}));
    assert_eq!(
        bundle.evaluate("test/p", &json!({"fragment": "moo"})).await,
        Ok(Some(json!(true)))
    );
    assert_eq!(
        bundle.evaluate("test/p", &json!({"fragment": "boo"})).await,
        Ok(None)
    );
    assert_eq!(bundle.evaluate("test/p", &json!(null)).await, Ok(None));
}

#[tokio::test]
async fn example_allow_abi_1_1_with_its_data_document() {
    let bundle = common::open("opa-wasm-extra/example-allow/policy.wasm");
    assert_eq!(
        bundle.abi_version(),
        (1, 1),
        "exercises the opa_eval_ctx_* path"
    );
    let request =
        |user: &str, action: &str| json!({"user": user, "object": "article", "action": action});
    // Without the data document nobody has a role.
    assert_eq!(
        bundle
            .evaluate("example/allow", &request("userA", "edit"))
            .await,
        Ok(Some(json!(false)))
    );
    let bundle = bundle
        .with_data(read_json("opa-wasm-extra/example-allow/data.json"))
        .expect("data");
    let cases = [
        ("userA", "edit", true),
        ("userA", "create", true),
        ("userA", "delete", false),
        ("userB", "edit", false),
    ];
    for _ in 0..3 {
        for (user, action, allowed) in cases {
            assert_eq!(
                bundle
                    .evaluate("example/allow", &request(user, action))
                    .await,
                Ok(Some(json!(allowed))),
                "{user} {action}"
            );
        }
    }
}

#[tokio::test]
async fn authz_allow_bundle_with_replaced_data_and_regex() {
    let bundle = common::open("opa-wasm-extra/authz-allow/bundle.tar.gz");
    assert_eq!(bundle.abi_version(), (1, 2));
    assert_eq!(bundle.entrypoints(), vec!["authz/allow".to_owned()]);
    assert_eq!(bundle.data(), &json!({}));
    let data = json!({
        "permissions": read_json("opa-wasm-extra/authz-allow/permissions.json"),
        "entrypointSetting": read_json("opa-wasm-extra/authz-allow/entrypointSetting.json"),
    });
    let bundle = bundle.with_data(data.clone()).expect("data");
    assert_eq!(bundle.data(), &data);
    let cases = [
        (
            json!({"who": "alice", "path": "/users", "method": "GET"}),
            true,
        ),
        (
            json!({"who": "bob", "path": "/users", "method": "GET"}),
            true,
        ),
        (
            json!({"who": "carol", "path": "/users", "method": "GET"}),
            false,
        ),
        (
            json!({"who": "carol", "path": "/offices", "method": "GET"}),
            true,
        ),
        (
            json!({"who": "bob", "path": "/users", "method": "POST"}),
            false,
        ),
        // pathRegex entrypoint (regex.match): only the owner or an admin may read an age.
        (
            json!({"who": "bob", "path": "/users/alice/age", "method": "GET", "args": {"user_name": "alice"}}),
            false,
        ),
        (
            json!({"who": "bob", "path": "/users/bob/age", "method": "GET", "args": {"user_name": "bob"}}),
            true,
        ),
        (
            json!({"who": "alice", "path": "/users/bob/age", "method": "GET", "args": {"user_name": "bob"}}),
            true,
        ),
    ];
    for (request, allowed) in cases {
        assert_eq!(
            bundle.evaluate("authz/allow", &request).await,
            Ok(Some(json!(allowed))),
            "{request}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_hundred_concurrent_evaluations_on_one_bundle() {
    common::open("rego-wasm/approved-tools.tar.gz");
    let policy = Arc::new(
        RegoToolCallPolicy::new(
            "approved-tools",
            common::fixture("rego-wasm/approved-tools.tar.gz"),
        )
        .expect("opens"),
    );
    // A bundle of its own (not the shared one other tests use), so its pool is this test's alone.
    let ssn = common::open("rego-wasm/no-ssn-input.tar.gz")
        .with_data(json!({}))
        .expect("same data");
    let tools = [
        "web_search",
        "exec_shell",
        "read_file",
        "send_email",
        "summarize",
    ];
    let mut tasks = Vec::new();
    for i in 0..400usize {
        let policy = Arc::clone(&policy);
        let ssn = ssn.clone();
        tasks.push(tokio::spawn(async move {
            let tool = tools[i % tools.len()];
            let decision = policy
                .evaluate(&tool_call(tool))
                .await
                .map_err(|error| error.to_string());
            let text = if i % 3 == 0 {
                format!("number {:03}-{:02}-{:04}", i % 1000, i % 100, i)
            } else {
                format!("message {i}")
            };
            let ssn_result = ssn
                .evaluate(
                    "aps/input/decision",
                    &serde_json::to_value(input(&[&text])).expect("json"),
                )
                .await;
            (i, tool, decision, i % 3 == 0, ssn_result)
        }));
    }
    for task in tasks {
        let (i, tool, decision, has_ssn, ssn_result) = task.await.expect("task");
        let expected = if ["web_search", "read_file", "summarize"].contains(&tool) {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("Tool is not in the approved list.")
        };
        assert_eq!(decision, Ok(expected), "call {i} ({tool})");
        let expected = if has_ssn {
            json!({"decision": "deny", "reason": "Message contains a potential SSN."})
        } else {
            json!({"decision": "allow"})
        };
        assert_eq!(ssn_result, Ok(Some(expected)), "call {i}");
    }
    // The pool reuses instances: a handful for 400 evaluations, at most one per worker plus the first.
    let idle = policy.bundle().idle_instances();
    assert!((1..=5).contains(&idle), "{idle} idle instances");
}

#[tokio::test]
async fn sequential_evaluations_reuse_one_instance() {
    common::open("rego-wasm/no-blocked-domain-output.tar.gz");
    let bundle = RegoBundle::open(common::fixture("rego-wasm/no-blocked-domain-output.tar.gz"))
        .expect("opens");
    for i in 0..200 {
        let text = if i % 2 == 0 {
            "fine"
        } else {
            "malicious.example"
        };
        let result = bundle
            .evaluate(
                "aps/output/decision",
                &json!({"response": {"role": "assistant", "content": text}}),
            )
            .await;
        let expected = if i % 2 == 0 { "allow" } else { "deny" };
        assert_eq!(
            result
                .expect("evaluates")
                .and_then(|v| v.get("decision").cloned()),
            Some(json!(expected))
        );
    }
    assert_eq!(bundle.idle_instances(), 1);
}

#[tokio::test]
async fn a_regex_module_keeps_its_pattern_cache_and_stays_within_its_memory_limit() {
    // no-ssn-input matches a regular expression: its instances keep their heap (and the compiled
    // pattern) between evaluations until the garbage passes a sixteenth of the memory limit, here
    // 256 KiB. A thousand inputs of 16 KiB make 16 MiB of garbage: the instance must reset its
    // heap on the way, or it would run out of its 4 MiB.
    common::open("rego-wasm/no-ssn-input.tar.gz");
    let policy = RegoInputPolicy::from_bundle(
        "no-ssn",
        RegoBundle::open(common::fixture("rego-wasm/no-ssn-input.tar.gz"))
            .expect("opens")
            .with_memory_limit(4 * 1024 * 1024)
            .expect("limit"),
    )
    .expect("policy");
    let filler = "lorem ipsum ".repeat(16 * 1024 / 12);
    for i in 0..1000 {
        let text = match i % 3 {
            0 => format!(
                "{filler} my number is {:03}-{:02}-{:04}",
                i % 1000,
                i % 100,
                i
            ),
            1 => format!("{filler} call {i}"),
            _ => format!("short {i}-{i}"),
        };
        let expected = if i % 3 == 0 {
            PolicyDecision::deny("Message contains a potential SSN.")
        } else {
            PolicyDecision::allow()
        };
        assert_eq!(
            policy.decide(&input(&["hello", &text])),
            Ok(expected),
            "evaluation {i}"
        );
    }
    assert_eq!(
        policy.bundle().idle_instances(),
        1,
        "no instance was dropped"
    );
}
