//! The streaming output guard against the whole-text evaluation of the same answer.
//!
//! `cargo bench -p portcullis-engine --bench stream`

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::stream::decide_whole_text;
use portcullis_engine::{
    BoxError, Message, Metadata, OutputContext, OutputPolicy, PolicyDecision, PolicyEngine,
    PolicySet, StreamItem, StreamingRule, async_trait,
};

/// A policy whose whole-text and streaming forms are the same rules.
struct Rules {
    id: &'static str,
    rules: Vec<StreamingRule>,
}

#[async_trait]
impl OutputPolicy for Rules {
    fn id(&self) -> &str {
        self.id
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        decide_whole_text(&self.rules, &context.response.content)
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(self.rules.clone())
    }
}

fn replace(pattern: &str, replacement: &str) -> StreamingRule {
    StreamingRule::Replace {
        pattern: pattern.into(),
        replacement: replacement.into(),
        max_match_len: None,
    }
}

/// The three rules; with `batch` > 0 the guard runs them once that many bytes have arrived.
fn engine(batch: usize) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .stream_batch(batch)
                .output(Rules {
                    id: "ssn",
                    rules: vec![replace(r"\b\d{3}-\d{2}-\d{4}\b", "[SSN]")],
                })
                .output(Rules {
                    id: "email",
                    rules: vec![replace(
                        r"[a-z0-9.]{1,32}@[a-z0-9.]{1,32}\.[a-z]{2,6}",
                        "[EMAIL]",
                    )],
                })
                .output(Rules {
                    id: "domains",
                    rules: vec![StreamingRule::deny_on_any(
                        &["phishing.example", "malware.test", "evil.invalid"],
                        Some("blocked domain".into()),
                    )],
                })
                .build(),
        )
        .build()
}

/// Bytes per batch in the batched runs.
const BATCH: usize = 256;

/// A 64 KiB answer; `sentences_per_secret` plain sentences come between two sentences that
/// hold an SSN and an e-mail address.
fn answer(sentences_per_secret: usize) -> String {
    let plain = "The quarterly report shows steady growth across all regions and segments. ";
    let secret = "Contact 123-45-6789 or ops@example.com for details. ";
    let mut text = String::new();
    let mut sentence = 0;
    while text.len() < 64 * 1024 {
        text.push_str(if sentence % sentences_per_secret == 0 {
            secret
        } else {
            plain
        });
        sentence += 1;
    }
    text.truncate(64 * 1024);
    text
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let batched = engine(BATCH);
    let engine = engine(0);
    let metadata = Metadata::new("agent", "session");
    let mut group = c.benchmark_group("stream");
    group.sample_size(20);

    for (name, sentences_per_secret) in [("typical", 30), ("dense", 1)] {
        let text = answer(sentences_per_secret);
        let chunks: Vec<&str> = text
            .as_bytes()
            .chunks(16)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        let context = OutputContext::new(Message::assistant(text.clone()), metadata.clone());
        group.bench_function(format!("{name}: whole text, 64 KiB, 3 rules"), |b| {
            b.to_async(&runtime).iter(|| async {
                std::hint::black_box(engine.evaluate_output(&context).await.is_ok())
            })
        });
        group.bench_function(
            format!("{name}: streamed in 16-byte chunks, 64 KiB, 3 rules"),
            |b| {
                b.to_async(&runtime).iter(|| async {
                    let mut guard = engine.output_stream(metadata.clone());
                    let mut released = 0;
                    for chunk in &chunks {
                        for item in guard.push(chunk).await {
                            if let StreamItem::Text(text) = item {
                                released += text.len();
                            }
                        }
                    }
                    for item in guard.finish().await {
                        if let StreamItem::Text(text) = item {
                            released += text.len();
                        }
                    }
                    std::hint::black_box(released)
                })
            },
        );

        for (how, engine) in [("", &engine), (" in 256-byte batches", &batched)] {
            group.bench_function(
                format!("{name}: fed in 16-byte chunks{how} (lent text), 64 KiB, 3 rules"),
                |b| {
                    b.to_async(&runtime).iter(|| async {
                        let mut guard = engine.output_stream(metadata.clone());
                        let mut released = 0;
                        for chunk in &chunks {
                            released += guard.feed(chunk).await.map_or(0, str::len);
                        }
                        for item in guard.finish().await {
                            if let StreamItem::Text(text) = item {
                                released += text.len();
                            }
                        }
                        std::hint::black_box(released)
                    })
                },
            );
        }

        // Latency each push adds, over many streams.
        for (how, engine) in [("", &engine), (" in 256-byte batches", &batched)] {
            let mut latencies: Vec<Duration> = Vec::with_capacity(chunks.len() * 20);
            runtime.block_on(async {
                for _ in 0..20 {
                    let mut guard = engine.output_stream(metadata.clone());
                    for chunk in &chunks {
                        let started = Instant::now();
                        std::hint::black_box(guard.push(chunk).await);
                        latencies.push(started.elapsed());
                    }
                    guard.finish().await;
                }
            });
            latencies.sort();
            let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
            println!(
                "stream/{name}: added latency per 16-byte chunk{how}: median {:?}, p99 {:?} ({} pushes)",
                at(0.5),
                at(0.99),
                latencies.len()
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
