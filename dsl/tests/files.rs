//! Policy ids and rule files from configuration cannot leave their rule directory: ids with path
//! separators, `..`, a leading `.` or NUL are refused before any file is touched, and a rule file
//! that is a link leading outside the directory is refused; links that stay inside are followed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use portcullis_dsl::{DslError, DslInputPolicy, DslToolCallPolicy, validate_id};

const RULE: &str = r#"{
  "condition": { "field": "messages.-1.content", "equals": "ping" },
  "action": "audit",
  "reason": "health check"
}"#;

/// A fresh scratch folder holding `rules/ping.json` and `outside/secret.json` (both valid rules).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("portcullis-dsl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("rules")).expect("scratch");
    std::fs::create_dir_all(dir.join("outside")).expect("scratch");
    std::fs::write(dir.join("rules/ping.json"), RULE).expect("write");
    std::fs::write(dir.join("outside/secret.json"), RULE).expect("write");
    dir
}

#[test]
fn ids_that_are_not_plain_file_names_are_refused() {
    let dir = scratch("ids");
    let rules = dir.join("rules");
    let bad = [
        ("../outside/secret", "path separator"),
        ("..", "`..`"),
        ("..secret", "`..`"),
        ("/etc/passwd", "path separator"),
        ("/tmp", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("C:\\rules\\x", "path separator"),
        (".hidden", "starts with `.`"),
        (".", "starts with `.`"),
        ("ping\0", "NUL"),
        ("\0", "NUL"),
        ("", "empty"),
    ];
    for (id, problem) in bad {
        let error = DslInputPolicy::new(id, &rules).expect_err(id);
        assert!(
            matches!(error, DslError::InvalidId { .. }),
            "{id:?}: {error:?}"
        );
        assert!(error.to_string().contains(problem), "{id:?}: {error}");
        assert!(validate_id(id).is_err(), "{id:?}");
    }
    // The control: the plain id names the file and loads.
    DslInputPolicy::new("ping", &rules).expect("a plain id loads");
}

#[cfg(unix)]
#[test]
fn links_out_of_the_rule_directory_are_refused() {
    use std::os::unix::fs::symlink;

    let dir = scratch("links");
    let rules = dir.join("rules");
    // A relative link and an absolute one, both to a valid rule outside the directory.
    symlink("../outside/secret.json", rules.join("relative.json")).expect("symlink");
    symlink(dir.join("outside/secret.json"), rules.join("absolute.json")).expect("symlink");
    // A link to a system file: refused for where it leads, before it is read.
    symlink("/etc/hostname", rules.join("system.json")).expect("symlink");
    for id in ["relative", "absolute", "system"] {
        let error = DslInputPolicy::new(id, &rules).expect_err(id);
        match &error {
            DslError::OutsideDirectory { path, resolved, .. } => {
                assert_eq!(path, &rules.join(format!("{id}.json")));
                assert!(!resolved.starts_with(&rules), "{}", resolved.display());
            }
            other => panic!("{id}: expected OutsideDirectory, got {other:?}"),
        }
        assert!(
            error.to_string().contains("outside the rule directory"),
            "{error}"
        );
    }
    // A chain of links that ends outside is refused too.
    symlink("relative.json", rules.join("chain.json")).expect("symlink");
    let error = DslToolCallPolicy::new("chain", &rules).expect_err("chain");
    assert!(
        matches!(error, DslError::OutsideDirectory { .. }),
        "{error:?}"
    );
}

#[cfg(unix)]
#[test]
fn links_inside_the_rule_directory_are_followed() {
    use std::os::unix::fs::symlink;

    let dir = scratch("inside");
    let rules = dir.join("rules");
    symlink("ping.json", rules.join("alias.json")).expect("symlink");
    std::fs::create_dir_all(rules.join("shared")).expect("mkdir");
    std::fs::write(rules.join("shared/common.json"), RULE).expect("write");
    symlink("shared/common.json", rules.join("common.json")).expect("symlink");
    for id in ["alias", "common"] {
        let policy = DslInputPolicy::new(id, &rules).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(
            portcullis_engine::Policy::<portcullis_engine::InputContext>::id(&policy),
            id
        );
    }
    // The rule directory itself may be reached through a link.
    let linked: &Path = &dir.join("linked-rules");
    symlink(&rules, linked).expect("symlink");
    DslInputPolicy::new("ping", linked).expect("a linked directory");
    DslInputPolicy::new("alias", linked).expect("an alias in a linked directory");
}

#[test]
fn a_dangling_or_missing_file_is_a_read_error() {
    let dir = scratch("missing");
    let error = DslInputPolicy::new("nothing", dir.join("rules")).expect_err("missing");
    assert!(matches!(error, DslError::Read { .. }), "{error:?}");
    let error = DslInputPolicy::new("ping", dir.join("no-such-dir")).expect_err("no dir");
    assert!(matches!(error, DslError::Read { .. }), "{error:?}");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("gone.json", dir.join("rules/dangling.json")).expect("symlink");
        let error = DslInputPolicy::new("dangling", dir.join("rules")).expect_err("dangling");
        assert!(matches!(error, DslError::Read { .. }), "{error:?}");
    }
}
