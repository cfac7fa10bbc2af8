//! The service's counters and its latency histogram, written in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the evaluation latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How many shards the counters of requests, decisions and evaluation times are split into.
/// A thread counts into one shard, picked the first time it counts, so the service's worker
/// threads rarely wait on one lock or pass one cache line between them.
const SHARDS: usize = 8;

/// The service's metrics. Counters are kept per label set; a label set seen once stays.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Requests, decisions and evaluation times, counted per thread and summed when rendered.
    shards: [Shard; SHARDS],
    /// outcome → reloads.
    reloads: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections open now, and the most ever open at once.
    connections: AtomicUsize,
    peak_connections: AtomicUsize,
    /// Counters other parts of the process keep, read at each scrape.
    external: Mutex<Vec<ExternalCounter>>,
}

/// One shard of the counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Tally>);

/// What one shard counts.
#[derive(Debug, Default)]
struct Tally {
    /// route → status → requests.
    requests: Counts<u16>,
    /// policy id → decision → decisions.
    decisions: Counts<String>,
    /// Evaluations per latency bucket (each counted in the first bucket it fits, the last slot
    /// for those over every bound); rendered cumulative.
    latency: [u64; BUCKETS.len() + 1],
    /// The evaluations' summed time, in nanoseconds.
    latency_nanos: u64,
}

impl Tally {
    /// Adds `other`'s counts to these.
    fn add(&mut self, other: &Tally) {
        add_counts(&mut self.requests, &other.requests);
        add_counts(&mut self.decisions, &other.decisions);
        for (slot, count) in self.latency.iter_mut().zip(other.latency) {
            *slot += count;
        }
        self.latency_nanos = self.latency_nanos.saturating_add(other.latency_nanos);
    }
}

fn add_counts<K: Ord + Clone>(counts: &mut Counts<K>, others: &Counts<K>) {
    for (first, inner) in others {
        let into = counts.entry(first.clone()).or_default();
        for (second, count) in inner {
            *into.entry(second.clone()).or_insert(0) += count;
        }
    }
}

/// A counter kept elsewhere in the process (the audit log's write failures).
pub(crate) struct ExternalCounter {
    pub(crate) name: String,
    pub(crate) help: String,
    pub(crate) read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl std::fmt::Debug for ExternalCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCounter")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Counters by two labels, the first a string: a label pair seen before is counted without
/// allocating (the maps are looked up by `&str`).
type Counts<K> = BTreeMap<String, BTreeMap<K, u64>>;

/// Counts one more `(first, second)`.
fn count<K: Ord + std::borrow::Borrow<Q>, Q: Ord + ?Sized + ToOwned<Owned = K>>(
    counts: &mut Counts<K>,
    first: &str,
    second: &Q,
) {
    let inner = match counts.get_mut(first) {
        Some(inner) => inner,
        None => counts.entry(first.to_owned()).or_default(),
    };
    match inner.get_mut(second) {
        Some(total) => *total += 1,
        None => {
            inner.insert(second.to_owned(), 1);
        }
    }
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *map.entry(key).or_insert(0) += 1;
}

impl Metrics {
    /// The shard this thread counts into.
    fn shard(&self) -> std::sync::MutexGuard<'_, Tally> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        }
        lock(&self.shards[SHARD.with(|shard| *shard)].0)
    }

    /// Every shard's counts, summed.
    fn tally(&self) -> Tally {
        let mut total = Tally::default();
        for shard in &self.shards {
            total.add(&lock(&shard.0));
        }
        total
    }

    pub(crate) fn request(&self, route: &str, status: u16) {
        count(&mut self.shard().requests, route, &status);
    }

    /// Shows `counter` too; one whose name is not a Prometheus metric name is left out.
    pub(crate) fn add_external(&self, counter: ExternalCounter) {
        let mut chars = counter.name.chars();
        let valid = chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_' || first == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if valid {
            lock(&self.external).push(counter);
        }
    }

    pub(crate) fn decision(&self, policy_id: &str, decision: &str) {
        count(&mut self.shard().decisions, policy_id, decision);
    }

    pub(crate) fn reload(&self, outcome: &'static str) {
        bump(&self.reloads, outcome);
    }

    /// A connection was accepted.
    pub(crate) fn connection_opened(&self) {
        let open = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_connections.fetch_max(open, Ordering::Relaxed);
    }

    /// A connection ended.
    pub(crate) fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn evaluation(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let mut shard = self.shard();
        shard.latency[slot] += 1;
        shard.latency_nanos = shard.latency_nanos.saturating_add(nanos);
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4).
    pub(crate) fn render(&self, loaded: bool) -> String {
        let tally = self.tally();
        let mut out = String::new();
        out.push_str(
            "# HELP portcullis_http_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE portcullis_http_requests_total counter\n");
        for (route, statuses) in &tally.requests {
            for (status, count) in statuses {
                let _ = writeln!(
                    out,
                    "portcullis_http_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                    escape(route)
                );
            }
        }
        out.push_str(
            "# HELP portcullis_decisions_total Policy decisions taken, by policy and decision.\n",
        );
        out.push_str("# TYPE portcullis_decisions_total counter\n");
        for (policy, decisions) in &tally.decisions {
            for (decision, count) in decisions {
                let _ = writeln!(
                    out,
                    "portcullis_decisions_total{{policy_id=\"{}\",decision=\"{}\"}} {count}",
                    escape(policy),
                    escape(decision)
                );
            }
        }
        out.push_str("# HELP portcullis_evaluation_duration_seconds Time to evaluate one request's policies.\n");
        out.push_str("# TYPE portcullis_evaluation_duration_seconds histogram\n");
        let mut below = 0;
        for (bound, count) in BUCKETS.iter().zip(tally.latency) {
            below += count;
            let _ = writeln!(
                out,
                "portcullis_evaluation_duration_seconds_bucket{{le=\"{bound}\"}} {below}"
            );
        }
        let count: u64 = tally.latency.iter().sum();
        let _ = writeln!(
            out,
            "portcullis_evaluation_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = tally.latency_nanos as f64 / 1e9;
        let _ = writeln!(out, "portcullis_evaluation_duration_seconds_sum {sum}");
        let _ = writeln!(out, "portcullis_evaluation_duration_seconds_count {count}");
        out.push_str("# HELP portcullis_reloads_total Policy set reloads, by outcome.\n");
        out.push_str("# TYPE portcullis_reloads_total counter\n");
        for (outcome, count) in lock(&self.reloads).iter() {
            let _ = writeln!(
                out,
                "portcullis_reloads_total{{outcome=\"{outcome}\"}} {count}"
            );
        }
        out.push_str("# HELP portcullis_connections_open Client connections open now.\n");
        out.push_str("# TYPE portcullis_connections_open gauge\n");
        let open = self.connections.load(Ordering::Relaxed);
        let _ = writeln!(out, "portcullis_connections_open {open}");
        out.push_str(
            "# HELP portcullis_connections_open_peak The most client connections open at once.\n",
        );
        out.push_str("# TYPE portcullis_connections_open_peak gauge\n");
        let peak = self.peak_connections.load(Ordering::Relaxed);
        let _ = writeln!(out, "portcullis_connections_open_peak {peak}");
        out.push_str(
            "# HELP portcullis_policy_set_loaded Whether a policy set is loaded (1) or not (0).\n",
        );
        out.push_str("# TYPE portcullis_policy_set_loaded gauge\n");
        let _ = writeln!(out, "portcullis_policy_set_loaded {}", u8::from(loaded));
        for counter in lock(&self.external).iter() {
            let help = counter.help.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {} {help}", counter.name);
            let _ = writeln!(out, "# TYPE {} counter", counter.name);
            let _ = writeln!(out, "{} {}", counter.name, (counter.read)());
        }
        out
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let metrics = Metrics::default();
        metrics.request("/v1/evaluate/{point}", 200);
        metrics.request("/v1/evaluate/{point}", 200);
        metrics.decision("a\"b", "deny");
        metrics.evaluation(Duration::from_micros(300));
        metrics.evaluation(Duration::from_secs(3));
        metrics.reload("failed");
        metrics.add_external(ExternalCounter {
            name: "portcullis_audit_write_failures_total".into(),
            help: "Audit records lost.".into(),
            read: Box::new(|| 3),
        });
        metrics.add_external(ExternalCounter {
            name: "not a name".into(),
            help: String::new(),
            read: Box::new(|| 4),
        });
        let text = metrics.render(true);
        assert!(text.contains(
            "portcullis_http_requests_total{route=\"/v1/evaluate/{point}\",status=\"200\"} 2\n"
        ));
        assert!(
            text.contains("portcullis_decisions_total{policy_id=\"a\\\"b\",decision=\"deny\"} 1\n")
        );
        assert!(text.contains("portcullis_evaluation_duration_seconds_bucket{le=\"0.00025\"} 0\n"));
        assert!(text.contains("portcullis_evaluation_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("portcullis_evaluation_duration_seconds_bucket{le=\"1\"} 1\n"));
        assert!(text.contains("portcullis_evaluation_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("portcullis_evaluation_duration_seconds_count 2\n"));
        assert!(text.contains("portcullis_reloads_total{outcome=\"failed\"} 1\n"));
        assert!(text.contains("# TYPE portcullis_audit_write_failures_total counter\nportcullis_audit_write_failures_total 3\n"));
        assert!(!text.contains("not a name"));
        assert!(text.contains("portcullis_policy_set_loaded 1\n"));
    }

    #[test]
    fn counts_from_many_threads_are_summed() {
        let metrics = Metrics::default();
        std::thread::scope(|scope| {
            for thread in 0..(2 * SHARDS) {
                let metrics = &metrics;
                scope.spawn(move || {
                    for _ in 0..100 {
                        metrics.request("/healthz", 200);
                        metrics.decision("p", "allow");
                        metrics.evaluation(Duration::from_micros(50 + 400 * (thread as u64 % 2)));
                    }
                });
            }
        });
        let text = metrics.render(true);
        let total = 2 * SHARDS * 100;
        let half = total / 2;
        assert!(text.contains(&format!(
            "portcullis_http_requests_total{{route=\"/healthz\",status=\"200\"}} {total}\n"
        )));
        assert!(text.contains(&format!(
            "portcullis_decisions_total{{policy_id=\"p\",decision=\"allow\"}} {total}\n"
        )));
        assert!(text.contains(&format!(
            "portcullis_evaluation_duration_seconds_bucket{{le=\"0.0001\"}} {half}\n"
        )));
        assert!(text.contains(&format!(
            "portcullis_evaluation_duration_seconds_bucket{{le=\"0.0005\"}} {total}\n"
        )));
        assert!(text.contains(&format!(
            "portcullis_evaluation_duration_seconds_count {total}\n"
        )));
    }
}
