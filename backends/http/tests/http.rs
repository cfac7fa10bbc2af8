//! The `http` backend against real endpoints on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// A test fails by panicking: unwrapping is how these tests say "this must work".

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis_engine::{
    AuditDecision, EngineError, InputContext, Message, Metadata, OnError, OutputContext, Policy,
    PolicyDecision, PolicyEngine, PolicySet, Redaction, ToolCallContext, TransformOperation,
};
use portcullis_http::{ClientError, RemoteError, RemoteErrorKind};
use portcullis_http::{HttpClientOptions, HttpInputPolicy, HttpOutputPolicy, HttpToolCallPolicy};
use portcullis_testing::{EvaluateServer, Reply};
use serde_json::json;

fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-1")
        .with_timestamp("2026-01-02T03:04:05.678Z")
        .with_extra("tenant", "acme")
}

fn input(text: &str) -> InputContext {
    InputContext::new(
        vec![Message::system("be brief"), Message::user(text)],
        metadata(),
    )
}

fn tool_call() -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("path".into(), json!("/etc/passwd"));
    ToolCallContext::new(
        "read_file",
        arguments,
        Message::assistant("reading it"),
        metadata(),
    )
}

fn output(text: &str) -> OutputContext {
    OutputContext::new(Message::assistant(text), metadata())
}

#[tokio::test]
async fn requests_carry_the_policy_the_point_the_context_and_the_headers() {
    let server = EvaluateServer::start().await.unwrap();
    let options = HttpClientOptions::new(server.url())
        .bearer_token("t0ken")
        .header("x-tenant", "acme");
    let input_policy = HttpInputPolicy::new("pii", options.clone()).unwrap();
    let tool_policy = HttpToolCallPolicy::new("tools", options.clone()).unwrap();
    let output_policy = HttpOutputPolicy::new("tone", options).unwrap();
    assert_eq!(
        input_policy.endpoint(),
        format!("{}/engine/evaluate", server.url())
    );

    let input = input("hello");
    let tool_call = tool_call();
    let output = output("hi there");
    assert_eq!(
        input_policy.evaluate(&input).await.unwrap(),
        PolicyDecision::allow()
    );
    assert_eq!(
        tool_policy.evaluate(&tool_call).await.unwrap(),
        PolicyDecision::allow()
    );
    assert_eq!(
        output_policy.evaluate(&output).await.unwrap(),
        PolicyDecision::allow()
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let expected = [
        json!({"policy_id": "pii", "interception_point": "input", "context": input}),
        json!({"policy_id": "tools", "interception_point": "tool_call", "context": tool_call}),
        json!({"policy_id": "tone", "interception_point": "output", "context": output}),
    ];
    for (request, expected) in requests.iter().zip(expected) {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/engine/evaluate");
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("authorization"), Some("Bearer t0ken"));
        assert_eq!(request.header("x-tenant"), Some("acme"));
        assert_eq!(request.json(), Some(expected));
    }
    // The context went out exactly as the engine's types serialize it, extra metadata included.
    let sent = requests[0].json().unwrap();
    assert_eq!(sent["context"]["metadata"]["tenant"], "acme");
    assert_eq!(
        sent["context"]["metadata"]["timestamp"],
        "2026-01-02T03:04:05.678Z"
    );
    assert_eq!(sent["context"]["messages"][1]["role"], "user");
}

#[tokio::test]
async fn a_base_url_with_a_path_prefix_is_kept() {
    let server = EvaluateServer::start().await.unwrap();
    for base in [
        format!("{}/policies/v2", server.url()),
        format!("{}/policies/v2/", server.url()),
    ] {
        let policy = HttpInputPolicy::new("p", HttpClientOptions::new(base)).unwrap();
        policy.evaluate(&input("x")).await.unwrap();
    }
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/policies/v2/engine/evaluate",
            "/policies/v2/engine/evaluate"
        ]
    );
}

#[tokio::test]
async fn every_decision_kind_comes_back() {
    let decisions = vec![
        PolicyDecision::allow(),
        PolicyDecision::Allow {
            audit: true,
            labels: Vec::new(),
        },
        PolicyDecision::deny("contains an SSN"),
        PolicyDecision::Deny {
            reason: None,
            policy_id: Some("central-pii".into()),
        },
        PolicyDecision::audit("looks odd"),
        PolicyDecision::redact([
            Redaction::replace("messages.1.content", r"\d{3}-\d{2}-\d{4}").with_replacement("***"),
            Redaction::mask("metadata.tenant"),
        ]),
        PolicyDecision::transform([
            TransformOperation::prepend("messages.0.content", "Policy: "),
            TransformOperation::set("metadata.reviewed", true),
        ]),
    ];
    // The server answers the decision whose index the message names.
    let script = decisions.clone();
    let server = EvaluateServer::scripted(move |request| {
        let index: usize = request.json().unwrap()["context"]["messages"][1]["content"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        Reply::decision(&script[index])
    })
    .await
    .unwrap();
    let policy = HttpInputPolicy::new("central", HttpClientOptions::new(server.url())).unwrap();
    for (index, decision) in decisions.iter().enumerate() {
        let got = policy.evaluate(&input(&index.to_string())).await.unwrap();
        assert_eq!(&got, decision, "decision {index}");
    }

    // Through an engine, the remote redaction is applied to what is forwarded.
    server.set_reply(Reply::json(json!({
        "decision": "redact",
        "redactions": [{"field": "messages.1.content", "strategy": "replace", "pattern": "\\d{3}-\\d{2}-\\d{4}"}],
    })));
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().input(policy).build())
        .build();
    let context = input("my SSN is 123-45-6789");
    let evaluation = engine.evaluate_input(&context).await.unwrap();
    assert_eq!(
        evaluation.context().messages[1].content,
        "my SSN is [REDACTED]"
    );

    // A remote deny stops the call with the decision's reason and policy id.
    server.set_reply(Reply::decision(&PolicyDecision::Deny {
        reason: Some("blocked centrally".into()),
        policy_id: Some("central-pii".into()),
    }));
    let error = engine.evaluate_input(&context).await.unwrap_err();
    let denial = error.as_denial().unwrap();
    assert_eq!(denial.reason(), Some("blocked centrally"));
    assert_eq!(denial.policy_id(), "central-pii");
}

/// The reference client reads the body as JSON whatever the header says: a valid decision is
/// a decision under any label, or none.
#[tokio::test]
async fn a_decision_is_read_whatever_its_content_type() {
    let decision = PolicyDecision::deny("labelled oddly");
    let body = serde_json::to_string(&decision).unwrap();
    for content_type in [
        Some("text/plain"),
        Some("text/html; charset=utf-8"),
        Some("application/octet-stream"),
        None,
    ] {
        let mut reply = Reply::status(200).with_body(body.clone());
        if let Some(content_type) = content_type {
            reply = reply.with_content_type(content_type);
        }
        let server = EvaluateServer::replying(reply).await.unwrap();
        let policy = HttpInputPolicy::new("remote", HttpClientOptions::new(server.url())).unwrap();
        let got = policy.evaluate(&input("hello")).await;
        assert_eq!(
            got.map_err(|error| error.to_string()),
            Ok(decision.clone()),
            "Content-Type {content_type:?}"
        );
        server.shutdown().await;
    }
}

/// What one failure class should look like.
struct Failure {
    name: &'static str,
    reply: Option<Reply>,
    timeout: Duration,
    kind: RemoteErrorKind,
    status: Option<u16>,
    excerpt: Option<&'static str>,
    message: &'static str,
}

fn failures() -> Vec<Failure> {
    let quick = Duration::from_millis(400);
    vec![
        Failure {
            name: "connection refused",
            reply: None,
            timeout: quick,
            kind: RemoteErrorKind::Connect,
            status: None,
            excerpt: None,
            message: "cannot connect",
        },
        Failure {
            name: "stall before headers",
            reply: Some(Reply::stall()),
            timeout: quick,
            kind: RemoteErrorKind::TimedOut,
            status: None,
            excerpt: None,
            message: "no complete answer within the time-out of 400ms",
        },
        Failure {
            name: "trickled body",
            reply: Some(Reply::trickle(Duration::from_millis(20))),
            timeout: quick,
            kind: RemoteErrorKind::TimedOut,
            status: Some(200),
            excerpt: Some(" "),
            message: "timed out",
        },
        Failure {
            name: "reset mid-body",
            reply: Some(Reply::reset_mid_body()),
            timeout: Duration::from_secs(5),
            kind: RemoteErrorKind::Body,
            status: Some(200),
            excerpt: None,
            message: "the body could not be read",
        },
        Failure {
            name: "server error",
            reply: Some(
                Reply::status(503)
                    .with_content_type("text/plain")
                    .with_body("overloaded, try later"),
            ),
            timeout: quick,
            kind: RemoteErrorKind::Status,
            status: Some(503),
            excerpt: Some("overloaded, try later"),
            message: "HTTP 503 Service Unavailable",
        },
        Failure {
            name: "oversized body",
            reply: Some(Reply::oversized(2 * 1024 * 1024)),
            timeout: Duration::from_secs(5),
            kind: RemoteErrorKind::TooLarge,
            status: Some(200),
            excerpt: Some("\"xxxx"),
            message: "more than the limit of 1048576 bytes",
        },
        Failure {
            name: "endless body",
            reply: Some(Reply::endless_body()),
            timeout: Duration::from_secs(30),
            kind: RemoteErrorKind::TooLarge,
            status: Some(200),
            excerpt: Some("    "),
            message: "longer than the limit of 1048576 bytes",
        },
        Failure {
            name: "redirect loop",
            reply: Some(Reply::redirect_loop()),
            timeout: quick,
            kind: RemoteErrorKind::Status,
            status: Some(307),
            excerpt: None,
            message: "redirected to \"/engine/evaluate\"; redirects are not followed",
        },
        Failure {
            name: "not a decision, labelled text/plain",
            reply: Some(
                Reply::status(200)
                    .with_content_type("text/plain")
                    .with_body("all good"),
            ),
            timeout: quick,
            kind: RemoteErrorKind::Shape,
            status: Some(200),
            excerpt: Some("all good"),
            message: "the body is not the JSON expected",
        },
        Failure {
            name: "not JSON",
            reply: Some(Reply::status(200).with_body("<html>hello</html>")),
            timeout: quick,
            kind: RemoteErrorKind::Shape,
            status: Some(200),
            excerpt: Some("<html>hello</html>"),
            message: "the body is not the JSON expected",
        },
        Failure {
            name: "not a decision",
            reply: Some(Reply::json(json!({"decision": "maybe"}))),
            timeout: quick,
            kind: RemoteErrorKind::Shape,
            status: Some(200),
            excerpt: Some(r#"{"decision":"maybe"}"#),
            message: "the body is not a decision",
        },
        Failure {
            name: "empty answer",
            reply: Some(Reply::status(204)),
            timeout: quick,
            kind: RemoteErrorKind::Shape,
            status: Some(204),
            excerpt: None,
            message: "the body is empty",
        },
    ]
}

/// A base URL nothing listens on.
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

fn check(failure: &Failure, error: &RemoteError) {
    let name = failure.name;
    assert_eq!(error.kind(), failure.kind, "{name}: {error}");
    assert_eq!(error.status(), failure.status, "{name}: {error}");
    let text = error.to_string();
    eprintln!("{name}: {text}");
    assert!(text.starts_with("POST http://127.0.0.1:"), "{name}: {text}");
    assert!(text.contains(failure.message), "{name}: {text}");
    match failure.excerpt {
        Some(excerpt) => {
            let got = error.body_excerpt().unwrap_or_default();
            assert!(got.starts_with(excerpt), "{name}: excerpt {got:?}");
            assert!(got.chars().count() <= 201, "{name}: excerpt too long");
        }
        None if failure.kind != RemoteErrorKind::Body => {
            assert_eq!(error.body_excerpt(), None, "{name}")
        }
        None => {}
    }
}

#[tokio::test]
async fn every_failure_is_an_evaluation_error_under_both_on_error_settings() {
    for failure in failures() {
        let server = match &failure.reply {
            Some(reply) => Some(EvaluateServer::replying(reply.clone()).await.unwrap()),
            None => None,
        };
        let url = match &server {
            Some(server) => server.url(),
            None => refused_url().await,
        };
        let options = HttpClientOptions::new(url).timeout(failure.timeout);

        for on_error in [OnError::Deny, OnError::Allow] {
            let records = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&records);
            let engine = PolicyEngine::builder()
                .policy_set(
                    PolicySet::builder()
                        .input(HttpInputPolicy::new("remote", options.clone()).unwrap())
                        .on_error(on_error)
                        .build(),
                )
                .on_audit(move |record: &portcullis_engine::AuditRecord<'_>| {
                    sink.lock()
                        .unwrap()
                        .push((record.decision, record.reason.as_deref().map(str::to_owned)));
                })
                .build();
            let context = input("hello");
            let started = Instant::now();
            let result = engine.evaluate_input(&context).await;
            let elapsed = started.elapsed();
            assert!(
                elapsed < failure.timeout + Duration::from_secs(3),
                "{}: took {elapsed:?}",
                failure.name
            );
            match on_error {
                OnError::Deny => {
                    let Err(EngineError::Evaluation(error)) = result else {
                        panic!("{}: expected an evaluation error", failure.name);
                    };
                    assert_eq!(error.policy_id(), "remote");
                    let remote = error
                        .cause()
                        .downcast_ref::<RemoteError>()
                        .expect("the cause is a RemoteError");
                    check(&failure, remote);
                }
                OnError::Allow => {
                    let evaluation = result.unwrap_or_else(|error| {
                        panic!("{}: on_error allow should go on: {error}", failure.name)
                    });
                    assert_eq!(evaluation.context(), &context);
                    assert!(evaluation.decisions().is_empty());
                }
            }
            let records = records.lock().unwrap();
            assert_eq!(records.len(), 1, "{}", failure.name);
            assert_eq!(records[0].0, AuditDecision::EvaluationError);
            let reason = records[0].1.clone().unwrap_or_default();
            assert!(
                reason.contains(failure.message),
                "{}: audit reason {reason}",
                failure.name
            );
        }
        if let Some(server) = server {
            server.shutdown().await;
        }
    }
}

#[tokio::test]
async fn a_server_that_never_answers_does_not_hold_the_agent_beyond_the_time_out() {
    let server = EvaluateServer::replying(Reply::stall()).await.unwrap();
    let timeout = Duration::from_millis(300);
    let policy = HttpInputPolicy::new(
        "slow",
        HttpClientOptions::new(server.url()).timeout(timeout),
    )
    .unwrap();
    let started = Instant::now();
    let error = policy.evaluate(&input("hello")).await.unwrap_err();
    let elapsed = started.elapsed();
    let error = error.downcast::<RemoteError>().unwrap();
    assert_eq!(error.kind(), RemoteErrorKind::TimedOut);
    assert!(elapsed >= timeout, "gave up early: {elapsed:?}");
    assert!(
        elapsed < timeout + Duration::from_secs(2),
        "held the agent for {elapsed:?}"
    );
    // The request did reach the server: it was the answer that never came.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_default_time_out_is_five_seconds_and_the_body_cap_one_mebibyte() {
    let options = HttpClientOptions::new("http://127.0.0.1:1");
    assert_eq!(options.request_timeout(), Duration::from_secs(5));
    assert_eq!(options.body_limit(), 1024 * 1024);

    // A smaller cap is enforced too, and the excerpt shows the start of the body.
    let server = EvaluateServer::replying(Reply::oversized(2000))
        .await
        .unwrap();
    let policy = HttpOutputPolicy::new(
        "capped",
        HttpClientOptions::new(server.url()).max_body_bytes(1000),
    )
    .unwrap();
    let error = policy.evaluate(&output("x")).await.unwrap_err();
    let error = error.downcast::<RemoteError>().unwrap();
    assert_eq!(error.kind(), RemoteErrorKind::TooLarge);
    assert!(
        error.to_string().contains("announces 2000 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn concurrent_calls_share_one_connection_pool() {
    let server = EvaluateServer::replying(
        Reply::decision(&PolicyDecision::allow()).after(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let options = HttpClientOptions::new(server.url());
    // Policies built from clones of one options value share its pool.
    let policies: Vec<Arc<HttpInputPolicy>> = (0..4)
        .map(|index| Arc::new(HttpInputPolicy::new(format!("p{index}"), options.clone()).unwrap()))
        .collect();

    let wave = |policies: Vec<Arc<HttpInputPolicy>>| async move {
        let mut tasks = tokio::task::JoinSet::new();
        for call in 0..32 {
            let policy = Arc::clone(&policies[call % policies.len()]);
            tasks.spawn(async move {
                policy
                    .evaluate(&input("hello"))
                    .await
                    .map_err(|e| e.to_string())
            });
        }
        while let Some(result) = tasks.join_next().await {
            assert_eq!(result.unwrap().unwrap(), PolicyDecision::allow());
        }
    };
    wave(policies.clone()).await;
    let first = server.connections_accepted();
    assert!((1..=32).contains(&first), "first wave opened {first}");
    wave(policies.clone()).await;
    let second = server.connections_accepted();
    assert!(
        second - first <= 2,
        "the second wave should reuse the first wave's connections: {first} then {second}"
    );
    for _ in 0..10 {
        policies[0].evaluate(&input("again")).await.unwrap();
    }
    assert_eq!(
        server.connections_accepted(),
        second,
        "sequential calls reuse one connection"
    );
    assert_eq!(server.requests().len(), 74);

    // A separately made options value has a pool of its own.
    let other = HttpInputPolicy::new("other", HttpClientOptions::new(server.url())).unwrap();
    other.evaluate(&input("hello")).await.unwrap();
    assert_eq!(server.connections_accepted(), second + 1);
}

#[test]
fn bad_options_fail_at_construction_and_say_why() {
    let error = |options: HttpClientOptions| HttpInputPolicy::new("p", options).unwrap_err();
    let cases = [
        (
            error(HttpClientOptions::new("localhost:8181")),
            "invalid base URL \"localhost:8181\": the scheme is \"localhost\"; only http and https are supported",
        ),
        (
            error(HttpClientOptions::new("not a url")),
            "invalid base URL \"not a url\": relative URL without a base (expected an absolute URL such as http://localhost:8181)",
        ),
        (
            error(HttpClientOptions::new("ftp://example.com")),
            "invalid base URL \"ftp://example.com\": the scheme is \"ftp\"; only http and https are supported",
        ),
        (
            error(HttpClientOptions::new("http://example.com/?x=1")),
            "invalid base URL \"http://example.com/?x=1\": it has a query or a fragment; give the service's base URL only",
        ),
        (
            error(HttpClientOptions::new("http://example.com").header("bad header", "x")),
            "invalid header \"bad header\": not a valid header name",
        ),
        (
            error(HttpClientOptions::new("http://example.com").header("x-token", "a\nb")),
            "invalid header \"x-token\": the value holds characters a header cannot carry (control characters or non-ASCII)",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.to_string(), message);
        assert!(matches!(
            error,
            ClientError::InvalidBaseUrl { .. } | ClientError::InvalidHeader { .. }
        ));
    }
}

#[tokio::test]
async fn https_goes_through_rustls() {
    // TLS to a server that speaks plain HTTP: rustls starts the handshake and the server's
    // answer is not TLS, so the connection fails; no OpenSSL is involved.
    let server = EvaluateServer::start().await.unwrap();
    let url = format!("https://{}", server.address());
    let policy = HttpInputPolicy::new("tls", HttpClientOptions::new(url)).unwrap();
    let error = policy.evaluate(&input("x")).await.unwrap_err();
    let error = error.downcast::<RemoteError>().unwrap();
    assert_eq!(error.kind(), RemoteErrorKind::Connect, "{error}");
    assert_eq!(server.connections_accepted(), 1);
}

#[test]
fn debug_output_never_shows_header_values() {
    let options = HttpClientOptions::new("http://example.com").bearer_token("very-secret");
    let shown = format!("{options:?}");
    assert!(shown.contains("authorization"), "{shown}");
    assert!(!shown.contains("very-secret"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_evaluations_has_at_most_max_connections_requests_in_flight() {
    // 300 evaluations at once against a server that answers after 20 ms: they all succeed, with
    // never more requests in flight than the options allow. Connections are reused, but a
    // connection on its way back to the pool when the next request starts can make a new one
    // open, so the count of connections is only bounded loosely.
    let server = EvaluateServer::replying(
        Reply::decision(&PolicyDecision::allow()).after(Duration::from_millis(20)),
    )
    .await
    .expect("server");
    let options = HttpClientOptions::new(server.url()).max_connections(8);
    assert_eq!(options.connection_limit(), 8);
    let policy = Arc::new(HttpInputPolicy::new("burst", options).expect("policy"));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300 {
        let policy = Arc::clone(&policy);
        tasks.spawn(async move { policy.evaluate(&input(&format!("hello {i}"))).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert_eq!(
            result.expect("task").expect("evaluation"),
            PolicyDecision::allow()
        );
    }
    assert_eq!(server.requests().len(), 300);
    let peak = server.peak_in_flight();
    assert!((1..=8).contains(&peak), "{peak} requests in flight at once");
    let connections = server.connections_accepted();
    assert!(
        connections < 300,
        "{connections} connections: none was reused"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn waiting_for_a_free_connection_counts_against_the_time_out() {
    // One slot and a server that never answers: five requests at once queue for the slot. Each
    // one fails within its own time-out (400 ms) counted from its start, waiting included; were
    // the wait not counted, the k-th would take k times the time-out.
    let server = EvaluateServer::replying(Reply::stall())
        .await
        .expect("server");
    let options = HttpClientOptions::new(server.url())
        .max_connections(1)
        .timeout(Duration::from_millis(400));
    let policy = Arc::new(HttpInputPolicy::new("one-slot", options).expect("policy"));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..5 {
        let policy = Arc::clone(&policy);
        tasks.spawn(async move {
            let started = Instant::now();
            let outcome = policy.evaluate(&input(&format!("request {i}"))).await;
            (started.elapsed(), outcome)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (elapsed, outcome) = joined.expect("task");
        let error = outcome.expect_err("the server never answers");
        let remote = error.downcast_ref::<RemoteError>().expect("a RemoteError");
        assert_eq!(remote.kind(), RemoteErrorKind::TimedOut, "{remote}");
        assert!(
            elapsed < Duration::from_millis(800),
            "{elapsed:?}: {remote}"
        );
    }
    server.shutdown().await;
}

/// A remote policy answering `{"decision": "escalate"}` makes the engine ask its resolver.
#[tokio::test]
async fn a_remote_escalation_asks_the_resolver() {
    use portcullis_engine::{
        ApprovalAnswer, ApprovalRequest, ApprovalResolver, BoxError, PolicyEngine, PolicySet,
        async_trait,
    };

    struct RefuseAll;

    #[async_trait]
    impl ApprovalResolver for RefuseAll {
        async fn resolve(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, BoxError> {
            assert_eq!(request.reasons, ["ask a person"]);
            Ok(ApprovalAnswer::Refused {
                reason: Some("no".into()),
            })
        }
    }

    let server =
        EvaluateServer::replying(Reply::decision(&PolicyDecision::escalate("ask a person")))
            .await
            .unwrap();
    let policy = HttpToolCallPolicy::new("remote", HttpClientOptions::new(server.url())).unwrap();
    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(policy).build())
        .approvals(RefuseAll)
        .build();
    let context = portcullis_engine::ToolCallContext::new(
        "send_email",
        serde_json::Map::new(),
        portcullis_engine::Message::assistant("sending"),
        portcullis_engine::Metadata::new("agent", "session"),
    );
    let error = engine.evaluate_tool_call(&context).await.unwrap_err();
    let denial = error.as_denial().expect("a refusal");
    assert_eq!(denial.policy_id(), "remote");
    assert_eq!(denial.reason(), Some("no"));
}
