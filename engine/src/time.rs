//! RFC 3339 timestamps without a date library.

use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `time` as an RFC 3339 UTC timestamp with millisecond precision
/// (`2026-11-22T05:30:17.123Z`). Times before 1970 are clamped to the epoch.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    Rfc3339::of(time).as_str().to_owned()
}

/// An RFC 3339 UTC timestamp with millisecond precision, written into a buffer of its own:
/// an audit record writes its time without allocating or going through `fmt`.
pub(crate) struct Rfc3339([u8; 24]);

impl Rfc3339 {
    /// `time`, clamped to the epoch when earlier. Years past 9999 keep their last four digits.
    pub(crate) fn of(time: SystemTime) -> Rfc3339 {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let seconds = since_epoch.as_secs();
        let second_of_day = seconds % 86_400;
        let (year, month, day) = civil_from_days(seconds / 86_400);
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut value: u64| {
            for slot in text[at..at + width].iter_mut().rev() {
                // A digit: `value % 10` is below 10.
                *slot = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, second_of_day / 3600);
        put(14, 2, second_of_day % 3600 / 60);
        put(17, 2, second_of_day % 60);
        put(20, 3, u64::from(since_epoch.subsec_millis()));
        Rfc3339(text)
    }

    /// The timestamp's text.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII digits and punctuation are ever written into the buffer.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// Writes the UTC date and time `seconds` after the Unix epoch, to the second, as RFC 3339
/// writes them: `2026-11-22T05:30:17` (no fraction, no offset: the caller adds them).
///
/// ```
/// let mut text = String::new();
/// portcullis_engine::time::write_utc_seconds(&mut text, 951_782_400).unwrap();
/// assert_eq!(text, "2000-02-29T00:00:00");
/// ```
pub fn write_utc_seconds(out: &mut impl Write, seconds: u64) -> fmt::Result {
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(seconds / 86_400);
    write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date `days` days after 1970-01-01.
///
/// Works in 400-year eras of 146,097 days, counted from 0000-03-01 so that the leap day is
/// the last day of a year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the origin from 1970-01-01 to 0000-03-01.
    let days = days + 719_468;
    let era = days / 146_097;
    let day_of_era = days % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Whether `text` is an RFC 3339 date-time (`2026-11-22T05:30:17.123Z`,
/// `2026-11-22T06:30:17+01:00`), as the JSON Schema `date-time` format asks: a real calendar
/// date, hours 00-23, minutes 00-59, seconds 00-60 (a leap second), optional fractional
/// seconds, and `Z` or a `+hh:mm`/`-hh:mm` offset. `T` and `Z` may be lowercase.
pub(crate) fn is_rfc3339(text: &str) -> bool {
    let bytes = text.as_bytes();
    let number = |from: usize, len: usize| -> Option<u32> {
        let digits = bytes.get(from..from + len)?;
        digits.iter().try_fold(0u32, |value, byte| {
            byte.is_ascii_digit()
                .then(|| value * 10 + u32::from(byte - b'0'))
        })
    };
    let at = |index: usize, expected: &[u8]| bytes.get(index).is_some_and(|b| expected.contains(b));
    let (Some(year), Some(month), Some(day)) = (number(0, 4), number(5, 2), number(8, 2)) else {
        return false;
    };
    let (Some(hour), Some(minute), Some(second)) = (number(11, 2), number(14, 2), number(17, 2))
    else {
        return false;
    };
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt") && at(13, b":") && at(16, b":")) {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if day == 0 || day > days || hour > 23 || minute > 59 || second > 60 {
        return false;
    }
    let mut rest = 19;
    if at(rest, b".") {
        let digits = bytes[rest + 1..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        if digits == 0 {
            return false;
        }
        rest += 1 + digits;
    }
    match bytes.get(rest) {
        Some(b'Z' | b'z') => rest + 1 == bytes.len(),
        Some(b'+' | b'-') => {
            let (Some(hours), Some(minutes)) = (number(rest + 1, 2), number(rest + 4, 2)) else {
                return false;
            };
            at(rest + 3, b":") && hours <= 23 && minutes <= 59 && rest + 6 == bytes.len()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_date_times_are_told_from_other_text() {
        for valid in [
            "2026-11-22T05:30:17Z",
            "2026-11-22T05:30:17.123Z",
            "2024-02-29T23:59:60+00:00",
            "2026-01-02t03:04:05.5-11:30",
            "2026-12-31T23:59:59z",
        ] {
            assert!(is_rfc3339(valid), "{valid}");
        }
        for invalid in [
            "",
            "yesterday",
            "2026-11-22",
            "2026-11-22 05:30:17Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T05:60:00Z",
            "2026-11-22T05:30:61Z",
            "2026-11-22T05:30:17",
            "2026-11-22T05:30:17.Z",
            "2026-11-22T05:30:17+0100",
            "2026-11-22T05:30:17+24:00",
            "2026-11-22T05:30:17Z!",
            "２026-11-22T05:30:17Z",
        ] {
            assert!(!is_rfc3339(invalid), "{invalid}");
        }
        assert!(is_rfc3339(&rfc3339(std::time::SystemTime::now())));
    }
    use std::time::Duration;

    fn at(seconds: u64, millis: u64) -> String {
        rfc3339(UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis))
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_709_164_799, 999), "2024-02-28T23:59:59.999Z");
        assert_eq!(at(1_709_251_200, 0), "2024-03-01T00:00:00.000Z");
        assert_eq!(at(1_795_325_417, 123), "2026-11-22T05:30:17.123Z");
        assert_eq!(at(4_102_444_800, 0), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn the_buffer_writes_what_the_formatter_writes() {
        for day in (0..200_000u64).step_by(7) {
            let seconds = day * 86_400 + day * 7_919 % 86_400;
            let mut expected = String::new();
            write_utc_seconds(&mut expected, seconds).unwrap();
            let millis = day % 1_000;
            expected.push_str(&format!(".{millis:03}Z"));
            assert_eq!(at(seconds, millis), expected);
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        let mut previous = civil_from_days(0);
        for day in 1..200_000 {
            let next = civil_from_days(day);
            let (year, month, date) = previous;
            let advanced = next == (year, month, date + 1)
                || (next == (year, month + 1, 1) && date >= 28)
                || (next == (year + 1, 1, 1) && month == 12 && date == 31);
            assert!(advanced, "{previous:?} -> {next:?}");
            previous = next;
        }
    }
}
