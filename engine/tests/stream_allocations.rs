//! A push that releases a few bytes allocates nothing: its item and the item's text are kept in
//! place. Only the guard's own buffers grow (amortized), so a long stream of small deltas
//! allocates a handful of times in all, not once or twice per delta.
//!
//! This test binary counts every heap allocation (through `stats_alloc`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::System;

use portcullis_engine::stream::decide_whole_text;
use portcullis_engine::{
    BoxError, Metadata, OutputContext, Policy, PolicyDecision, PolicyEngine, PolicySet, StreamItem,
    StreamText, StreamingRule, async_trait,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

struct Rules(Vec<StreamingRule>);

#[async_trait]
impl Policy<OutputContext> for Rules {
    fn id(&self) -> &str {
        "rules"
    }

    async fn evaluate(&self, context: &OutputContext) -> Result<PolicyDecision, BoxError> {
        decide_whole_text(&self.0, &context.response.content)
    }

    fn streaming(&self) -> Option<Vec<StreamingRule>> {
        Some(self.0.clone())
    }
}

fn engine(batch: usize) -> PolicyEngine {
    PolicyEngine::builder()
        .policy_set(
            PolicySet::builder()
                .stream_batch(batch)
                .output(Rules(vec![StreamingRule::Replace {
                    pattern: r"\b\d{3}-\d{2}-\d{4}\b".into(),
                    replacement: "[SSN]".into(),
                    max_match_len: None,
                }]))
                .output(Rules(vec![StreamingRule::deny_on_any(
                    &["phishing.example", "evil.invalid"],
                    None,
                )]))
                .build(),
        )
        .build()
}

/// Streams `text` in 16-byte deltas with `push`: the text released, the allocations the
/// pushes made (the guard's creation and `finish` left out), and how many pushes released
/// more text than an item keeps in place.
fn pushes(engine: &PolicyEngine, text: &str) -> (String, usize, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut guard = engine.output_stream(Metadata::new("agent", "session"));
        let mut shown = String::with_capacity(2 * text.len());
        let mut long = 0;
        let region = Region::new(GLOBAL);
        for chunk in text.as_bytes().chunks(16) {
            let delta = std::str::from_utf8(chunk).expect("ascii");
            for item in guard.push(delta).await {
                match item {
                    StreamItem::Text(released) => {
                        long += usize::from(released.len() > StreamText::INLINE);
                        shown.push_str(&released);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let allocations = region.change().allocations;
        for item in guard.finish().await {
            shown.push_str(&item.into_text().expect("text"));
        }
        (shown, allocations, long)
    })
}

#[test]
fn pushing_small_deltas_does_not_allocate_per_delta() {
    let plain = "The quarterly report shows steady growth across all regions. ";
    let with_secret = format!("{plain}My number is 123-45-6789, see evil-invalid.org. ");
    for batch in [0, 256] {
        let engine = engine(batch);
        for (sentence, secrets) in [(plain, 0), (with_secret.as_str(), 1024)] {
            let text = sentence.repeat(1024);
            let deltas = text.len().div_ceil(16);
            let (shown, allocations, long) = pushes(&engine, &text);
            assert_eq!(shown, text.replace("123-45-6789", "[SSN]"));
            // A push allocates for its item only when it releases more text than an item
            // keeps in place. Besides, a debug build checks the guard's state when it takes
            // the fast lane again after a secret (which allocates), the guard's buffers double
            // as they grow, and the regexes build their caches when they first run: a few
            // hundred allocations in all. (When each push allocated its item, that was one or
            // two per delta.)
            assert!(
                allocations <= long + secrets + 256,
                "{allocations} allocations for {deltas} deltas, {long} of them releasing long \
                 text, {secrets} secrets (batch {batch})"
            );
            if batch == 0 && secrets == 0 {
                assert_eq!(long, 0);
            }
        }
    }
}
