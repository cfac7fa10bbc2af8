//! The engine's modules depend on each other one way: plain data at the bottom, policies and
//! sets on it, the engine on those, streaming on the engine. This test reads the sources and
//! fails when a module uses one of its own layer or above (see `docs/architecture.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// Each module and its layer; a module may use only modules of a lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("time", 0),
    ("timer", 0),
    ("path", 0),
    ("pattern", 0),
    ("stream/report", 0),
    ("stream/short", 0),
    ("stream/grams", 0),
    ("token", 0),
    ("edge", 0),
    ("duration", 0),
    ("json", 0),
    ("context", 1),
    ("decision", 1),
    ("approval", 2),
    ("error", 3),
    ("stream/rule", 4),
    ("stream/item", 4),
    ("blocking", 4),
    ("audit", 4),
    ("grant", 4),
    ("resolve", 5),
    ("point", 5),
    ("policy", 6),
    ("set", 7),
    ("stream/plan", 8),
    ("apply", 9),
    ("stream/stage", 9),
    ("unwind", 9),
    ("engine", 10),
    ("stream/guard", 11),
    ("stream/guard/audit", 11),
    ("stream/guard/evaluation", 11),
    ("stream/guard/feed", 11),
    ("stream/guard/held", 11),
    ("stream/guard/lane", 11),
    ("stream/guard/stages", 11),
    ("single", 11),
    ("stream", 12),
    ("session/store", 4),
    ("session/memory", 5),
    ("session/flow", 9),
    ("session", 12),
];

/// Items defined at the crate root that any module may use.
const ROOT_ITEMS: &[&str] = &["BoxFuture", "async_trait"];

fn layer(module: &str) -> Option<u32> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
}

/// The module a `crate::…` path names, from the text after `crate::`.
fn module_of(path: &str) -> String {
    let mut segments = path.split("::");
    let first = segments.next().unwrap_or_default();
    if let Some(second) = segments.next()
        && layer(&format!("{first}/{second}")).is_some()
    {
        return format!("{first}/{second}");
    }
    first.to_owned()
}

/// The code of a file, without comments and without its test module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn sources(dir: &Path, found: &mut Vec<(String, String)>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(dir).expect("a readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
            continue;
        }
        let relative = path
            .strip_prefix(&root)
            .expect("under src")
            .with_extension("")
            .to_string_lossy()
            .replace('\\', "/");
        let module = relative
            .strip_suffix("/mod")
            .unwrap_or(&relative)
            .to_owned();
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        found.push((module, text));
    }
}

#[test]
fn modules_depend_on_lower_layers_only() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut problems = Vec::new();
    for (module, text) in &files {
        // The crate root, and test modules kept in files of their own (as a module's
        // `#[cfg(test)] mod tests` is left out of its file below).
        if module == "lib" || module.ends_with("/tests") {
            continue;
        }
        let Some(own) = layer(module) else {
            problems.push(format!("`{module}` has no layer in this test"));
            continue;
        };
        let code = code(text);
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let path = rest[..end].trim_end_matches(':');
            if path.starts_with('{') || path.is_empty() {
                problems.push(format!("`{module}` imports a group from the crate root"));
                continue;
            }
            if ROOT_ITEMS.contains(&path.split("::").next().unwrap_or_default()) {
                continue;
            }
            let used = module_of(path);
            match layer(&used) {
                Some(theirs) if theirs < own => {}
                Some(_) if used == *module => {}
                Some(theirs) => problems.push(format!(
                    "`{module}` (layer {own}) uses `crate::{path}` of `{used}` (layer {theirs})"
                )),
                None => problems.push(format!(
                    "`{module}` uses `crate::{path}`: name the module it comes from"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
