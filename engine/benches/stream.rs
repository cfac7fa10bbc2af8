//! The streaming output guard against the whole-text evaluation of the same answer.
//!
//! `cargo bench -p portcullis-engine --bench stream`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_engine::{Message, Metadata, OutputContext, StreamItem};

mod common;

use common::{answer, stream_engine};

/// Bytes per batch in the batched runs.
const BATCH: usize = 256;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let batched = stream_engine(BATCH);
    let engine = stream_engine(0);
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
