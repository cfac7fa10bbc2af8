//! Time: `time.*`, as OPA computes it with Go's `time` package.
//!
//! A time operand is nanoseconds since the Unix epoch, or `[ns, zone]`, or (for `time.format`)
//! `[ns, zone, layout]`. The zone is an IANA name (`Europe/Paris`), `UTC` or empty for UTC, or
//! `Local`, which is UTC here (the sandbox reads nothing of the host). The zone database is
//! built in, as OPA carries its own. Layouts are Go's (`2006-01-02T15:04:05Z07:00`) or the names
//! of Go's layout constants (`RFC3339`, `DateOnly`, …).

use std::fmt::Write as _;

use jiff::tz::{Offset, TimeZone};
use jiff::{Timestamp, ZonedDateTime};
use serde_json::Value;

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, arg, integer, string};

pub(super) const TABLE: &[HostBuiltin] = &[
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
        func: |args, _| {
            let (zoned, _) = zoned_operand(args)?;
            Ok(Value::from(vec![
                i64::from(zoned.year()),
                i64::from(zoned.month()),
                i64::from(zoned.day()),
            ]))
        },
    },
    HostBuiltin {
        name: "time.clock",
        func: |args, _| {
            let (zoned, _) = zoned_operand(args)?;
            Ok(Value::from(vec![
                i64::from(zoned.hour()),
                i64::from(zoned.minute()),
                i64::from(zoned.second()),
            ]))
        },
    },
    HostBuiltin {
        name: "time.weekday",
        func: |args, _| {
            let (zoned, _) = zoned_operand(args)?;
            Ok(Value::from(weekday_name(&zoned)))
        },
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
        name: "time.diff",
        func: time_diff,
    },
    HostBuiltin {
        name: "time.parse_ns",
        func: |args, _| Ok(Value::from(parse_go(string(args, 0)?, string(args, 1)?)?)),
    },
];

const NANOS_PER_SECOND: i128 = 1_000_000_000;
const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SECOND;

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn weekday_name(zoned: &ZonedDateTime) -> &'static str {
    let index = usize::try_from(zoned.weekday().to_monday_zero_offset()).unwrap_or(0);
    WEEKDAYS[index % 7]
}

/// The time zone named `name`, as Go's `time.LoadLocation` (and `Local` as UTC).
fn zone(name: &str) -> Result<TimeZone, BuiltinError> {
    match name {
        "" | "UTC" | "Local" => Ok(TimeZone::UTC),
        name => jiff::tz::db()
            .get(name)
            .map_err(|_| BuiltinError::Failed(format!("unknown time zone {name}"))),
    }
}

/// The nanoseconds of a time operand, in its zone, and its layout if it has one.
fn zoned_operand(args: &[Value]) -> Result<(ZonedDateTime, Option<&str>), BuiltinError> {
    let (ns, zone_name, layout) = match arg(args, 0)? {
        Value::Array(items) => {
            let ns = integer(items, 0)?;
            let zone_name = match items.get(1) {
                Some(Value::String(name)) => name.as_str(),
                Some(_) => return Err("the time zone must be a string".into()),
                None => "",
            };
            let layout = match items.get(2) {
                Some(Value::String(layout)) => Some(layout.as_str()),
                Some(_) => return Err("the layout must be a string".into()),
                None => None,
            };
            (ns, zone_name, layout)
        }
        _ => (integer(args, 0)?, "", None),
    };
    let timestamp = Timestamp::from_nanosecond(i128::from(ns))
        .map_err(|error| BuiltinError::Failed(error.to_string()))?;
    Ok((timestamp.to_zoned_datetime(zone(zone_name)?), layout))
}

/// Go's `t.AddDate(years, months, days)` in UTC: months past December carry into years and
/// days past the month's end into the following months.
fn time_add_date(args: &[Value], _: &mut BuiltinContext) -> Outcome {
    let ns = integer(args, 0)?;
    let (years, months, days) = (integer(args, 1)?, integer(args, 2)?, integer(args, 3)?);
    let out_of_range = || BuiltinError::Failed("time outside of valid range".to_owned());
    let zoned = Timestamp::from_nanosecond(i128::from(ns))
        .map_err(|_| out_of_range())?
        .to_zoned_datetime(TimeZone::UTC);
    let within_day = i128::from(ns).rem_euclid(NANOS_PER_DAY);
    let month_total = i128::from(zoned.year()) * 12
        + i128::from(zoned.month() - 1)
        + i128::from(years) * 12
        + i128::from(months);
    let year = i16::try_from(month_total.div_euclid(12)).map_err(|_| out_of_range())?;
    let month = i8::try_from(month_total.rem_euclid(12) + 1).map_err(|_| out_of_range())?;
    let first = jiff::civil::Date::new(year, month, 1)
        .and_then(|date| date.to_zoned_datetime(TimeZone::UTC))
        .map_err(|_| out_of_range())?;
    let first_day = i128::from(first.timestamp().as_second()).div_euclid(86_400);
    let day = first_day + i128::from(zoned.day() - 1) + i128::from(days);
    let total = day
        .checked_mul(NANOS_PER_DAY)
        .and_then(|ns| ns.checked_add(within_day))
        .ok_or_else(out_of_range)?;
    i64::try_from(total)
        .map(Value::from)
        .map_err(|_| out_of_range())
}

/// OPA's `time.diff`: `[years, months, days, hours, minutes, seconds]` between two times, in
/// the first one's zone, the earlier subtracted from the later, each unit borrowing from the
/// next larger one.
fn time_diff(args: &[Value], _: &mut BuiltinContext) -> Outcome {
    let (first, _) = zoned_operand(args)?;
    let (second, _) = zoned_operand(&args[1.min(args.len())..])?;
    let second = second.with_time_zone(first.time_zone().clone());
    let (early, late) = if first.timestamp() > second.timestamp() {
        (second, first)
    } else {
        (first, second)
    };
    let part = |f: fn(&ZonedDateTime) -> i64| f(&late) - f(&early);
    let mut year = part(|z| i64::from(z.year()));
    let mut month = part(|z| i64::from(z.month()));
    let mut day = part(|z| i64::from(z.day()));
    let mut hour = part(|z| i64::from(z.hour()));
    let mut minute = part(|z| i64::from(z.minute()));
    let mut second = part(|z| i64::from(z.second()));
    if second < 0 {
        second += 60;
        minute -= 1;
    }
    if minute < 0 {
        minute += 60;
        hour -= 1;
    }
    if hour < 0 {
        hour += 24;
        day -= 1;
    }
    if day < 0 {
        day += i64::from(early.days_in_month());
        month -= 1;
    }
    if month < 0 {
        month += 12;
        year -= 1;
    }
    Ok(Value::from(vec![year, month, day, hour, minute, second]))
}

fn time_format(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let (zoned, layout) = zoned_operand(args)?;
    let layout = match layout {
        Some(name) => named_layout(name).unwrap_or(name),
        None => RFC3339_NANO,
    };
    context.charge(layout.len().saturating_mul(16), "time.format's output")?;
    Ok(Value::from(format_go(&zoned, layout)))
}

const RFC3339_NANO: &str = "2006-01-02T15:04:05.999999999Z07:00";

/// The layout of one of Go's layout constants, by name.
fn named_layout(name: &str) -> Option<&'static str> {
    Some(match name {
        "ANSIC" => "Mon Jan _2 15:04:05 2006",
        "UnixDate" => "Mon Jan _2 15:04:05 MST 2006",
        "RubyDate" => "Mon Jan 02 15:04:05 -0700 2006",
        "RFC822" => "02 Jan 06 15:04 MST",
        "RFC822Z" => "02 Jan 06 15:04 -0700",
        "RFC850" => "Monday, 02-Jan-06 15:04:05 MST",
        "RFC1123" => "Mon, 02 Jan 2006 15:04:05 MST",
        "RFC1123Z" => "Mon, 02 Jan 2006 15:04:05 -0700",
        "RFC3339" => "2006-01-02T15:04:05Z07:00",
        "RFC3339Nano" => RFC3339_NANO,
        "Kitchen" => "3:04PM",
        "Stamp" => "Jan _2 15:04:05",
        "StampMilli" => "Jan _2 15:04:05.000",
        "StampMicro" => "Jan _2 15:04:05.000000",
        "StampNano" => "Jan _2 15:04:05.000000000",
        "DateTime" => "2006-01-02 15:04:05",
        "DateOnly" => "2006-01-02",
        "TimeOnly" => "15:04:05",
        _ => return None,
    })
}

/// One element of a Go layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm {
        upper: bool,
    },
    Tz,
    /// A numeric zone: `Z` for UTC when `z`, with `colon`s, and with seconds or not minutes.
    Offset {
        z: bool,
        colon: bool,
        minutes: bool,
        seconds: bool,
    },
    /// Fractional seconds: the separator, the digit count, and whether trailing zeros go.
    Fraction {
        separator: char,
        digits: usize,
        trim: bool,
    },
}

/// Go's `nextStdChunk`: the literal text before the next element, the element, and the rest.
fn next_chunk(layout: &str) -> (&str, Option<(Std, &str)>) {
    let bytes = layout.as_bytes();
    for (i, &c) in bytes.iter().enumerate() {
        // Elements are ASCII: the bytes inside a wider character start none.
        if !layout.is_char_boundary(i) {
            continue;
        }
        let rest = &layout[i..];
        let found: Option<(Std, usize)> = match c {
            b'J' if rest.starts_with("January") => Some((Std::LongMonth, 7)),
            b'J' if rest.starts_with("Jan") && !starts_lower(&rest[3..]) => Some((Std::Month, 3)),
            b'M' if rest.starts_with("Monday") => Some((Std::LongWeekDay, 6)),
            b'M' if rest.starts_with("Mon") && !starts_lower(&rest[3..]) => Some((Std::WeekDay, 3)),
            b'M' if rest.starts_with("MST") => Some((Std::Tz, 3)),
            b'0' if rest.starts_with("002") => Some((Std::ZeroYearDay, 3)),
            b'0' => match bytes.get(i + 1) {
                Some(b'1') => Some((Std::ZeroMonth, 2)),
                Some(b'2') => Some((Std::ZeroDay, 2)),
                Some(b'3') => Some((Std::ZeroHour12, 2)),
                Some(b'4') => Some((Std::ZeroMinute, 2)),
                Some(b'5') => Some((Std::ZeroSecond, 2)),
                Some(b'6') => Some((Std::Year, 2)),
                _ => None,
            },
            b'1' if rest.starts_with("15") => Some((Std::Hour, 2)),
            b'1' => Some((Std::NumMonth, 1)),
            b'2' if rest.starts_with("2006") => Some((Std::LongYear, 4)),
            b'2' => Some((Std::Day, 1)),
            b'_' if rest.starts_with("_2006") => {
                // A literal `_` before the year.
                return (&layout[..=i], Some((Std::LongYear, &layout[i + 5..])));
            }
            b'_' if rest.starts_with("__2") => Some((Std::UnderYearDay, 3)),
            b'_' if rest.starts_with("_2") => Some((Std::UnderDay, 2)),
            b'3' => Some((Std::Hour12, 1)),
            b'4' => Some((Std::Minute, 1)),
            b'5' => Some((Std::Second, 1)),
            b'P' if rest.starts_with("PM") => Some((Std::Pm { upper: true }, 2)),
            b'p' if rest.starts_with("pm") => Some((Std::Pm { upper: false }, 2)),
            b'-' | b'Z' => {
                let z = c == b'Z';
                let forms: [(&str, bool, bool, bool); 5] = [
                    ("07:00:00", true, true, true),
                    ("070000", false, true, true),
                    ("0700", false, true, false),
                    ("07:00", true, true, false),
                    ("07", false, false, false),
                ];
                forms.iter().find_map(|&(form, colon, minutes, seconds)| {
                    rest[1..].starts_with(form).then_some((
                        Std::Offset {
                            z,
                            colon,
                            minutes,
                            seconds,
                        },
                        form.len() + 1,
                    ))
                })
            }
            b'.' | b',' => {
                let digit = bytes.get(i + 1).copied();
                match digit {
                    Some(d @ (b'0' | b'9')) => {
                        let run = bytes[i + 1..].iter().take_while(|&&b| b == d).count();
                        let after = bytes.get(i + 1 + run);
                        (!after.is_some_and(u8::is_ascii_digit)).then_some((
                            Std::Fraction {
                                separator: char::from(c),
                                digits: run,
                                trim: d == b'9',
                            },
                            run + 1,
                        ))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((std, len)) = found {
            return (&layout[..i], Some((std, &layout[i + len..])));
        }
    }
    (layout, None)
}

fn starts_lower(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Go's `t.Format(layout)`.
fn format_go(zoned: &ZonedDateTime, layout: &str) -> String {
    let mut out = String::with_capacity(layout.len() + 16);
    let mut rest = layout;
    loop {
        let (literal, found) = next_chunk(rest);
        out.push_str(literal);
        let Some((std, after)) = found else {
            break;
        };
        rest = after;
        write_std(&mut out, zoned, std);
    }
    out
}

fn write_std(out: &mut String, zoned: &ZonedDateTime, std: Std) {
    let month = usize::try_from(zoned.month() - 1).unwrap_or(0) % 12;
    let hour12 = match zoned.hour() % 12 {
        0 => 12,
        h => h,
    };
    let _ = match std {
        Std::LongMonth => write!(out, "{}", MONTHS[month]),
        Std::Month => write!(out, "{}", &MONTHS[month][..3]),
        Std::NumMonth => write!(out, "{}", zoned.month()),
        Std::ZeroMonth => write!(out, "{:02}", zoned.month()),
        Std::LongWeekDay => write!(out, "{}", weekday_name(zoned)),
        Std::WeekDay => write!(out, "{}", &weekday_name(zoned)[..3]),
        Std::Day => write!(out, "{}", zoned.day()),
        Std::UnderDay => write!(out, "{:>2}", zoned.day()),
        Std::ZeroDay => write!(out, "{:02}", zoned.day()),
        Std::UnderYearDay => write!(out, "{:>3}", zoned.day_of_year()),
        Std::ZeroYearDay => write!(out, "{:03}", zoned.day_of_year()),
        Std::Hour => write!(out, "{:02}", zoned.hour()),
        Std::Hour12 => write!(out, "{hour12}"),
        Std::ZeroHour12 => write!(out, "{hour12:02}"),
        Std::Minute => write!(out, "{}", zoned.minute()),
        Std::ZeroMinute => write!(out, "{:02}", zoned.minute()),
        Std::Second => write!(out, "{}", zoned.second()),
        Std::ZeroSecond => write!(out, "{:02}", zoned.second()),
        Std::LongYear => write!(out, "{:04}", zoned.year()),
        Std::Year => write!(out, "{:02}", i32::from(zoned.year()).rem_euclid(100)),
        Std::Pm { upper } => out.write_str(match (zoned.hour() >= 12, upper) {
            (true, true) => "PM",
            (true, false) => "pm",
            (false, true) => "AM",
            (false, false) => "am",
        }),
        Std::Tz => {
            let info = zoned.time_zone().to_offset_info(zoned.timestamp());
            let abbreviation = info.abbreviation();
            if abbreviation.is_empty() {
                // Go writes a zone without a name as its offset, `-0700` or `-07`.
                write_offset(out, zoned.offset(), false, false, true, false);
            } else {
                out.push_str(abbreviation);
            }
            Ok(())
        }
        Std::Offset {
            z,
            colon,
            minutes,
            seconds,
        } => {
            write_offset(out, zoned.offset(), z, colon, minutes, seconds);
            Ok(())
        }
        Std::Fraction {
            separator,
            digits,
            trim,
        } => {
            let nanos = format!("{:09}", zoned.subsec_nanosecond());
            let kept = &nanos[..digits.min(9)];
            let kept = if trim {
                kept.trim_end_matches('0')
            } else {
                kept
            };
            if !kept.is_empty() {
                out.push(separator);
                out.push_str(kept);
            }
            Ok(())
        }
    };
}

fn write_offset(
    out: &mut String,
    offset: Offset,
    z: bool,
    colon: bool,
    minutes: bool,
    seconds: bool,
) {
    let total = offset.seconds();
    if z && total == 0 {
        out.push('Z');
        return;
    }
    let magnitude = total.unsigned_abs();
    let _ = write!(
        out,
        "{}{:02}",
        if total < 0 { '-' } else { '+' },
        magnitude / 3600
    );
    let separator = if colon { ":" } else { "" };
    if minutes {
        let _ = write!(out, "{separator}{:02}", magnitude / 60 % 60);
    }
    if seconds {
        let _ = write!(out, "{separator}{:02}", magnitude % 60);
    }
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn get_number(value: &str, fixed: bool) -> Option<(i64, &str)> {
    let bytes = value.as_bytes();
    let digit = |i: usize| {
        bytes
            .get(i)
            .filter(|b| b.is_ascii_digit())
            .map(|b| i64::from(b - b'0'))
    };
    let first = digit(0)?;
    match digit(1) {
        Some(second) => Some((first * 10 + second, &value[2..])),
        None if fixed => None,
        None => Some((first, &value[1..])),
    }
}

/// Go's `lookup`: the index of the name `value` starts with, ignoring ASCII case.
fn lookup_name<'v>(names: &[&str], value: &'v str, short: bool) -> Option<(usize, &'v str)> {
    names.iter().enumerate().find_map(|(index, name)| {
        let name = if short { &name[..3] } else { name };
        let head = value.get(..name.len())?;
        head.eq_ignore_ascii_case(name)
            .then(|| (index, &value[name.len()..]))
    })
}

/// Go's `skip`: the layout's literal text at the start of `value` (a space matching any run).
fn skip_literal<'v>(value: &'v str, literal: &str) -> Option<&'v str> {
    let (mut value, mut literal) = (value, literal);
    while let Some(c) = literal.chars().next() {
        if c == ' ' {
            if !value.is_empty() && !value.starts_with(' ') {
                return None;
            }
            literal = literal.trim_start_matches(' ');
            value = value.trim_start_matches(' ');
            continue;
        }
        value = value.strip_prefix(c)?;
        literal = &literal[c.len_utf8()..];
    }
    Some(value)
}

/// Go's `parseNanoseconds`: the fraction after the separator at `value[0]`, `len` bytes in all.
fn nanoseconds(value: &str, len: usize) -> Option<i64> {
    if !value.starts_with(['.', ',']) {
        return None;
    }
    let digits = value.get(1..len.min(10))?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: i64 = digits.parse().ok()?;
    for _ in digits.len()..9 {
        ns *= 10;
    }
    Some(ns)
}

/// Go's `parseTimeZone`: the length of a zone abbreviation at the start of `value`.
fn zone_abbreviation(value: &str) -> Option<usize> {
    let bytes = value.as_bytes();
    if value.starts_with("ChST") || value.starts_with("MeST") {
        return Some(4);
    }
    if value.starts_with("GMT") {
        let rest = &bytes[3..];
        let signed = matches!(rest.first(), Some(b'+' | b'-'));
        let digits = rest
            .iter()
            .skip(1)
            .take_while(|b| b.is_ascii_digit())
            .count();
        return Some(if signed && digits > 0 { 4 + digits } else { 3 });
    }
    let upper = bytes.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match upper {
        3 => Some(3),
        4 if bytes[3] == b'T' || value.starts_with("WITA") => Some(4),
        5 if bytes[4] == b'T' => Some(5),
        _ => None,
    }
}

/// Go's `time.Parse(layout, value)` as nanoseconds since the epoch (a zone without an offset
/// in the value, such as `MST`, counts as UTC, as on a host whose local zone is UTC).
pub(crate) fn parse_go(layout: &str, value: &str) -> Result<i64, BuiltinError> {
    let original = value;
    let bad = |rest: &str| {
        BuiltinError::Failed(format!(
            "parsing time {original:?} as {layout:?}: cannot parse {rest:?}"
        ))
    };
    let out_of_range = |what: &str| {
        BuiltinError::Failed(format!("parsing time {original:?}: {what} out of range"))
    };
    let (mut year, mut month, mut day, mut year_day) = (0i64, -1i64, -1i64, -1i64);
    let (mut hour, mut minute, mut second, mut nanos) = (0i64, 0i64, 0i64, 0i64);
    let (mut pm, mut am) = (false, false);
    let mut offset: Option<i64> = None;
    let mut zone_name: Option<&str> = None;
    let mut rest_layout = layout;
    let mut value = value;
    loop {
        let (literal, found) = next_chunk(rest_layout);
        value = skip_literal(value, literal).ok_or_else(|| bad(value))?;
        let Some((std, after)) = found else {
            if !value.is_empty() {
                return Err(BuiltinError::Failed(format!(
                    "parsing time {original:?}: extra text: {value:?}"
                )));
            }
            break;
        };
        rest_layout = after;
        let here = value;
        match std {
            Std::Year => {
                let digits = value
                    .get(..2)
                    .filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
                let digits = digits.ok_or_else(|| bad(here))?;
                let two: i64 = digits.parse().map_err(|_| bad(here))?;
                year = if two >= 69 { 1900 + two } else { 2000 + two };
                value = &value[2..];
            }
            Std::LongYear => {
                let digits = value
                    .get(..4)
                    .filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
                year = digits
                    .ok_or_else(|| bad(here))?
                    .parse()
                    .map_err(|_| bad(here))?;
                value = &value[4..];
            }
            Std::Month | Std::LongMonth => {
                let (index, rest) =
                    lookup_name(&MONTHS, value, std == Std::Month).ok_or_else(|| bad(here))?;
                month = i64::try_from(index).unwrap_or(0) + 1;
                value = rest;
            }
            Std::NumMonth | Std::ZeroMonth => {
                let (n, rest) =
                    get_number(value, std == Std::ZeroMonth).ok_or_else(|| bad(here))?;
                if !(1..=12).contains(&n) {
                    return Err(out_of_range("month"));
                }
                month = n;
                value = rest;
            }
            Std::WeekDay | Std::LongWeekDay => {
                let (_, rest) =
                    lookup_name(&WEEKDAYS, value, std == Std::WeekDay).ok_or_else(|| bad(here))?;
                value = rest;
            }
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if std == Std::UnderDay {
                    value = value.strip_prefix(' ').unwrap_or(value);
                }
                let (n, rest) = get_number(value, std == Std::ZeroDay).ok_or_else(|| bad(here))?;
                day = n;
                value = rest;
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                let digits = value.get(..3).map(|d| d.trim_start_matches(' '));
                let digits =
                    digits.filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
                year_day = digits
                    .ok_or_else(|| bad(here))?
                    .parse()
                    .map_err(|_| bad(here))?;
                value = &value[3..];
            }
            Std::Hour => {
                let (n, rest) = get_number(value, false).ok_or_else(|| bad(here))?;
                if n > 23 {
                    return Err(out_of_range("hour"));
                }
                hour = n;
                value = rest;
            }
            Std::Hour12 | Std::ZeroHour12 => {
                let (n, rest) =
                    get_number(value, std == Std::ZeroHour12).ok_or_else(|| bad(here))?;
                if n > 12 {
                    return Err(out_of_range("hour"));
                }
                hour = n;
                value = rest;
            }
            Std::Minute | Std::ZeroMinute => {
                let (n, rest) =
                    get_number(value, std == Std::ZeroMinute).ok_or_else(|| bad(here))?;
                if n > 59 {
                    return Err(out_of_range("minute"));
                }
                minute = n;
                value = rest;
            }
            Std::Second | Std::ZeroSecond => {
                let (n, rest) =
                    get_number(value, std == Std::ZeroSecond).ok_or_else(|| bad(here))?;
                if n > 59 {
                    return Err(out_of_range("second"));
                }
                second = n;
                value = rest;
                // A fraction the layout does not name is read all the same.
                let next_is_fraction =
                    matches!(next_chunk(rest_layout).1, Some((Std::Fraction { .. }, _)))
                        && next_chunk(rest_layout).0.is_empty();
                if !next_is_fraction
                    && value.starts_with(['.', ','])
                    && value.as_bytes().get(1).is_some_and(u8::is_ascii_digit)
                {
                    let len = 1 + value[1..].bytes().take_while(u8::is_ascii_digit).count();
                    nanos = nanoseconds(value, len).ok_or_else(|| bad(value))?;
                    value = &value[len..];
                }
            }
            Std::Pm { upper } => {
                let head = value.get(..2).ok_or_else(|| bad(here))?;
                let (p, a) = if upper { ("PM", "AM") } else { ("pm", "am") };
                if head == p {
                    pm = true;
                } else if head == a {
                    am = true;
                } else {
                    return Err(bad(here));
                }
                value = &value[2..];
            }
            Std::Offset {
                z,
                colon,
                minutes,
                seconds,
            } => {
                if z && let Some(rest) = value.strip_prefix('Z') {
                    offset = Some(0);
                    value = rest;
                    continue;
                }
                let b = value.as_bytes();
                let field =
                    |from: usize| value.get(from..from + 2).and_then(|f| get_number(f, true));
                let (len, h, m, s) = match (colon, minutes, seconds) {
                    (_, false, _) => (3, field(1), Some((0, "")), Some((0, ""))),
                    (true, true, false) if b.get(3) == Some(&b':') => {
                        (6, field(1), field(4), Some((0, "")))
                    }
                    (true, true, true) if b.get(3) == Some(&b':') && b.get(6) == Some(&b':') => {
                        (9, field(1), field(4), field(7))
                    }
                    (false, true, true) => (7, field(1), field(3), field(5)),
                    (false, true, false) => (5, field(1), field(3), Some((0, ""))),
                    _ => return Err(bad(here)),
                };
                let (Some((h, _)), Some((m, _)), Some((s, _))) = (h, m, s) else {
                    return Err(bad(here));
                };
                if h > 24 || m > 60 || s > 60 {
                    return Err(out_of_range("time zone offset"));
                }
                let magnitude = (h * 60 + m) * 60 + s;
                offset = Some(match b.first() {
                    Some(b'+') => magnitude,
                    Some(b'-') => -magnitude,
                    _ => return Err(bad(here)),
                });
                value = &value[len..];
            }
            Std::Tz => {
                if let Some(rest) = value.strip_prefix("UTC") {
                    offset = Some(0);
                    value = rest;
                    continue;
                }
                let len = zone_abbreviation(value).ok_or_else(|| bad(here))?;
                zone_name = Some(&value[..len]);
                value = &value[len..];
            }
            Std::Fraction { digits, trim, .. } => {
                if trim {
                    if value.len() < 2
                        || !value.starts_with(['.', ','])
                        || !value.as_bytes()[1].is_ascii_digit()
                    {
                        continue;
                    }
                    let len = 1 + value[1..].bytes().take_while(u8::is_ascii_digit).count();
                    nanos = nanoseconds(value, len).ok_or_else(|| bad(here))?;
                    value = &value[len..];
                } else {
                    nanos = nanoseconds(value, digits + 1).ok_or_else(|| bad(here))?;
                    value = &value[digits + 1..];
                }
            }
        }
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    let narrow = |n: i64, what: &str| i8::try_from(n).map_err(|_| out_of_range(what));
    let year16 = i16::try_from(year).map_err(|_| out_of_range("year"))?;
    if year_day >= 0 {
        let first = jiff::civil::Date::new(year16, 1, 1).map_err(|_| out_of_range("year"))?;
        let date = first
            .with()
            .day_of_year(i16::try_from(year_day).map_err(|_| out_of_range("day-of-year"))?)
            .build()
            .map_err(|_| out_of_range("day-of-year"))?;
        if (month >= 0 && month != i64::from(date.month()))
            || (day >= 0 && day != i64::from(date.day()))
        {
            return Err(BuiltinError::Failed(format!(
                "parsing time {original:?}: day-of-year does not match the date"
            )));
        }
        month = i64::from(date.month());
        day = i64::from(date.day());
    }
    let month = if month < 0 { 1 } else { month };
    let day = if day < 0 { 1 } else { day };
    let date = jiff::civil::Date::new(year16, narrow(month, "month")?, narrow(day, "day")?)
        .map_err(|_| out_of_range("day"))?;
    let midnight = date
        .to_zoned_datetime(TimeZone::UTC)
        .map_err(|_| out_of_range("year"))?
        .timestamp()
        .as_second();
    let offset = offset.unwrap_or_else(|| {
        // An abbreviation Go cannot place: `GMT+N` is N hours, anything else UTC.
        zone_name
            .and_then(|name| name.strip_prefix("GMT"))
            .and_then(|hours| hours.parse::<i64>().ok())
            .map_or(0, |hours| hours * 3600)
    });
    let seconds =
        i128::from(midnight) + i128::from(hour * 3600 + minute * 60 + second) - i128::from(offset);
    i64::try_from(seconds * NANOS_PER_SECOND + i128::from(nanos)).map_err(|_| {
        BuiltinError::Failed(format!(
            "parsing time {original:?}: time outside of the valid range"
        ))
    })
}

/// Go's `time.Parse(time.RFC3339, text)` as nanoseconds since the epoch: exactly
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, with an upper-case `T` and `Z`, a day that
/// exists in its month, and a second below 60.
pub(crate) fn parse_rfc3339(text: &str) -> Result<i64, BuiltinError> {
    let bad = || {
        BuiltinError::Failed(format!(
            "parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": not an RFC 3339 timestamp"
        ))
    };
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Result<i64, BuiltinError> {
        let part = bytes.get(range).ok_or_else(bad)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(part.iter().fold(0i64, |n, b| n * 10 + i64::from(b - b'0')))
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || bytes[10] != b'T'
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return Err(bad());
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad());
    }
    let mut index = 19;
    let mut fraction = 0i128;
    if matches!(bytes.get(index), Some(b'.' | b',')) {
        index += 1;
        let start = index;
        while bytes.get(index).is_some_and(u8::is_ascii_digit) {
            index += 1;
        }
        if index == start {
            return Err(bad());
        }
        for (position, digit) in bytes[start..index].iter().take(9).enumerate() {
            let scale = 10i128.pow(8 - u32::try_from(position).unwrap_or(8));
            fraction += i128::from(digit - b'0') * scale;
        }
    }
    let offset_seconds = match &bytes[index..] {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let hours = number(index + 1..index + 3)?;
            let minutes = number(index + 4..index + 6)?;
            // Go writes `>` here, not `>=`: "some people do write offsets of 24 hours".
            if hours > 24 || minutes > 60 {
                return Err(bad());
            }
            let sign = if *sign == b'-' { -1 } else { 1 };
            sign * (hours * 3600 + minutes * 60)
        }
        _ => return Err(bad()),
    };
    let narrow = |n: i64| i8::try_from(n).map_err(|_| bad());
    let date = jiff::civil::Date::new(
        i16::try_from(year).map_err(|_| bad())?,
        narrow(month)?,
        narrow(day)?,
    )
    .map_err(|_| bad())?;
    let seconds = date
        .to_zoned_datetime(TimeZone::UTC)
        .map_err(|_| bad())?
        .timestamp()
        .as_second()
        + hour * 3600
        + minute * 60
        + second
        - offset_seconds;
    i64::try_from(i128::from(seconds) * NANOS_PER_SECOND + fraction)
        .map_err(|_| BuiltinError::Failed(format!("{text:?} is outside of the valid time range")))
}

/// Go's `time.ParseDuration`: `[-+]` then numbers with units `ns us µs ms s m h`, e.g. `1h30m`,
/// `1.5s`; integers exactly, fractions as Go computes them.
pub(crate) fn parse_duration(text: &str) -> Result<i64, BuiltinError> {
    let bad = |what: &str| BuiltinError::Failed(format!("time: {what} {text:?}"));
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad("invalid duration"));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut whole: u64 = 0;
        for b in rest[..digits].bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
                .filter(|&n| n <= 1 << 63)
                .ok_or_else(|| bad("invalid duration"))?;
        }
        rest = &rest[digits..];
        let pre = digits > 0;
        let (mut fraction, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(after) = rest.strip_prefix('.') {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            for b in after[..digits].bytes() {
                if overflow {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(b - b'0')))
                    .filter(|&n| n <= 1 << 63)
                {
                    Some(n) => {
                        fraction = n;
                        scale *= 10.0;
                    }
                    None => overflow = true,
                }
            }
            post = digits > 0;
            rest = &after[digits..];
        }
        if !pre && !post {
            return Err(bad("invalid duration"));
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(bad("missing unit in duration"));
        }
        let unit: u64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(BuiltinError::Failed(format!(
                    "time: unknown unit {other:?} in duration {text:?}"
                )));
            }
        };
        rest = &rest[unit_len..];
        let mut value = whole
            .checked_mul(unit)
            .filter(|&n| n <= 1 << 63)
            .ok_or_else(|| bad("invalid duration"))?;
        if fraction > 0 {
            // As Go: a float64 is precise enough for fractions of an hour.
            value = value
                .checked_add((fraction as f64 * (unit as f64 / scale)) as u64)
                .filter(|&n| n <= 1 << 63)
                .ok_or_else(|| bad("invalid duration"))?;
        }
        total = total
            .checked_add(value)
            .filter(|&n| n <= 1 << 63)
            .ok_or_else(|| bad("invalid duration"))?;
    }
    if negative {
        return Ok(0i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| bad("invalid duration"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Outcome {
        let Value::Array(args) = args else {
            unreachable!()
        };
        let builtin = TABLE.iter().find(|b| b.name == name).expect(name);
        (builtin.func)(&args, &mut BuiltinContext::default())
    }

    #[test]
    fn layouts_with_wider_characters_are_read_around_them() {
        assert_eq!(next_chunk("Xé`ééi"), ("Xé`ééi", None));
        assert_eq!(next_chunk("é2006é"), ("é", Some((Std::LongYear, "é"))));
    }

    const LEAP_DAY: i64 = 1_709_214_330_500_000_000; // 2024-02-29T13:45:30.5Z, a Thursday

    #[test]
    fn time_builtins() {
        assert_eq!(parse_rfc3339("2024-02-29T13:45:30.5Z"), Ok(LEAP_DAY));
        assert_eq!(parse_rfc3339("2024-02-29T14:45:30.5+01:00"), Ok(LEAP_DAY));
        assert!(parse_rfc3339("yesterday").is_err());
        assert_eq!(
            call("time.date", json!([LEAP_DAY])),
            Ok(json!([2024, 2, 29]))
        );
        assert_eq!(
            call("time.clock", json!([[LEAP_DAY, "UTC"]])),
            Ok(json!([13, 45, 30]))
        );
        assert_eq!(
            call("time.weekday", json!([LEAP_DAY])),
            Ok(json!("Thursday"))
        );
        // Go normalizes 2025-02-29 to 2025-03-01.
        let next_year = call("time.add_date", json!([LEAP_DAY, 1, 0, 0])).expect("add");
        assert_eq!(
            call("time.date", json!([next_year])),
            Ok(json!([2025, 3, 1]))
        );
        assert_eq!(
            call("time.format", json!([LEAP_DAY])),
            Ok(json!("2024-02-29T13:45:30.5Z"))
        );
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_duration("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_duration("300ms"), Ok(300_000_000));
        assert!(parse_duration("3 days").is_err());
        let mut context = BuiltinContext::default();
        let first = context.now_ns();
        assert_eq!(
            context.now_ns(),
            first,
            "now is fixed within one evaluation"
        );
    }

    /// Each line: what OPA v1.20 answers (Go's `time.Parse(time.RFC3339, …)`).
    #[test]
    fn rfc3339_parsing_is_as_strict_as_go() {
        for refused in [
            "2024-02-29t13:45:30Z",
            "2024-02-29 13:45:30Z",
            "2024-02-31T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-02-29T23:59:60Z",
            "2024-02-29T24:00:00Z",
            "2024-02-29T13:45:30z",
            "2024-02-29T13:45:30+25:00",
            "2024-02-29T13:45:30.Z",
            "2024-02-29T13:45:30+0100",
            "+2024-02-29T13:45:30Z",
        ] {
            assert!(parse_rfc3339(refused).is_err(), "{refused}");
        }
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:00.123456789123Z"),
            Ok(123_456_789)
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Ok(-1_000_000_000));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00,5Z"), Ok(500_000_000));
        assert!(
            parse_rfc3339("9999-12-31T23:59:59Z").is_err(),
            "past int64 nanoseconds"
        );
    }

    /// Go's `time.ParseDuration`: integers exactly.
    #[test]
    fn durations_are_exact() {
        assert_eq!(
            parse_duration("9007199254740993ns"),
            Ok(9_007_199_254_740_993)
        );
        assert_eq!(parse_duration("1.000000001s"), Ok(1_000_000_001));
        assert_eq!(parse_duration("2562047h47m16.854775807s"), Ok(i64::MAX));
        assert_eq!(parse_duration("-2562047h47m16.854775808s"), Ok(i64::MIN));
        assert!(parse_duration("2562047h47m16.854775808s").is_err());
        assert_eq!(parse_duration(".5s"), Ok(500_000_000));
        assert_eq!(parse_duration("1.s"), Ok(1_000_000_000));
        assert_eq!(parse_duration("1µs1μs1us"), Ok(3_000));
        assert_eq!(parse_duration("+0"), Ok(0));
        for refused in ["", "1", ".s", "1d", "1h-1m", "-", "99999999999999999999ns"] {
            assert!(parse_duration(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn zones_and_layouts_are_gos() {
        // 2024-07-01T12:00:00Z: summer time in Paris (+02:00), winter in Sydney (+10:00).
        let noon = 1_719_835_200_000_000_000i64;
        assert_eq!(
            call("time.clock", json!([[noon, "Europe/Paris"]])),
            Ok(json!([14, 0, 0]))
        );
        assert_eq!(
            call(
                "time.date",
                json!([[noon - 13 * 3_600_000_000_000, "Pacific/Kiritimati"]])
            ),
            Ok(json!([2024, 7, 1]))
        );
        assert_eq!(
            call(
                "time.weekday",
                json!([[noon + 12 * 3_600_000_000_000, "Australia/Sydney"]])
            ),
            Ok(json!("Tuesday"))
        );
        assert!(call("time.date", json!([[noon, "Mars/Olympus"]])).is_err());
        let format = |layout: &str| {
            call(
                "time.format",
                json!([[noon + 5_000_000, "Europe/Paris", layout]]),
            )
        };
        assert_eq!(format("2006-01-02"), Ok(json!("2024-07-01")));
        assert_eq!(format("RFC3339"), Ok(json!("2024-07-01T14:00:00+02:00")));
        assert_eq!(
            format("RFC3339Nano"),
            Ok(json!("2024-07-01T14:00:00.005+02:00"))
        );
        assert_eq!(
            format("RFC1123"),
            Ok(json!("Mon, 01 Jul 2024 14:00:00 CEST"))
        );
        assert_eq!(format("Kitchen"), Ok(json!("2:00PM")));
        assert_eq!(
            format("Jan _2 06 3:4:5.000 pm -0700 Z07"),
            Ok(json!("Jul  1 24 2:0:0.005 pm +0200 +02"))
        );
        assert_eq!(
            format("Monday January 002 __2"),
            Ok(json!("Monday July 183 183"))
        );
        assert_eq!(
            call(
                "time.format",
                json!([[noon, "UTC", "2006-01-02T15:04:05Z07:00 MST"]])
            ),
            Ok(json!("2024-07-01T12:00:00Z UTC"))
        );
    }

    /// Go's `time.Parse`, as OPA's `time.parse_ns` calls it.
    #[test]
    fn go_layouts_parse_as_go_does() {
        let parse = |layout: &str, value: &str| call("time.parse_ns", json!([layout, value]));
        assert_eq!(
            parse("2006-01-02", "1970-01-02"),
            Ok(json!(86_400_000_000_000i64))
        );
        assert_eq!(
            parse("2006-01-02T15:04:05Z07:00", "2024-02-29T14:45:30.5+01:00"),
            Ok(json!(LEAP_DAY))
        );
        assert_eq!(
            parse(
                "Mon Jan _2 15:04:05 MST 2006",
                "Thu Feb 29 13:45:30 UTC 2024"
            ),
            Ok(json!(LEAP_DAY - 500_000_000))
        );
        assert_eq!(
            parse("02 Jan 06 3:04PM -0700", "29 feb 24 1:45PM +0000"),
            Ok(json!(LEAP_DAY - 30_500_000_000))
        );
        assert_eq!(
            parse("2006-01-02 15:04:05.000", "2024-02-29 13:45:30.500"),
            Ok(json!(LEAP_DAY))
        );
        assert_eq!(
            parse("2006 002", "1970 002"),
            Ok(json!(86_400_000_000_000i64))
        );
        assert!(
            parse("15:04 MST", "00:00 GMT+1").is_err(),
            "year 0 is out of range"
        );
        assert!(parse("2006-01-02", "2024-02-30").is_err());
        assert!(parse("2006-01-02", "2024-02-29x").is_err());
        assert!(parse("2006-01-02", "24-02-29").is_err());
        assert!(parse("15:04", "25:00").is_err());
    }

    /// The examples of OPA's documentation, and borrowing across a month end.
    #[test]
    fn differences_answer_as_opa_does() {
        let at = |text: &str| parse_rfc3339(text).expect("timestamp");
        assert_eq!(
            call(
                "time.diff",
                json!([at("2021-11-07T09:42:51Z"), at("1995-12-07T10:26:52Z")])
            ),
            Ok(json!([25, 10, 30, 23, 15, 59]))
        );
        assert_eq!(
            call(
                "time.diff",
                json!([at("2024-01-31T00:00:00Z"), at("2024-03-01T00:00:00Z")])
            ),
            Ok(json!([0, 1, 1, 0, 0, 0]))
        );
        assert_eq!(
            call("time.diff", json!([0, 0])),
            Ok(json!([0, 0, 0, 0, 0, 0]))
        );
    }

    #[test]
    fn huge_date_arithmetic_is_an_error_not_a_panic() {
        for (years, months, days) in [
            (i64::MAX, 0, 0),
            (0, i64::MAX, 0),
            (0, 0, i64::MAX),
            (i64::MIN, i64::MIN, i64::MIN),
            (300, 0, 0),
        ] {
            let result = call("time.add_date", json!([0, years, months, days]));
            assert!(
                matches!(result, Err(BuiltinError::Failed(_))),
                "{years} {months} {days}: {result:?}"
            );
        }
        assert!(call("time.add_date", json!([i64::MAX, 0, 0, 1])).is_err());
        assert_eq!(
            call("time.add_date", json!([0, 0, 13, -1])),
            Ok(json!(34_128_000_000_000_000i64))
        );
    }
}
