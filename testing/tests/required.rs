//! A test that cannot run for want of a tool (here `redis-server`) passes as skipped, unless
//! the test command requires it (`PORTCULLIS_REQUIRE_REDIS`, set by `scripts/test`): then it
//! fails, so a suite cannot pass without running its Redis tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

/// Run only by [`a_missing_redis_server_fails_the_test_only_when_required`], in a process
/// whose `PATH` holds no `redis-server`.
#[test]
#[ignore = "started by a_missing_redis_server_fails_the_test_only_when_required"]
fn starts_a_redis_server() {
    let server = portcullis_testing::redis::RedisServer::start();
    assert!(server.is_none(), "a redis-server started without a PATH");
}

/// Runs [`starts_a_redis_server`] in a test process of its own, with an empty `PATH` and
/// `PORTCULLIS_REQUIRE_REDIS` set to `require` (unset for `None`).
fn without_redis(require: Option<&str>) -> Output {
    let empty = std::env::temp_dir().join(format!("portcullis-no-tools-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "starts_a_redis_server",
            "--ignored",
            "--nocapture",
        ])
        .env("PATH", &empty)
        .env_remove("PORTCULLIS_REQUIRE_REDIS");
    if let Some(value) = require {
        command.env("PORTCULLIS_REQUIRE_REDIS", value);
    }
    let output = command.output().unwrap();
    let _ = std::fs::remove_dir(&empty);
    output
}

#[test]
fn a_missing_redis_server_fails_the_test_only_when_required() {
    for require in [None, Some("0")] {
        let output = without_redis(require);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{require:?}: {stderr}");
        assert!(
            stderr.contains("skipped: cannot start redis-server"),
            "{require:?}: {stderr}"
        );
    }
    let output = without_redis(Some("1"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "a required test passed unrun: {printed}"
    );
    assert!(
        printed.contains("cannot start redis-server")
            && printed.contains("PORTCULLIS_REQUIRE_REDIS requires this test to run"),
        "{printed}"
    );
}
