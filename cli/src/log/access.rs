//! The service's access lines, written straight into the log's queue: the very line the
//! `answered` event gives through [`Line`](super::Line), without building an event. One such
//! line is written per request, so its cost is the request's.

use std::fmt::{self, Write};

use portcullis::server::{AccessLine, AccessLog};
use tracing::Level;

use super::line::{level_column, write_integer, write_json_string, write_quoted, write_time};
use super::{LogFormat, QueuedStderr};

/// The access log of `portcullis serve`: each line formatted as the rest of the log is, at
/// the line's level, and queued for the log's writer thread (dropped, and counted, when the
/// queue is full).
pub(crate) struct QueuedAccessLog {
    to: QueuedStderr,
    format: LogFormat,
    /// The most verbose level written (`--log-level`).
    max_level: Level,
}

impl QueuedAccessLog {
    pub(crate) fn new(to: QueuedStderr, format: LogFormat, max_level: Level) -> Self {
        QueuedAccessLog {
            to,
            format,
            max_level,
        }
    }
}

impl AccessLog for QueuedAccessLog {
    fn answered(&self, line: &AccessLine<'_>) {
        // `tracing` orders levels by verbosity: a level above the maximum is filtered out.
        if line.level() > self.max_level {
            return;
        }
        let mut text = String::with_capacity(192);
        if write_line(&mut text, self.format, line).is_ok() {
            self.to.queue(text.into_bytes());
        }
    }
}

/// A field's value, as the `answered` event records it.
enum Value<'a> {
    /// Recorded with `%`: written as it is in text.
    Shown(&'a str),
    /// A string: quoted in text.
    Text(&'a str),
    /// A number.
    Number(u64),
}

/// Writes `line` as [`Line`](super::Line) writes the `answered` event in `format`, the
/// newline included.
fn write_line(out: &mut String, format: LogFormat, line: &AccessLine<'_>) -> fmt::Result {
    let level = line.level();
    // The event's fields, in the order it records them.
    let fields = [
        ("request_id", Value::Shown(line.request_id)),
        ("method", Value::Text(line.method)),
        ("route", Value::Text(line.route)),
        ("status", Value::Number(u64::from(line.status))),
        ("micros", Value::Number(line.micros)),
    ];
    match format {
        LogFormat::Text => {
            write_time(out)?;
            out.push_str(level_column(level));
            out.push_str(AccessLine::MESSAGE);
            for (name, value) in fields {
                out.push(' ');
                out.push_str(name);
                out.push('=');
                match value {
                    Value::Shown(text) => out.push_str(text),
                    Value::Text(text) => write_quoted(out, text)?,
                    Value::Number(number) => write_integer(out, number)?,
                }
            }
        }
        LogFormat::Json => {
            out.push_str("{\"timestamp\":\"");
            write_time(out)?;
            out.push_str("\",\"level\":\"");
            out.push_str(level.as_str());
            out.push_str("\",\"fields\":{\"message\":");
            write_json_string(out, AccessLine::MESSAGE)?;
            for (name, value) in fields {
                // The names are plain words: nothing in them to escape.
                out.push_str(",\"");
                out.push_str(name);
                out.push_str("\":");
                match value {
                    Value::Shown(text) | Value::Text(text) => write_json_string(out, text)?,
                    Value::Number(number) => write_integer(out, number)?,
                }
            }
            out.push_str("}}");
        }
    }
    out.write_char('\n')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::Ordering;

    use portcullis::server::TracingAccessLog;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::super::Queued;
    use super::super::line::Line;
    use super::super::line::tests::Captured;
    use super::super::tests::unwritten;
    use super::*;

    fn lines() -> [AccessLine<'static>; 4] {
        [
            AccessLine::new("5f3a09c1-17", "POST", "/v1/evaluate/{point}", 200, 412),
            AccessLine::new("caller's \"own\" \\ id", "GET", "/healthz", 503, 7),
            AccessLine::new("r-1", "PURGE", "/v1/evaluate/{point}", 405, 0),
            AccessLine::new("r-2", "GET", "(none)", 404, u64::MAX),
        ]
    }

    /// The line with its time (27 characters, where the format puts it) taken out.
    fn without_time(line: &str, format: LogFormat) -> String {
        let at = match format {
            LogFormat::Text => 0,
            LogFormat::Json => "{\"timestamp\":\"".len(),
        };
        format!("{}{}", &line[..at], &line[at + 27..])
    }

    /// The lines the `tracing` event gives, through the log's own formatter.
    fn through_tracing(format: LogFormat) -> Vec<String> {
        let captured = Captured::default();
        let log = || {
            lines()
                .iter()
                .for_each(|line| TracingAccessLog.answered(line))
        };
        let builder = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false);
        match format {
            LogFormat::Text => tracing::subscriber::with_default(
                builder.event_format(Line::new(format)).finish(),
                log,
            ),
            LogFormat::Json => tracing::subscriber::with_default(
                builder
                    .fmt_fields(JsonFields::new())
                    .event_format(Line::new(format))
                    .finish(),
                log,
            ),
        }
        captured.lines()
    }

    #[test]
    fn a_line_written_directly_is_the_line_of_the_event() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let expected = through_tracing(format);
            assert_eq!(expected.len(), lines().len(), "{expected:?}");
            for (line, expected) in lines().iter().zip(&expected) {
                let mut written = String::new();
                write_line(&mut written, format, line).unwrap();
                let written = written.strip_suffix('\n').expect("one line");
                assert_eq!(
                    without_time(written, format),
                    without_time(expected, format),
                    "{format:?}"
                );
            }
        }
    }

    #[test]
    fn lines_below_the_level_are_not_queued_and_a_full_queue_drops_them() {
        let (to, queued, dropped) = unwritten(2);
        let warnings = QueuedAccessLog::new(to.clone(), LogFormat::Text, Level::WARN);
        for line in lines() {
            warnings.answered(&line);
        }
        let Queued::Line(only) = queued.try_recv().unwrap() else {
            panic!("a line was expected")
        };
        let only = String::from_utf8(only).unwrap();
        assert!(only.contains("  WARN answered request_id="), "{only}");
        assert!(queued.try_recv().is_err(), "only the 503 is a warning");

        let everything = QueuedAccessLog::new(to, LogFormat::Json, Level::TRACE);
        for line in lines() {
            everything.answered(&line);
        }
        assert_eq!(queued.try_iter().count(), 2);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            2,
            "two found the queue full"
        );
    }
}
