#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The backend's decisions and load errors, policy by policy.

mod common;

use common::call;
use portcullis_cedar::{
    CedarError, CedarEvaluationError, CedarInputPolicy, CedarOutputPolicy, CedarSource,
    CedarSources, CedarToolCallPolicy, CedarToolResultPolicy, NO_PERMIT_REASON,
};
use portcullis_engine::{
    InputContext, Message, Metadata, OutputContext, PolicyDecision, Role, ToolCallContext,
    ToolResultContext,
};
use serde_json::json;

fn with_session(mut context: ToolCallContext, labels: &[&str], total: u64) -> ToolCallContext {
    context.metadata.extra.insert(
        "session".to_owned(),
        json!({"labels": labels, "counters": {"tool_call": {"total": total, "by_tool": {}}}}),
    );
    context
}

fn deny(reason: &str, id: &str) -> PolicyDecision {
    PolicyDecision::Deny {
        reason: Some(reason.to_owned()),
        policy_id: Some(id.to_owned()),
    }
}

const ALLOWLIST: &str = r#"
permit(principal, action == Action::"tool_call", resource)
when { [Tool::"web_search", Tool::"read_file", Tool::"summarize"].contains(resource) };
"#;

#[test]
fn a_permit_list_allows_its_tools_and_denies_the_rest_by_default() {
    let policy = CedarToolCallPolicy::new("tools", ALLOWLIST).unwrap();
    for tool in ["web_search", "read_file", "summarize"] {
        assert_eq!(
            policy.decide(&call("a", tool)).unwrap(),
            PolicyDecision::allow(),
            "{tool}"
        );
    }
    assert_eq!(
        policy.decide(&call("a", "delete_database")).unwrap(),
        deny(NO_PERMIT_REASON, "tools")
    );
}

#[test]
fn a_forbid_denies_with_its_reason_or_its_id() {
    let policies = r#"
        permit(principal, action, resource);
        @reason("no emails from here")
        forbid(principal, action, resource == Tool::"send_email");
        @id("no-shell")
        forbid(principal, action, resource == Tool::"shell");
        forbid(principal, action, resource == Tool::"rm");
    "#;
    let policy = CedarToolCallPolicy::new("tools", policies).unwrap();
    assert_eq!(
        policy.decide(&call("a", "send_email")).unwrap(),
        deny("no emails from here", "tools")
    );
    assert_eq!(
        policy.decide(&call("a", "shell")).unwrap(),
        deny("no-shell", "tools")
    );
    assert_eq!(
        policy.decide(&call("a", "rm")).unwrap(),
        deny("policy3", "tools")
    );
    assert_eq!(
        policy.decide(&call("a", "ls")).unwrap(),
        PolicyDecision::allow()
    );
}

#[test]
fn the_first_forbid_in_the_text_gives_the_reason() {
    let policies = r#"
        @reason("first") forbid(principal, action, resource);
        @reason("second") forbid(principal, action, resource);
        @reason("third") forbid(principal, action, resource);
    "#;
    let policy = CedarToolCallPolicy::new("tools", policies).unwrap();
    for _ in 0..20 {
        assert_eq!(
            policy.decide(&call("a", "x")).unwrap(),
            deny("first", "tools")
        );
    }
}

#[test]
fn decision_annotations_audit_and_escalate() {
    let policies = r#"
        permit(principal, action, resource);
        @decision("audit") @reason("reads are audited")
        permit(principal, action, resource == Tool::"read_file");
        @decision("escalate") @reason("emails need a person")
        forbid(principal, action, resource == Tool::"send_email");
        @decision("audit") @reason("shell use is watched")
        forbid(principal, action, resource == Tool::"shell");
        @decision("escalate") @reason("payments need a person")
        forbid(principal, action, resource == Tool::"pay");
        @reason("never pay from a sandbox")
        forbid(principal == Agent::"sandbox", action, resource == Tool::"pay");
    "#;
    let policy = CedarToolCallPolicy::new("tools", policies).unwrap();
    assert_eq!(
        policy.decide(&call("a", "read_file")).unwrap(),
        PolicyDecision::audit("reads are audited")
    );
    assert_eq!(
        policy.decide(&call("a", "send_email")).unwrap(),
        PolicyDecision::escalate("emails need a person")
    );
    assert_eq!(
        policy.decide(&call("a", "shell")).unwrap(),
        PolicyDecision::audit("shell use is watched")
    );
    assert_eq!(
        policy.decide(&call("a", "ls")).unwrap(),
        PolicyDecision::allow()
    );
    // A plain forbid that applies too still denies: a person cannot overrule it.
    assert_eq!(
        policy.decide(&call("a", "pay")).unwrap(),
        PolicyDecision::escalate("payments need a person")
    );
    assert_eq!(
        policy.decide(&call("sandbox", "pay")).unwrap(),
        deny("never pay from a sandbox", "tools")
    );
}

#[test]
fn a_softened_forbid_with_no_permit_still_denies() {
    let policies = r#"
        @decision("escalate") forbid(principal, action, resource == Tool::"send_email");
    "#;
    let policy = CedarToolCallPolicy::new("tools", policies).unwrap();
    assert_eq!(
        policy.decide(&call("a", "send_email")).unwrap(),
        deny(NO_PERMIT_REASON, "tools")
    );
}

#[test]
fn session_labels_and_counters_in_conditions() {
    let policies = r#"
        permit(principal, action, resource);
        @reason("the session read untrusted content")
        forbid(principal, action, resource == Tool::"send_email")
        when { context.metadata has session && context.metadata.session.labels.contains("untrusted") };
        @reason("too many tool calls")
        forbid(principal, action, resource)
        when { context.metadata has session && context.metadata.session.counters.tool_call.total >= 10 };
    "#;
    let policy = CedarToolCallPolicy::new("tools", policies).unwrap();
    assert_eq!(
        policy.decide(&call("a", "send_email")).unwrap(),
        PolicyDecision::allow()
    );
    let clean = with_session(call("a", "send_email"), &["trusted"], 1);
    assert_eq!(policy.decide(&clean).unwrap(), PolicyDecision::allow());
    let tainted = with_session(call("a", "send_email"), &["untrusted"], 1);
    assert_eq!(
        policy.decide(&tainted).unwrap(),
        deny("the session read untrusted content", "tools")
    );
    let busy = with_session(call("a", "web_search"), &[], 10);
    assert_eq!(
        policy.decide(&busy).unwrap(),
        deny("too many tool calls", "tools")
    );
}

#[test]
fn entity_groups_decide_who_may_call_what() {
    let policies = r#"
        permit(principal in Group::"finance", action == Action::"tool_call", resource in ToolGroup::"payments");
        permit(principal, action == Action::"tool_call", resource) when { resource.risk == "low" };
    "#;
    let entities = r#"[
        {"uid": {"type": "Agent", "id": "ledger-bot"}, "attrs": {}, "parents": [{"type": "Group", "id": "finance"}]},
        {"uid": {"type": "Group", "id": "finance"}, "attrs": {}, "parents": []},
        {"uid": {"type": "Tool", "id": "pay_invoice"}, "attrs": {"risk": "high"}, "parents": [{"type": "ToolGroup", "id": "payments"}]},
        {"uid": {"type": "Tool", "id": "web_search"}, "attrs": {"risk": "low"}, "parents": []}
    ]"#;
    let policy = CedarToolCallPolicy::new("tools", policies)
        .unwrap()
        .with_entities(entities)
        .unwrap();
    assert_eq!(
        policy.decide(&call("ledger-bot", "pay_invoice")).unwrap(),
        PolicyDecision::allow()
    );
    assert_eq!(
        policy.decide(&call("chat-bot", "pay_invoice")).unwrap(),
        deny(NO_PERMIT_REASON, "tools")
    );
    assert_eq!(
        policy.decide(&call("chat-bot", "web_search")).unwrap(),
        PolicyDecision::allow()
    );
    // A tool with no entity has no `risk`: reading it is an error, not a decision.
    let error = policy
        .decide(&call("chat-bot", "unknown_tool"))
        .unwrap_err();
    assert!(
        matches!(error, CedarEvaluationError::Policies(_)),
        "{error}"
    );
    assert!(error.to_string().contains("unknown_tool"), "{error}");
}

#[test]
fn every_point_maps_its_request() {
    let policies = r#"
        permit(principal == Agent::"a", action == Action::"input", resource == Session::"s1")
        when { context.messages.contains({"role": "user", "content": "hello"}) };
        permit(principal == Agent::"a", action == Action::"output", resource == Session::"s1")
        when { context.response.content like "*fine*" };
        permit(principal == Agent::"a", action == Action::"tool_result", resource == Tool::"fetch")
        when { !context.is_error && context.content != "" };
    "#;
    let input = CedarInputPolicy::new("p", policies).unwrap();
    let output = CedarOutputPolicy::new("p", policies).unwrap();
    let result = CedarToolResultPolicy::new("p", policies).unwrap();
    let metadata = Metadata::new("a", "s1");
    let hello = InputContext::new(vec![Message::user("hello")], metadata.clone());
    assert_eq!(input.decide(&hello).unwrap(), PolicyDecision::allow());
    let other = InputContext::new(vec![Message::user("bye")], metadata.clone());
    assert_eq!(input.decide(&other).unwrap(), deny(NO_PERMIT_REASON, "p"));
    let answer = OutputContext::new(Message::new(Role::Assistant, "all fine"), metadata.clone());
    assert_eq!(output.decide(&answer).unwrap(), PolicyDecision::allow());
    let fetched = ToolResultContext::new("fetch", serde_json::Map::new(), "page", metadata);
    assert_eq!(result.decide(&fetched).unwrap(), PolicyDecision::allow());

    let request = input.request_for(&hello).unwrap();
    assert_eq!(request.principal().unwrap().to_string(), r#"Agent::"a""#);
    assert_eq!(request.action().unwrap().to_string(), r#"Action::"input""#);
    assert_eq!(request.resource().unwrap().to_string(), r#"Session::"s1""#);
    let request = result
        .request_for(&ToolResultContext::new(
            "fetch",
            serde_json::Map::new(),
            "x",
            Metadata::new("", "s"),
        ))
        .unwrap();
    assert_eq!(request.principal().unwrap().to_string(), r#"Agent::"""#);
    assert_eq!(request.resource().unwrap().to_string(), r#"Tool::"fetch""#);
}

#[test]
fn the_request_carries_only_the_context_the_policies_read() {
    let policy = CedarToolCallPolicy::new("tools", ALLOWLIST).unwrap();
    let request = policy.request_for(&call("a", "x")).unwrap();
    assert_eq!(
        request.context().unwrap().to_json_value().unwrap(),
        json!({})
    );
    let policy = CedarToolCallPolicy::new(
        "tools",
        r#"permit(principal, action, resource) when { context.arguments.to like "*@example.com" };"#,
    )
    .unwrap();
    let mut context = call("a", "send_email");
    context
        .arguments
        .insert("to".to_owned(), json!("x@example.com"));
    let request = policy.request_for(&context).unwrap();
    assert_eq!(
        request.context().unwrap().to_json_value().unwrap(),
        json!({"arguments": {"to": "x@example.com"}})
    );
    assert_eq!(policy.decide(&context).unwrap(), PolicyDecision::allow());
}

fn error_of<T: std::fmt::Debug>(result: Result<T, CedarError>) -> CedarError {
    result.expect_err("a load error")
}

#[test]
fn syntax_errors_are_reported_at_their_line_and_column() {
    let policies = "permit(principal, action, resource);\n\nforbid(principal, action resource);\n";
    let error = error_of(CedarToolCallPolicy::new("tools", policies));
    let problem = &error.problems()[0];
    assert_eq!(problem.source, CedarSource::Policies);
    let (line, column) = problem.position.unwrap();
    assert_eq!(line, 3, "{problem}");
    assert!((20..=26).contains(&column), "{problem}");
    assert!(error.to_string().contains("policies:3:"), "{error}");
}

#[test]
fn a_bad_decision_annotation_is_a_load_error_at_its_place() {
    let policies = "permit(principal, action, resource);\n  @decision(\"maybe\")\nforbid(principal, action, resource);\n";
    let error = error_of(CedarToolCallPolicy::new("tools", policies));
    let problem = &error.problems()[0];
    assert_eq!(problem.position, Some((2, 3)), "{problem}");
    assert!(problem.message.contains("maybe"), "{problem}");
    assert!(problem.help.as_deref().unwrap().contains("escalate"));
}

const SCHEMA: &str = r#"
entity Group;
entity Agent in [Group];
entity Tool { risk: String };
entity Session;
type Meta = { agent_id: String, session_id: String };
action "tool_call" appliesTo {
    principal: Agent,
    resource: Tool,
    context: { tool_name: String, metadata: Meta }
};
action "input" appliesTo { principal: Agent, resource: Session, context: {} };
"#;

#[test]
fn policies_are_validated_against_the_schema_at_their_place() {
    let policies = "permit(principal, action == Action::\"tool_call\", resource)\nwhen { resource.danger == \"low\" };\n";
    let error = error_of(
        CedarToolCallPolicy::new("tools", policies)
            .unwrap()
            .with_schema(SCHEMA),
    );
    let problem = &error.problems()[0];
    assert_eq!(problem.source, CedarSource::Policies);
    assert_eq!(problem.position.map(|(line, _)| line), Some(2), "{problem}");
    assert!(problem.message.contains("danger"), "{problem}");
}

#[test]
fn schema_syntax_errors_are_reported_at_their_line_and_column() {
    let schema = "entity Agent;\nentity Tool {\n  risk: Strin g\n};\n";
    let error = error_of(
        CedarToolCallPolicy::new("tools", ALLOWLIST)
            .unwrap()
            .with_schema(schema),
    );
    let problem = &error.problems()[0];
    assert_eq!(problem.source, CedarSource::Schema);
    assert_eq!(problem.position.map(|(line, _)| line), Some(3), "{problem}");
}

#[test]
fn a_schema_without_the_points_action_is_a_load_error() {
    let error = error_of(
        CedarOutputPolicy::new("p", "permit(principal, action, resource);")
            .unwrap()
            .with_schema(SCHEMA),
    );
    assert!(
        error.problems()[0].message.contains(r#"Action::"output""#),
        "{error}"
    );
}

#[test]
fn every_problem_of_the_three_texts_is_reported_at_once() {
    let error = error_of(CedarToolCallPolicy::from_sources(
        "tools",
        CedarSources {
            policies: "permit(principal, action, resource)",
            schema: Some("entity Agent\n"),
            entities: Some("[{\"uid\": 3}"),
        },
    ));
    let sources: Vec<_> = error
        .problems()
        .iter()
        .map(|problem| problem.source)
        .collect();
    assert!(sources.contains(&CedarSource::Policies), "{error}");
    assert!(sources.contains(&CedarSource::Schema), "{error}");
    assert!(sources.contains(&CedarSource::Entities), "{error}");
    assert!(
        error
            .problems()
            .iter()
            .all(|problem| problem.position.is_some()),
        "{error}"
    );
}

#[test]
fn entity_errors_are_placed_at_the_entity() {
    let entities = "[\n  {\"uid\": {\"type\": \"Agent\", \"id\": \"a\"}, \"attrs\": {}, \"parents\": []},\n  {\"uid\": {\"type\": \"Tool\"}, \"attrs\": {}, \"parents\": []}\n]";
    let error = error_of(
        CedarToolCallPolicy::new("tools", ALLOWLIST)
            .unwrap()
            .with_entities(entities),
    );
    assert_eq!(error.problems()[0].source, CedarSource::Entities);
    assert_eq!(error.problems()[0].position, Some((3, 3)), "{error}");
}

#[test]
fn with_a_schema_requests_keep_the_declared_context_and_are_validated() {
    let policies = r#"
        permit(principal in Group::"ops", action == Action::"tool_call", resource)
        when { resource.risk == "low" && context.metadata.agent_id != "" };
    "#;
    let entities = r#"[
        {"uid": {"type": "Agent", "id": "a"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]},
        {"uid": {"type": "Group", "id": "ops"}, "attrs": {}, "parents": []},
        {"uid": {"type": "Tool", "id": "web_search"}, "attrs": {"risk": "low"}, "parents": []}
    ]"#;
    let policy = CedarToolCallPolicy::new("tools", policies)
        .unwrap()
        .with_schema(SCHEMA)
        .unwrap()
        .with_entities(entities)
        .unwrap();
    let mut context = call("a", "web_search");
    context
        .arguments
        .insert("__entity".to_owned(), json!({"type": "Agent", "id": "x"}));
    context
        .metadata
        .extra
        .insert("trace".to_owned(), json!(1.5));
    assert_eq!(policy.decide(&context).unwrap(), PolicyDecision::allow());
    let request = policy.request_for(&context).unwrap();
    assert_eq!(
        request.context().unwrap().to_json_value().unwrap(),
        json!({"tool_name": "web_search", "metadata": {"agent_id": "a", "session_id": "s1"}})
    );
    // An entity that does not fit the schema is a load error.
    let bad = r#"[{"uid": {"type": "Tool", "id": "t"}, "attrs": {"risk": 3}, "parents": []}]"#;
    let error = error_of(policy.clone().with_entities(bad));
    assert_eq!(error.problems()[0].source, CedarSource::Entities, "{error}");
}

#[test]
fn a_context_that_does_not_fit_the_schema_is_an_evaluation_error() {
    let schema = r#"
        entity Agent; entity Tool; entity Session;
        action "tool_call" appliesTo { principal: Agent, resource: Tool, context: { arguments: { count: Long } } };
    "#;
    let policy = CedarToolCallPolicy::new("tools", "permit(principal, action, resource);")
        .unwrap()
        .with_schema(schema)
        .unwrap();
    let mut context = call("a", "t");
    context.arguments.insert("count".to_owned(), json!(2));
    assert_eq!(policy.decide(&context).unwrap(), PolicyDecision::allow());
    context.arguments.insert("count".to_owned(), json!("two"));
    let error = policy.decide(&context).unwrap_err();
    assert!(matches!(error, CedarEvaluationError::Request(_)), "{error}");
    context.arguments.remove("count");
    assert!(policy.decide(&context).is_err());
}

#[test]
fn a_json_schema_is_read_too() {
    let schema = json!({"": {
        "entityTypes": {"Agent": {}, "Tool": {}},
        "actions": {"tool_call": {"appliesTo": {"principalTypes": ["Agent"], "resourceTypes": ["Tool"],
            "context": {"type": "Record", "attributes": {"tool_name": {"type": "String"}}}}}}
    }});
    let policy = CedarToolCallPolicy::new(
        "tools",
        r#"permit(principal, action, resource) when { context.tool_name == "x" };"#,
    )
    .unwrap()
    .with_schema(schema.to_string())
    .unwrap();
    assert_eq!(
        policy.decide(&call("a", "x")).unwrap(),
        PolicyDecision::allow()
    );
}

#[test]
fn validation_warnings_come_with_a_policy_that_loads() {
    let policy = CedarToolCallPolicy::new("tools", "").unwrap();
    assert!(!policy.warnings().is_empty());
    assert_eq!(
        policy.decide(&call("a", "x")).unwrap(),
        deny(NO_PERMIT_REASON, "tools")
    );
}
