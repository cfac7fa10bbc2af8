//! RFC 3339 timestamps without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `time` as an RFC 3339 UTC timestamp with millisecond precision
/// (`2026-11-22T05:30:17.123Z`). Times before 1970 are clamped to the epoch.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
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

#[cfg(test)]
mod tests {
    use super::*;
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
