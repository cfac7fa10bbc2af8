//! What an escalation asks a person: the [`ApprovalRequest`], bound to the exact action by its
//! [`action_digest`].
//!
//! The digest is the lowercase hex SHA-256 of the RFC 8785 (JSON Canonicalization Scheme)
//! form of `{"interception_point": .., "context": ..}`, with the context's
//! `metadata.timestamp` left out: the same action asked again later has the same digest, and
//! an action that differs in any other byte (another argument, another recipient) has another.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::context::InterceptionPoint;

/// An action that may proceed only once a person approves it.
///
/// Built by the engine when a point ends with no denial and at least one enforced `escalate`
/// decision. It is handed to the [`ApprovalResolver`](crate::ApprovalResolver), and carried
/// by [`EngineError::ApprovalRequired`](crate::EngineError::ApprovalRequired) when no answer
/// came, so the application can show it to a person and record a grant for its
/// [`action_digest`](ApprovalRequest::action_digest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// A name for this request, unique within a fleet sharing a grant store (for logs,
    /// approval tickets and the approval routes).
    pub id: String,
    /// Where the action was intercepted.
    pub interception_point: InterceptionPoint,
    /// The policies that escalated, in declared order.
    pub policy_ids: Vec<String>,
    /// The reasons the escalations gave, in the same order (escalations without a reason are
    /// left out).
    pub reasons: Vec<String>,
    /// The context that would be forwarded (after the point's redactions and transforms), as
    /// JSON.
    pub context: Value,
    /// The action's digest: what a grant is recorded for.
    pub action_digest: String,
}

impl ApprovalRequest {
    /// A request for `context` at `interception_point`, with its digest computed and a fresh id.
    pub fn new(
        interception_point: InterceptionPoint,
        policy_ids: Vec<String>,
        reasons: Vec<String>,
        context: Value,
    ) -> Self {
        Self::scoped(
            ApprovalScope::Context,
            interception_point,
            policy_ids,
            reasons,
            context,
        )
    }

    /// [`new`](Self::new), with the digest covering what `scope` says.
    pub fn scoped(
        scope: ApprovalScope,
        interception_point: InterceptionPoint,
        policy_ids: Vec<String>,
        reasons: Vec<String>,
        context: Value,
    ) -> Self {
        let action_digest = scope.digest(interception_point, &context);
        ApprovalRequest {
            id: next_id(&action_digest),
            interception_point,
            policy_ids,
            reasons,
            context,
            action_digest,
        }
    }
}

impl fmt::Display for ApprovalRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "approval required at {} by {}",
            self.interception_point,
            self.policy_ids.join(", ")
        )?;
        if !self.reasons.is_empty() {
            write!(f, " ({})", self.reasons.join("; "))?;
        }
        write!(f, " for action {}", self.action_digest)
    }
}

/// What of a context an action digest covers, and so what a person's grant applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalScope {
    /// The whole context but `metadata.timestamp` ([`action_digest`]): any other byte that
    /// differs is another action.
    #[default]
    Context,
    /// What a person approves, and nothing a model or a client invents anew on each try
    /// ([`call_digest`]): the context without its `calling_message` (the text a model wrote
    /// around a tool call) and with only `agent_id` and `session_id` of its `metadata` (no
    /// `tool_call_id`, response ids or other extras). For a tool call: the tool, its
    /// arguments, the agent and the session. The proxies use it: a model's retry of a call
    /// comes with a new call id and other words around it.
    Action,
}

impl ApprovalScope {
    /// The digest of `context` at `point` under this scope.
    pub fn digest(self, point: InterceptionPoint, context: &Value) -> String {
        match self {
            ApprovalScope::Context => action_digest(point, context),
            ApprovalScope::Action => call_digest(point, context),
        }
    }
}

/// The digest of what a person approves of `context` at `point` ([`ApprovalScope::Action`]):
/// the [`action_digest`] of the context without `calling_message` and with only
/// `metadata.agent_id` and `metadata.session_id` of its metadata.
///
/// ```
/// use portcullis_engine::{InterceptionPoint, approval::call_digest};
/// use serde_json::json;
///
/// let first = json!({"tool_name": "send_email", "arguments": {"to": "a@example.com"},
///     "calling_message": {"role": "assistant", "content": "Sending it now."},
///     "metadata": {"agent_id": "a", "session_id": "s", "tool_call_id": "call_1"}});
/// let retry = json!({"tool_name": "send_email", "arguments": {"to": "a@example.com"},
///     "calling_message": {"role": "assistant", "content": "Let me try again."},
///     "metadata": {"agent_id": "a", "session_id": "s", "tool_call_id": "call_2"}});
/// assert_eq!(
///     call_digest(InterceptionPoint::ToolCall, &first),
///     call_digest(InterceptionPoint::ToolCall, &retry)
/// );
/// ```
pub fn call_digest(point: InterceptionPoint, context: &Value) -> String {
    let Value::Object(members) = context else {
        return action_digest(point, context);
    };
    let mut action = serde_json::Map::new();
    for (key, value) in members {
        match key.as_str() {
            "calling_message" => {}
            "metadata" => {
                let mut kept = serde_json::Map::new();
                for name in ["agent_id", "session_id"] {
                    if let Some(value) = value.get(name) {
                        kept.insert(name.to_owned(), value.clone());
                    }
                }
                action.insert(key.clone(), Value::Object(kept));
            }
            _ => {
                action.insert(key.clone(), value.clone());
            }
        }
    }
    action_digest(point, &Value::Object(action))
}

/// A request id: the time, the start of the action's digest and a count of this process. Ids
/// stay apart across the processes of a fleet sharing one grant store: two requests made in
/// the same millisecond with the same count are for the same action (the same digest), which
/// the store keeps as one request anyway.
fn next_id(digest: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let count = NEXT.fetch_add(1, Ordering::Relaxed);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_millis())
        .unwrap_or_default();
    let action = digest.get(..12).unwrap_or(digest);
    format!("apr-{started:x}-{action}-{count}")
}

/// The digest of the action `context` (a context's JSON) at `point`: lowercase hex SHA-256 of
/// the RFC 8785 canonical JSON of `{"interception_point": point, "context": context}`, with
/// `metadata.timestamp` left out.
///
/// ```
/// use portcullis_engine::{InterceptionPoint, approval::action_digest};
/// use serde_json::json;
///
/// let first = json!({"tool_name": "send_email", "arguments": {"to": "a@example.com", "n": 1},
///                    "metadata": {"timestamp": "2026-11-24T03:00:00Z"}});
/// let later = json!({"metadata": {"timestamp": "2026-11-24T04:00:00Z"},
///                    "arguments": {"n": 1, "to": "a@example.com"}, "tool_name": "send_email"});
/// let digest = action_digest(InterceptionPoint::ToolCall, &first);
/// assert_eq!(digest, action_digest(InterceptionPoint::ToolCall, &later));
/// assert_eq!(digest.len(), 64);
/// ```
pub fn action_digest(point: InterceptionPoint, context: &Value) -> String {
    // Hashing one buffer is faster than hashing the many small pieces as they come.
    let hash = Sha256::digest(canonical_action(point, context));
    let mut hex = String::with_capacity(64);
    for byte in hash {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The bytes the digest is taken of: the canonical JSON of the action.
pub fn canonical_action(point: InterceptionPoint, context: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    write_action(point, context, &mut out);
    out
}

/// The canonical JSON of `value` (RFC 8785): object members sorted by the UTF-16 code units
/// of their names, no white space, strings with the fewest escapes, numbers as ECMAScript
/// writes them.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(value, None, &mut out);
    out
}

/// Writes the canonical JSON of the action to `out`.
fn write_action(point: InterceptionPoint, context: &Value, out: &mut Vec<u8>) {
    // "context" sorts before "interception_point".
    out.extend_from_slice(b"{\"context\":");
    write_value(context, Some(Skip::Timestamp), out);
    out.extend_from_slice(b",\"interception_point\":\"");
    out.extend_from_slice(point.as_str().as_bytes());
    out.extend_from_slice(b"\"}");
}

/// What to leave out of an object on the way down: the context's `metadata.timestamp`.
#[derive(Clone, Copy)]
enum Skip {
    /// At the context: look for `metadata`.
    Timestamp,
    /// At `metadata`: leave `timestamp` out.
    Key(&'static str),
}

fn write_value(value: &Value, skip: Option<Skip>, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        // RFC 8785 escapes strings as serde_json does.
        Value::String(text) => crate::json::write_string(out, text),
        Value::Array(items) => {
            out.extend_from_slice(b"[");
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    out.extend_from_slice(b",");
                }
                write_value(item, None, out);
            }
            out.extend_from_slice(b"]");
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map
                .iter()
                .filter(|(key, _)| !matches!(skip, Some(Skip::Key(left_out)) if key.as_str() == left_out))
                .collect();
            // `Map` iterates in UTF-8 byte order (or insertion order): sort by UTF-16 code
            // units, as RFC 8785 asks (the two differ above U+FFFF).
            members.sort_by(|(a, _), (b, _)| compare_utf16(a, b));
            out.extend_from_slice(b"{");
            for (at, (key, item)) in members.into_iter().enumerate() {
                if at > 0 {
                    out.extend_from_slice(b",");
                }
                crate::json::write_string(out, key);
                out.extend_from_slice(b":");
                let inner = match skip {
                    Some(Skip::Timestamp) if key == "metadata" => Some(Skip::Key("timestamp")),
                    _ => None,
                };
                write_value(item, inner, out);
            }
            out.extend_from_slice(b"}");
        }
    }
}

fn compare_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// A number as ECMAScript writes it (RFC 8785): integers up to 2^53 as digits, every other
/// number as the shortest form of its IEEE 754 double.
fn write_number(number: &serde_json::Number, out: &mut Vec<u8>) {
    const EXACT: u64 = 1 << 53;
    if let Some(integer) = number.as_u64()
        && integer <= EXACT
    {
        let mut buffer = itoa_buffer();
        out.extend_from_slice(format_u64(integer, &mut buffer));
        return;
    }
    if let Some(integer) = number.as_i64()
        && integer.unsigned_abs() <= EXACT
    {
        out.extend_from_slice(b"-");
        let mut buffer = itoa_buffer();
        out.extend_from_slice(format_u64(integer.unsigned_abs(), &mut buffer));
        return;
    }
    // Parsed numbers are finite; a number that has no double (never in practice) is written
    // as null, as ECMAScript would refuse it.
    match number.as_f64() {
        Some(double) if double.is_finite() => {
            let mut buffer = ryu_js::Buffer::new();
            out.extend_from_slice(buffer.format_finite(double).as_bytes());
        }
        _ => out.extend_from_slice(b"null"),
    }
}

const fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

fn format_u64(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buffer[at..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(value: &Value) -> String {
        let ours = String::from_utf8(canonical_json(value)).unwrap();
        // A second, independent implementation agrees.
        let theirs = String::from_utf8(serde_jcs::to_vec(value).unwrap()).unwrap();
        assert_eq!(ours, theirs);
        ours
    }

    #[test]
    fn integers_beyond_2_pow_53_are_written_as_their_double() {
        assert_eq!(
            canonical(&json!(9_007_199_254_740_993_u64)),
            "9007199254740992"
        );
        assert_eq!(
            canonical(&json!(-9_007_199_254_740_992_i64)),
            "-9007199254740992"
        );
        assert_eq!(canonical(&json!(u64::MAX)), "18446744073709552000");
        assert_eq!(canonical(&json!(-1)), "-1");
        assert_eq!(canonical(&json!(1.0)), "1");
    }

    #[test]
    fn strings_escape_as_rfc_8785_says() {
        let text: String = (0u8..0x20)
            .map(char::from)
            .chain("\"\\/\u{7f}é€😀".chars())
            .collect();
        assert_eq!(
            canonical(&json!(text)),
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\\"\\\\/\u{7f}é€😀\""
        );
    }

    #[test]
    fn the_digest_hashes_exactly_the_canonical_action() {
        use sha2::{Digest, Sha256};
        let context = json!({"metadata": {"timestamp": "x", "agent_id": "a"}, "b": [1, 2.5, "é"]});
        let bytes = canonical_action(InterceptionPoint::Output, &context);
        let expected: String = Sha256::digest(&bytes)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(action_digest(InterceptionPoint::Output, &context), expected);
    }

    /// RFC 8785 section 3.2.2 (the sample of the whole scheme).
    #[test]
    fn the_rfc_8785_sample_canonicalizes_as_the_rfc_says() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let value: Value = serde_json::from_str(input).unwrap();
        assert_eq!(
            canonical(&value),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// RFC 8785 section 3.2.3: properties sorted by their UTF-16 code units.
    #[test]
    fn keys_sort_by_utf16_code_units_as_in_rfc_8785() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let order: Vec<String> = {
            let text = canonical(&value);
            let back: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
            // `Map` may sort again: read the order from the text itself.
            let mut positions: Vec<(usize, String)> = back
                .values()
                .map(|v| {
                    let name = v.as_str().unwrap().to_owned();
                    (text.find(&name).unwrap(), name)
                })
                .collect();
            positions.sort();
            positions.into_iter().map(|(_, name)| name).collect()
        };
        assert_eq!(
            order,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh",
            ]
        );
    }

    /// RFC 8785 appendix B: IEEE 754 values and their ECMAScript serialization.
    #[test]
    fn numbers_serialize_as_rfc_8785_appendix_b_says() {
        let cases: [(u64, &str); 24] = [
            (0x0000_0000_0000_0000, "0"),
            (0x8000_0000_0000_0000, "0"),
            (0x0000_0000_0000_0001, "5e-324"),
            (0x8000_0000_0000_0001, "-5e-324"),
            (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
            (0x4340_0000_0000_0000, "9007199254740992"),
            (0xc340_0000_0000_0000, "-9007199254740992"),
            (0x4430_0000_0000_0000, "295147905179352830000"),
            (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
            (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
            (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
            (0x444b_1ae4_d6e2_ef50, "1e+21"),
            (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
            (0x41b3_de43_5555_5553, "333333333.3333332"),
            (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0x41b3_de43_5555_5555, "333333333.3333333"),
            (0x41b3_de43_5555_5556, "333333333.3333334"),
            (0x41b3_de43_5555_5557, "333333333.33333343"),
            (0xbecb_f647_612f_3696, "-0.0000033333333333333333"),
            (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
        ];
        for (bits, expected) in cases {
            let number = f64::from_bits(bits);
            assert_eq!(canonical(&json!(number)), expected, "{bits:016x}");
        }
    }

    #[test]
    fn the_timestamp_is_left_out_and_nothing_else() {
        let context = json!({
            "tool_name": "send_email",
            "arguments": {"to": "a@example.com", "timestamp": 1},
            "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-11-24T03:00:00Z"}
        });
        let text =
            String::from_utf8(canonical_action(InterceptionPoint::ToolCall, &context)).unwrap();
        assert_eq!(
            text,
            r#"{"context":{"arguments":{"timestamp":1,"to":"a@example.com"},"metadata":{"agent_id":"a","session_id":"s"},"tool_name":"send_email"},"interception_point":"tool_call"}"#
        );
    }

    #[test]
    fn one_changed_byte_or_another_point_gives_another_digest() {
        let context = json!({"tool_name": "t", "arguments": {"to": "a@example.com"}});
        let changed = json!({"tool_name": "t", "arguments": {"to": "b@example.com"}});
        let digest = action_digest(InterceptionPoint::ToolCall, &context);
        assert_ne!(digest, action_digest(InterceptionPoint::ToolCall, &changed));
        assert_ne!(digest, action_digest(InterceptionPoint::Input, &context));
        assert!(
            digest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }
}
