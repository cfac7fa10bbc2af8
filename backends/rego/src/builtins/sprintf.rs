//! `sprintf`: Go's `fmt.Sprintf`, as OPA calls it.
//!
//! OPA hands Go's formatter each element of the argument array as a Go value: an integer as an
//! `int64` (a larger one as a `*big.Int`), a number with a fraction or an exponent as a
//! `float64`, a string as a `string`, and anything else (a boolean, `null`, an array, an object)
//! as its Rego text, a `string` too. So `%d` of a boolean is `%!d(string=true)`, `%s` of 5 is
//! `%!s(int64=5)` and `%t` never formats anything but errors. Widths and precisions past a
//! million make Go give up (`%!(NOVERB)`), which bounds what one verb can write; what the whole
//! call writes is charged against the memory limit.

use std::fmt::Write as _;

use serde_json::Value;

use super::{BuiltinContext, BuiltinError, HostBuiltin, Outcome, arg, string, type_name};

pub(super) const TABLE: &[HostBuiltin] = &[HostBuiltin {
    name: "sprintf",
    func: sprintf,
}];

fn sprintf(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let format = string(args, 0)?;
    let values = match arg(args, 1)? {
        Value::Array(values) => values.as_slice(),
        other => {
            return Err(BuiltinError::Failed(format!(
                "operand 2 must be an array, got {}",
                type_name(other)
            )));
        }
    };
    let operands: Vec<GoValue> = values.iter().map(GoValue::of).collect();
    go_format(format, &operands, context).map(Value::from)
}

/// An operand as Go's formatter sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GoValue {
    /// An `int64`.
    Int(i64),
    /// A `*big.Int` (an integer past `int64`).
    Big(u64),
    /// A `float64`.
    Float(f64),
    /// A `string`.
    Str(String),
}

impl GoValue {
    /// What OPA hands Go's formatter for `value`.
    pub(crate) fn of(value: &Value) -> GoValue {
        match value {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    GoValue::Int(i)
                } else if let Some(u) = n.as_u64() {
                    GoValue::Big(u)
                } else {
                    GoValue::Float(n.as_f64().unwrap_or(0.0))
                }
            }
            Value::String(s) => GoValue::Str(s.clone()),
            other => GoValue::Str(rego_string(other)),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            GoValue::Int(_) => "int64",
            GoValue::Big(_) => "*big.Int",
            GoValue::Float(_) => "float64",
            GoValue::Str(_) => "string",
        }
    }
}

/// The flags, width and precision of one verb.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    sharp: bool,
    zero: bool,
    plus: bool,
    minus: bool,
    space: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

/// Go's `parsenum`: digits at `i`; a number past a million is "crazy long" and consumes the rest.
fn parse_number(format: &[u8], mut i: usize) -> (Option<usize>, usize) {
    let mut number: Option<usize> = None;
    while let Some(&byte) = format.get(i) {
        if !byte.is_ascii_digit() {
            break;
        }
        let so_far = number.unwrap_or(0);
        if so_far > 1_000_000 {
            return (None, format.len());
        }
        number = Some(so_far * 10 + usize::from(byte - b'0'));
        i += 1;
    }
    (number, i)
}

/// Go's `argNumber`: an explicit `[n]` operand index at `i`.
fn arg_index(format: &[u8], i: usize, count: usize) -> Option<(Option<usize>, usize)> {
    if format.get(i) != Some(&b'[') {
        return None;
    }
    let close = format[i..].iter().position(|&b| b == b']')? + i;
    let (number, end) = parse_number(format, i + 1);
    match number {
        Some(n) if end == close && n >= 1 && n <= count => Some((Some(n - 1), close + 1)),
        _ => Some((None, close + 1)),
    }
}

/// Go's `intFromArg`: a `*` width or precision from an integer operand of at most a million.
fn star_operand(operands: &[GoValue], arg_num: &mut usize) -> Option<i64> {
    let operand = operands.get(*arg_num)?;
    *arg_num += 1;
    match operand {
        GoValue::Int(n) if n.unsigned_abs() <= 1_000_000 => Some(*n),
        _ => None,
    }
}

/// Go's `fmt.Sprintf` of `format` with `operands`, charged against `context`'s memory limit.
pub(crate) fn go_format(
    format: &str,
    operands: &[GoValue],
    context: &mut BuiltinContext,
) -> Result<String, BuiltinError> {
    let bytes = format.as_bytes();
    let end = bytes.len();
    let mut out = String::with_capacity(format.len() + 16);
    let mut arg_num = 0usize;
    let mut reordered = false;
    let mut i = 0;
    while i < end {
        let start = i;
        while i < end && bytes[i] != b'%' {
            i += 1;
        }
        out.push_str(&format[start..i]);
        if i >= end {
            break;
        }
        i += 1;
        let mut flags = Flags::default();
        while i < end {
            match bytes[i] {
                b'#' => flags.sharp = true,
                b'0' => flags.zero = !flags.minus,
                b'+' => flags.plus = true,
                b'-' => {
                    flags.minus = true;
                    flags.zero = false;
                }
                b' ' => flags.space = true,
                _ => break,
            }
            i += 1;
        }
        let mut good_arg = true;
        let mut after_index = false;
        if let Some((index, next)) = arg_index(bytes, i, operands.len()) {
            reordered = true;
            i = next;
            match index {
                Some(index) => {
                    arg_num = index;
                    after_index = true;
                }
                None => good_arg = false,
            }
        }
        if bytes.get(i) == Some(&b'*') {
            i += 1;
            match star_operand(operands, &mut arg_num) {
                Some(width) => {
                    flags.width = usize::try_from(width.unsigned_abs()).ok();
                    if width < 0 {
                        flags.minus = true;
                        flags.zero = false;
                    }
                }
                None => out.push_str("%!(BADWIDTH)"),
            }
            after_index = false;
        } else {
            let (width, next) = parse_number(bytes, i);
            i = next;
            flags.width = width;
            if after_index && width.is_some() {
                good_arg = false;
            }
        }
        if i + 1 < end && bytes[i] == b'.' {
            i += 1;
            if after_index {
                good_arg = false;
            }
            if let Some((index, next)) = arg_index(bytes, i, operands.len()) {
                reordered = true;
                i = next;
                match index {
                    Some(index) => {
                        arg_num = index;
                        after_index = true;
                    }
                    None => good_arg = false,
                }
            }
            if bytes.get(i) == Some(&b'*') {
                i += 1;
                match star_operand(operands, &mut arg_num) {
                    // A negative precision is no precision.
                    Some(precision) => flags.precision = usize::try_from(precision).ok(),
                    None => out.push_str("%!(BADPREC)"),
                }
                after_index = false;
            } else {
                let (precision, next) = parse_number(bytes, i);
                i = next;
                flags.precision = Some(precision.unwrap_or(0));
            }
        }
        if !after_index && let Some((index, next)) = arg_index(bytes, i, operands.len()) {
            reordered = true;
            i = next;
            match index {
                Some(index) => arg_num = index,
                None => good_arg = false,
            }
        }
        let Some(verb) = format.get(i..).and_then(|rest| rest.chars().next()) else {
            out.push_str("%!(NOVERB)");
            break;
        };
        i += verb.len_utf8();
        // What one verb can write: its operand, its width and its precision (each at most
        // about ten million), and a little more for signs, prefixes and exponents.
        let operand_len = operands.get(arg_num).map_or(0, |operand| match operand {
            GoValue::Str(s) => s.len().saturating_mul(6),
            _ => 32,
        });
        context.charge(
            operand_len
                .saturating_add(flags.width.unwrap_or(0))
                .saturating_add(flags.precision.unwrap_or(0))
                .saturating_add(340),
            "sprintf's output",
        )?;
        match verb {
            '%' => out.push('%'),
            _ if !good_arg => {
                let _ = write!(out, "%!{verb}(BADINDEX)");
            }
            _ if arg_num >= operands.len() => {
                let _ = write!(out, "%!{verb}(MISSING)");
            }
            _ => {
                let mut flags = flags;
                if verb == 'v' {
                    flags.sharp = false;
                    flags.plus = false;
                }
                print_arg(&mut out, &operands[arg_num], verb, flags);
                arg_num += 1;
            }
        }
    }
    if !reordered && arg_num < operands.len() {
        out.push_str("%!(EXTRA ");
        for (index, operand) in operands[arg_num..].iter().enumerate() {
            if index > 0 {
                out.push_str(", ");
            }
            out.push_str(operand.type_name());
            out.push('=');
            print_arg(&mut out, operand, 'v', Flags::default());
        }
        out.push(')');
    }
    Ok(out)
}

/// Go's `printArg` for one operand and verb.
fn print_arg(out: &mut String, operand: &GoValue, verb: char, flags: Flags) {
    match operand {
        GoValue::Int(i) => match verb {
            'v' | 'd' => integer(out, i.unsigned_abs(), *i < 0, 10, verb, flags),
            'b' => integer(out, i.unsigned_abs(), *i < 0, 2, verb, flags),
            'o' | 'O' => integer(out, i.unsigned_abs(), *i < 0, 8, verb, flags),
            'x' | 'X' => integer(out, i.unsigned_abs(), *i < 0, 16, verb, flags),
            'c' => pad(out, &rune_of(*i).to_string(), flags),
            'q' => pad(out, &quote_rune(rune_of(*i)), flags),
            'U' => {
                let mut text = format!("U+{:04X}", i.unsigned_abs());
                if flags.sharp
                    && let Some(c) = u32::try_from(*i).ok().and_then(char::from_u32)
                    && !needs_escape(c)
                {
                    let _ = write!(text, " '{c}'");
                }
                pad(out, &text, flags);
            }
            _ => bad_verb(out, operand, verb, flags),
        },
        GoValue::Big(u) => match verb {
            'v' | 'd' | 's' => integer(out, *u, false, 10, 'd', flags),
            'b' => integer(out, *u, false, 2, verb, flags),
            'o' | 'O' => integer(out, *u, false, 8, verb, flags),
            'x' | 'X' => integer(out, *u, false, 16, verb, flags),
            _ => {
                let _ = write!(out, "%!{verb}(big.Int={u})");
            }
        },
        GoValue::Float(f) => match verb {
            'v' => float(out, *f, 'g', None, flags),
            'b' | 'g' | 'G' | 'x' | 'X' => float(out, *f, verb, None, flags),
            'f' | 'F' | 'e' | 'E' => float(out, *f, verb, Some(6), flags),
            _ => bad_verb(out, operand, verb, flags),
        },
        GoValue::Str(s) => match verb {
            'v' | 's' => pad(out, truncate(s, flags.precision), flags),
            'q' => {
                let s = truncate(s, flags.precision);
                let quoted = if flags.sharp && can_backquote(s) {
                    format!("`{s}`")
                } else {
                    quote(s, '"', flags.plus)
                };
                pad(out, &quoted, flags);
            }
            'x' | 'X' => {
                let s = truncate_bytes(s, flags.precision);
                pad(out, &hex_bytes(s, verb == 'X', flags), flags);
            }
            _ => bad_verb(out, operand, verb, flags),
        },
    }
}

/// Go's `badVerb`: `%!d(string=x)`, the operand printed with `%v` and the verb's flags.
fn bad_verb(out: &mut String, operand: &GoValue, verb: char, flags: Flags) {
    let _ = write!(out, "%!{verb}({}=", operand.type_name());
    let mut flags = flags;
    flags.sharp = false;
    flags.plus = false;
    print_arg(out, operand, 'v', flags);
    out.push(')');
}

fn rune_of(i: i64) -> char {
    u32::try_from(i)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{FFFD}')
}

fn truncate(s: &str, precision: Option<usize>) -> &str {
    match precision {
        Some(precision) => match s.char_indices().nth(precision) {
            Some((at, _)) => &s[..at],
            None => s,
        },
        None => s,
    }
}

fn truncate_bytes(s: &str, precision: Option<usize>) -> &[u8] {
    let bytes = s.as_bytes();
    match precision {
        Some(precision) if precision < bytes.len() => &bytes[..precision],
        _ => bytes,
    }
}

/// Go's `fmtSbx`: the bytes in hexadecimal, with `#` (a `0x` prefix) and ` ` (spaced) flags.
fn hex_bytes(bytes: &[u8], upper: bool, flags: Flags) -> String {
    let mut text = String::with_capacity(bytes.len() * 3);
    let prefix = if upper { "0X" } else { "0x" };
    for (index, byte) in bytes.iter().enumerate() {
        if flags.space && index > 0 {
            text.push(' ');
        }
        if flags.sharp && (flags.space || index == 0) {
            text.push_str(prefix);
        }
        let _ = if upper {
            write!(text, "{byte:02X}")
        } else {
            write!(text, "{byte:02x}")
        };
    }
    text
}

/// Go's `fmt.pad`: `text` padded to the width, with spaces, or zeros on the left with `0`.
fn pad(out: &mut String, text: &str, flags: Flags) {
    let len = text.chars().count();
    let padding = flags.width.map_or(0, |width| width.saturating_sub(len));
    let fill = if flags.zero && !flags.minus { '0' } else { ' ' };
    if flags.minus {
        out.push_str(text);
        out.extend(std::iter::repeat_n(fill, padding));
    } else {
        out.extend(std::iter::repeat_n(fill, padding));
        out.push_str(text);
    }
}

/// Go's `fmtInteger`.
fn integer(out: &mut String, magnitude: u64, negative: bool, base: u32, verb: char, flags: Flags) {
    let mut zeros = 0usize;
    if let Some(precision) = flags.precision {
        if precision == 0 && magnitude == 0 {
            let mut flags = flags;
            flags.zero = false;
            pad(out, "", flags);
            return;
        }
        zeros = precision;
    } else if flags.zero
        && !flags.minus
        && let Some(width) = flags.width
    {
        zeros = width;
        if negative || flags.plus || flags.space {
            zeros = zeros.saturating_sub(1);
        }
    }
    let digits = match base {
        2 => format!("{magnitude:b}"),
        8 => format!("{magnitude:o}"),
        16 if verb == 'X' => format!("{magnitude:X}"),
        16 => format!("{magnitude:x}"),
        _ => magnitude.to_string(),
    };
    let mut text = String::with_capacity(digits.len().max(zeros) + 4);
    if negative {
        text.push('-');
    } else if flags.plus {
        text.push('+');
    } else if flags.space {
        text.push(' ');
    }
    if verb == 'O' {
        text.push_str("0o");
    } else if flags.sharp {
        match base {
            2 => text.push_str("0b"),
            8 if zeros <= digits.len() && !digits.starts_with('0') => text.push('0'),
            16 if verb == 'X' => text.push_str("0X"),
            16 => text.push_str("0x"),
            _ => {}
        }
    }
    text.extend(std::iter::repeat_n('0', zeros.saturating_sub(digits.len())));
    text.push_str(&digits);
    let mut flags = flags;
    flags.zero = false;
    pad(out, &text, flags);
}

/// Go's `fmt.fmtFloat`: `f` formatted by `verb` with the operand's precision or `precision`.
fn float(out: &mut String, f: f64, verb: char, precision: Option<usize>, flags: Flags) {
    let precision = flags.precision.or(precision);
    let magnitude = format_float(f.abs(), verb, precision);
    let negative = f.is_sign_negative();
    let sign = if negative {
        Some('-')
    } else if flags.plus {
        Some('+')
    } else if flags.space {
        Some(' ')
    } else {
        None
    };
    let Some(sign) = sign else {
        pad(out, &magnitude, flags);
        return;
    };
    let len = magnitude.chars().count() + 1;
    if flags.zero
        && !flags.minus
        && let Some(width) = flags.width
        && width > len
    {
        out.push(sign);
        out.extend(std::iter::repeat_n('0', width - len));
        out.push_str(&magnitude);
        return;
    }
    pad(out, &format!("{sign}{magnitude}"), flags);
}

/// Go's `strconv.FormatFloat(f, verb, precision, 64)` of a non-negative `f`.
pub(crate) fn format_float(f: f64, verb: char, precision: Option<usize>) -> String {
    match verb {
        'f' | 'F' => {
            // Past its 1074th fractional digit a double's expansion is zeros (and Rust's
            // formatter takes precisions up to 65535 only).
            let precision = precision.unwrap_or(6);
            let exact = precision.min(EXACT_FRACTION_DIGITS);
            let mut text = format!("{f:.exact$}");
            text.extend(std::iter::repeat_n('0', precision - exact));
            text
        }
        'e' | 'E' => {
            let mut text = match precision {
                Some(precision) => {
                    let exact = precision.min(EXACT_SIGNIFICANT_DIGITS);
                    let text = format!("{f:.exact$e}");
                    let at = text.find('e').unwrap_or(text.len());
                    let zeros = "0".repeat(precision - exact);
                    format!("{}{zeros}{}", &text[..at], &text[at..])
                }
                None => format!("{f:e}"),
            };
            text = go_exponent(&text);
            if verb == 'E' {
                text.to_uppercase()
            } else {
                text
            }
        }
        'g' | 'G' => {
            let text = format_g(f, precision);
            if verb == 'G' {
                text.to_uppercase()
            } else {
                text
            }
        }
        'x' | 'X' => format_hex(f, verb, precision),
        _ => format_binary(f),
    }
}

/// Digits after the point past which a double's decimal expansion is all zeros.
const EXACT_FRACTION_DIGITS: usize = 1100;
/// Significant digits past which a double's decimal expansion is all zeros.
const EXACT_SIGNIFICANT_DIGITS: usize = 800;

/// The decimal digits of `f` (no leading or trailing zeros) and the decimal point's position:
/// `f = 0.d1d2d3… × 10^point`. Shortest when `significant` is `None`.
fn decimal_digits(f: f64, significant: Option<usize>) -> (Vec<u8>, i32) {
    if f == 0.0 {
        return (Vec::new(), 0);
    }
    let text = match significant {
        Some(n) => format!("{f:.*e}", n.clamp(1, EXACT_SIGNIFICANT_DIGITS) - 1),
        None => format!("{f:e}"),
    };
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    (digits, exponent + 1)
}

/// `%e` written from digits: `d.ddde±dd` with `precision` digits after the point.
fn digits_e(digits: &[u8], point: i32, precision: usize) -> String {
    let mut text = String::with_capacity(precision + 8);
    text.push(char::from(*digits.first().unwrap_or(&b'0')));
    if precision > 0 {
        text.push('.');
        for index in 1..=precision {
            text.push(char::from(*digits.get(index).unwrap_or(&b'0')));
        }
    }
    let exponent = if digits.is_empty() { 0 } else { point - 1 };
    let _ = write!(
        text,
        "e{}{:02}",
        if exponent < 0 { '-' } else { '+' },
        exponent.unsigned_abs()
    );
    text
}

/// `%f` written from digits with `precision` digits after the point.
fn digits_f(digits: &[u8], point: i32, precision: usize) -> String {
    let mut text = String::new();
    if point > 0 {
        for index in 0..usize::try_from(point).unwrap_or(0) {
            text.push(char::from(*digits.get(index).unwrap_or(&b'0')));
        }
    } else {
        text.push('0');
    }
    if precision > 0 {
        text.push('.');
        for index in 1..=precision {
            let at = i64::from(point) + i64::try_from(index).unwrap_or(i64::MAX) - 1;
            let digit = usize::try_from(at)
                .ok()
                .and_then(|at| digits.get(at))
                .copied()
                .unwrap_or(b'0');
            text.push(char::from(digit));
        }
    }
    text
}

/// Go's `%g`: the shortest representation, or `precision` significant digits.
fn format_g(f: f64, precision: Option<usize>) -> String {
    let shortest = precision.is_none();
    let significant = precision.map(|p| p.max(1));
    let (digits, point) = decimal_digits(f, significant);
    let count = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let mut precision = match significant {
        Some(p) => i32::try_from(p).unwrap_or(i32::MAX),
        None => count,
    };
    let mut exponent_precision = precision;
    if exponent_precision > count && count >= point {
        exponent_precision = count;
    }
    if shortest {
        exponent_precision = 6;
    }
    let exponent = point - 1;
    if exponent < -4 || exponent >= exponent_precision {
        if precision > count {
            precision = count;
        }
        let after = usize::try_from(precision - 1).unwrap_or(0);
        return digits_e(&digits, point, after);
    }
    if precision > point {
        precision = count;
    }
    digits_f(
        &digits,
        point,
        usize::try_from(precision - point).unwrap_or(0),
    )
}

/// Go's `%x` of a float: `0x1.8p+00`.
fn format_hex(f: f64, verb: char, precision: Option<usize>) -> String {
    let bits = f.to_bits();
    let biased = i32::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
    let mut mantissa = bits & ((1 << 52) - 1);
    let mut exponent = biased;
    if biased == 0 {
        exponent += 1;
    } else {
        mantissa |= 1 << 52;
    }
    exponent -= 1023;
    if mantissa == 0 {
        exponent = 0;
    }
    mantissa <<= 60 - 52;
    while mantissa != 0 && mantissa & (1 << 60) == 0 {
        mantissa <<= 1;
        exponent -= 1;
    }
    if let Some(precision) = precision
        && precision < 15
    {
        let shift = u32::try_from(precision * 4).unwrap_or(0);
        let extra = (mantissa << shift) & ((1 << 60) - 1);
        mantissa >>= 60 - shift;
        if extra | (mantissa & 1) > 1 << 59 {
            mantissa += 1;
        }
        mantissa <<= 60 - shift;
        if mantissa & (1 << 61) != 0 {
            mantissa >>= 1;
            exponent += 1;
        }
    }
    let upper = verb == 'X';
    let hex: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut text = String::from(if upper { "0X" } else { "0x" });
    text.push(if (mantissa >> 60) & 1 == 1 { '1' } else { '0' });
    mantissa <<= 4;
    let digit = |m: u64| char::from(hex[usize::try_from((m >> 60) & 15).unwrap_or(0)]);
    match precision {
        None if mantissa != 0 => {
            text.push('.');
            while mantissa != 0 {
                text.push(digit(mantissa));
                mantissa <<= 4;
            }
        }
        Some(precision) if precision > 0 => {
            text.push('.');
            for _ in 0..precision {
                text.push(digit(mantissa));
                mantissa <<= 4;
            }
        }
        _ => {}
    }
    text.push(if upper { 'P' } else { 'p' });
    text.push(if exponent < 0 { '-' } else { '+' });
    let _ = write!(text, "{:02}", exponent.unsigned_abs());
    text
}

/// Go's `%b` of a float: `6755399441055744p-52`.
fn format_binary(f: f64) -> String {
    let bits = f.to_bits();
    let biased = i64::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
    let mut mantissa = bits & ((1 << 52) - 1);
    let exponent = if biased == 0 {
        -1074
    } else {
        mantissa |= 1 << 52;
        biased - 1075
    };
    format!(
        "{mantissa}p{}{}",
        if exponent < 0 { '-' } else { '+' },
        exponent.unsigned_abs()
    )
}

/// Rust writes `1.5e2` and `1.5e-7`; Go writes `1.5e+02` and `1.5e-07`.
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

/// Whether Go's `strconv.Quote` escapes `c` (it is not printable, or is a quote or backslash).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00A0}' | '\u{00AD}' | '\u{1680}' | '\u{2000}'..='\u{200F}' | '\u{2028}'..='\u{202F}'
            | '\u{205F}'..='\u{206F}' | '\u{3000}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E000}'..='\u{F8FF}' | '\u{F0000}'..='\u{10FFFF}' | '\u{0600}'..='\u{0605}'
            | '\u{061C}' | '\u{06DD}' | '\u{070F}' | '\u{180E}' | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// Go's `strconv.Quote` (`ascii`: `QuoteToASCII`), with `quote` as the quote character.
fn quote(s: &str, quote: char, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        escape_into(&mut out, c, quote, ascii);
    }
    out.push(quote);
    out
}

fn escape_into(out: &mut String, c: char, quote: char, ascii: bool) {
    match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        '\\' => out.push_str("\\\\"),
        c if c == quote => {
            out.push('\\');
            out.push(c);
        }
        c if (ascii && !c.is_ascii()) || needs_escape(c) => {
            let code = u32::from(c);
            let _ = if code < 0x80 {
                write!(out, "\\x{code:02x}")
            } else if code < 0x10000 {
                write!(out, "\\u{code:04x}")
            } else {
                write!(out, "\\U{code:08x}")
            };
        }
        c => out.push(c),
    }
}

/// Go's `strconv.QuoteRune`.
fn quote_rune(c: char) -> String {
    let mut out = String::from("'");
    escape_into(&mut out, c, '\'', false);
    out.push('\'');
    out
}

/// Go's `strconv.CanBackquote`.
fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !c.is_control()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn format(format: &str, args: Value) -> String {
        match sprintf(&[json!(format), args], &mut BuiltinContext::default()) {
            Ok(Value::String(s)) => s,
            other => panic!("{format}: {other:?}"),
        }
    }

    /// Each line: the format, the operands, and what OPA v1.20's `sprintf` answers.
    #[test]
    fn sprintf_answers_as_opa_does() {
        let cases = [
            ("%s is %d years", json!(["ann", 42]), "ann is 42 years"),
            (
                "%v|%v|%v",
                json!([1.5, [1, "a"], {"k": true}]),
                "1.5|[1, \"a\"]|{\"k\": true}",
            ),
            ("%05d|%-4s|%4s", json!([42, "ab", "cd"]), "00042|ab  |  cd"),
            (
                "%.2f %x %q %%",
                json!([1.23456, 255, "hi"]),
                "1.23 ff \"hi\" %",
            ),
            ("%d", json!(["x"]), "%!d(string=x)"),
            ("%s", json!([5]), "%!s(int64=5)"),
            ("%d", json!([true]), "%!d(string=true)"),
            ("%t", json!([true]), "%!t(string=true)"),
            ("%t", json!([5]), "%!t(int64=5)"),
            ("%d", json!([1.5]), "%!d(float64=1.5)"),
            ("%5d", json!(["x"]), "%!d(string=    x)"),
            ("%s %s", json!(["a"]), "a %!s(MISSING)"),
            ("%s", json!(["a", 1, "b"]), "a%!(EXTRA int64=1, string=b)"),
            ("%", json!([]), "%!(NOVERB)"),
            ("%z", json!([1]), "%!z(int64=1)"),
            ("%q", json!(["a\u{7}b\"\\\u{1}é"]), r#""a\ab\"\\\x01é""#),
            ("%+q", json!(["é"]), r#""\u00e9""#),
            ("%x|%X", json!(["hi", "hi"]), "6869|6869"),
            (
                "%x|%X|%x",
                json!([1.5, 1.5, 0.0]),
                "0x1.8p+00|0X1.8P+00|0x0p+00",
            ),
            (
                "%e|%E",
                json!([1.5e-7, 1234.5678]),
                "1.500000e-07|1.234568E+03",
            ),
            (
                "%g|%G|%g",
                json!([1.5e-7, 1e21, 100000.0]),
                "1.5e-07|1E+21|100000",
            ),
            (
                "%v|%v|%v",
                json!([1e6, 1234567.0, 0.0001]),
                "1e+06|1.234567e+06|0.0001",
            ),
            ("%.3g|%.3g|%g", json!([1.0, 1234.5, 0.5]), "1|1.23e+03|0.5"),
            ("%+d|% d|%+.1f", json!([5, 5, -0.25]), "+5| 5|-0.2"),
            (
                "%08.3f|%-8.2f|",
                json!([-1.23456, 2.5]),
                "-001.235|2.50    |",
            ),
            ("%#x|%#o|%b|%o", json!([255, 8, 5, -8]), "0xff|010|101|-10"),
            ("%c|%U|%q", json!([65, 233, 97]), "A|U+00E9|'a'"),
            (
                "%05s|%.2s|%-3v|",
                json!(["ab", "héllo", 1]),
                "000ab|hé|1  |",
            ),
            ("%[2]s %[1]s", json!(["a", "b"]), "b a"),
            ("%[3]s", json!(["a"]), "%!s(BADINDEX)"),
            ("%*d|%-*d|%.*f", json!([3, 1, 3, 2, 2, 1.5]), "  1|2  |1.50"),
            ("%*d", json!(["x", 1]), "%!(BADWIDTH)1"),
            (
                "%d",
                json!([18446744073709551615u64]),
                "18446744073709551615",
            ),
            ("%b", json!([1.5]), "6755399441055744p-52"),
        ];
        for (f, args, expected) in cases {
            assert_eq!(format(f, args), expected, "{f}");
        }
    }

    #[test]
    fn widths_past_a_million_are_not_widths() {
        // Go gives up on the number and the rest of the format.
        assert_eq!(
            format("%9999999999s", json!(["x"])),
            "%!(NOVERB)%!(EXTRA string=x)"
        );
        assert_eq!(
            format("%.9999999999f", json!([1.5])),
            "%!(NOVERB)%!(EXTRA float64=1.5)"
        );
        assert_eq!(format("%1000000d", json!([1])).len(), 1_000_000);
        // Precisions past what Rust's formatter takes.
        let long = format("%.70000f", json!([1.5]));
        assert_eq!(long.len(), 70_002);
        assert!(long.starts_with("1.5000") && long.ends_with("000"));
        let long = format("%.70000e", json!([1.5]));
        assert!(
            long.starts_with("1.5000") && long.ends_with("0e+00"),
            "{}",
            &long[long.len() - 8..]
        );
        assert!(
            format("%.70000g", json!([0.1])).starts_with("0.1000000000000000055511151231257827")
        );
    }

    #[test]
    fn the_output_is_charged_against_the_memory_limit() {
        let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
        context.begin_call();
        let error = sprintf(&[json!("%1000000d%1000000d"), json!([1, 2])], &mut context);
        assert!(
            matches!(error, Err(BuiltinError::MemoryLimit(_))),
            "{error:?}"
        );
        context.begin_call();
        let fine = sprintf(&[json!("%100000d"), json!([1])], &mut context);
        assert!(fine.is_ok());
    }
}
