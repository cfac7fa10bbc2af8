//! Compiled (`dsl_policy!`) against runtime (`Dsl*Policy::new`) DSL rules: the same file,
//! the same context, side by side. Run with `cargo bench --bench macros`.
//!
//! Each group holds two functions, `compiled` and `runtime`, deciding on one context with
//! the rule's `decide` (the evaluation itself; `evaluate` adds the same boxed future to both).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis::dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis::{InputContext, Message, Metadata, ToolCallContext, dsl_policy};
use serde_json::json;

fn rules_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rules"))
}

fn conversation() -> InputContext {
    let mut messages = vec![Message::system("You are a helpful support agent.")];
    for turn in 0..10 {
        messages.push(Message::user(format!(
            "Question {turn}: how do I reset the router in the living room? It blinks orange."
        )));
        messages.push(Message::assistant(format!(
            "Answer {turn}: hold the reset button for ten seconds, then wait for the light."
        )));
    }
    messages.push(Message::user("my social security number is 078-05-1120"));
    InputContext::new(messages, Metadata::new("support", "session-1"))
}

fn tool_call(name: &str) -> ToolCallContext {
    let arguments = match json!({ "query": "router reset orange light" }) {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    ToolCallContext::new(
        name,
        arguments,
        Message::assistant("let me search"),
        Metadata::new("support", "session-1"),
    )
}

fn input_rules(c: &mut Criterion) {
    let context = conversation();

    let mut group = c.benchmark_group("block_secrets (input, contains over 22 messages, allow)");
    let compiled = dsl_policy!(input, "examples/rules/block_secrets.json");
    let runtime = DslInputPolicy::new("block_secrets", rules_dir()).expect("a valid rule");
    assert_eq!(compiled.decide(&context), runtime.decide(&context));
    group.bench_function("compiled", |b| {
        b.iter(|| compiled.decide(black_box(&context)))
    });
    group.bench_function("runtime", |b| {
        b.iter(|| runtime.decide(black_box(&context)))
    });
    group.finish();

    let mut group = c.benchmark_group("no_ssn (input, always: redact SSNs)");
    let compiled = dsl_policy!(input, "examples/rules/no_ssn.json");
    let runtime = DslInputPolicy::new("no_ssn", rules_dir()).expect("a valid rule");
    assert_eq!(compiled.decide(&context), runtime.decide(&context));
    group.bench_function("compiled", |b| {
        b.iter(|| compiled.decide(black_box(&context)))
    });
    group.bench_function("runtime", |b| {
        b.iter(|| runtime.decide(black_box(&context)))
    });
    group.finish();

    let mut group = c.benchmark_group("max_length (input, any of two lengths)");
    let compiled = dsl_policy!(input, "examples/rules/max_length.json");
    let runtime = DslInputPolicy::new("max_length", rules_dir()).expect("a valid rule");
    assert_eq!(compiled.decide(&context), runtime.decide(&context));
    group.bench_function("compiled", |b| {
        b.iter(|| compiled.decide(black_box(&context)))
    });
    group.bench_function("runtime", |b| {
        b.iter(|| runtime.decide(black_box(&context)))
    });
    group.finish();
}

fn tool_call_rules(c: &mut Criterion) {
    let context = tool_call("search");

    let mut group = c.benchmark_group("approved_tools (tool_call, not_in)");
    let compiled = dsl_policy!(tool_call, "examples/rules/approved_tools.json");
    let runtime = DslToolCallPolicy::new("approved_tools", rules_dir()).expect("a valid rule");
    assert_eq!(compiled.decide(&context), runtime.decide(&context));
    group.bench_function("compiled", |b| {
        b.iter(|| compiled.decide(black_box(&context)))
    });
    group.bench_function("runtime", |b| {
        b.iter(|| runtime.decide(black_box(&context)))
    });
    group.finish();

    let mut group = c.benchmark_group("tag_tool_calls (tool_call, all/not, transform template)");
    let compiled = dsl_policy!(tool_call, "examples/rules/tag_tool_calls.json");
    let runtime = DslToolCallPolicy::new("tag_tool_calls", rules_dir()).expect("a valid rule");
    assert_eq!(compiled.decide(&context), runtime.decide(&context));
    group.bench_function("compiled", |b| {
        b.iter(|| compiled.decide(black_box(&context)))
    });
    group.bench_function("runtime", |b| {
        b.iter(|| runtime.decide(black_box(&context)))
    });
    group.finish();
}

criterion_group!(benches, input_rules, tool_call_rules);
criterion_main!(benches);
