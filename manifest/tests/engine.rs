//! A manifest into an engine: the session store, the approval time-out and the audit sinks it
//! names, each opened by `into_engine_builder`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[cfg(feature = "otel")]
#[path = "../../backends/observability/tests/support/receiver.rs"]
mod receiver;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Scratch;
use portcullis_engine::{
    ApprovalAnswer, ApprovalRequest, AuditRecord, BoxError, EngineError, InputContext, Message,
    Metadata, PolicyEngine, ToolCallContext, async_trait,
};
use portcullis_manifest::{CodeRegistry, Manifest, ManifestErrors};
use serde_json::{Map, Value, json};

/// Input from the web marks the session `untrusted`.
const MARK_UNTRUSTED: &str = r#"{
  "condition": { "field": "messages.0.content", "contains": ["<html", "http://", "https://"] },
  "action": "audit",
  "reason": "web content entered the session",
  "labels": ["untrusted"]
}"#;

/// No e-mail leaves a session once untrusted content entered it.
const NO_EMAIL_AFTER_UNTRUSTED: &str = r#"{
  "condition": {
    "all": [
      { "field": "tool_name", "equals": "send_email" },
      { "field": "metadata.session.labels", "contains": ["untrusted"] }
    ]
  },
  "action": "deny",
  "reason": "no outbound e-mail once untrusted content entered the session"
}"#;

/// Every e-mail needs a person's approval.
const ESCALATE_EMAIL: &str = r#"{
  "condition": { "field": "tool_name", "equals": "send_email" },
  "action": "escalate",
  "reason": "e-mail leaves the company"
}"#;

fn trifecta_manifest(scratch: &Scratch, sessions: &str) -> std::path::PathBuf {
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    scratch.write(
        "rules/no_email_after_untrusted.json",
        NO_EMAIL_AFTER_UNTRUSTED,
    );
    scratch.write(
        "portcullis.yaml",
        &format!(
            "input:\n  - dsl: rules/mark_untrusted.json\ntool_call:\n  - dsl: rules/no_email_after_untrusted.json\n{sessions}"
        ),
    )
}

fn input(session: &str, text: &str) -> InputContext {
    InputContext::new(vec![Message::user(text)], Metadata::new("agent", session))
}

fn email(session: &str) -> ToolCallContext {
    let mut arguments = Map::new();
    arguments.insert("to".into(), json!("team@example.com"));
    ToolCallContext::new(
        "send_email",
        arguments,
        Message::assistant(""),
        Metadata::new("agent", session),
    )
}

async fn engine_of(path: &std::path::Path) -> PolicyEngine {
    let loaded = Manifest::load(path, &CodeRegistry::new()).expect("the manifest loads");
    loaded
        .into_engine_builder()
        .await
        .expect("the engine assembles")
        .build()
}

async fn errors_of(path: &std::path::Path) -> ManifestErrors {
    let loaded = Manifest::load(path, &CodeRegistry::new()).expect("the manifest loads");
    match loaded.into_engine_builder().await {
        Ok(_) => panic!("{} should not assemble", path.display()),
        Err(errors) => errors,
    }
}

/// The lethal trifecta, stopped by a rule on `metadata.session.labels`.
async fn trifecta(engine: &PolicyEngine) {
    // Before anything untrusted, e-mail goes out.
    engine.evaluate_tool_call(&email("s1")).await.unwrap();
    // A web page enters the session: allowed, and the session is labelled.
    engine
        .evaluate_input(&input("s1", "summarise https://evil.example/page"))
        .await
        .unwrap();
    // Now e-mail is denied, in that session only.
    let denial = engine.evaluate_tool_call(&email("s1")).await.unwrap_err();
    let denial = denial.as_denial().expect("a denial");
    assert_eq!(denial.policy_id(), "no_email_after_untrusted");
    engine.evaluate_tool_call(&email("s2")).await.unwrap();
    // A caller cannot forge the session's facts, in either direction.
    let mut forged = email("s3");
    forged
        .metadata
        .extra
        .insert("session".into(), json!({ "labels": ["untrusted"] }));
    engine.evaluate_tool_call(&forged).await.unwrap();
    let mut forged = email("s1");
    forged
        .metadata
        .extra
        .insert("session".into(), json!({ "labels": [] }));
    assert!(engine.evaluate_tool_call(&forged).await.is_err());
}

#[tokio::test]
async fn sessions_from_the_manifest_stop_the_lethal_trifecta() {
    let scratch = Scratch::new("trifecta");
    let path = trifecta_manifest(&scratch, "sessions: { store: memory, ttl: 1h }\n");
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    assert!(
        loaded.warnings().is_empty(),
        "sessions are applied, nothing to warn about: {:?}",
        loaded.warnings()
    );
    trifecta(&engine_of(&path).await).await;
}

#[tokio::test]
async fn without_sessions_in_the_manifest_no_state_is_kept() {
    let scratch = Scratch::new("no-sessions");
    let path = trifecta_manifest(&scratch, "");
    let engine = engine_of(&path).await;
    engine
        .evaluate_input(&input("s1", "https://evil.example"))
        .await
        .unwrap();
    engine.evaluate_tool_call(&email("s1")).await.unwrap();
}

#[tokio::test]
async fn the_memory_store_keeps_its_ttl_and_capacity() {
    let scratch = Scratch::new("bounded");
    let path = trifecta_manifest(
        &scratch,
        "sessions: { store: memory, ttl: 300ms, capacity: 1 }\n",
    );
    let engine = engine_of(&path).await;
    engine
        .evaluate_input(&input("s1", "https://evil.example"))
        .await
        .unwrap();
    assert!(engine.evaluate_tool_call(&email("s1")).await.is_err());
    // A second session cannot evict the labelled first (capacity 1): it is refused, and the
    // label stays.
    let refused = engine
        .evaluate_input(&input("s2", "hello"))
        .await
        .expect_err("a store full of labelled sessions refuses a new one");
    assert_eq!(
        refused.policy_id(),
        portcullis_engine::session::SESSION_POLICY_ID
    );
    assert!(engine.evaluate_tool_call(&email("s1")).await.is_err());
    // The label of a session expires 300 ms after its last update; then there is room.
    tokio::time::sleep(Duration::from_millis(400)).await;
    engine.evaluate_tool_call(&email("s1")).await.unwrap();
    // An unlabelled session is evicted for a new one.
    engine.evaluate_input(&input("s2", "hello")).await.unwrap();
    engine.evaluate_input(&input("s3", "hello")).await.unwrap();
}

#[test]
fn session_settings_are_checked_with_their_place() {
    let scratch = Scratch::new("bad-sessions");
    let path = scratch.write(
        "portcullis.yaml",
        "sessions: { store: \"redis://127.0.0.1:1/0\", capacity: 5 }\napprovals: { timeout: soon }\n",
    );
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    let messages: Vec<String> = errors.errors().iter().map(|d| d.to_string()).collect();
    assert!(
        messages.iter().any(|m| m.contains(
            "portcullis.yaml:1:45: error: `sessions.capacity` applies to the `memory` store only"
        )),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("portcullis.yaml:2:23: error: `approvals.timeout`")),
        "{messages:#?}"
    );
    let path = scratch.write("zero.yaml", "sessions: { ttl: 0s, capacity: 0 }\n");
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    assert_eq!(errors.errors().len(), 2, "{errors}");
}

/// A Redis password written into the manifest's URL is refused (secrets come from the
/// environment through `password_env`), and no diagnostic repeats it.
#[test]
fn a_redis_password_in_the_manifest_is_refused_without_being_repeated() {
    let scratch = Scratch::new("redis-credentials");
    let path = scratch.write(
        "portcullis.yaml",
        "sessions: { store: \"rediss://app:hunter2@cache.internal:6380/0\" }\n",
    );
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    let text = errors.to_string();
    assert!(text.contains("holds credentials"), "{text}");
    assert!(text.contains("password_env"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    // `password_env` belongs to a Redis store.
    let path = scratch.write(
        "memory.yaml",
        "sessions: { store: memory, password_env: X }\n",
    );
    let errors = Manifest::load(&path, &CodeRegistry::new()).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("`sessions.password_env` applies to a Redis store only"),
        "{errors}"
    );
    // A Redis store with `password_env` loads.
    let path = scratch.write(
        "redis.yaml",
        "sessions: { store: \"rediss://cache.internal:6380/0\", password_env: REDIS_PASSWORD }\n",
    );
    Manifest::load(&path, &CodeRegistry::new()).expect("loads");
}

/// The password of `password_env` reaches Redis (`requirepass`), and a variable that is not
/// set is an error naming it.
#[cfg(feature = "redis")]
#[tokio::test]
async fn password_env_authenticates_to_a_real_redis() {
    // The password is a variable the test process already has (setting one needs `unsafe`).
    let Ok(password) = std::env::var("PATH") else {
        return;
    };
    let Some(server) = RedisServer::start_with(&["--requirepass", &password]) else {
        return;
    };
    let port = server.port();
    let scratch = Scratch::new("redis-password-env");
    let sessions = |variable: &str| {
        format!("sessions: {{ store: \"redis://127.0.0.1:{port}/0\", password_env: {variable} }}\n")
    };
    let path = trifecta_manifest(&scratch, &sessions("PORTCULLIS_TEST_NO_SUCH_VARIABLE"));
    let unset = Manifest::load(&path, &CodeRegistry::new())
        .unwrap()
        .into_engine_builder()
        .await
        .err()
        .expect("the variable is not set");
    assert!(
        unset
            .to_string()
            .contains("PORTCULLIS_TEST_NO_SUCH_VARIABLE"),
        "{unset}"
    );
    let path = trifecta_manifest(&scratch, &sessions("PATH"));
    let engine = engine_of(&path).await;
    engine
        .evaluate_input(&input("s1", "https://evil.example"))
        .await
        .unwrap();
    assert!(engine.evaluate_tool_call(&email("s1")).await.is_err());
    drop(server);
}

/// A resolver that never answers in time.
struct Slow;

#[async_trait]
impl portcullis_engine::ApprovalResolver for Slow {
    async fn resolve(&self, _: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(ApprovalAnswer::Granted { by: "late".into() })
    }
}

#[tokio::test]
async fn the_approval_timeout_is_applied() {
    let scratch = Scratch::new("approvals");
    scratch.write("rules/escalate_email.json", ESCALATE_EMAIL);
    let path = scratch.write(
        "portcullis.yaml",
        "tool_call:\n  - dsl: rules/escalate_email.json\napprovals: { timeout: 200ms }\n",
    );
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    let engine = loaded
        .into_engine_builder()
        .await
        .unwrap()
        .approvals(Slow)
        .build();
    assert_eq!(engine.approvals().timeout(), Duration::from_millis(200));
    let started = Instant::now();
    let error = engine.evaluate_tool_call(&email("s1")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the resolver was waited for {:?}",
        started.elapsed()
    );
    let EngineError::ApprovalRequired(request) = error else {
        panic!("expected ApprovalRequired, got {error:?}");
    };
    assert_eq!(request.policy_ids, ["escalate_email"]);
    // A grant for that digest lets the retried call through, once.
    engine
        .approvals()
        .grant(&request.action_digest, "a person", Duration::from_secs(60))
        .await
        .unwrap();
    engine.evaluate_tool_call(&email("s1")).await.unwrap();
    assert!(engine.evaluate_tool_call(&email("s1")).await.is_err());

    // Without the section, the engine's default.
    let path = scratch.write(
        "default.yaml",
        "tool_call:\n  - dsl: rules/escalate_email.json\n",
    );
    let engine = engine_of(&path).await;
    assert_eq!(
        engine.approvals().timeout(),
        portcullis_engine::DEFAULT_APPROVAL_TIMEOUT
    );
}

/// The records of the log once it has `count` of them (or after five seconds).
fn lines_eventually(path: &std::path::Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let read = lines(path);
        if read.len() >= count || Instant::now() > deadline {
            return read;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn audit_records_go_to_the_jsonl_file_and_to_the_callers_handler() {
    let scratch = Scratch::new("jsonl");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    std::fs::create_dir_all(scratch.path("logs")).unwrap();
    let path = scratch.write(
        "portcullis.yaml",
        "input:\n  - dsl: rules/mark_untrusted.json\naudit: { jsonl: logs/audit.jsonl }\n",
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = Arc::clone(&seen);
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    let engine = loaded
        .into_engine_builder_with_audit(move |record: &AuditRecord<'_>| {
            noted
                .lock()
                .unwrap()
                .push(record.decision.as_str().to_owned());
        })
        .await
        .unwrap()
        .build();
    engine
        .evaluate_input(&input("s1", "see https://x.example"))
        .await
        .unwrap();
    engine.evaluate_input(&input("s1", "hello")).await.unwrap();
    // The log's own thread writes the lines: they are all there once the engine is dropped.
    drop(engine);
    let written = lines(&scratch.path("logs/audit.jsonl"));
    assert_eq!(written.len(), 2);
    assert_eq!(written[0]["policy_id"], "mark_untrusted");
    assert_eq!(written[0]["decision"], "audit");
    assert_eq!(written[0]["context"]["metadata"]["session_id"], "s1");
    assert_eq!(written[1]["decision"], "allow");
    assert_eq!(*seen.lock().unwrap(), ["audit", "allow"]);

    // Without sinks, the caller's handler alone.
    let path = scratch.write("bare.yaml", "input:\n  - dsl: rules/mark_untrusted.json\n");
    let seen = Arc::new(Mutex::new(0));
    let noted = Arc::clone(&seen);
    let engine = Manifest::load(&path, &CodeRegistry::new())
        .unwrap()
        .into_engine_builder_with_audit(move |_: &AuditRecord<'_>| *noted.lock().unwrap() += 1)
        .await
        .unwrap()
        .build();
    engine.evaluate_input(&input("s1", "hello")).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_sink_that_cannot_be_opened_is_a_load_error_with_its_place() {
    let scratch = Scratch::new("bad-sink");
    let path = scratch.write(
        "portcullis.yaml",
        "input: []\naudit:\n  jsonl: missing/folder/audit.jsonl\n",
    );
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    // Loading warns; assembling refuses.
    assert!(
        loaded
            .warnings()
            .iter()
            .any(|w| w.to_string().contains("portcullis.yaml:3:10: warning:")),
        "{:?}",
        loaded.warnings()
    );
    let errors = errors_of(&path).await;
    assert_eq!(errors.errors().len(), 1, "{errors}");
    let error = errors.errors()[0].to_string();
    assert!(
        error.contains("portcullis.yaml:3:10: error: `audit.jsonl`: cannot open"),
        "{error}"
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_that_does_not_answer_is_a_load_error_with_its_place() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let scratch = Scratch::new("dead-redis");
    let path = scratch.write(
        "portcullis.yaml",
        &format!("input: []\nsessions:\n  store: redis://127.0.0.1:{port}/0\n"),
    );
    let errors = errors_of(&path).await;
    let error = errors.errors()[0].to_string();
    assert!(
        error.contains("portcullis.yaml:3:10: error: `sessions.store`: cannot connect to Redis"),
        "{error}"
    );
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_in_redis_from_the_manifest_are_shared_by_engines() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let scratch = Scratch::new("redis");
    let path = trifecta_manifest(
        &scratch,
        &format!("sessions: {{ store: \"{}\", ttl: 1h }}\n", server.url()),
    );
    trifecta(&engine_of(&path).await).await;
    // A second engine on the same Redis sees the first one's labels.
    let other = engine_of(&path).await;
    assert!(other.evaluate_tool_call(&email("s1")).await.is_err());
    other.evaluate_tool_call(&email("s2")).await.unwrap();
}

#[cfg(feature = "redis")]
use portcullis_testing::redis::RedisServer;

#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_a_collector_over_otlp_http() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

    let collector = receiver::Receiver::start(receiver::Behaviour::status(200)).await;
    let scratch = Scratch::new("otlp");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    scratch.write(
        "rules/no_email_after_untrusted.json",
        NO_EMAIL_AFTER_UNTRUSTED,
    );
    std::fs::create_dir_all(scratch.path("logs")).unwrap();
    let path = scratch.write(
        "portcullis.yaml",
        &format!(
            "input:\n  - dsl: rules/mark_untrusted.json\ntool_call:\n  - dsl: rules/no_email_after_untrusted.json\nsessions: {{ store: memory }}\naudit:\n  jsonl: logs/audit.jsonl\n  otlp: {}\n",
            collector.base_url()
        ),
    );
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    let export = loaded.audit_export();
    assert_eq!(export.endpoint(), None, "nothing exports before the engine");
    let engine = loaded.into_engine_builder().await.unwrap().build();
    assert_eq!(
        export.endpoint(),
        Some(format!("{}/v1/traces", collector.base_url()))
    );
    engine
        .evaluate_input(&input("s1", "https://evil.example"))
        .await
        .unwrap();
    assert!(engine.evaluate_tool_call(&email("s1")).await.is_err());
    export.flush().await.unwrap();

    let requests = collector.requests();
    assert!(!requests.is_empty());
    let mut spans = Vec::new();
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(
            request.header("content-type"),
            Some("application/x-protobuf")
        );
        for resource in request.decode().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let attribute = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|value| match &value.value {
                Some(Any::StringValue(text)) => Some(text.clone()),
                _ => None,
            })
    };
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let audit = spans
        .iter()
        .find(|s| attribute(s, "engine.policy_id").as_deref() == Some("mark_untrusted"))
        .expect("the audit span");
    assert_eq!(audit.name, "engine.policy.evaluate");
    assert_eq!(
        attribute(audit, "engine.decision").as_deref(),
        Some("audit")
    );
    assert_eq!(
        attribute(audit, "engine.interception_point").as_deref(),
        Some("input")
    );
    let deny = spans
        .iter()
        .find(|s| attribute(s, "engine.policy_id").as_deref() == Some("no_email_after_untrusted"))
        .expect("the denial span");
    assert_eq!(attribute(deny, "engine.decision").as_deref(), Some("deny"));
    assert_eq!(
        deny.status.as_ref().map(|status| status.code),
        Some(StatusCode::Error as i32)
    );
    // The JSON lines sink got the same records (written by the log's own thread).
    assert_eq!(
        lines_eventually(&scratch.path("logs/audit.jsonl"), 2).len(),
        2
    );

    // After shutdown nothing more is exported, and the handle is idle.
    export.shutdown().await.unwrap();
    assert_eq!(export.endpoint(), None);
    engine.evaluate_input(&input("s2", "hello")).await.unwrap();
    export.flush().await.unwrap();
    assert_eq!(receiver::spans_received(&collector), 2);
}

#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_left_at_the_end_are_exported_by_shutdown() {
    let collector = receiver::Receiver::start(receiver::Behaviour::status(200)).await;
    let scratch = Scratch::new("otlp-shutdown");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    let path = scratch.write(
        "portcullis.yaml",
        &format!(
            "input:\n  - dsl: rules/mark_untrusted.json\naudit: {{ otlp: \"{}/\" }}\n",
            collector.base_url()
        ),
    );
    let loaded = Manifest::load(&path, &CodeRegistry::new()).unwrap();
    let export = loaded.audit_export();
    let engine = loaded.into_engine_builder().await.unwrap().build();
    for _ in 0..5 {
        engine.evaluate_input(&input("s1", "hello")).await.unwrap();
    }
    drop(engine);
    export.shutdown().await.unwrap();
    assert_eq!(receiver::spans_received(&collector), 5);
}

#[cfg(unix)]
#[tokio::test]
async fn the_jsonl_log_is_created_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("jsonl-mode");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    let path = scratch.write(
        "portcullis.yaml",
        "input:\n  - dsl: rules/mark_untrusted.json\naudit: { jsonl: audit.jsonl }\n",
    );
    let engine = engine_of(&path).await;
    engine
        .evaluate_input(&input("s1", "my password is hunter2"))
        .await
        .unwrap();
    drop(engine);
    let mode = std::fs::metadata(scratch.path("audit.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the log holds prompts: {mode:o}");
    assert!(
        std::fs::read_to_string(scratch.path("audit.jsonl"))
            .unwrap()
            .contains("hunter2")
    );
}

/// A log file that was left world-readable (made by hand, by an older version, by a careless
/// `touch`): the records it is about to receive hold prompts before redaction, so opening it
/// sets it to `0600` before the first record is written; what it held stays.
#[cfg(unix)]
#[tokio::test]
async fn an_existing_log_open_to_others_is_set_to_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("jsonl-existing-mode");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    for mode in [0o644, 0o666, 0o640, 0o604, 0o660] {
        let log = scratch.write("audit.jsonl", "{\"earlier\":true}\n");
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(mode)).unwrap();
        let path = scratch.write(
            "portcullis.yaml",
            "input:\n  - dsl: rules/mark_untrusted.json\naudit: { jsonl: audit.jsonl }\n",
        );
        let engine = engine_of(&path).await;
        let opened = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(opened, 0o600, "{mode:o} was left {opened:o}");
        engine
            .evaluate_input(&input("s1", "my password is hunter2"))
            .await
            .unwrap();
        drop(engine);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.starts_with("{\"earlier\":true}\n"), "{text}");
        assert!(text.contains("hunter2"), "{text}");
        let after = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(after, 0o600, "{mode:o} became {after:o}");
    }
}

/// A log on a full disk (`/dev/full` fails every write): the failures are counted, and with
/// `on_failure: deny` the calls fail once a write failed, even under `on_error: allow`; with
/// the default they go on.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_log_that_cannot_be_written_is_counted_and_fails_the_calls_under_deny() {
    let scratch = Scratch::new("jsonl-full");
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    for (on_failure, denies) in [("allow", false), ("deny", true)] {
        let path = scratch.write(
            &format!("{on_failure}.yaml"),
            &format!(
                "on_error: allow\ninput:\n  - dsl: rules/mark_untrusted.json\naudit: {{ jsonl: /dev/full, on_failure: {on_failure} }}\n"
            ),
        );
        let before = portcullis_manifest::audit_write_failures();
        let engine = engine_of(&path).await;
        // The first record is queued: its call proceeds, its write fails afterwards.
        engine
            .evaluate_input(&input("s1", "hello"))
            .await
            .expect("the first record is queued");
        let deadline = Instant::now() + Duration::from_secs(10);
        if denies {
            // From the failed write on, every call fails.
            let error = loop {
                match engine.evaluate_input(&input("s1", "hello")).await {
                    Ok(_) => assert!(Instant::now() < deadline, "the calls still proceed"),
                    Err(error) => break error,
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            assert_eq!(error.policy_id(), portcullis_engine::AUDIT_POLICY_ID);
            assert!(error.to_string().contains("portcullis.audit"), "{error}");
            let context = input("s2", "hello");
            let again = engine.evaluate_input(&context).await;
            assert!(again.is_err(), "the log still fails: so do the calls");
        } else {
            while portcullis_manifest::audit_write_failures() == before {
                assert!(
                    Instant::now() < deadline,
                    "the failed write was not counted"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            engine
                .evaluate_input(&input("s1", "hello"))
                .await
                .expect("on_failure: allow goes on");
        }
    }
}

/// A log whose writes stall (a pipe nobody reads, as a hung disk would): its queue fills, and
/// the records that do not fit are counted; under `on_failure: deny` their calls fail.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_fills_its_bounded_queue_and_denies_under_deny() {
    use std::io::Read;
    let scratch = Scratch::new("jsonl-stalled");
    let fifo = scratch.path("audit.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|status| status.success()), "mkfifo");
    // A reader that holds the pipe open without reading until told to drain it.
    let (drain, drained) = std::sync::mpsc::channel::<()>();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::File::open(&fifo).unwrap();
            let _ = drained.recv();
            let mut sink = Vec::new();
            let _ = pipe.read_to_end(&mut sink);
        })
    };
    scratch.write("rules/mark_untrusted.json", MARK_UNTRUSTED);
    let path = scratch.write(
        "portcullis.yaml",
        &format!(
            "on_error: allow\ninput:\n  - dsl: rules/mark_untrusted.json\naudit: {{ jsonl: {}, on_failure: deny }}\n",
            fifo.display()
        ),
    );
    let engine = engine_of(&path).await;
    let before = portcullis_manifest::audit_write_failures();
    let mut refused = None;
    // The pipe takes 64 KiB, the queue AUDIT_QUEUE_RECORDS records: the calls past both fail.
    for call in 0..(portcullis_manifest::AUDIT_QUEUE_RECORDS * 2) {
        if let Err(error) = engine.evaluate_input(&input("s1", "hello")).await {
            refused = Some((call, error));
            break;
        }
    }
    let (call, error) = refused.expect("a call failed once the queue was full");
    assert!(call >= portcullis_manifest::AUDIT_QUEUE_RECORDS, "{call}");
    assert_eq!(error.policy_id(), portcullis_engine::AUDIT_POLICY_ID);
    assert!(portcullis_manifest::audit_write_failures() > before);
    let _ = drain.send(());
    drop(engine);
    reader.join().unwrap();
}
