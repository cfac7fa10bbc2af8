//! The access line: one per answered request, written once the route has answered.
//!
//! By default the line is a `tracing` event ([`TracingAccessLog`]). An application with a log
//! of its own hands the service an [`AccessLog`] that writes the line there directly, which
//! spares each request the cost of building an event.

use tracing::Level;

/// What the access line of one answered request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccessLine<'a> {
    /// The request's id, as answered in `x-request-id`.
    pub request_id: &'a str,
    /// The request's method (`POST`).
    pub method: &'a str,
    /// The route's pattern (`/v1/evaluate/{point}`), never the path as sent.
    pub route: &'a str,
    /// The answer's status code.
    pub status: u16,
    /// The time from the request's head to its answer, in microseconds.
    pub micros: u64,
}

impl<'a> AccessLine<'a> {
    /// The message the line carries: `answered`.
    pub const MESSAGE: &'static str = "answered";

    /// The line of a request answered `status` after `micros` microseconds.
    pub fn new(
        request_id: &'a str,
        method: &'a str,
        route: &'a str,
        status: u16,
        micros: u64,
    ) -> Self {
        AccessLine {
            request_id,
            method,
            route,
            status,
            micros,
        }
    }

    /// The level the line is written at: WARN for a server error (5xx), INFO otherwise.
    pub fn level(&self) -> Level {
        if self.status >= 500 {
            Level::WARN
        } else {
            Level::INFO
        }
    }
}

/// Where the service writes its access lines.
///
/// [`answered`](AccessLog::answered) is called on the request's task, before the answer is
/// sent: it must not block (queue the line; drop it rather than wait when the queue is full).
pub trait AccessLog: Send + Sync + 'static {
    /// Writes the access line of one answered request.
    fn answered(&self, line: &AccessLine<'_>);
}

/// The default access log: one `tracing` event per request, with the target
/// `portcullis_server::access`, the message `answered` and the fields `request_id`, `method`,
/// `route`, `status` and `micros`, at the line's [`level`](AccessLine::level).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingAccessLog;

impl AccessLog for TracingAccessLog {
    fn answered(&self, line: &AccessLine<'_>) {
        let AccessLine {
            request_id,
            method,
            route,
            status,
            micros,
        } = *line;
        if line.level() == Level::WARN {
            tracing::warn!(request_id = %request_id, method, route, status, micros, "answered");
        } else {
            tracing::info!(request_id = %request_id, method, route, status, micros, "answered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_is_a_warning_and_anything_else_information() {
        let line = |status| AccessLine::new("a-1", "GET", "/healthz", status, 3);
        assert_eq!(line(200).level(), Level::INFO);
        assert_eq!(line(404).level(), Level::INFO);
        assert_eq!(line(499).level(), Level::INFO);
        assert_eq!(line(500).level(), Level::WARN);
        assert_eq!(line(503).level(), Level::WARN);
    }
}
