//! The service's counters and its latency histogram, written in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the evaluation latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The service's metrics. Counters are kept per label set; a label set seen once stays.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// route → status → requests.
    requests: Mutex<Counts<u16>>,
    /// policy id → decision → decisions.
    decisions: Mutex<Counts<String>>,
    /// outcome → reloads.
    reloads: Mutex<BTreeMap<&'static str, u64>>,
    latency: Histogram,
    /// Connections open now, and the most ever open at once.
    connections: AtomicUsize,
    peak_connections: AtomicUsize,
    /// Counters other parts of the process keep, read at each scrape.
    external: Mutex<Vec<ExternalCounter>>,
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

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// The sum, in nanoseconds.
    sum_nanos: AtomicU64,
}

/// Counters by two labels, the first a string: a label pair seen before is counted without
/// allocating (the maps are looked up by `&str`).
type Counts<K> = BTreeMap<String, BTreeMap<K, u64>>;

/// Counts one more `(first, second)`.
fn count<K: Ord + std::borrow::Borrow<Q>, Q: Ord + ?Sized + ToOwned<Owned = K>>(
    counts: &Mutex<Counts<K>>,
    first: &str,
    second: &Q,
) {
    let mut counts = counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    pub(crate) fn request(&self, route: &str, status: u16) {
        count(&self.requests, route, &status);
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
        count(&self.decisions, policy_id, decision);
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
        for (bound, bucket) in BUCKETS.iter().zip(&self.latency.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.latency.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4).
    pub(crate) fn render(&self, loaded: bool) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP portcullis_http_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE portcullis_http_requests_total counter\n");
        for (route, statuses) in lock(&self.requests).iter() {
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
        for (policy, decisions) in lock(&self.decisions).iter() {
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
        for (bound, bucket) in BUCKETS.iter().zip(&self.latency.buckets) {
            let _ = writeln!(
                out,
                "portcullis_evaluation_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.latency.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "portcullis_evaluation_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.latency.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
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
}
