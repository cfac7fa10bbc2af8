//! The Redis grant store against a real `redis-server` on 127.0.0.1 (skipped with a message
//! when it is missing, failed instead when `PORTCULLIS_REQUIRE_REDIS` is set): two stores on
//! one server are two replicas, and what one records the other sees, decides and spends once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime};

use portcullis_engine::grant::{ApprovalStatus, ApprovalVerdict, DecideError, GrantStore};
use portcullis_engine::{ApprovalRequest, InterceptionPoint};
use portcullis_redis::RedisGrantStore;
use portcullis_testing::redis::RedisServer;
use serde_json::json;

async fn store(server: &RedisServer) -> RedisGrantStore {
    RedisGrantStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connects")
}

fn request(to: &str) -> ApprovalRequest {
    ApprovalRequest::new(
        InterceptionPoint::ToolCall,
        vec!["ask_before_email".into()],
        vec!["email leaves the company".into()],
        json!({"tool_name": "send_email", "arguments": {"to": to, "n": 1.5e300},
               "metadata": {"agent_id": "a", "session_id": "s"}}),
    )
}

fn in_a_minute() -> SystemTime {
    SystemTime::now() + Duration::from_secs(60)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_requests_and_spend_a_grant_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (one, two) = (store(&server).await, store(&server).await);
    let asked = request("bob@example.com");
    let recorded = one.record(&asked, in_a_minute()).await.unwrap();
    assert_eq!(recorded.status, ApprovalStatus::Pending);
    assert_eq!(recorded.request, asked, "the request comes back as it was");
    // A retry on the other replica before anyone answered finds the same request.
    let retried = two
        .record(&request("bob@example.com"), in_a_minute())
        .await
        .unwrap();
    assert_eq!(retried.request.id, asked.id);
    let other = two
        .record(&request("eve@example.com"), in_a_minute())
        .await
        .unwrap();

    let listed = two.approvals(Some(ApprovalStatus::Pending)).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|r| r.request.id.as_str()).collect();
    assert_eq!(
        ids,
        [other.request.id.as_str(), asked.id.as_str()],
        "newest first"
    );
    assert_eq!(
        one.approval(&asked.id).await.unwrap().unwrap().request,
        asked
    );
    assert_eq!(one.approval("missing").await.unwrap(), None);

    // Both replicas decide at once: one decision counts.
    let grant = |by: &str| ApprovalVerdict::Grant {
        by: by.into(),
        ttl: Duration::from_secs(60),
    };
    let (first, second) = tokio::join!(
        one.decide(&asked.id, grant("erin")),
        two.decide(&asked.id, grant("frank"))
    );
    let decided = match (first, second) {
        (Ok(record), Err(DecideError::AlreadyDecided(_)))
        | (Err(DecideError::AlreadyDecided(_)), Ok(record)) => record,
        other => panic!("one decision, not {other:?}"),
    };
    assert_eq!(decided.status, ApprovalStatus::Granted);
    assert!(decided.decided_at.is_some());

    // Both replicas take at once: one grant, one call.
    let digest = &asked.action_digest;
    let (first, second) = tokio::join!(one.take(digest), two.take(digest));
    let taken: Vec<_> = [first.unwrap(), second.unwrap()]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(Some(taken[0].by.clone()), decided.decided_by);
    assert_eq!(one.take(digest).await.unwrap(), None);

    // A refusal is kept for its digest, on every replica.
    let refused = one
        .decide(
            &other.request.id,
            ApprovalVerdict::Refuse {
                by: "erin".into(),
                reason: Some("not to eve".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(refused.reason.as_deref(), Some("not to eve"));
    let refusal = two
        .refusal(&other.request.action_digest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refusal.denial_reason(), "refused by erin: not to eve");
    assert!(matches!(
        two.decide("missing", grant("x")).await,
        Err(DecideError::Unknown(_))
    ));
    assert_eq!(
        two.approvals(Some(ApprovalStatus::Pending)).await.unwrap(),
        []
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_and_an_expired_grant_are_gone() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server).await;
    let asked = request("bob@example.com");
    store
        .record(&asked, SystemTime::now() + Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(store.approval(&asked.id).await.unwrap(), None);
    assert_eq!(store.approvals(None).await.unwrap(), []);
    store
        .put(
            &asked.action_digest,
            portcullis_engine::Grant {
                by: "erin".into(),
                expires_at: SystemTime::now() - Duration::from_secs(1),
            },
        )
        .await
        .unwrap();
    assert_eq!(store.take(&asked.action_digest).await.unwrap(), None);
}
