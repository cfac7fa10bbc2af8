//! Errors follow std's convention: `Display` says what went wrong at this level, and the
//! transport's own error is the `source()`, not pasted into the message as well (a reporter
//! that walks the chain would print it twice).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error as _;

use portcullis_http_client::{ClientOptions, RemoteErrorKind};

/// A base URL on 127.0.0.1 nothing listens on.
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    drop(listener);
    format!("http://{address}")
}

#[tokio::test]
async fn a_refused_connection_says_so_and_gives_the_transport_error_as_its_source() {
    let client = ClientOptions::new(refused_url().await)
        .connect()
        .expect("a valid URL");
    let url = client.url(["engine", "evaluate"]);
    let error = client
        .post_json(&url, &serde_json::json!({}))
        .await
        .expect_err("nothing listens there");
    assert_eq!(error.kind(), RemoteErrorKind::Connect);
    let message = error.to_string();
    assert!(message.ends_with(": cannot connect"), "{message}");

    let source = error.source().expect("the transport's error is the source");
    let mut chain = Vec::new();
    let mut cause: Option<&dyn std::error::Error> = Some(source);
    while let Some(error) = cause {
        chain.push(error.to_string());
        cause = error.source();
    }
    for cause in &chain {
        assert!(
            !message.contains(cause.as_str()),
            "the message {message:?} repeats its cause {cause:?}"
        );
    }
}
