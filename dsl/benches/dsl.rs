//! `cargo bench -p portcullis-dsl --bench dsl`
//!
//! Goals (issue 3): `contains` with 4 needles over one 1 KiB message under 300 ns per
//! evaluation; `not_in` over 20 tool names under 100 ns; construction from a file reported.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{InputContext, InputPolicy, Message, Metadata, ToolCallContext};

const TOOLS: [&str; 20] = [
    "search",
    "calculator",
    "weather",
    "calendar",
    "email_read",
    "email_draft",
    "files_list",
    "files_read",
    "translate",
    "summarize",
    "maps",
    "stocks",
    "news",
    "wikipedia",
    "dictionary",
    "timer",
    "reminders",
    "contacts",
    "notes",
    "unit_convert",
];

/// About 1 KiB of mixed-case prose without any of the needles.
fn message() -> String {
    let sentence = "The Quick brown fox jumps over the lazy dog while Planning the Next release. ";
    let mut text = String::new();
    while text.len() < 1024 {
        text.push_str(sentence);
    }
    text.truncate(1024);
    text
}

fn contains(c: &mut Criterion) {
    let policy = DslInputPolicy::from_source(
        "block_secrets",
        r#"{ "condition": { "field": "messages.-1.content",
                            "contains": ["api key", "password", "secret key", "BEGIN PRIVATE KEY"] },
             "action": "deny", "reason": "secret" }"#,
        "block_secrets.json",
    )
    .expect("valid rule");
    let metadata = Metadata::new("agent", "session");
    let miss = InputContext::new(vec![Message::user(message())], metadata.clone());
    let mut late = message();
    late.replace_range(1000.., "my PASSWORD!!!!!!!!!!!!!");
    let hit = InputContext::new(vec![Message::user(late)], metadata.clone());
    let lower = InputContext::new(vec![Message::user(message().to_lowercase())], metadata);
    assert!(!policy.decide(&miss).is_deny());
    assert!(policy.decide(&hit).is_deny());

    let mut group = c.benchmark_group("contains_4_needles_1KiB");
    group.bench_function("no_match", |b| b.iter(|| policy.decide(black_box(&miss))));
    group.bench_function("match_at_end", |b| {
        b.iter(|| policy.decide(black_box(&hit)))
    });
    group.bench_function("no_match_lowercase_text", |b| {
        b.iter(|| policy.decide(black_box(&lower)))
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    group.bench_function("no_match_via_async_evaluate", |b| {
        b.iter(|| runtime.block_on(policy.evaluate(black_box(&miss))))
    });
    group.finish();
}

fn not_in(c: &mut Criterion) {
    let names = serde_json::to_string(&TOOLS).expect("json");
    let policy = DslToolCallPolicy::from_source(
        "approved_tools",
        &format!(
            r#"{{ "condition": {{ "field": "tool_name", "not_in": {names} }}, "action": "deny" }}"#
        ),
        "approved_tools.json",
    )
    .expect("valid rule");
    let call = |tool: &str| {
        ToolCallContext::new(
            tool,
            Default::default(),
            Message::assistant(""),
            Metadata::new("agent", "session"),
        )
    };
    let unknown = call("shell_exec");
    let approved = call("unit_convert");
    assert!(policy.decide(&unknown).is_deny());
    assert!(!policy.decide(&approved).is_deny());
    let mut group = c.benchmark_group("not_in_20_tools");
    group.bench_function("denied", |b| b.iter(|| policy.decide(black_box(&unknown))));
    group.bench_function("approved", |b| {
        b.iter(|| policy.decide(black_box(&approved)))
    });
    group.finish();
}

fn construction(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/rules");
    let mut group = c.benchmark_group("construction_from_file");
    group.bench_function("block_secrets", |b| {
        b.iter(|| DslInputPolicy::new(black_box("block_secrets"), dir).expect("valid"))
    });
    group.bench_function("no_ssn", |b| {
        b.iter(|| DslInputPolicy::new(black_box("no_ssn"), dir).expect("valid"))
    });
    group.bench_function("approved_tools", |b| {
        b.iter(|| DslToolCallPolicy::new(black_box("approved_tools"), dir).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, contains, not_in, construction);
criterion_main!(benches);
