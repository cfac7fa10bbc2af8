//! Numbers and units: `numbers.range_step`, `units.parse`, `units.parse_bytes`.

use serde_json::Value;

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, VALUE_COST, integer, string};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "numbers.range_step",
        func: range_step,
    },
    HostBuiltin {
        name: "units.parse",
        func: |args, _| units(string(args, 0)?, false),
    },
    HostBuiltin {
        name: "units.parse_bytes",
        func: |args, _| units(string(args, 0)?, true),
    },
];

/// From `a` to `b` (both included) by `step`, downwards when `b < a`.
fn range_step(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let (a, b, step) = (integer(args, 0)?, integer(args, 1)?, integer(args, 2)?);
    if step <= 0 {
        return Err("numbers.range_step: step must be a positive number above zero".into());
    }
    let span = i128::from(b) - i128::from(a);
    let count = span.unsigned_abs() / u128::from(step.unsigned_abs()) + 1;
    context.charge(
        usize::try_from(count.saturating_mul(VALUE_COST as u128)).unwrap_or(usize::MAX),
        "numbers.range_step's numbers",
    )?;
    let direction = if span < 0 { -1 } else { 1 };
    let mut numbers = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut n = i128::from(a);
    for _ in 0..count {
        context.check_time()?;
        numbers.push(Value::from(i64::try_from(n).unwrap_or(i64::MAX)));
        n += direction * i128::from(step);
    }
    Ok(Value::from(numbers))
}

/// A decimal number exactly: `mantissa × 10^exponent`.
fn decimal(text: &str) -> Option<(i128, i32)> {
    let (number, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    if !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 36 {
        return None;
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let scale = i32::try_from(fraction.len()).ok()?;
    Some((mantissa, exponent.checked_sub(scale)?))
}

/// OPA's `units.parse` (SI and binary suffixes, `m` for milli, case-sensitive past the first
/// letter kept) and `units.parse_bytes` (suffixes in any case, optionally ending in `b`, an
/// integer result).
fn units(text: &str, bytes: bool) -> Outcome {
    let name = if bytes {
        "units.parse_bytes"
    } else {
        "units.parse"
    };
    let text = text.replace('"', "");
    if text.contains(' ') {
        return Err(BuiltinError::Failed(format!(
            "{name}: spaces not allowed in resource strings"
        )));
    }
    let split = number_end(&text);
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(BuiltinError::Failed(format!("{name}: no amount provided")));
    }
    let (mantissa, exponent) = decimal(number).ok_or_else(|| {
        BuiltinError::Failed(format!("{name}: could not parse amount to a number"))
    })?;
    let (decimal_power, binary_power): (i32, u32) = if bytes {
        match unit.to_ascii_lowercase().as_str() {
            "" | "b" => (0, 0),
            "k" | "kb" => (3, 0),
            "ki" | "kib" => (0, 10),
            "m" | "mb" => (6, 0),
            "mi" | "mib" => (0, 20),
            "g" | "gb" => (9, 0),
            "gi" | "gib" => (0, 30),
            "t" | "tb" => (12, 0),
            "ti" | "tib" => (0, 40),
            "p" | "pb" => (15, 0),
            "pi" | "pib" => (0, 50),
            "e" | "eb" => (18, 0),
            "ei" | "eib" => (0, 60),
            _ => {
                return Err(BuiltinError::Failed(format!(
                    "{name}: byte unit {unit} not recognized"
                )));
            }
        }
    } else {
        let unit = match unit.char_indices().nth(1) {
            Some((at, _)) => format!("{}{}", &unit[..at], unit[at..].to_lowercase()),
            None => unit.to_owned(),
        };
        match unit.as_str() {
            "m" => (-3, 0),
            "" => (0, 0),
            "k" | "K" => (3, 0),
            "ki" | "Ki" => (0, 10),
            "M" => (6, 0),
            "Mi" => (0, 20),
            "G" => (9, 0),
            "Gi" => (0, 30),
            "T" => (12, 0),
            "Ti" => (0, 40),
            "P" => (15, 0),
            "Pi" => (0, 50),
            "E" => (18, 0),
            "Ei" => (0, 60),
            _ => {
                return Err(BuiltinError::Failed(format!(
                    "{name}: unit {unit} not recognized"
                )));
            }
        }
    };
    let too_large = || BuiltinError::Failed(format!("{name}: {text} is out of range"));
    let mut numerator = mantissa
        .checked_mul(1i128.checked_shl(binary_power).ok_or_else(too_large)?)
        .ok_or_else(too_large)?;
    let mut denominator: i128 = 1;
    let power = exponent + decimal_power;
    if power >= 0 {
        numerator = 10i128
            .checked_pow(u32::try_from(power).map_err(|_| too_large())?)
            .and_then(|scale| numerator.checked_mul(scale))
            .ok_or_else(too_large)?;
    } else {
        denominator = 10i128
            .checked_pow(power.unsigned_abs())
            .ok_or_else(too_large)?;
    }
    if bytes || numerator % denominator == 0 {
        let whole = numerator / denominator;
        return i64::try_from(whole)
            .map(Value::from)
            .or_else(|_| u64::try_from(whole).map(Value::from))
            .map_err(|_| too_large());
    }
    Ok(Value::from(numerator as f64 / denominator as f64))
}

/// Where the number of a resource string ends (digits, `.`, and an exponent when digits follow).
fn number_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_digit() || b == b'.' || b == b'+' || b == b'-' {
            i += 1;
            continue;
        }
        if matches!(b, b'e' | b'E') {
            match bytes.get(i + 1) {
                Some(next) if next.is_ascii_digit() => i += 1,
                Some(b'+' | b'-') => i += 2,
                _ => return i,
            }
            continue;
        }
        return i;
    }
    i
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

    /// The examples of OPA's documentation.
    #[test]
    fn units_answer_as_opa_does() {
        let parse = |text: &str| call("units.parse", json!([text]));
        assert_eq!(parse("10K"), Ok(json!(10_000)));
        assert_eq!(parse("1Ki"), Ok(json!(1024)));
        assert_eq!(parse("1.5M"), Ok(json!(1_500_000)));
        assert_eq!(parse("200m"), Ok(json!(0.2)));
        assert_eq!(parse("1KI"), Ok(json!(1024)));
        assert_eq!(parse("1e3"), Ok(json!(1000)));
        assert_eq!(parse("2E"), Ok(json!(2_000_000_000_000_000_000u64)));
        assert!(parse("1 K").is_err());
        assert!(parse("K").is_err());
        assert!(parse("1X").is_err());
        let bytes = |text: &str| call("units.parse_bytes", json!([text]));
        assert_eq!(bytes("1KB"), Ok(json!(1000)));
        assert_eq!(bytes("1kib"), Ok(json!(1024)));
        assert_eq!(bytes("2MiB"), Ok(json!(2 * 1024 * 1024)));
        assert_eq!(bytes("1.5GB"), Ok(json!(1_500_000_000)));
        assert_eq!(bytes("100"), Ok(json!(100)));
        assert_eq!(bytes("1.1K"), Ok(json!(1100)));
        assert!(bytes("1 KB").is_err());
        assert!(bytes("1XB").is_err());
        assert!(bytes("99999999999EB").is_err());
    }

    #[test]
    fn ranges_step_both_ways_and_are_bounded() {
        assert_eq!(
            call("numbers.range_step", json!([0, 10, 3])),
            Ok(json!([0, 3, 6, 9]))
        );
        assert_eq!(
            call("numbers.range_step", json!([10, 0, 4])),
            Ok(json!([10, 6, 2]))
        );
        assert_eq!(call("numbers.range_step", json!([1, 1, 5])), Ok(json!([1])));
        assert!(call("numbers.range_step", json!([0, 10, 0])).is_err());
        assert!(call("numbers.range_step", json!([0, 10, -1])).is_err());
        let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
        context.begin_call();
        let error = range_step(&[json!(i64::MIN), json!(i64::MAX), json!(1)], &mut context);
        assert!(
            matches!(error, Err(BuiltinError::MemoryLimit(_))),
            "{error:?}"
        );
    }
}
