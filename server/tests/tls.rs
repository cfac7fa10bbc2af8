//! HTTPS with rustls: a certificate and key made for these tests (`openssl req -x509`, P-256,
//! for localhost and 127.0.0.1).

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{input, policies, start_with};
use portcullis_server::{DecisionService, ServeOptions, Tls};

const CERTIFICATE: &str = r"-----BEGIN CERTIFICATE-----
MIIBrDCCAVKgAwIBAgIUdespZ6jY1GUydxtBzMANfF0qc10wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MB4XDTI2MTEyNDA1MzQ0NloXDTM2MTEyMTA1
MzQ0NlowFDESMBAGA1UEAwwJbG9jYWxob3N0MFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEiwREj3W/7TxMXcUYSDD1N+zh0f6TGgsfI+TFp79QVJiSzp5XvQHYlf+B
zW2Sk/L72yWoxTIcFumZZvCNySftsKOBgTB/MB0GA1UdDgQWBBQOp/wLg3W8yC0V
OCtg2oNt6ifvgTAfBgNVHSMEGDAWgBQOp/wLg3W8yC0VOCtg2oNt6ifvgTAaBgNV
HREEEzARgglsb2NhbGhvc3SHBH8AAAEwDAYDVR0TAQH/BAIwADATBgNVHSUEDDAK
BggrBgEFBQcDATAKBggqhkjOPQQDAgNIADBFAiA0SvwhMgd1zXAsBIJMmuXM5Uov
ov+4CFHf0AIl6RWIagIhAI5JpdzTGYNHDyYa8gvxPcvStGBVDd0u1Xru/mX+UjRN
-----END CERTIFICATE-----";
const KEY: &str = r"-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgzSUPhSB5LQPt9Dsx
/r3XhvPLy+nXLobP0AFx3kHT41uhRANCAASLBESPdb/tPExdxRhIMPU37OHR/pMa
Cx8j5MWnv1BUmJLOnle9AdiV/4HNbZKT8vvbJajFMhwW6Zlm8I3JJ+2w
-----END PRIVATE KEY-----";

fn files(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "portcullis-server-tls-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("a folder");
    let (certificate, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&certificate, CERTIFICATE).expect("written");
    std::fs::write(&key, KEY).expect("written");
    (certificate, key)
}

/// On the caller's runtime, and on worker threads (which run the handshake too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_and_survives_a_plain_http_client() {
    let (certificate, key) = files("serve");
    let tls = Tls::from_pem_files(&certificate, &key).expect("a usable certificate");
    for options in [
        ServeOptions::new().tls(tls.clone()),
        ServeOptions::new().tls(tls.clone()).workers(2),
    ] {
        served_over_https(options).await;
    }
}

async fn served_over_https(options: ServeOptions) {
    let server = start_with(DecisionService::builder(), Some(policies()), options).await;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(CERTIFICATE.as_bytes()).expect("PEM"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client");
    let https = format!("https://localhost:{}", server.addr.port());

    // A client speaking plain HTTP to the TLS port gets nothing, and the server goes on.
    assert!(
        common::client()
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .is_err()
    );

    let response = client
        .post(format!("{https}/v1/evaluate/input"))
        .json(&input("a secret"))
        .send()
        .await
        .expect("an answer over TLS");
    assert_eq!(response.status().as_u16(), 200);
    let outcome: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(outcome["outcome"], "denied");
    server.stop().await;
}

#[test]
fn a_key_that_is_not_one_is_an_error_naming_the_file() {
    let (certificate, key) = files("bad");
    std::fs::write(&key, "not a key").expect("written");
    let error = Tls::from_pem_files(&certificate, &key)
        .expect_err("refused")
        .to_string();
    assert!(error.contains("key.pem"), "{error}");
    let error = Tls::from_pem_files(key.with_file_name("missing.pem"), &key)
        .expect_err("refused")
        .to_string();
    assert!(error.contains("missing.pem"), "{error}");
}
