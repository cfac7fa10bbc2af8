//! The approval console in a real browser: `portcullis serve --console` on 127.0.0.1 with a
//! manifest whose tool-call policy escalates e-mail, driven by `cli/tests/console/console.mjs`
//! (Node with `playwright-core` and Debian's headless Chromium). The script signs in, approves
//! and refuses with the keyboard through the page, retries the call through the HTTP API, reads
//! the decision feed, and checks that nothing the page shows runs and that no request leaves
//! for another host.
//!
//! Skipped, with a message, when Chromium (`/usr/bin/chromium` or `PORTCULLIS_CHROMIUM`) or
//! `cli/tests/console/node_modules/playwright-core` is missing, unless
//! `PORTCULLIS_REQUIRE_BROWSER` is set: then it fails. `scripts/test` installs both.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use portcullis_testing::process::{Process, Scratch};

const TOKEN_VARIABLE: &str = "PORTCULLIS_CONSOLE_TEST_TOKEN";

/// A scratch folder with the escalating rule and a manifest using it.
fn escalating() -> Scratch {
    let scratch = Scratch::new("console");
    scratch.write(
        "rules/ask_before_email.json",
        r#"{"condition": {"field": "tool_name", "equals": "send_email"}, "action": "escalate", "reason": "email leaves the company"}"#,
    );
    scratch.write(
        "portcullis.yaml",
        "tool_call:\n  - dsl: rules/ask_before_email.json\n",
    );
    scratch
}

/// `portcullis serve --console` on 127.0.0.1 with `token`: the process and its base URL.
fn serve_console(manifest: &Path, token: &str) -> (Process, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command
        .arg("serve")
        .arg(manifest)
        .args(["--listen", "127.0.0.1:0", "--console"])
        .args(["--token-env", TOKEN_VARIABLE])
        .env(TOKEN_VARIABLE, token);
    let (process, address) = Process::start(command, "serving decisions on http://");
    (process, format!("http://{address}"))
}

/// Debian's Chromium, or the one `PORTCULLIS_CHROMIUM` names.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PORTCULLIS_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.is_file().then_some(path)
}

/// The browser test's folder, when its packages are installed.
fn script_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

/// Whether the browser and the test's packages are here; a missing one skips the test, or
/// fails it when `PORTCULLIS_REQUIRE_BROWSER` is set.
fn browser_ready() -> Option<PathBuf> {
    let mut missing = Vec::new();
    let chromium = chromium();
    if chromium.is_none() {
        missing.push("chromium (/usr/bin/chromium or PORTCULLIS_CHROMIUM)".to_owned());
    }
    let playwright = script_folder().join("node_modules/playwright-core");
    if !playwright.is_dir() {
        missing.push(format!(
            "{} (npm ci in cli/tests/console)",
            playwright.display()
        ));
    }
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !node {
        missing.push("node".to_owned());
    }
    if missing.is_empty() {
        return chromium;
    }
    let message = format!("the console's browser test needs {}", missing.join(", "));
    if std::env::var_os("PORTCULLIS_REQUIRE_BROWSER").is_some() {
        panic!("{message} (PORTCULLIS_REQUIRE_BROWSER is set)");
    }
    eprintln!("skipped: {message}");
    None
}

#[test]
fn the_console_approves_and_refuses_in_a_browser() {
    let Some(chromium) = browser_ready() else {
        return;
    };
    let scratch = escalating();
    let token = format!("console-test-token-{}", std::process::id());
    let (server, base) = serve_console(&scratch.path().join("portcullis.yaml"), &token);

    let output = Command::new("node")
        .arg(script_folder().join("console.mjs"))
        .args([&base, &token])
        .current_dir(script_folder())
        .env("PORTCULLIS_CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the browser test failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- the service's log\n{}",
        output.status,
        server.log()
    );
}
