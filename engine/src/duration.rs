//! Durations as people write them: `500ms`, `5m`, `24h`, `1m30s`.

use std::time::Duration;

/// Parses a duration: one or more `<whole number><unit>` parts, units `ms`, `s`, `m`, `h`,
/// `d` (`us` too). `1m30s` is ninety seconds.
///
/// ```
/// use std::time::Duration;
/// use portcullis_engine::duration::parse_duration;
///
/// assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(parse_duration("500").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("an empty duration".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!(
                "{text:?} is not a duration: expected a number at {rest:?}"
            ));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?} is not a duration: the number is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "us" | "µs" => Duration::from_micros(number),
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "d" => Duration::from_secs(number.saturating_mul(86_400)),
            "" => {
                return Err(format!(
                    "{text:?} has no unit: write it as {number}ms, {number}s, {number}m or {number}h"
                ));
            }
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use ms, s, m, h or d)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("99999999999999999999999s").is_err());
    }
}
