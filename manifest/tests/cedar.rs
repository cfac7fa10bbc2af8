//! `cedar:` entries: loaded with their schema and entities, every problem of every file at
//! its place, and reloaded when any of the three files changes.
#![cfg(feature = "cedar")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Scratch, rewrite, watched};
use portcullis_engine::{
    EngineError, InputContext, Message, Metadata, PolicyEngine, Role, ToolCallContext,
};
use portcullis_manifest::{CodeRegistry, Manifest, ReloadOutcome, Severity};

const POLICIES: &str = r#"
permit(principal, action == Action::"tool_call", resource)
when { [Tool::"web_search", Tool::"read_file"].contains(resource) };

@reason("interns may not read files")
forbid(principal in Group::"interns", action == Action::"tool_call", resource == Tool::"read_file");

permit(principal, action == Action::"input", resource);
"#;

const SCHEMA: &str = r#"
entity Group;
entity Agent in [Group];
entity Tool;
entity Session;
action "tool_call" appliesTo { principal: Agent, resource: Tool, context: { tool_name: String } };
action "input" appliesTo { principal: Agent, resource: Session, context: {} };
"#;

const ENTITIES: &str = r#"[
  {"uid": {"type": "Agent", "id": "intern"}, "attrs": {}, "parents": [{"type": "Group", "id": "interns"}]},
  {"uid": {"type": "Group", "id": "interns"}, "attrs": {}, "parents": []}
]"#;

fn call(agent: &str, tool: &str) -> ToolCallContext {
    ToolCallContext::new(
        tool,
        serde_json::Map::new(),
        Message::new(Role::Assistant, "calling"),
        Metadata::new(agent, "s"),
    )
}

async fn denial(engine: &PolicyEngine, agent: &str, tool: &str) -> Option<(String, String)> {
    match engine.evaluate_tool_call(&call(agent, tool)).await {
        Ok(_) => None,
        Err(EngineError::Denied(denial)) => Some((
            denial.policy_id().to_owned(),
            denial.reason().unwrap_or_default().to_owned(),
        )),
        Err(other) => panic!("{other:?}"),
    }
}

fn cedar_manifest(scratch: &Scratch) -> std::path::PathBuf {
    scratch.write("policies/tools.cedar", POLICIES);
    scratch.write("policies/agent.cedarschema", SCHEMA);
    scratch.write("policies/entities.json", ENTITIES);
    scratch.write(
        "portcullis.yaml",
        "tool_call:\n  - cedar: policies/tools.cedar\n    schema: policies/agent.cedarschema\n    entities: policies/entities.json\ninput:\n  - cedar: policies/tools.cedar\n    schema: policies/agent.cedarschema\n",
    )
}

#[tokio::test]
async fn a_cedar_entry_loads_with_its_schema_and_entities() {
    let scratch = Scratch::new("cedar-load");
    let path = cedar_manifest(&scratch);
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    for file in ["tools.cedar", "agent.cedarschema", "entities.json"] {
        assert!(
            loaded.files().iter().any(|watched| watched.ends_with(file)),
            "{file} is watched"
        );
    }
    let engine = PolicyEngine::builder()
        .policy_set(loaded.into_policy_set())
        .build();
    assert_eq!(denial(&engine, "bot", "web_search").await, None);
    assert_eq!(
        denial(&engine, "intern", "read_file").await,
        Some(("tools".to_owned(), "interns may not read files".to_owned()))
    );
    assert_eq!(
        denial(&engine, "bot", "shell").await,
        Some((
            "tools".to_owned(),
            "no Cedar policy permits this".to_owned()
        ))
    );
    let hello = InputContext::new(vec![Message::user("hi")], Metadata::new("bot", "s"));
    assert!(engine.evaluate_input(&hello).await.is_ok());
}

#[test]
fn every_problem_of_every_cedar_file_is_reported_at_its_place() {
    let scratch = Scratch::new("cedar-problems");
    scratch.write(
        "bad.cedar",
        "permit(principal, action, resource);\n\nforbid(principal, action, resource);\npermit(principal action, resource);\n",
    );
    scratch.write(
        "annotated.cedar",
        "permit(principal, action, resource);\n@decision(\"maybe\")\nforbid(principal, action, resource);\n",
    );
    scratch.write(
        "bad.cedarschema",
        "entity Agent;\nentity Tool {\n  risk: Strin g\n};\n",
    );
    scratch.write("typo.cedar", "permit(principal, action == Action::\"tool_call\", resource)\n  when { resource.danger == 1 };\n");
    scratch.write("agent.cedarschema", SCHEMA);
    scratch.write(
        "bad.json",
        "[\n  {\"uid\": {\"type\": \"Agent\"}, \"attrs\": {}, \"parents\": []}\n]",
    );
    let path = scratch.write(
        "portcullis.yaml",
        "tool_call:\n  - cedar: bad.cedar\n    schema: bad.cedarschema\n    entities: bad.json\n  - cedar: typo.cedar\n    schema: agent.cedarschema\n  - cedar: missing.cedar\n  - dsl: rule.json\n    schema: agent.cedarschema\n  - cedar: annotated.cedar\n",
    );
    let errors = Manifest::check(&path, &CodeRegistry::new()).unwrap_err();
    let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let has = |file: &str, line: usize, text: &str| {
        errors.iter().any(|diagnostic| {
            diagnostic.severity() == Severity::Error
                && diagnostic.file().ends_with(file)
                && diagnostic.position().map(|position| position.line) == Some(line)
                && diagnostic.to_string().contains(text)
        })
    };
    assert!(has("annotated.cedar", 2, "maybe"), "{found:#?}");
    assert!(has("bad.cedar", 4, ""), "{found:#?}");
    assert!(has("bad.cedarschema", 3, ""), "{found:#?}");
    assert!(has("bad.json", 2, ""), "{found:#?}");
    assert!(has("typo.cedar", 2, "danger"), "{found:#?}");
    assert!(has("portcullis.yaml", 7, "missing.cedar"), "{found:#?}");
    assert!(
        has(
            "portcullis.yaml",
            9,
            "`schema` does not apply to a `dsl` entry"
        ),
        "{found:#?}"
    );
}

#[tokio::test]
async fn a_change_to_the_policies_schema_or_entities_reloads() {
    let scratch = Scratch::new("cedar-watch");
    let path = cedar_manifest(&scratch);
    let (engine, outcomes, watcher) = watched(&path);
    assert!(denial(&engine, "bob", "read_file").await.is_none());

    // The entities change: bob is an intern now.
    rewrite(
        &scratch.path("policies/entities.json"),
        &ENTITIES.replace("\"intern\"", "\"bob\""),
    );
    let outcome = outcomes.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(outcome.is_reloaded(), "{outcome:?}");
    assert!(denial(&engine, "bob", "read_file").await.is_some());

    // The policies change: read_file leaves the list.
    rewrite(
        &scratch.path("policies/tools.cedar"),
        &POLICIES.replace(", Tool::\"read_file\"", ""),
    );
    assert!(
        outcomes
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .is_reloaded()
    );
    assert_eq!(
        denial(&engine, "alice", "read_file")
            .await
            .map(|(_, reason)| reason),
        Some("no Cedar policy permits this".to_owned())
    );

    // A schema that breaks the policies: the reload fails at the place, the set stays.
    rewrite(
        &scratch.path("policies/agent.cedarschema"),
        &SCHEMA
            .replace("entity Group;", "entity Team;")
            .replace("in [Group]", "in [Team]"),
    );
    match outcomes.recv_timeout(Duration::from_secs(10)).unwrap() {
        ReloadOutcome::Failed(errors) => {
            let text = errors.to_string();
            assert!(text.contains("tools.cedar:"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(denial(&engine, "bob", "read_file").await.is_some());
    assert!(denial(&engine, "alice", "web_search").await.is_none());
    watcher.stop();
}
