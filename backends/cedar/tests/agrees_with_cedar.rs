#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The backend decides as Cedar's own authorizer does on the request the backend built, and
//! leaving out the context no policy reads changes no decision: generated policy sets,
//! entities and calls.

use cedar_policy::{Authorizer, Decision};
use portcullis_cedar::{CedarToolCallPolicy, NO_PERMIT_REASON, cedar_policy};
use portcullis_engine::{Message, Metadata, PolicyDecision, Role, ToolCallContext};
use proptest::prelude::*;
use serde_json::json;

const AGENTS: [&str; 3] = ["alice", "bob", ""];
const TOOLS: [&str; 3] = ["web_search", "send_email", "shell"];
const LABELS: [&str; 2] = ["untrusted", "pii"];

/// One generated policy: its effect, scope and condition.
#[derive(Debug, Clone)]
struct Generated {
    forbid: bool,
    principal: usize,
    resource: usize,
    condition: usize,
    reason: Option<usize>,
}

fn policy_text(policy: &Generated, index: usize) -> String {
    let principal = match policy.principal {
        0 => "principal".to_owned(),
        1 => format!("principal == Agent::\"{}\"", AGENTS[index % 2]),
        _ => "principal in Group::\"admins\"".to_owned(),
    };
    let resource = match policy.resource {
        0 => "resource".to_owned(),
        n => format!("resource == Tool::\"{}\"", TOOLS[n - 1]),
    };
    let condition = match policy.condition {
        0 => String::new(),
        1 => format!(
            "when {{ context.metadata has session && context.metadata.session.labels.contains(\"{}\") }}",
            LABELS[index % 2]
        ),
        // Errors when `count` is missing or not a number: a policy that fails.
        2 => "when { context.arguments.count > 2 }".to_owned(),
        3 => "when { context.arguments has count && context.arguments.count == 1 }".to_owned(),
        _ => "unless { context.tool_name like \"s*\" }".to_owned(),
    };
    let reason = policy
        .reason
        .map(|n| format!("@reason(\"reason {n}\") "))
        .unwrap_or_default();
    let effect = if policy.forbid { "forbid" } else { "permit" };
    format!(
        "{reason}{effect}({principal}, action == Action::\"tool_call\", {resource}) {condition};\n"
    )
}

fn generated() -> impl Strategy<Value = Generated> {
    (
        any::<bool>(),
        0..3usize,
        0..4usize,
        0..5usize,
        proptest::option::of(0..5usize),
    )
        .prop_map(
            |(forbid, principal, resource, condition, reason)| Generated {
                forbid,
                principal,
                resource,
                condition,
                reason,
            },
        )
}

fn call(
    agent: usize,
    tool: usize,
    labels: Vec<usize>,
    count: Option<serde_json::Value>,
) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    if let Some(count) = count {
        arguments.insert("count".to_owned(), count);
    }
    let mut metadata = Metadata::new(AGENTS[agent], "s");
    if !labels.is_empty() {
        let labels: Vec<_> = labels.into_iter().map(|n| LABELS[n]).collect();
        metadata.extra.insert(
            "session".to_owned(),
            json!({"labels": labels, "counters": {}}),
        );
    }
    ToolCallContext::new(
        TOOLS[tool],
        arguments,
        Message::new(Role::Assistant, "calling"),
        metadata,
    )
}

const ENTITIES: &str = r#"[
    {"uid": {"type": "Agent", "id": "bob"}, "attrs": {}, "parents": [{"type": "Group", "id": "admins"}]}
]"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn the_decision_is_cedars_on_the_request_built(
        policies in proptest::collection::vec(generated(), 0..6),
        agent in 0..3usize,
        tool in 0..3usize,
        labels in proptest::collection::vec(0..2usize, 0..3),
        count in proptest::option::of(prop_oneof![
            (0..4i64).prop_map(|n| json!(n)),
            Just(json!("three")),
            Just(json!(1.5)),
        ]),
    ) {
        let text: String = policies.iter().enumerate().map(|(index, policy)| policy_text(policy, index)).collect();
        let backend = CedarToolCallPolicy::new("generated", text.clone()).unwrap().with_entities(ENTITIES).unwrap();
        let context = call(agent, tool, labels, count);
        let request = backend.request_for(&context).unwrap();
        let response = Authorizer::new().is_authorized(&request, backend.policy_set(), backend.entities());

        let mut forbids: Vec<usize> = response
            .diagnostics()
            .reason()
            .filter(|id| backend.policy_set().policy(id).unwrap().effect() == cedar_policy::Effect::Forbid)
            .map(|id| id.to_string().trim_start_matches("policy").parse().unwrap())
            .collect();
        forbids.sort();
        let failed = response.diagnostics().errors().next().is_some();
        let decided = backend.decide(&context);
        match (response.decision(), forbids.first()) {
            (Decision::Deny, Some(&first)) => {
                let reason = policies[first].reason.map_or(format!("policy{first}"), |n| format!("reason {n}"));
                prop_assert_eq!(decided.unwrap(), PolicyDecision::Deny { reason: Some(reason), policy_id: Some("generated".to_owned()) });
            }
            _ if failed => prop_assert!(decided.is_err(), "{text}: {decided:?}"),
            (Decision::Deny, None) => prop_assert_eq!(decided.unwrap(), PolicyDecision::Deny { reason: Some(NO_PERMIT_REASON.to_owned()), policy_id: Some("generated".to_owned()) }),
            (Decision::Allow, _) => prop_assert_eq!(decided.unwrap(), PolicyDecision::allow()),
        }

        // The whole context decides the same as the part the policies read.
        let full = backend.full_request_for(&context).unwrap();
        let whole = Authorizer::new().is_authorized(&full, backend.policy_set(), backend.entities());
        prop_assert_eq!(whole.decision(), response.decision(), "{}", text);
        let mut reasons: Vec<_> = response.diagnostics().reason().collect();
        let mut whole_reasons: Vec<_> = whole.diagnostics().reason().collect();
        reasons.sort();
        whole_reasons.sort();
        prop_assert_eq!(reasons, whole_reasons);
        prop_assert_eq!(failed, whole.diagnostics().errors().next().is_some());
    }
}
