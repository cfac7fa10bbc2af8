//! Builtins the OPA WebAssembly compiler leaves to the host.
//!
//! OPA compiles most builtins into the module itself; the rest appear in the module's `builtins()`
//! map and are called through `opa_builtin0..4`. This host provides the ones an agent policy
//! plausibly uses; a module that needs another one fails when it is opened, naming it.
//! The list is [`HOST_BUILTINS`]. Timezones other than UTC are not supported by the time builtins.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Number, Value};

/// Per-evaluation state shared by the builtins of one evaluation.
#[derive(Debug, Default)]
pub(crate) struct BuiltinContext {
    now_ns: Option<i64>,
}

impl BuiltinContext {
    pub(crate) fn reset(&mut self) {
        self.now_ns = None;
    }

    /// The evaluation's "now": the same value for every call during one evaluation, as in OPA.
    fn now_ns(&mut self) -> i64 {
        *self.now_ns.get_or_insert_with(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| {
                    i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX)
                })
        })
    }
}

type BuiltinFn = fn(&[Value], &mut BuiltinContext) -> Result<Value, String>;

/// A builtin implemented by the host.
pub(crate) struct HostBuiltin {
    pub(crate) name: &'static str,
    pub(crate) func: BuiltinFn,
}

/// The builtins this host provides to OPA WebAssembly modules, by their Rego names.
pub const HOST_BUILTINS: &[&str] = &[
    "sprintf",
    "time.now_ns",
    "time.parse_rfc3339_ns",
    "time.parse_duration_ns",
    "time.date",
    "time.clock",
    "time.weekday",
    "time.add_date",
    "time.format",
    "regex.match",
    "regex.is_valid",
    "regex.replace",
    "regex.split",
    "regex.find_n",
    "regex.find_all_string_submatch_n",
    "strings.reverse",
    "strings.any_prefix_match",
    "strings.any_suffix_match",
    "indexof_n",
    "json.is_valid",
    "hex.encode",
    "hex.decode",
    "base64url.encode_no_pad",
    "urlquery.encode",
    "urlquery.decode",
    "urlquery.encode_object",
    "opa.runtime",
    "trace",
];

static TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "sprintf",
        func: sprintf,
    },
    HostBuiltin {
        name: "time.now_ns",
        func: |_, context| Ok(Value::from(context.now_ns())),
    },
    HostBuiltin {
        name: "time.parse_rfc3339_ns",
        func: |args, _| Ok(Value::from(parse_rfc3339(string(args, 0)?)?)),
    },
    HostBuiltin {
        name: "time.parse_duration_ns",
        func: |args, _| Ok(Value::from(parse_duration(string(args, 0)?)?)),
    },
    HostBuiltin {
        name: "time.date",
        func: time_date,
    },
    HostBuiltin {
        name: "time.clock",
        func: time_clock,
    },
    HostBuiltin {
        name: "time.weekday",
        func: time_weekday,
    },
    HostBuiltin {
        name: "time.add_date",
        func: time_add_date,
    },
    HostBuiltin {
        name: "time.format",
        func: time_format,
    },
    HostBuiltin {
        name: "regex.match",
        func: |args, _| Ok(Value::Bool(regex(args, 0)?.is_match(string(args, 1)?))),
    },
    HostBuiltin {
        name: "regex.is_valid",
        func: |args, _| {
            Ok(Value::Bool(
                args.first()
                    .and_then(Value::as_str)
                    .is_some_and(|p| regex::Regex::new(p).is_ok()),
            ))
        },
    },
    HostBuiltin {
        name: "regex.replace",
        func: |args, _| {
            Ok(Value::from(
                regex(args, 1)?
                    .replace_all(string(args, 0)?, string(args, 2)?)
                    .into_owned(),
            ))
        },
    },
    HostBuiltin {
        name: "regex.split",
        func: |args, _| {
            Ok(Value::from(
                regex(args, 0)?
                    .split(string(args, 1)?)
                    .map(Value::from)
                    .collect::<Vec<_>>(),
            ))
        },
    },
    HostBuiltin {
        name: "regex.find_n",
        func: regex_find_n,
    },
    HostBuiltin {
        name: "regex.find_all_string_submatch_n",
        func: regex_submatches,
    },
    HostBuiltin {
        name: "strings.reverse",
        func: |args, _| {
            Ok(Value::from(
                string(args, 0)?.chars().rev().collect::<String>(),
            ))
        },
    },
    HostBuiltin {
        name: "strings.any_prefix_match",
        func: |args, _| any_match(args, |s, p| s.starts_with(p)),
    },
    HostBuiltin {
        name: "strings.any_suffix_match",
        func: |args, _| any_match(args, |s, p| s.ends_with(p)),
    },
    HostBuiltin {
        name: "indexof_n",
        func: indexof_n,
    },
    HostBuiltin {
        name: "json.is_valid",
        func: |args, _| {
            Ok(Value::Bool(
                serde_json::from_str::<Value>(string(args, 0)?).is_ok(),
            ))
        },
    },
    HostBuiltin {
        name: "hex.encode",
        func: |args, _| {
            Ok(Value::from(string(args, 0)?.bytes().fold(
                String::new(),
                |mut out, b| {
                    let _ = write!(out, "{b:02x}");
                    out
                },
            )))
        },
    },
    HostBuiltin {
        name: "hex.decode",
        func: hex_decode,
    },
    HostBuiltin {
        name: "base64url.encode_no_pad",
        func: |args, _| Ok(Value::from(base64url_no_pad(string(args, 0)?.as_bytes()))),
    },
    HostBuiltin {
        name: "urlquery.encode",
        func: |args, _| Ok(Value::from(query_escape(string(args, 0)?))),
    },
    HostBuiltin {
        name: "urlquery.decode",
        func: |args, _| Ok(Value::from(query_unescape(string(args, 0)?)?)),
    },
    HostBuiltin {
        name: "urlquery.encode_object",
        func: urlquery_encode_object,
    },
    HostBuiltin {
        name: "opa.runtime",
        func: |_, _| Ok(Value::Object(Map::new())),
    },
    HostBuiltin {
        name: "trace",
        func: |_, _| Ok(Value::Bool(true)),
    },
];

/// The host builtin named `name`, if this host provides it.
pub(crate) fn lookup(name: &str) -> Option<&'static HostBuiltin> {
    TABLE.iter().find(|builtin| builtin.name == name)
}

fn arg(args: &[Value], index: usize) -> Result<&Value, String> {
    args.get(index)
        .ok_or_else(|| format!("missing operand {}", index + 1))
}

fn string(args: &[Value], index: usize) -> Result<&str, String> {
    let value = arg(args, index)?;
    value.as_str().ok_or_else(|| {
        format!(
            "operand {} must be a string, got {}",
            index + 1,
            type_name(value)
        )
    })
}

fn integer(args: &[Value], index: usize) -> Result<i64, String> {
    let value = arg(args, index)?;
    value
        .as_i64()
        .or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                .map(|f| f as i64)
        })
        .ok_or_else(|| {
            format!(
                "operand {} must be an integer, got {}",
                index + 1,
                type_name(value)
            )
        })
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn regex(args: &[Value], index: usize) -> Result<std::sync::Arc<regex::Regex>, String> {
    portcullis_engine::apply::cached_regex(string(args, index)?)
}

// ---------------------------------------------------------------- sprintf

fn sprintf(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let format = string(args, 0)?;
    let values = match arg(args, 1)? {
        Value::Array(values) => values.as_slice(),
        other => {
            return Err(format!(
                "operand 2 must be an array, got {}",
                type_name(other)
            ));
        }
    };
    Ok(Value::from(go_format(format, values)))
}

/// Go's `fmt.Sprintf` for the verbs Rego policies use: `%v %s %d %f %e %g %q %x %X %o %b %t %%`,
/// with flags `-`, `0`, `+`, width and precision. Mistakes render like Go's (`%!d(string=x)`).
pub(crate) fn go_format(format: &str, values: &[Value]) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    let mut next = values.iter();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut left, mut zero, mut plus) = (false, false, false);
        while let Some(&flag) = chars.peek() {
            match flag {
                '-' => left = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = None::<usize>;
        while let Some(digit) = chars.peek().and_then(|c| c.to_digit(10)) {
            width = Some(width.unwrap_or(0) * 10 + digit as usize);
            chars.next();
        }
        let mut precision = None::<usize>;
        if chars.peek() == Some(&'.') {
            chars.next();
            precision = Some(0);
            while let Some(digit) = chars.peek().and_then(|c| c.to_digit(10)) {
                precision = Some(precision.unwrap_or(0) * 10 + digit as usize);
                chars.next();
            }
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(value) = next.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        let text = match format_one(verb, value, precision, plus) {
            Some(text) => text,
            None => {
                let _ = write!(out, "%!{verb}({}={})", type_name(value), rego_string(value));
                continue;
            }
        };
        let len = text.chars().count();
        let pad = width.map_or(0, |width| width.saturating_sub(len));
        if left {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if zero && matches!(value, Value::Number(_)) {
            let (sign, digits) = match text.strip_prefix(['-', '+']) {
                Some(rest) => (&text[..1], rest),
                None => ("", text.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
    }
    if next.len() > 0 {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = next
            .map(|value| format!("{}={}", type_name(value), rego_string(value)))
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

fn format_one(verb: char, value: &Value, precision: Option<usize>, plus: bool) -> Option<String> {
    let signed = |text: String, negative: bool| {
        if plus && !negative {
            format!("+{text}")
        } else {
            text
        }
    };
    Some(match (verb, value) {
        ('v', Value::String(s)) | ('s', Value::String(s)) => match precision {
            Some(precision) => s.chars().take(precision).collect(),
            None => s.clone(),
        },
        ('v', Value::Number(n)) => signed(number_string(n), n.as_f64().is_some_and(|f| f < 0.0)),
        ('v' | 's', other) => rego_string(other),
        ('q', Value::String(s)) => serde_json::to_string(s).ok()?,
        ('t', Value::Bool(b)) => b.to_string(),
        ('d', Value::Number(n)) => {
            let i = n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))?;
            signed(i.to_string(), i < 0)
        }
        ('b' | 'o' | 'x' | 'X', Value::Number(n)) => {
            let i = n.as_i64()?;
            let magnitude = i.unsigned_abs();
            let digits = match verb {
                'b' => format!("{magnitude:b}"),
                'o' => format!("{magnitude:o}"),
                'x' => format!("{magnitude:x}"),
                _ => format!("{magnitude:X}"),
            };
            if i < 0 {
                format!("-{digits}")
            } else {
                signed(digits, false)
            }
        }
        ('x', Value::String(s)) => s.bytes().fold(String::new(), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        }),
        ('X', Value::String(s)) => s.bytes().fold(String::new(), |mut out, b| {
            let _ = write!(out, "{b:02X}");
            out
        }),
        ('f' | 'F', Value::Number(n)) => {
            let f = n.as_f64()?;
            signed(format!("{f:.*}", precision.unwrap_or(6)), f < 0.0)
        }
        ('e', Value::Number(n)) => {
            let f = n.as_f64()?;
            signed(
                go_exponent(&format!("{f:.*e}", precision.unwrap_or(6))),
                f < 0.0,
            )
        }
        ('g', Value::Number(n)) => {
            let f = n.as_f64()?;
            signed(
                match precision {
                    Some(precision) => format!("{f:.*}", precision),
                    None => number_string(n),
                },
                f < 0.0,
            )
        }
        _ => return None,
    })
}

/// Rust writes `1.5e2`; Go writes `1.5e+02`.
fn go_exponent(text: &str) -> String {
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text.to_owned(),
    }
}

fn number_string(n: &Number) -> String {
    if n.is_f64()
        && let Some(f) = n.as_f64()
        && f.fract() == 0.0
        && f.abs() < 1e21
    {
        return format!("{f:.0}");
    }
    n.to_string()
}

/// How Rego prints a value: JSON with `", "` and `": "` separators; strings bare at the top level.
fn rego_string(value: &Value) -> String {
    fn write_value(out: &mut String, value: &Value) {
        match value {
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push_str(", ");
                    }
                    write_value(out, item);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                for (index, (key, item)) in map.iter().enumerate() {
                    if index > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&serde_json::to_string(key).unwrap_or_default());
                    out.push_str(": ");
                    write_value(out, item);
                }
                out.push('}');
            }
            Value::Number(n) => out.push_str(&number_string(n)),
            other => out.push_str(&other.to_string()),
        }
    }
    match value {
        Value::String(s) => s.clone(),
        other => {
            let mut out = String::new();
            write_value(&mut out, other);
            out
        }
    }
}

// ---------------------------------------------------------------- time

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_DAY: i64 = 86_400 * NANOS_PER_SECOND;
const WEEKDAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The nanosecond timestamp of a time builtin operand: `ns` or `[ns, "UTC"]` (and `[ns, tz, layout]`).
fn timestamp(args: &[Value]) -> Result<(i64, Option<&str>), String> {
    match arg(args, 0)? {
        Value::Array(items) => {
            let ns = integer(items, 0)?;
            if let Some(zone) = items.get(1) {
                let zone = zone.as_str().ok_or("the timezone must be a string")?;
                if !matches!(zone, "" | "UTC") {
                    return Err(format!("timezone {zone:?} is not supported (only UTC)"));
                }
            }
            Ok((ns, items.get(2).and_then(Value::as_str)))
        }
        _ => Ok((integer(args, 0)?, None)),
    }
}

fn time_date(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let (ns, _) = timestamp(args)?;
    let (year, month, day) = civil_from_days(ns.div_euclid(NANOS_PER_DAY));
    Ok(Value::from(vec![year, month, day]))
}

fn time_clock(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let (ns, _) = timestamp(args)?;
    let seconds = ns.rem_euclid(NANOS_PER_DAY) / NANOS_PER_SECOND;
    Ok(Value::from(vec![
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
    ]))
}

fn time_weekday(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let (ns, _) = timestamp(args)?;
    let day = ns.div_euclid(NANOS_PER_DAY).rem_euclid(7);
    Ok(Value::from(WEEKDAYS[usize::try_from(day).unwrap_or(0)]))
}

fn time_add_date(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let ns = integer(args, 0)?;
    let (years, months, days) = (integer(args, 1)?, integer(args, 2)?, integer(args, 3)?);
    let day_count = ns.div_euclid(NANOS_PER_DAY);
    let within_day = ns.rem_euclid(NANOS_PER_DAY);
    let (year, month, day) = civil_from_days(day_count);
    // Go normalizes month overflow into years and day overflow into the following months.
    let month_total = year * 12 + (month - 1) + years * 12 + months;
    let new_days = days_from_civil(
        month_total.div_euclid(12),
        month_total.rem_euclid(12) + 1,
        1,
    ) + day
        - 1
        + days;
    new_days
        .checked_mul(NANOS_PER_DAY)
        .and_then(|base| base.checked_add(within_day))
        .map(Value::from)
        .ok_or_else(|| "time out of range".to_owned())
}

fn time_format(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let (ns, layout) = timestamp(args)?;
    if let Some(layout) = layout
        && !matches!(
            layout,
            "RFC3339"
                | "RFC3339Nano"
                | "2006-01-02T15:04:05Z07:00"
                | "2006-01-02T15:04:05.999999999Z07:00"
        )
    {
        return Err(format!(
            "layout {layout:?} is not supported (only RFC 3339)"
        ));
    }
    Ok(Value::from(format_rfc3339(ns)))
}

fn format_rfc3339(ns: i64) -> String {
    let (year, month, day) = civil_from_days(ns.div_euclid(NANOS_PER_DAY));
    let within = ns.rem_euclid(NANOS_PER_DAY);
    let seconds = within / NANOS_PER_SECOND;
    let fraction = within % NANOS_PER_SECOND;
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    if fraction != 0 {
        let digits = format!("{fraction:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` to nanoseconds since the epoch.
pub(crate) fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not an RFC 3339 timestamp");
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = text.get(range).ok_or_else(bad)?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse::<i64>().map_err(|_| bad())
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return Err(bad());
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let mut index = 19;
    let mut fraction = 0i64;
    if bytes.get(index) == Some(&b'.') {
        index += 1;
        let start = index;
        while bytes.get(index).is_some_and(u8::is_ascii_digit) {
            index += 1;
        }
        let digits = &text[start..index];
        if digits.is_empty() {
            return Err(bad());
        }
        let kept: String = digits.chars().take(9).collect();
        fraction = format!("{kept:0<9}").parse::<i64>().map_err(|_| bad())?;
    }
    let offset_seconds = match &text[index..] {
        "Z" | "z" => 0,
        zone if zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && zone.as_bytes()[3] == b':' =>
        {
            let hours = number(index + 1..index + 3)?;
            let minutes = number(index + 4..index + 6)?;
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            sign * (hours * 3600 + minutes * 60)
        }
        _ => return Err(bad()),
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_seconds;
    seconds
        .checked_mul(NANOS_PER_SECOND)
        .and_then(|ns| ns.checked_add(fraction))
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// Go's `time.ParseDuration`: `[-+]` then numbers with units `ns us µs ms s m h`, e.g. `1h30m`, `1.5s`.
pub(crate) fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a duration (like \"300ms\" or \"1h30m\")");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    if total > i64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    let ns = total.round() as i64;
    Ok(if negative { -ns } else { ns })
}

// ---------------------------------------------------------------- regex and strings

fn limit(args: &[Value], index: usize) -> Result<usize, String> {
    let n = integer(args, index)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

fn regex_find_n(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let pattern = regex(args, 0)?;
    let n = limit(args, 2)?;
    let found: Vec<Value> = pattern
        .find_iter(string(args, 1)?)
        .take(n)
        .map(|m| Value::from(m.as_str()))
        .collect();
    Ok(Value::from(found))
}

fn regex_submatches(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let pattern = regex(args, 0)?;
    let n = limit(args, 2)?;
    let found: Vec<Value> = pattern
        .captures_iter(string(args, 1)?)
        .take(n)
        .map(|captures| {
            Value::from(
                captures
                    .iter()
                    .map(|group| Value::from(group.map_or("", |m| m.as_str())))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    Ok(Value::from(found))
}

fn strings_of(value: &Value) -> Result<Vec<&str>, String> {
    match value {
        Value::String(s) => Ok(vec![s.as_str()]),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| format!("expected strings, got {}", type_name(item)))
            })
            .collect(),
        other => Err(format!(
            "expected a string or an array of strings, got {}",
            type_name(other)
        )),
    }
}

fn any_match(args: &[Value], test: fn(&str, &str) -> bool) -> Result<Value, String> {
    let search = strings_of(arg(args, 0)?)?;
    let base = strings_of(arg(args, 1)?)?;
    Ok(Value::Bool(
        search.iter().any(|s| base.iter().any(|b| test(s, b))),
    ))
}

fn indexof_n(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let haystack = string(args, 0)?;
    let needle = string(args, 1)?;
    if needle.is_empty() {
        return Err("empty search character".to_owned());
    }
    // Indices count characters (runes), as in Rego's `indexof`.
    let found: Vec<Value> = haystack
        .match_indices(needle)
        .map(|(byte, _)| Value::from(haystack[..byte].chars().count()))
        .collect();
    Ok(Value::from(found))
}

// ---------------------------------------------------------------- encodings

fn hex_decode(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let text = string(args, 0)?;
    if text.len() % 2 != 0 {
        return Err("odd length hex string".to_owned());
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(text.get(i..i + 2).unwrap_or("zz"), 16)
                .map_err(|_| format!("invalid hex {text:?}"))
        })
        .collect::<Result<Vec<u8>, String>>()?;
    String::from_utf8(bytes)
        .map(Value::from)
        .map_err(|_| "the decoded bytes are not UTF-8".to_owned())
}

fn base64url_no_pad(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

fn query_unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .ok_or_else(|| format!("invalid escape in {text:?}"))?;
                out.push(
                    u8::from_str_radix(hex, 16)
                        .map_err(|_| format!("invalid escape in {text:?}"))?,
                );
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "the decoded bytes are not UTF-8".to_owned())
}

fn urlquery_encode_object(args: &[Value], _: &mut BuiltinContext) -> Result<Value, String> {
    let Value::Object(map) = arg(args, 0)? else {
        return Err("operand 1 must be an object".to_owned());
    };
    let mut pairs = Vec::new();
    for (key, value) in map {
        for item in strings_of(value)? {
            pairs.push(format!("{}={}", query_escape(key), query_escape(item)));
        }
    }
    pairs.sort();
    Ok(Value::from(pairs.join("&")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_listed_builtin_is_implemented() {
        for name in HOST_BUILTINS {
            assert!(lookup(name).is_some(), "{name}");
        }
        assert_eq!(HOST_BUILTINS.len(), TABLE.len());
    }

    #[test]
    fn sprintf_follows_go() {
        let cases = [
            ("%s is %d years", json!(["ann", 42]), "ann is 42 years"),
            (
                "%v|%v|%v",
                json!([1.5, [1, "a"], {"k": true}]),
                "1.5|[1, \"a\"]|{\"k\": true}",
            ),
            ("%05d|%-4s|%4s", json!([42, "ab", "cd"]), "00042|ab  |  cd"),
            (
                "%.2f %x %q %t %%",
                json!([1.23456, 255, "hi", false]),
                "1.23 ff \"hi\" false %",
            ),
            ("%d", json!(["x"]), "%!d(string=x)"),
            ("%s %s", json!(["a"]), "a %!s(MISSING)"),
        ];
        for (format, args, expected) in cases {
            let got = sprintf(&[json!(format), args], &mut BuiltinContext::default());
            assert_eq!(got, Ok(json!(expected)), "{format}");
        }
    }

    #[test]
    fn time_builtins() {
        let ns = parse_rfc3339("2024-02-29T13:45:30.5Z").expect("parse");
        assert_eq!(ns, 1_709_214_330_500_000_000);
        assert_eq!(parse_rfc3339("2024-02-29T14:45:30.5+01:00"), Ok(ns));
        assert!(parse_rfc3339("yesterday").is_err());
        let mut context = BuiltinContext::default();
        assert_eq!(
            time_date(&[json!(ns)], &mut context),
            Ok(json!([2024, 2, 29]))
        );
        assert_eq!(
            time_clock(&[json!([ns, "UTC"])], &mut context),
            Ok(json!([13, 45, 30]))
        );
        assert_eq!(
            time_weekday(&[json!(ns)], &mut context),
            Ok(json!("Thursday"))
        );
        assert!(time_date(&[json!([ns, "Europe/Paris"])], &mut context).is_err());
        let next_year =
            time_add_date(&[json!(ns), json!(1), json!(0), json!(0)], &mut context).expect("add");
        // Go normalizes 2025-02-29 to 2025-03-01.
        assert_eq!(
            time_date(&[next_year], &mut context),
            Ok(json!([2025, 3, 1]))
        );
        assert_eq!(
            time_format(&[json!(ns)], &mut context),
            Ok(json!("2024-02-29T13:45:30.5Z"))
        );
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_duration("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_duration("300ms"), Ok(300_000_000));
        assert!(parse_duration("3 days").is_err());
        let first = context.now_ns();
        assert_eq!(
            context.now_ns(),
            first,
            "now is fixed within one evaluation"
        );
    }

    #[test]
    fn string_regex_and_encoding_builtins() {
        let mut context = BuiltinContext::default();
        let call = |name: &str, args: Value, context: &mut BuiltinContext| {
            let Value::Array(args) = args else {
                unreachable!()
            };
            (lookup(name).expect(name).func)(&args, context)
        };
        assert_eq!(
            call(
                "regex.replace",
                json!(["a1b22", "[0-9]+", "#"]),
                &mut context
            ),
            Ok(json!("a#b#"))
        );
        assert_eq!(
            call("regex.split", json!([",\\s*", "a, b,c"]), &mut context),
            Ok(json!(["a", "b", "c"]))
        );
        assert_eq!(
            call("regex.find_n", json!(["[0-9]", "a1b2c3", 2]), &mut context),
            Ok(json!(["1", "2"]))
        );
        assert_eq!(
            call(
                "regex.find_all_string_submatch_n",
                json!(["(a)(b)?", "ab a", -1]),
                &mut context
            ),
            Ok(json!([["ab", "a", "b"], ["a", "a", ""]]))
        );
        assert!(call("regex.match", json!(["(", "x"]), &mut context).is_err());
        assert_eq!(
            call("strings.reverse", json!(["héllo"]), &mut context),
            Ok(json!("olléh"))
        );
        assert_eq!(
            call(
                "strings.any_prefix_match",
                json!([["x/y", "a/b"], "a/"]),
                &mut context
            ),
            Ok(json!(true))
        );
        assert_eq!(
            call("indexof_n", json!(["aéaa", "a"]), &mut context),
            Ok(json!([0, 2, 3]))
        );
        assert_eq!(
            call(
                "hex.decode",
                json!([call("hex.encode", json!(["hi!"]), &mut context).expect("hex")]),
                &mut context
            ),
            Ok(json!("hi!"))
        );
        assert_eq!(
            call("base64url.encode_no_pad", json!(["hi?>"]), &mut context),
            Ok(json!("aGk_Pg"))
        );
        assert_eq!(
            call("urlquery.encode", json!(["a b&c"]), &mut context),
            Ok(json!("a+b%26c"))
        );
        assert_eq!(
            call("urlquery.decode", json!(["a+b%26c"]), &mut context),
            Ok(json!("a b&c"))
        );
        assert_eq!(
            call(
                "urlquery.encode_object",
                json!([{"b": ["1", "2"], "a": "x y"}]),
                &mut context
            ),
            Ok(json!("a=x+y&b=1&b=2"))
        );
        assert_eq!(
            call("json.is_valid", json!(["{\"a\": 1}"]), &mut context),
            Ok(json!(true))
        );
    }
}
