//! A request's path, decoded and normalised once: the one spelling the proxy classifies,
//! matches against `--pass-through` and forwards (SPEC §16, "fail closed at the edge").
//!
//! An upstream that decodes percent-escapes, removes dot segments, merges slashes or folds
//! case would otherwise read a route the proxy did not: `/v1/models/../chat/%63ompletions`
//! is a pass-through path to a proxy that matches the raw text, and a chat completion to the
//! upstream. So the proxy decodes and normalises the path itself, forwards only that form,
//! and refuses every spelling whose meaning could differ from one server to the next.

use std::fmt;

/// A path in its one canonical spelling: it starts with `/`, has no empty, `.` or `..`
/// segment, no percent-escape, and only characters that every server reads alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CanonicalPath(String);

impl CanonicalPath {
    /// The path as forwarded (its case as the client wrote it).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CanonicalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a path is refused: it is ambiguous, or leaves the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmbiguousPath(pub(crate) String);

impl fmt::Display for AmbiguousPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a byte may stand in a canonical segment: RFC 3986's unreserved characters and
/// the sub-delimiters but `;` (some servers cut a segment at it), plus `:` and `@`.
fn is_plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b'='
                | b':'
                | b'@'
        )
}

/// The value of a hexadecimal digit.
fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Decodes the percent-escapes of one raw segment; refuses an escape of `/`, `\` or `%`
/// (a second decoding would read another path), a malformed escape, and any byte that is
/// not plain once decoded (control characters, spaces, `;`, `\`, non-ASCII).
fn decode_segment(raw: &str) -> Result<String, AmbiguousPath> {
    let bytes = raw.as_bytes();
    let mut decoded = String::with_capacity(raw.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = if bytes[index] == b'%' {
            let value = bytes
                .get(index + 1)
                .copied()
                .and_then(hex)
                .zip(bytes.get(index + 2).copied().and_then(hex))
                .map(|(high, low)| high << 4 | low)
                .ok_or_else(|| AmbiguousPath("it has a malformed percent-escape".to_owned()))?;
            if matches!(value, b'/' | b'\\' | b'%') {
                return Err(AmbiguousPath(format!(
                    "it encodes {:?} in a percent-escape",
                    char::from(value)
                )));
            }
            index += 3;
            value
        } else {
            index += 1;
            bytes[index - 1]
        };
        if !is_plain(byte) {
            return Err(AmbiguousPath(format!(
                "it holds the byte {byte:#04x}, which servers read differently"
            )));
        }
        decoded.push(char::from(byte));
    }
    Ok(decoded)
}

/// The canonical form of a request's raw path: percent-escapes decoded, `.` segments and
/// empty segments (`//`) removed, each `..` taking back the segment before it; refused when
/// a `..` would leave the root or follows an empty segment, a segment other than `.` and `..` ends with a dot (some
/// servers drop trailing dots), or a segment is ambiguous (see [`decode_segment`]). A
/// trailing `/` is kept. Case is kept too: callers compare routes without case.
pub(crate) fn canonicalize(raw: &str) -> Result<CanonicalPath, AmbiguousPath> {
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(AmbiguousPath("it does not start with \"/\"".to_owned()));
    };
    let mut segments: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    let mut merged_slashes = false;
    for raw_segment in rest.split('/') {
        let segment = decode_segment(raw_segment)?;
        trailing_slash = false;
        match segment.as_str() {
            "" => {
                trailing_slash = true;
                merged_slashes = true;
            }
            "." => trailing_slash = true,
            ".." => {
                // `/a//..` is `/` where slashes are merged first, `/a/` where not.
                if merged_slashes {
                    return Err(AmbiguousPath(
                        "a \"..\" after \"//\" reads differently where slashes are merged"
                            .to_owned(),
                    ));
                }
                if segments.pop().is_none() {
                    return Err(AmbiguousPath("a \"..\" in it leaves the root".to_owned()));
                }
                trailing_slash = true;
            }
            _ if segment.ends_with('.') => {
                return Err(AmbiguousPath(format!(
                    "its segment {segment:?} ends with a dot, which some servers drop"
                )));
            }
            _ => segments.push(segment),
        }
    }
    let mut path = String::with_capacity(raw.len());
    for segment in &segments {
        path.push('/');
        path.push_str(segment);
    }
    if path.is_empty() || trailing_slash {
        path.push('/');
    }
    Ok(CanonicalPath(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(raw: &str) -> String {
        canonicalize(raw)
            .unwrap_or_else(|problem| panic!("{raw}: {problem}"))
            .0
    }

    #[test]
    fn spellings_of_one_route_have_one_canonical_form() {
        for raw in [
            "/v1/chat/completions",
            "/v1/models/../chat/%63ompletions",
            "/v1/models/%2e%2e/chat/completions",
            "/v1/models/%2E./chat/completions",
            "//v1///chat/./completions",
            "/v1/./x/../chat//completions",
            "/v1/x/y/../../chat/completions",
            "/%76%31/chat/completions",
        ] {
            assert_eq!(canonical(raw), "/v1/chat/completions", "{raw}");
        }
        assert_eq!(canonical("/v1/chat/completions/"), "/v1/chat/completions/");
        assert_eq!(canonical("/v1/chat/completions/."), "/v1/chat/completions/");
        assert_eq!(canonical("/V1/Chat/Completions"), "/V1/Chat/Completions");
        assert_eq!(canonical("/"), "/");
        assert_eq!(
            canonical("/v1/files/file-AbC:x@y"),
            "/v1/files/file-AbC:x@y"
        );
    }

    #[test]
    fn ambiguous_spellings_are_refused() {
        for raw in [
            "/v1/models%2f..%2fchat/completions",
            "/v1/models%2F..%2Fchat/completions",
            "/v1/models%5c..%5cchat/completions",
            "/v1/models\\..\\chat/completions",
            "/v1/chat/%2563ompletions",
            "/v1/chat/completions%00",
            "/v1/chat/completions%20",
            "/v1/chat/completions.",
            "/v1/chat/completions%2e",
            "/v1/chat/completions../",
            "/v1/chat/completions;x",
            "/v1/chat/completions%3bx",
            "/v1/chat/%zzompletions",
            "/v1/chat/%6",
            "/..",
            "/v1/../../chat/completions",
            "/v1/models//../chat/completions",
            "//v1/x/../chat/completions",
            "/%2e%2e/v1/chat/completions",
            "/v1/chat/compl\u{e9}tions",
            "/v1/chat/compl%C3%A9tions",
            "v1/chat/completions",
            "*",
        ] {
            assert!(canonicalize(raw).is_err(), "{raw} was accepted");
        }
    }
}
