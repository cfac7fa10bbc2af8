//! Loading manifests: every key, every problem at once, the same decisions as Rust.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{BLOCK_RM, NO_SSN, REDACT_CARD, Scratch};
use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{
    BoxError, EngineError, InputContext, InterceptionPoint, Message, Metadata, OnError, Policy,
    PolicyDecision, PolicyEngine, PolicySet, ToolCallContext, async_trait,
};
use portcullis_manifest::{
    ApprovalStore, CodeRegistry, Manifest, PolicySource, SessionStore, Severity,
};
use serde_json::json;

struct NoShouting;

#[async_trait]
impl Policy<InputContext> for NoShouting {
    fn id(&self) -> &str {
        "no_shouting"
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        let shouting = context
            .messages
            .iter()
            .any(|m| m.content.len() > 3 && m.content == m.content.to_uppercase());
        Ok(if shouting {
            PolicyDecision::deny("no shouting")
        } else {
            PolicyDecision::allow()
        })
    }
}

fn input(text: &str) -> InputContext {
    InputContext::new(vec![Message::user(text)], Metadata::new("agent", "session"))
}

fn full_manifest(scratch: &Scratch) -> std::path::PathBuf {
    scratch.write("rules/no_ssn.json", NO_SSN);
    scratch.write("rules/input/b_redact_card.json", REDACT_CARD);
    scratch.write("rules/input/a_no_ssn_too.json", NO_SSN);
    scratch.write("rules/input/notes.txt", "not a rule");
    scratch.write("rules/block_rm.json", BLOCK_RM);
    scratch.write(
        "aps/policies.json",
        &json!({
            "aps_version": "0.1.0",
            "policies": [
                { "condition": { "field": "tool_name", "equals": "delete_db" }, "action": "deny",
                  "reason": "never", "applies_to": ["tool_call"] },
                { "condition": { "field": "arguments.to", "contains": ["@evil.example"] }, "action": "deny",
                  "reason": "no mail to evil", "applies_to": ["tool_call"], "tools": ["send_email"] },
                { "condition": { "always": true }, "action": "audit", "reason": "seen" }
            ]
        })
        .to_string(),
    );
    scratch.write(
        "portcullis.yaml",
        r#"
on_error: allow
input:
  - dsl: rules/no_ssn.json
  - dsl: rules/input/
    monitor: false
  - code: no_shouting
    deadline: 50ms
tool_call:
  - dsl: rules/block_rm.json
    monitor: true
output: []
include:
  - aps/policies.json
settings:
  input: { concurrent: false, call_deadline: 300ms, policy_deadline: 100ms }
  output: { stream_batch: 64, stream_checkpoint: 200 }
audit:
  jsonl: audit.jsonl
  otlp: http://localhost:4318
sessions: { store: "redis://localhost:6379/0", ttl: 24h }
approvals: { timeout: 5m }
"#,
    )
}

#[tokio::test]
async fn a_full_manifest_loads() {
    let scratch = Scratch::new("full");
    let path = full_manifest(&scratch);
    let registry = CodeRegistry::new().input("no_shouting", NoShouting);
    let loaded = Manifest::load(&path, &registry).unwrap_or_else(|errors| panic!("{errors}"));
    let set = loaded.policy_set();
    let ids = |point: InterceptionPoint| -> Vec<String> {
        match point {
            InterceptionPoint::Input => set.input().policies().map(|p| p.id().to_owned()).collect(),
            InterceptionPoint::ToolCall => set
                .tool_call()
                .policies()
                .map(|p| p.id().to_owned())
                .collect(),
            InterceptionPoint::ToolResult => set
                .tool_result()
                .policies()
                .map(|p| p.id().to_owned())
                .collect(),
            InterceptionPoint::Output => {
                set.output().policies().map(|p| p.id().to_owned()).collect()
            }
        }
    };
    assert_eq!(
        ids(InterceptionPoint::Input),
        [
            "no_ssn",
            "a_no_ssn_too",
            "b_redact_card",
            "no_shouting",
            "policies#2"
        ]
    );
    assert_eq!(
        ids(InterceptionPoint::ToolCall),
        ["block_rm", "policies#0", "policies#1", "policies#2"]
    );
    assert_eq!(ids(InterceptionPoint::Output), ["policies#2"]);
    assert_eq!(set.on_error(), OnError::Allow);
    let settings = set.settings(InterceptionPoint::Input);
    assert_eq!(
        settings.call_deadline,
        Some(std::time::Duration::from_millis(300))
    );
    assert_eq!(
        settings.policy_deadline,
        Some(std::time::Duration::from_millis(100))
    );

    let manifest = loaded.manifest();
    assert_eq!(manifest.audit.jsonl, Some(scratch.path("audit.jsonl")));
    assert_eq!(
        manifest.audit.otlp.as_deref(),
        Some("http://localhost:4318")
    );
    let sessions = manifest.sessions.as_ref().unwrap();
    assert_eq!(
        sessions.store,
        SessionStore::Redis("redis://localhost:6379/0".into())
    );
    assert_eq!(sessions.ttl, Some(std::time::Duration::from_secs(86_400)));
    assert_eq!(
        manifest.approvals.as_ref().unwrap().timeout,
        Some(std::time::Duration::from_secs(300))
    );
    assert!(
        matches!(manifest.input[2].source, PolicySource::Code { ref name } if name == "no_shouting")
    );
    let warnings: Vec<String> = loaded
        .warnings()
        .iter()
        .map(|w| w.message().to_owned())
        .collect();
    // Every section is applied by `into_engine_builder`: only a build without the feature a
    // section needs warns about it.
    let expected = usize::from(!cfg!(feature = "redis")) + usize::from(!cfg!(feature = "otel"));
    assert_eq!(warnings.len(), expected, "{warnings:?}");
    assert_eq!(
        warnings
            .iter()
            .any(|w| w.contains("cannot keep sessions in Redis")),
        !cfg!(feature = "redis")
    );
    assert_eq!(
        warnings
            .iter()
            .any(|w| w.contains("cannot export spans over OTLP")),
        !cfg!(feature = "otel")
    );
    assert!(
        loaded
            .files()
            .contains(&scratch.path("rules/input/b_redact_card.json"))
    );
    assert!(loaded.files().contains(&scratch.path("aps/policies.json")));

    // It decides.
    let engine = PolicyEngine::builder()
        .policy_set(loaded.into_policy_set())
        .build();
    let denied = engine
        .evaluate_input(&input("my ssn is 1"))
        .await
        .unwrap_err();
    assert_eq!(denied.as_denial().unwrap().policy_id(), "no_ssn");
    let shouted = engine
        .evaluate_input(&input("HELLO THERE"))
        .await
        .unwrap_err();
    assert_eq!(shouted.as_denial().unwrap().policy_id(), "no_shouting");
    let card = input("card 1234-5678");
    let redacted = engine.evaluate_input(&card).await.unwrap();
    assert_eq!(redacted.context().messages[0].content, "card [CARD]");
    let mail = |to: &str, tool: &str| {
        ToolCallContext::new(
            tool,
            json!({ "to": to }).as_object().unwrap().clone(),
            Message::assistant(""),
            Metadata::new("a", "s"),
        )
    };
    let (to_evil, posted, drop_table) = (
        mail("x@evil.example", "send_email"),
        mail("x@evil.example", "post"),
        mail("", "delete_db"),
    );
    let evil = engine.evaluate_tool_call(&to_evil).await;
    assert_eq!(
        evil.unwrap_err().as_denial().unwrap().policy_id(),
        "policies#1"
    );
    // The same arguments to another tool: the scoped entry does not apply.
    assert!(engine.evaluate_tool_call(&posted).await.is_ok());
    let drop_db = engine.evaluate_tool_call(&drop_table).await;
    assert_eq!(
        drop_db.unwrap_err().as_denial().unwrap().policy_id(),
        "policies#0"
    );
    // block_rm is monitored: it decides but does not block.
    let rm = ToolCallContext::new(
        "shell",
        json!({ "command": "rm -rf /" })
            .as_object()
            .unwrap()
            .clone(),
        Message::assistant(""),
        Metadata::new("a", "s"),
    );
    let evaluation = engine.evaluate_tool_call(&rm).await.unwrap();
    assert!(!evaluation.decisions()[0].enforced);
}

#[test]
fn every_problem_is_reported_at_once_with_its_place() {
    let scratch = Scratch::new("problems");
    scratch.write(
        "rules/typo.json",
        "{\n  \"condition\": { \"field\": \"messages.0.contnet\", \"contains\": [\"x\"] },\n  \"action\": \"deny\"\n}\n",
    );
    let path = scratch.write(
        "portcullis.yaml",
        "on_eror: deny\ninput:\n  - dsl: rules/missing.json\n  - dsl: rules/typo.json\n    deadline: 5 minutes\n  - code: no_shoutin\n  - rego_server: http://localhost:8181\n  - http: ${POLICY_URL}\n    id: remote\n  - dsl: x.json\n    entrypoint: a/b\ntool_call: 3\nsettings:\n  input: { concurent: true }\n  tool_call: { stream_batch: 3 }\nsessions: { store: memcached }\n",
    );
    let registry = CodeRegistry::new().input("no_shouting", NoShouting);
    let errors = Manifest::load(&path, &registry).unwrap_err();
    let lines: Vec<String> = errors
        .errors()
        .iter()
        .map(|e| {
            let at = e
                .position()
                .map(|p| format!("{}:{}", p.line, p.column))
                .unwrap_or_default();
            let file = e.file().file_name().unwrap().to_string_lossy().into_owned();
            format!("{file}:{at}: {} | {}", e.message(), e.help().unwrap_or(""))
        })
        .collect();
    let expected = [
        "portcullis.yaml:1:1: unknown key `on_eror` in the manifest | did you mean `on_error`?",
        "portcullis.yaml:5:15: `deadline`: \"5 minutes\" has no unit",
        "portcullis.yaml:7:5: a `rego_server` entry needs `package`",
        "portcullis.yaml:7:5: a `rego_server` entry needs `id`",
        "portcullis.yaml:8:11: `http` contains `${`",
        "portcullis.yaml:11:5: `entrypoint` does not apply to a `dsl` entry",
        "portcullis.yaml:12:12: `tool_call` must be a list, not a number",
        "portcullis.yaml:14:12: unknown key `concurent` in `settings.input` | did you mean `concurrent`?",
        "portcullis.yaml:15:16: `settings.tool_call.stream_batch` only applies to `output`",
        "portcullis.yaml:16:20: `sessions.store` must be `memory` or a redis:// URL",
        "portcullis.yaml:3:5: the rule file",
        "typo.json:2:18: field \"messages.0.contnet\" does not exist",
        "portcullis.yaml:6:5: no input code policy is registered as `no_shoutin` | did you mean `no_shouting`?",
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, expected) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(expected),
            "{line:?} should start with {expected:?}\nall: {lines:#?}"
        );
    }
    assert!(lines[11].contains("contnet"), "{}", lines[11]);
    assert!(
        errors
            .errors()
            .iter()
            .all(|e| e.severity() == Severity::Error)
    );
}

#[test]
fn yaml_that_is_not_a_manifest() {
    let scratch = Scratch::new("bad-yaml");
    let path = scratch.write("portcullis.yaml", "input: [\n  - dsl: a\n");
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    assert_eq!(errors.errors().len(), 1);
    assert!(errors.errors()[0].position().is_some(), "{errors}");
    let path = scratch.write("list.yaml", "- a\n- b\n");
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    assert_eq!(
        errors.errors()[0].message(),
        "the manifest must be a map, not a list"
    );
    let missing = Manifest::load(scratch.path("nope.yaml"), &CodeRegistry::new()).unwrap_err();
    assert!(
        missing.errors()[0].message().contains("cannot read"),
        "{missing}"
    );
    // JSON is YAML; `{}` is a set without policies.
    let path = scratch.write("empty.json", "{}");
    assert!(Manifest::load(&path, &CodeRegistry::new()).is_ok());
    // An empty file (one caught half-written, say) is not: it would allow everything.
    for text in ["", "  \n", "# only a comment\n"] {
        let path = scratch.write("empty.yaml", text);
        let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
        assert_eq!(
            errors.errors()[0].message(),
            "the manifest is empty",
            "{text:?}"
        );
    }
}

#[tokio::test]
async fn a_manifest_decides_as_the_same_set_built_in_rust() {
    let scratch = Scratch::new("same");
    scratch.write("rules/no_ssn.json", NO_SSN);
    scratch.write("rules/redact_card.json", REDACT_CARD);
    scratch.write("rules/block_rm.json", BLOCK_RM);
    let path = scratch.write(
        "portcullis.yaml",
        "input:\n  - dsl: rules/redact_card.json\n  - code: no_shouting\n  - dsl: rules/no_ssn.json\ntool_call:\n  - dsl: rules/block_rm.json\n",
    );
    let registry = CodeRegistry::new().input("no_shouting", NoShouting);
    let from_file = PolicyEngine::builder()
        .policy_set(Manifest::load(&path, &registry).unwrap().into_policy_set())
        .build();
    let rules = scratch.path("rules");
    let in_rust = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(DslInputPolicy::new("redact_card", &rules).unwrap())
                .input(NoShouting)
                .input(DslInputPolicy::new("no_ssn", &rules).unwrap())
                .tool_call(DslToolCallPolicy::new("block_rm", &rules).unwrap())
                .build(),
        )
        .build();
    fn summary<C: Clone + std::fmt::Debug>(
        result: Result<portcullis_engine::Evaluation<'_, C>, EngineError>,
    ) -> String {
        match result {
            Ok(evaluation) => format!("{:?} {:?}", evaluation.context(), evaluation.decisions()),
            Err(error) => format!("{error:?}"),
        }
    }
    for text in [
        "hello",
        "my ssn",
        "card 1234-5678 and ssn",
        "LOUD NOISES",
        "1234-5678",
    ] {
        let context = input(text);
        assert_eq!(
            summary(from_file.evaluate_input(&context).await),
            summary(in_rust.evaluate_input(&context).await),
            "{text}"
        );
    }
    for command in ["ls", "rm -rf /"] {
        let context = ToolCallContext::new(
            "shell",
            json!({ "command": command }).as_object().unwrap().clone(),
            Message::assistant(""),
            Metadata::new("a", "s"),
        );
        assert_eq!(
            summary(from_file.evaluate_tool_call(&context).await),
            summary(in_rust.evaluate_tool_call(&context).await)
        );
    }
}

#[test]
fn policy_set_files_are_checked_with_places() {
    let scratch = Scratch::new("aps");
    scratch.write(
        "aps/bad.json",
        "{\n  \"aps_version\": \"1\",\n  \"policies\": [\n    { \"condition\": { \"always\": true }, \"action\": \"deny\", \"applies_to\": [\"inptu\"] },\n    { \"condition\": { \"field\": \"tool_nam\", \"equals\": \"x\" }, \"action\": \"deny\", \"applies_to\": [\"tool_call\"] },\n    { \"condition\": { \"always\": true }, \"action\": \"deny\", \"scope\": 1 }\n  ]\n}\n",
    );
    let path = scratch.write(
        "portcullis.yaml",
        "include: [aps/bad.json, aps/missing.json]\n",
    );
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    let lines: Vec<String> = errors.errors().iter().map(ToString::to_string).collect();
    let text = lines.join("\n");
    assert!(
        text.contains("bad.json:2:18: error: `aps_version` must be a version"),
        "{text}"
    );
    assert!(
        text.contains("bad.json:4:73: error: `applies_to` lists points"),
        "{text}"
    );
    assert!(text.contains("did you mean `input`?"), "{text}");
    assert!(text.contains("bad.json:5:22: error: policy 1:"), "{text}");
    assert!(
        text.contains("bad.json:6:58: error: policy 2: unknown key \"scope\""),
        "{text}"
    );
    assert_eq!(text.matches("scope").count(), 1, "reported once: {text}");
    assert!(text.contains("missing.json"), "{text}");
}

#[test]
fn the_approvals_section_names_its_store_and_refuses_what_does_not_belong() {
    let scratch = Scratch::new("approvals");
    let path = scratch.write(
        "portcullis.yaml",
        "approvals: { store: \"redis://127.0.0.1:6379/2\", timeout: 10m, password_env: REDIS_PASSWORD }\n",
    );
    let (manifest, _) = Manifest::read(&path).expect("a valid manifest");
    let approvals = manifest.approvals.expect("the section");
    assert_eq!(
        approvals.store,
        ApprovalStore::Redis("redis://127.0.0.1:6379/2".into())
    );
    assert_eq!(approvals.timeout, Some(std::time::Duration::from_secs(600)));
    assert_eq!(approvals.password_env.as_deref(), Some("REDIS_PASSWORD"));
    let (manifest, _) =
        Manifest::read(scratch.write("memory.yaml", "approvals: { timeout: 5m }\n"))
            .expect("a valid manifest");
    assert_eq!(manifest.approvals.unwrap().store, ApprovalStore::Memory);

    for (text, message) in [
        (
            "approvals: { store: \"redis://app:s3cret@cache:6379/0\" }\n",
            "`approvals.store`: the Redis URL holds credentials",
        ),
        (
            "approvals: { store: postgres }\n",
            "`approvals.store` must be `memory` or a redis:// URL",
        ),
        (
            "approvals: { store: memory, password_env: X }\n",
            "`approvals.password_env` applies to a Redis store only",
        ),
        (
            "approvals: { timeout: 0s }\n",
            "`approvals.timeout` must be longer than 0",
        ),
        ("approvals: { stores: memory }\n", "unknown key `stores`"),
    ] {
        let errors = Manifest::read(scratch.write("bad.yaml", text)).unwrap_err();
        assert!(
            errors
                .errors()
                .iter()
                .any(|e| e.message().contains(message)),
            "{text}: {errors}"
        );
    }
}
