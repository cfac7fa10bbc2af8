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

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TOKEN_VARIABLE: &str = "PORTCULLIS_CONSOLE_TEST_TOKEN";

/// A scratch folder with the manifest, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("portcullis-console-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("rules")).expect("a scratch folder");
        std::fs::write(
            dir.join("rules/ask_before_email.json"),
            r#"{"condition": {"field": "tool_name", "equals": "send_email"}, "action": "escalate", "reason": "email leaves the company"}"#,
        )
        .expect("the rule is written");
        std::fs::write(
            dir.join("portcullis.yaml"),
            "tool_call:\n  - dsl: rules/ask_before_email.json\n",
        )
        .expect("the manifest is written");
        Scratch(dir)
    }

    fn manifest(&self) -> PathBuf {
        self.0.join("portcullis.yaml")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `portcullis serve --console`, killed on drop.
struct Server {
    child: Child,
    addr: String,
    /// What it logged, for a failure's message.
    log: mpsc::Receiver<String>,
}

impl Server {
    fn start(manifest: &Path, token: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .arg("serve")
            .arg(manifest)
            .args(["--listen", "127.0.0.1:0", "--console"])
            .args(["--token-env", TOKEN_VARIABLE])
            .env(TOKEN_VARIABLE, token)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let stderr = child.stderr.take().expect("stderr");
        let (sender, log) = mpsc::channel();
        // From here the child is killed when the server is dropped, even if it never starts.
        let mut server = Server {
            child,
            addr: String::new(),
            log,
        };
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut startup = Vec::new();
        loop {
            let line = match server
                .log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => line,
                Err(_) => panic!(
                    "the service did not start; it logged:\n{}",
                    startup.join("\n")
                ),
            };
            startup.push(line.clone());
            let marker = "serving decisions on http://";
            if let Some(at) = line.find(marker) {
                // Up to the first space, or the quote that ends a JSON log line's message.
                server.addr = line[at + marker.len()..]
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                return server;
            }
        }
    }

    /// What it logged since it started listening.
    fn drain_log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let scratch = Scratch::new();
    let token = format!("console-test-token-{}", std::process::id());
    let server = Server::start(&scratch.manifest(), &token);
    let base = format!("http://{}", server.addr);

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
        server.drain_log()
    );
}
