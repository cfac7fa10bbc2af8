//! `cargo bench -p portcullis-dsl --bench dsl`
//!
//! Goals (issue 3): `contains` with 4 needles over one 1 KiB message under 300 ns per
//! evaluation; `not_in` over 20 tool names under 100 ns; construction from a file reported.
//!
//! Each evaluation benchmark runs twice: with criterion's wall-clock time, and with the
//! thread's CPU time (group names ending in `cpu_time`), which stays meaningful on a machine
//! shared with other work, where wall-clock time also counts the time the thread waits for a
//! core.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use portcullis_dsl::{DslInputPolicy, DslToolCallPolicy};
use portcullis_engine::{InputContext, Message, Metadata, Policy, ToolCallContext};

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

/// The calling thread's CPU time.
struct ThreadCpuTime;

struct Nanoseconds;

impl ValueFormatter for Nanoseconds {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        _throughput: &Throughput,
        _values: &mut [f64],
    ) -> &'static str {
        "ns"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = cpu_time::ThreadTime;
    type Value = Duration;

    fn start(&self) -> Self::Intermediate {
        cpu_time::ThreadTime::now()
    }

    fn end(&self, start: Self::Intermediate) -> Self::Value {
        start.elapsed()
    }

    fn add(&self, left: &Self::Value, right: &Self::Value) -> Self::Value {
        *left + *right
    }

    fn zero(&self) -> Self::Value {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Self::Value) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanoseconds
    }
}

/// The suffix of group names measured with `M`.
trait Named {
    const SUFFIX: &'static str;
}

impl Named for WallTime {
    const SUFFIX: &'static str = "";
}

impl Named for ThreadCpuTime {
    const SUFFIX: &'static str = "/cpu_time";
}

fn contains<M: Measurement + Named>(c: &mut Criterion<M>) {
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

    let mut group = c.benchmark_group(format!("contains_4_needles_1KiB{}", M::SUFFIX));
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

    // A long message is lower-cased and searched piece by piece, never copied whole.
    let long = InputContext::new(
        vec![Message::user(message().repeat(1024))],
        Metadata::new("agent", "session"),
    );
    let mut group = c.benchmark_group(format!("contains_4_needles_1MiB{}", M::SUFFIX));
    group.bench_function("no_match", |b| b.iter(|| policy.decide(black_box(&long))));
    group.finish();
}

fn not_in<M: Measurement + Named>(c: &mut Criterion<M>) {
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
    let mut group = c.benchmark_group(format!("not_in_20_tools{}", M::SUFFIX));
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

criterion_group!(
    benches,
    contains::<WallTime>,
    not_in::<WallTime>,
    construction
);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = contains::<ThreadCpuTime>, not_in::<ThreadCpuTime>
}
criterion_main!(benches, cpu_time);
