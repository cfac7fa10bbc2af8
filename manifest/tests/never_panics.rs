//! The manifest reader never panics, whatever the text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Scratch;
use portcullis_manifest::{CodeRegistry, Manifest};
use proptest::prelude::*;

const PIECES: &[&str] = &[
    "on_error: ",
    "deny",
    "allow",
    "input:",
    "tool_call:",
    "output:",
    "\n",
    "  ",
    "- ",
    "dsl: ",
    "rules/",
    "x.json",
    "rego: ",
    "code: ",
    "monitor: ",
    "true",
    "deadline: ",
    "5ms",
    "[",
    "]",
    "{",
    "}",
    ": ",
    ",",
    "&a ",
    "*a",
    "settings:",
    "audit:",
    "jsonl: ",
    "sessions:",
    "ttl: ",
    "include:",
    "\"",
    "'",
    "#",
    "${X}",
    "9999999999999999999999",
    "-1",
    "~",
    "!!str ",
    "---\n",
    "? ",
    "|\n",
    ">\n",
    "\t",
    "é",
    "\u{0}",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text(text in any::<String>()) {
        let _ = portcullis_manifest::yaml::parse(&text);
    }

    #[test]
    fn manifest_like_text(pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..60)) {
        let text = pieces.concat();
        let _ = portcullis_manifest::yaml::parse(&text);
        let scratch = Scratch::new("prop");
        let path = scratch.write("portcullis.yaml", &text);
        let _ = Manifest::load(&path, &CodeRegistry::new());
    }
}
