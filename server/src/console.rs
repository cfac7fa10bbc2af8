//! The approval console: a page for the people who approve (its HTML, script and styles are
//! built into the binary and served at `/console`), and the live feed of decisions it shows
//! (`GET /v1/decisions/feed`, Server-Sent Events).
//!
//! The page is plain HTML, JavaScript and CSS, with no framework and no build step: nothing to
//! install or fetch, a few hundred lines anyone can read. It signs in with the service's
//! bearer token, which it sends with every call; it builds what it shows with `textContent`,
//! so a tool's arguments (text an attacker may have written) show as text. A strict
//! Content-Security-Policy lets it load only its own script and styles and talk only to the
//! service.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use portcullis_engine::AuditRecord;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::service::{Shared, authorize};

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLES: &str = include_str!("../console/app.css");

/// What the console's responses allow: its own script, styles and calls, nothing else.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How many minutes the per-policy counts cover.
const WINDOW_MINUTES: u64 = 60;

/// How many decisions a slow reader of the feed may fall behind before it skips some.
const FEED_BACKLOG: usize = 256;

/// The decisions the service took, for the console: each one as it is taken, to every open
/// feed, and per-policy counts of the last hour.
pub(crate) struct DecisionFeed {
    sender: broadcast::Sender<Arc<str>>,
    counts: Mutex<Counts>,
    closing: watch::Sender<bool>,
}

/// The decisions of one minute: by policy, a count per decision.
type Minute = HashMap<String, HashMap<&'static str, u64>>;

/// Counts by minute: the minute (since the epoch), and the count of each policy's decisions.
#[derive(Default)]
struct Counts {
    minutes: VecDeque<(u64, Minute)>,
    /// Goes up with every decision counted, so a feed knows when to send the counts again.
    version: u64,
}

fn minute_of(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs() / 60)
        .unwrap_or(0)
}

impl DecisionFeed {
    pub(crate) fn new() -> DecisionFeed {
        let (sender, _) = broadcast::channel(FEED_BACKLOG);
        let (closing, _) = watch::channel(false);
        DecisionFeed {
            sender,
            counts: Mutex::new(Counts::default()),
            closing,
        }
    }

    /// Notes one audit record: counted, and sent to the open feeds (built only when one is
    /// open).
    pub(crate) fn note(&self, record: &AuditRecord<'_>) {
        let decision = record.decision.as_str();
        {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            let minute = minute_of(record.timestamp);
            if counts.minutes.back().is_none_or(|(last, _)| *last < minute) {
                counts.minutes.push_back((minute, HashMap::new()));
            }
            while counts
                .minutes
                .front()
                .is_some_and(|(first, _)| first + WINDOW_MINUTES <= minute)
            {
                counts.minutes.pop_front();
            }
            if let Some((_, by_policy)) = counts.minutes.back_mut() {
                // The policy's name is copied once a minute, not once a decision.
                if !by_policy.contains_key(record.policy_id) {
                    by_policy.insert(record.policy_id.to_owned(), HashMap::new());
                }
                if let Some(by_decision) = by_policy.get_mut(record.policy_id) {
                    *by_decision.entry(decision).or_default() += 1;
                }
            }
            counts.version += 1;
        }
        if self.sender.receiver_count() == 0 {
            return;
        }
        let metadata = record.context.metadata();
        let event = json!({
            "at": record.timestamp_rfc3339(),
            "interception_point": record.interception_point,
            "policy_id": record.policy_id,
            "decision": decision,
            "reason": record.reason.as_deref(),
            "agent_id": metadata.agent_id,
            "session_id": metadata.session_id,
        });
        let _ = self.sender.send(Arc::from(event.to_string()));
    }

    /// The version of the counts: it goes up with every decision counted.
    fn version(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version
    }

    /// The per-policy counts of the last hour, and their version.
    fn counts(&self) -> (Value, u64) {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let now = minute_of(SystemTime::now());
        let mut totals: HashMap<&str, HashMap<&'static str, u64>> = HashMap::new();
        for (minute, by_policy) in &counts.minutes {
            if minute + WINDOW_MINUTES <= now {
                continue;
            }
            for (policy, decisions) in by_policy {
                let total = totals.entry(policy.as_str()).or_default();
                for (decision, count) in decisions {
                    *total.entry(decision).or_default() += count;
                }
            }
        }
        let mut policies: Vec<(&str, HashMap<&'static str, u64>)> = totals.into_iter().collect();
        policies.sort_by(|a, b| a.0.cmp(b.0));
        let policies: Vec<Value> = policies
            .into_iter()
            .map(|(policy, decisions)| json!({"policy_id": policy, "decisions": decisions}))
            .collect();
        let value = json!({"window_seconds": WINDOW_MINUTES * 60, "policies": policies});
        (value, counts.version)
    }

    /// Ends every open feed (the service is shutting down: a feed would otherwise hold its
    /// connection open until the drain time-out).
    pub(crate) fn close(&self) {
        let _ = self.closing.send(true);
    }
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut response = (StatusCode::OK, text).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    guard_headers(headers);
    response
}

/// The headers every console response carries: the content security policy, no sniffing, no
/// framing, no referrer, no caching of a page that shows approvals.
fn guard_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// `GET /console`.
pub(crate) fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /console/app.js`.
pub(crate) fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console/app.css`.
pub(crate) fn styles() -> Response {
    asset("text/css; charset=utf-8", STYLES)
}

/// One Server-Sent Event.
fn event(name: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// `GET /v1/decisions/feed`: Server-Sent Events, `counts` at once and again after decisions
/// (at most once a second), `decision` for each decision taken, a comment every 15 s to keep
/// the connection open. Needs the bearer token (sent by `fetch`: a browser's `EventSource`
/// cannot send it).
pub(crate) fn feed(shared: &Shared, headers: &HeaderMap) -> Response {
    if let Err(error) = authorize(shared, headers) {
        return error.into_response();
    }
    let Some(feed) = shared.feed.clone() else {
        return crate::service::ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "the decision feed is served with the console only",
        )
        .into_response();
    };
    let receiver = feed.sender.subscribe();
    let closing = feed.closing.subscribe();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = Reader {
        feed,
        receiver,
        closing,
        ticks,
        sent_version: None,
        quiet_ticks: 0,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let chunk = state.next().await?;
        Some((Ok::<Bytes, Infallible>(chunk), state))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One open feed.
struct Reader {
    feed: Arc<DecisionFeed>,
    receiver: broadcast::Receiver<Arc<str>>,
    closing: watch::Receiver<bool>,
    ticks: tokio::time::Interval,
    sent_version: Option<u64>,
    quiet_ticks: u32,
}

impl Reader {
    /// The next chunk to send; `None` ends the feed.
    async fn next(&mut self) -> Option<Bytes> {
        if self.sent_version.is_none() {
            return Some(self.counts());
        }
        loop {
            if *self.closing.borrow() {
                return None;
            }
            tokio::select! {
                received = self.receiver.recv() => match received {
                    Ok(data) => return Some(event("decision", &data)),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.ticks.tick() => {
                    if Some(self.feed.version()) != self.sent_version {
                        return Some(self.counts());
                    }
                    self.quiet_ticks += 1;
                    if self.quiet_ticks >= 15 {
                        self.quiet_ticks = 0;
                        return Some(Bytes::from_static(b": keep-alive\n\n"));
                    }
                }
                _ = self.closing.changed() => return None,
            }
        }
    }

    fn counts(&mut self) -> Bytes {
        let (counts, version) = self.feed.counts();
        self.sent_version = Some(version);
        self.quiet_ticks = 0;
        event("counts", &counts.to_string())
    }
}
