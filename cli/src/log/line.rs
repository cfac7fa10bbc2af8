//! The service's log lines, formatted for the cost of a request: one access line per request
//! is written at INFO, so a line is built with as little machinery as it can be, straight into
//! the writer's buffer.
//!
//! Text lines keep the layout people know from `tracing`'s own format (time, level, the spans
//! with their fields, the message, the fields); JSON lines are one object,
//! `{"timestamp", "level", "fields": {"message", ..}, "span": {.., "name"}}`, `span` being the
//! innermost span the event is in, when it is in one.

use std::cell::RefCell;
use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use portcullis::time::write_utc_seconds;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::LogFormat;

/// The event formatter of the service's log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    format: LogFormat,
}

impl Line {
    pub(crate) fn new(format: LogFormat) -> Line {
        Line { format }
    }
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        match self.format {
            LogFormat::Text => {
                write_time(&mut writer)?;
                writer.write_str(level_column(level))?;
                let mut in_span = false;
                if let Some(scope) = context.event_scope() {
                    for span in scope.from_root() {
                        in_span = true;
                        writer.write_str(span.name())?;
                        let extensions = span.extensions();
                        if let Some(fields) = extensions.get::<FormattedFields<N>>()
                            && !fields.is_empty()
                        {
                            write!(writer, "{{{fields}}}")?;
                        }
                        writer.write_char(':')?;
                    }
                }
                if in_span {
                    writer.write_char(' ')?;
                }
                let mut fields = TextFields(Members::new(&mut writer));
                event.record(&mut fields);
                fields.0.result?;
            }
            LogFormat::Json => {
                writer.write_str("{\"timestamp\":\"")?;
                write_time(&mut writer)?;
                writer.write_str("\",\"level\":\"")?;
                writer.write_str(level.as_str())?;
                writer.write_str("\",\"fields\":{")?;
                let mut fields = JsonFields(Members::new(&mut writer));
                event.record(&mut fields);
                fields.0.result?;
                writer.write_char('}')?;
                if let Some(span) = context.lookup_current() {
                    // The span's fields, written by the JSON field formatter: an object.
                    writer.write_str(",\"span\":")?;
                    let extensions = span.extensions();
                    let fields = extensions
                        .get::<FormattedFields<N>>()
                        .map(|fields| fields.as_str().trim())
                        .and_then(|fields| fields.strip_suffix('}'))
                        .unwrap_or("{");
                    writer.write_str(fields)?;
                    if fields != "{" {
                        writer.write_char(',')?;
                    }
                    writer.write_str("\"name\":")?;
                    write_json_string(&mut writer, span.name())?;
                    writer.write_char('}')?;
                }
                writer.write_char('}')?;
            }
        }
        writer.write_char('\n')
    }
}

/// Writes the time now, UTC, to the microsecond: `2026-11-30T05:06:37.431680Z`. The date and
/// time of the current second are kept per thread and written again while the second lasts.
pub(super) fn write_time(out: &mut impl Write) -> fmt::Result {
    thread_local! {
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != seconds {
            second.1.clear();
            let _ = write_utc_seconds(&mut second.1, seconds);
            second.0 = seconds;
        }
        out.write_str(&second.1)
    })?;
    // The microseconds, six digits with their leading zeros: the digits of a million more,
    // but the first.
    let mut digits = itoa::Buffer::new();
    let micros = digits.format(1_000_000 + now.subsec_micros());
    out.write_char('.')?;
    out.write_str(&micros[1..])?;
    out.write_char('Z')
}

/// An event's fields being written: whether one was written yet, and the first error.
struct Members<'a, 'w> {
    out: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl<'a, 'w> Members<'a, 'w> {
    fn new(out: &'a mut Writer<'w>) -> Self {
        Members {
            out,
            first: true,
            result: Ok(()),
        }
    }

    /// Writes one field with `write`, told whether it is the first; nothing after an error.
    fn write(&mut self, write: impl FnOnce(&mut Writer<'_>, bool) -> fmt::Result) {
        if self.result.is_ok() {
            let first = std::mem::replace(&mut self.first, false);
            self.result = write(self.out, first);
        }
    }
}

/// An event's fields as text: the message as it is, then `name=value` for each other field
/// (a string quoted and escaped).
struct TextFields<'a, 'w>(Members<'a, 'w>);

impl TextFields<'_, '_> {
    /// Writes the separator and, but for the message, `name=`; then the value with `write`.
    fn field(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        self.0.write(|out, first| {
            if !first {
                out.write_char(' ')?;
            }
            if field.name() != "message" {
                out.write_str(field.name())?;
                out.write_char('=')?;
            }
            write(out)
        });
    }
}

impl Visit for TextFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.field(field, |out| out.write_str(value));
        } else {
            self.field(field, |out| write_quoted(out, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |out| write_integer(out, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, |out| write_integer(out, value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, |out| write!(out, "{value}"));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.field(field, |out| write!(out, "{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, |out| write!(out, "{value:?}"));
    }
}

/// An event's fields as the members of a JSON object.
struct JsonFields<'a, 'w>(Members<'a, 'w>);

impl JsonFields<'_, '_> {
    /// Writes `"name":` and then the value with `write`.
    fn member(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        self.0.write(|out, first| {
            if !first {
                out.write_char(',')?;
            }
            write_json_string(out, field.name())?;
            out.write_char(':')?;
            write(out)
        });
    }
}

impl Visit for JsonFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.member(field, |out| write_json_string(out, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.member(field, |out| write_integer(out, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.member(field, |out| write_integer(out, value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() {
            self.member(field, |out| write!(out, "{value}"));
        } else {
            self.member(field, |out| out.write_str("null"));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.member(field, |out| write!(out, "{value}"));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.member(field, |out| write_json_string(out, &value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.member(field, |out| write_json_string(out, &format!("{value:?}")));
    }
}

/// A text line's level column: the level, right-aligned, between spaces.
pub(super) fn level_column(level: Level) -> &'static str {
    match level {
        Level::ERROR => " ERROR ",
        Level::WARN => "  WARN ",
        Level::INFO => "  INFO ",
        Level::DEBUG => " DEBUG ",
        Level::TRACE => " TRACE ",
    }
}

/// Writes a string field's value as a text line shows it: what `{:?}` writes of it, without
/// its escaping machinery when nothing needs escaping.
pub(super) fn write_quoted(out: &mut impl Write, value: &str) -> fmt::Result {
    if value
        .bytes()
        .all(|byte| matches!(byte, b' '..=b'~') && byte != b'"' && byte != b'\\')
    {
        out.write_char('"')?;
        out.write_str(value)?;
        out.write_char('"')
    } else {
        write!(out, "{value:?}")
    }
}

/// Writes an integer in decimal, without the formatting machinery.
pub(super) fn write_integer(out: &mut impl Write, value: impl itoa::Integer) -> fmt::Result {
    out.write_str(itoa::Buffer::new().format(value))
}

/// Writes `text` as a JSON string, escaped as `serde_json` escapes it.
pub(super) fn write_json_string(out: &mut impl Write, text: &str) -> fmt::Result {
    out.write_str(&serde_json::to_string(text).map_err(|_| fmt::Error)?)
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields as JsonFieldFormatter;

    use super::*;

    /// Every line written, in one buffer.
    #[derive(Clone, Default)]
    pub(in crate::log) struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    impl Captured {
        pub(in crate::log) fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// Logs what every line should carry: an access line in a span, a line with an odd
    /// string and an error outside of one.
    fn log_lines() {
        let span = tracing::info_span!("request", request_id = %"r-1", attempt = 2_u64);
        span.in_scope(|| {
            tracing::info!(
                method = "GET",
                route = "/healthz",
                status = 200_u64,
                micros = 12_u64,
                "answered"
            );
        });
        let error = io::Error::other("the disk is full");
        tracing::warn!(
            path = "a \"quoted\"\\path\n\u{1}",
            error = &error as &dyn std::error::Error,
            ratio = 0.5,
            "cannot write: {}",
            7
        );
    }

    #[test]
    fn text_lines_have_the_time_level_spans_message_and_fields() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .event_format(Line::new(LogFormat::Text))
            .finish();
        tracing::subscriber::with_default(subscriber, log_lines);
        let lines = captured.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let (time, rest) = lines[0].split_once(' ').unwrap();
        assert_eq!(time.len(), "2026-11-30T05:06:37.431680Z".len(), "{time}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
        assert!(
            time[19..20] == *"." && time[20..26].bytes().all(|byte| byte.is_ascii_digit()),
            "{time}"
        );
        assert_eq!(
            rest,
            r#" INFO request{request_id=r-1 attempt=2}: answered method="GET" route="/healthz" status=200 micros=12"#
        );
        let (_, rest) = lines[1].split_once(' ').unwrap();
        assert_eq!(
            rest,
            r#" WARN cannot write: 7 path="a \"quoted\"\\path\n\u{1}" error=the disk is full ratio=0.5"#
        );
    }

    #[test]
    fn json_lines_are_one_object_with_fields_and_the_current_span() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .fmt_fields(JsonFieldFormatter::new())
            .event_format(Line::new(LogFormat::Json))
            .finish();
        tracing::subscriber::with_default(subscriber, log_lines);
        let lines: Vec<Value> = captured
            .lines()
            .iter()
            .map(|line| serde_json::from_str(line).expect(line))
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let access = &lines[0];
        assert_eq!(access["level"], "INFO");
        assert_eq!(
            access["fields"],
            serde_json::json!({"message": "answered", "method": "GET", "route": "/healthz", "status": 200, "micros": 12})
        );
        assert_eq!(
            access["span"],
            serde_json::json!({"request_id": "r-1", "attempt": 2, "name": "request"})
        );
        let warning = &lines[1];
        assert_eq!(warning["level"], "WARN");
        assert!(warning.get("span").is_none(), "{warning}");
        assert_eq!(
            warning["fields"],
            serde_json::json!({"message": "cannot write: 7", "path": "a \"quoted\"\\path\n\u{1}",
                "error": "the disk is full", "ratio": 0.5})
        );
        let time = warning["timestamp"].as_str().unwrap();
        assert_eq!(time.len(), "2026-11-30T05:06:37.431680Z".len(), "{time}");
    }

    #[test]
    fn strings_are_written_as_debug_writes_them() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .event_format(Line::new(LogFormat::Text))
            .finish();
        let texts = [
            "plain /v1/x{y}",
            "tab\there",
            "quote\"",
            "é\u{200b}",
            "",
            "~ !",
        ];
        tracing::subscriber::with_default(subscriber, || {
            for text in texts {
                tracing::info!(text, "m");
            }
        });
        for (line, text) in captured.lines().iter().zip(texts) {
            assert!(line.ends_with(&format!(" m text={text:?}")), "{line}");
        }
    }
}
