//! The engine's overhead as ratios, each side measured against its floor in one run.
//!
//! `cargo bench -p portcullis-engine --bench ratios` (or `-- <name filter>`; `-- family` runs
//! the streaming benchmark family of `common/family.rs` alone: 48 members, and a reference row
//! for each set, density and delta size, in a few minutes)
//!
//! Each workload has two sides, the engine and the floor it wraps. The two are measured in
//! alternating rounds of about a millisecond each (a batch of one, then a batch of the other),
//! so a machine busy with other work slows both alike; the figure printed is the median of the
//! per-round ratios, with the median time per iteration of each side. The session store's figure is a difference (the
//! nanoseconds the store adds per evaluation), not a ratio.
//!
//! `PORTCULLIS_PROFILE=<name>` runs only the engine side of the workloads named (their floor
//! with `PORTCULLIS_PROFILE_FLOOR=1` too), for a profiler (`valgrind --tool=callgrind`);
//! `PORTCULLIS_PROFILE_ROUNDS=<n>` runs them `n` times, so that the difference between two
//! counts is the work of the extra rounds alone, without the one-time setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::borrow::Cow;
use std::hint::black_box;
use std::time::Instant;

use portcullis_engine::{
    BoxError, InputContext, InputPolicy, MemorySessionStore, Message, Metadata, OutputContext,
    Policy, PolicyDecision, PolicyEngine, PolicySet, Redaction, StreamItem, async_trait,
};
use regex::Regex;
use tokio::runtime::Runtime;

mod common;

use common::family::{self, RULE_SETS};
use common::{SSN, answer, family_engine, stream_engine};

struct AllowAll(String);

#[async_trait]
impl Policy<InputContext> for AllowAll {
    fn id(&self) -> &str {
        &self.0
    }

    async fn evaluate(&self, context: &InputContext) -> Result<PolicyDecision, BoxError> {
        black_box(context);
        Ok(PolicyDecision::allow())
    }
}

fn allow_policies() -> Vec<AllowAll> {
    (0..10).map(|at| AllowAll(format!("allow_{at}"))).collect()
}

fn allow_engine(store: Option<MemorySessionStore>) -> PolicyEngine {
    let mut set = PolicySet::builder();
    for policy in allow_policies() {
        set = set.input(policy);
    }
    let builder = PolicyEngine::builder().policy_set(set.build());
    match store {
        Some(store) => builder.sessions(store).build(),
        None => builder.build(),
    }
}

fn small_context() -> InputContext {
    InputContext::new(
        vec![
            Message::system("You are a helpful assistant."),
            Message::user("What is the weather in Paris tomorrow?"),
        ],
        Metadata::new("agent-1", "session-1"),
    )
}

/// A policy that redacts SSNs in the first message, as a rule that found one decides.
struct RedactSsn(PolicyDecision);

#[async_trait]
impl Policy<InputContext> for RedactSsn {
    fn id(&self) -> &str {
        "redact_ssn"
    }

    async fn evaluate(&self, _: &InputContext) -> Result<PolicyDecision, BoxError> {
        Ok(self.0.clone())
    }
}

/// A 1 KiB message with one SSN in it.
fn ssn_message() -> String {
    let mut text = String::new();
    while text.len() < 1000 {
        text.push_str("The quarterly report shows steady growth across all regions. ");
        if text.len() > 480 && !text.contains('-') {
            text.push_str("My SSN is 123-45-6789. ");
        }
    }
    text.truncate(1024);
    text
}

/// Streams `chunks` through `engine`'s guard with `feed` (or `push`); the bytes released.
/// With `finish` false the guard is dropped after the last push (the pushes alone, with a
/// batch longer than the answer).
async fn stream(
    engine: &PolicyEngine,
    metadata: &Metadata,
    chunks: &[&str],
    push: bool,
    finish: bool,
) -> usize {
    let mut guard = engine.output_stream(metadata.clone());
    let mut released = 0;
    for chunk in chunks {
        if push {
            for item in guard.push(chunk).await {
                if let StreamItem::Text(text) = item {
                    released += text.len();
                }
            }
        } else {
            released += guard.feed(chunk).await.map_or(0, str::len);
        }
    }
    if !finish {
        return released;
    }
    for item in guard.finish().await {
        if let StreamItem::Text(text) = item {
            released += text.len();
        }
    }
    released
}

/// How one side of a streaming workload streams its answer.
#[derive(Clone, Copy)]
struct Streamed {
    engine: &'static PolicyEngine,
    chunks: &'static [&'static str],
    /// `push` rather than `feed`.
    push: bool,
    /// Finish the stream (otherwise the guard is dropped after the last delta).
    finish: bool,
}

/// A streaming workload: `streamed` against the whole-text evaluation of `context` by
/// `floor`, `iterations` a call, over `rounds` rounds.
fn stream_workload(
    name: String,
    goal: Goal,
    (iterations, rounds): (usize, usize),
    streamed: Streamed,
    (floor, context): (&'static PolicyEngine, &'static OutputContext),
    rt: &'static Runtime,
) -> Workload<'static> {
    let metadata = &context.metadata;
    Workload {
        name,
        goal,
        iterations,
        rounds,
        engine: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    let Streamed {
                        engine,
                        chunks,
                        push,
                        finish,
                    } = streamed;
                    black_box(stream(engine, metadata, chunks, push, finish).await);
                }
            })
        }),
        floor: whole_text(floor, context, rt),
    }
}

/// The floor of the streaming workloads: the whole-text evaluation of `context` by `floor`.
fn whole_text(
    floor: &'static PolicyEngine,
    context: &'static OutputContext,
    rt: &'static Runtime,
) -> Box<dyn FnMut(usize)> {
    Box::new(move |n| {
        rt.block_on(async {
            for _ in 0..n {
                black_box(floor.evaluate_output(context).await.is_ok());
            }
        })
    })
}

/// The least any guard given the answer delta by delta can do, against the whole-text
/// evaluation: keep each delta (appended to a string made with room for the whole answer), and
/// judge nothing. No goal: where this alone is over a member's goal, no guard with a call per
/// delta meets it (the pushes cost more than the whole-text search they are measured
/// against).
fn kept_only(
    name: String,
    chunks: &'static [&'static str],
    (floor, context): (&'static PolicyEngine, &'static OutputContext),
    rt: &'static Runtime,
) -> Workload<'static> {
    let length = chunks.iter().map(|chunk| chunk.len()).sum();
    Workload {
        name,
        goal: Goal::Reference,
        iterations: 10,
        rounds: FAMILY_ROUNDS,
        engine: Box::new(move |n| {
            for _ in 0..n {
                let mut kept = String::with_capacity(length);
                for chunk in black_box(chunks) {
                    kept.push_str(black_box(chunk));
                    black_box(&kept);
                }
                black_box(kept);
            }
        }),
        floor: whole_text(floor, context, rt),
    }
}

/// One workload: the engine's side and its floor, each running `iterations` times per call.
struct Workload<'a> {
    name: String,
    goal: Goal,
    iterations: usize,
    /// Rounds of each side measured.
    rounds: usize,
    engine: Box<dyn FnMut(usize) + 'a>,
    floor: Box<dyn FnMut(usize) + 'a>,
}

enum Goal {
    /// The engine's side at most this many times the floor.
    Ratio(f64),
    /// The engine's side adds at most this many nanoseconds to the floor.
    Added(f64),
    /// No goal: a figure that puts the others in context.
    Reference,
}

/// `text` in deltas of `size` bytes (the answers are ASCII).
fn chunks_of(text: &'static str, size: usize) -> &'static [&'static str] {
    let chunks: Vec<&str> = text
        .as_bytes()
        .chunks(size)
        .map(|chunk| std::str::from_utf8(chunk).expect("ascii"))
        .collect();
    leak(chunks)
}

/// Keeps `value` for the whole run (the workloads borrow their engines and inputs).
fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn time(side: &mut dyn FnMut(usize), iterations: usize) -> f64 {
    let started = Instant::now();
    side(iterations);
    started.elapsed().as_nanos() as f64 / iterations as f64
}

/// Rounds of the workloads other than the family's.
const ROUNDS: usize = 201;
/// Rounds of each member of the family: 48 of them, so fewer, for a quick run of all.
const FAMILY_ROUNDS: usize = 31;

fn measure(mut workload: Workload<'_>, rounds: usize) {
    // Warm up both sides (thread-local caches, lazily built plans), then size each side's
    // rounds to about a millisecond: rounds of one length are interrupted alike by the other
    // processes of a busy machine, whichever side is slower.
    let engine_once = time(&mut workload.engine, workload.iterations);
    let floor_once = time(&mut workload.floor, workload.iterations);
    let per_round = |nanos: f64| ((1e6 / nanos.max(1.0)) as usize).clamp(1, workload.iterations);
    let (engine_iterations, floor_iterations) = (per_round(engine_once), per_round(floor_once));
    let (mut engine, mut floor, mut ratios, mut added) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // Alternate which side goes first, so neither always follows the other.
        let (e, f) = if round % 2 == 0 {
            let e = time(&mut workload.engine, engine_iterations);
            (e, time(&mut workload.floor, floor_iterations))
        } else {
            let f = time(&mut workload.floor, floor_iterations);
            (time(&mut workload.engine, engine_iterations), f)
        };
        engine.push(e);
        floor.push(f);
        ratios.push(e / f);
        added.push(e - f);
    }
    let (engine, floor) = (median(&mut engine), median(&mut floor));
    let (ratio, added) = (median(&mut ratios), median(&mut added));
    let verdict = match workload.goal {
        Goal::Ratio(most) => format!("{ratio:.2}x (goal <= {most}x)"),
        Goal::Added(most) => format!("+{added:.0} ns (goal < {most} ns), {ratio:.2}x"),
        Goal::Reference => format!("{ratio:.2}x (no goal)"),
    };
    println!(
        "{:<62} engine {:>10.0} ns  floor {:>10.0} ns  {verdict}",
        workload.name, engine, floor
    );
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let profile = std::env::var("PORTCULLIS_PROFILE").ok();
    let runtime: Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let rt = leak(runtime);
    let mut workloads: Vec<Workload<'_>> = Vec::new();

    // 10 allow policies: the engine against calling them one after another.
    let context = small_context();
    let context = leak(context);
    let plain = allow_engine(None);
    let plain = leak(plain);
    let direct: Vec<Box<dyn InputPolicy>> = allow_policies()
        .into_iter()
        .map(|policy| Box::new(policy) as Box<dyn InputPolicy>)
        .collect();
    let direct = leak(direct);
    workloads.push(Workload {
        name: "10 allow policies: engine / direct evaluate calls".into(),
        goal: Goal::Ratio(1.5),
        iterations: 20_000,
        rounds: ROUNDS,
        engine: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    black_box(plain.evaluate_input(black_box(context)).await.is_ok());
                }
            })
        }),
        floor: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    for policy in direct {
                        black_box(policy.evaluate(black_box(context)).await.is_ok());
                    }
                }
            })
        }),
    });

    // The in-memory session store: 10 allow policies with it against without it.
    let kept = allow_engine(Some(MemorySessionStore::new()));
    let kept = leak(kept);
    workloads.push(Workload {
        name: "10 allow policies: in-memory session store / none".into(),
        goal: Goal::Added(300.0),
        iterations: 20_000,
        rounds: ROUNDS,
        engine: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    black_box(kept.evaluate_input(black_box(context)).await.is_ok());
                }
            })
        }),
        floor: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    black_box(plain.evaluate_input(black_box(context)).await.is_ok());
                }
            })
        }),
    });

    // A `replace` redaction of one SSN in a 1 KiB message: the engine against copying the
    // context and replacing on the copy.
    let redacting = PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .input(RedactSsn(PolicyDecision::redact([Redaction::replace(
                    "messages.0.content",
                    SSN,
                )
                .with_replacement("[SSN]")])))
                .build(),
        )
        .build();
    let redacting = leak(redacting);
    let message = InputContext::new(
        vec![Message::user(ssn_message())],
        Metadata::new("agent-1", "session-1"),
    );
    let message = leak(message);
    let regex = Regex::new(SSN).expect("a valid pattern");
    let regex = leak(regex);
    workloads.push(Workload {
        name: "replace one SSN in 1 KiB: engine / clone + replace_all".into(),
        goal: Goal::Ratio(2.0),
        iterations: 5_000,
        rounds: ROUNDS,
        engine: Box::new(move |n| {
            rt.block_on(async {
                for _ in 0..n {
                    let evaluation = redacting.evaluate_input(black_box(message)).await;
                    black_box(evaluation.map(|e| e.is_modified()).ok());
                }
            })
        }),
        floor: Box::new(move |n| {
            for _ in 0..n {
                let mut copy = black_box(message).clone();
                let content = &mut copy.messages[0].content;
                if let Cow::Owned(replaced) = regex.replace_all(content, regex::NoExpand("[SSN]")) {
                    *content = replaced;
                }
                black_box(copy);
            }
        }),
    });

    // The streaming guard against the whole-text evaluation of the same 64 KiB answer.
    let every = leak(stream_engine(0));
    let batched = leak(stream_engine(256));
    // One batch for the whole answer: the rules run once, at the end, so this is what the
    // pushes alone cost beside the whole-text evaluation, the least any batch size can cost.
    let once = leak(stream_engine(1 << 20));
    let metadata = leak(Metadata::new("agent", "session"));
    let texts: Vec<(&str, String)> = vec![
        ("typical", answer(30)),
        ("dense", answer(1)),
        // One secret, at the start: what the lane costs when the stages have nothing to do.
        ("clean", answer(usize::MAX)),
    ];
    let texts = leak(texts);
    for (name, text) in texts {
        let context = OutputContext::new(Message::assistant(text.clone()), metadata.clone());
        let context = leak(context);
        let mut runs = vec![
            (
                16,
                "feed, rules on every delta",
                every,
                false,
                Goal::Ratio(2.0),
                true,
            ),
            (
                16,
                "push, rules on every delta",
                every,
                true,
                Goal::Ratio(3.0),
                true,
            ),
            (
                16,
                "feed, stream_batch(256)",
                batched,
                false,
                Goal::Ratio(1.3),
                true,
            ),
            (
                16,
                "push, stream_batch(256)",
                batched,
                true,
                Goal::Ratio(1.5),
                true,
            ),
        ];
        if *name == "clean" {
            // Its `feed` rows alone, for reference: the goals are for answers with secrets.
            runs.retain(|&(_, _, _, push, ..)| !push);
            for run in &mut runs {
                run.4 = Goal::Reference;
            }
        }
        if *name == "typical" {
            runs.extend([
                (
                    16,
                    "feed, one batch for the whole answer",
                    once,
                    false,
                    Goal::Reference,
                    true,
                ),
                // The pushes alone: the text kept, the rules never run.
                (
                    16,
                    "feed, the pushes alone (never finished)",
                    once,
                    false,
                    Goal::Reference,
                    false,
                ),
                // Deltas of a model's tokens, a few bytes each.
                (
                    4,
                    "feed, rules on every delta",
                    every,
                    false,
                    Goal::Reference,
                    true,
                ),
                (
                    4,
                    "push, rules on every delta",
                    every,
                    true,
                    Goal::Reference,
                    true,
                ),
                (
                    4,
                    "feed, stream_batch(256)",
                    batched,
                    false,
                    Goal::Reference,
                    true,
                ),
            ]);
        }
        for (size, how, engine, push, goal, finish) in runs {
            workloads.push(stream_workload(
                format!("stream {name} 64 KiB/{size} B: {how} / whole"),
                goal,
                (20, ROUNDS),
                Streamed {
                    engine,
                    chunks: chunks_of(text, size),
                    push,
                    finish,
                },
                (every, context),
                rt,
            ));
        }
    }

    // The family: every set, dense and sparse, in 4- and 16-byte deltas, each way of
    // streaming against the whole-text evaluation of the same answer.
    for set in &RULE_SETS {
        let every = leak(family_engine(set, 0));
        let batched = leak(family_engine(set, 256));
        for (density, sentences_per_secret) in [("dense", 1), ("sparse", 100)] {
            let text = leak(family::answer(set.secret, sentences_per_secret));
            let context = leak(OutputContext::new(
                Message::assistant(text.clone()),
                metadata.clone(),
            ));
            for size in [4, 16] {
                let chunks = chunks_of(text, size);
                workloads.push(kept_only(
                    format!("family {} {density}/{size} B: keep only / whole", set.name),
                    chunks,
                    (every, context),
                    rt,
                ));
                for (how, engine, push, goal) in [
                    ("push, rules on every delta", every, true, 3.0),
                    ("feed, rules on every delta", every, false, 2.0),
                    ("push, stream_batch(256)", batched, true, 1.5),
                ] {
                    workloads.push(stream_workload(
                        format!("family {} {density}/{size} B: {how} / whole", set.name),
                        Goal::Ratio(goal),
                        (10, FAMILY_ROUNDS),
                        Streamed {
                            engine,
                            chunks,
                            push,
                            finish: true,
                        },
                        (every, context),
                        rt,
                    ));
                }
            }
        }
    }

    // Profiling, the side runs this many times its iterations: the difference between two
    // counts leaves out the one-time work (building the engine, compiling patterns).
    let profile_rounds: usize = std::env::var("PORTCULLIS_PROFILE_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(1);
    for mut workload in workloads {
        if let Some(profile) = &profile {
            if workload.name.contains(profile.as_str()) {
                for _ in 0..profile_rounds {
                    if std::env::var_os("PORTCULLIS_PROFILE_FLOOR").is_some() {
                        (workload.floor)(workload.iterations);
                    } else {
                        (workload.engine)(workload.iterations);
                    }
                }
            }
            continue;
        }
        if filter
            .as_deref()
            .is_none_or(|filter| workload.name.contains(filter))
        {
            let rounds = workload.rounds;
            measure(workload, rounds);
        }
    }
}
