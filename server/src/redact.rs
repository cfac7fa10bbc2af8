//! URLs cut down to what may be shown: a reload error names bundle URLs, whose query strings
//! and user information may hold credentials.

use std::borrow::Cow;

/// `text` with every URL in it (`scheme://…`, up to a space, a quote or the punctuation
/// that ends it) cut down to its
/// scheme, host, port and path: user information (`user:password@`), the query string and
/// the fragment are left out.
///
/// ```
/// use portcullis_server::redact_urls;
///
/// assert_eq!(
///     redact_urls("GET https://bot:pw@bundles.example/b.tar.gz?sig=abc: 403"),
///     "GET https://bundles.example/b.tar.gz: 403"
/// );
/// ```
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme = rest[..at]
            .bytes()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            .count();
        out.push_str(&rest[..at + 3]);
        let after = &rest[at + 3..];
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(after.len());
        // Punctuation that ends a sentence rather than the URL stays in the text.
        let url_end = after[..end]
            .trim_end_matches([':', ';', ',', '.', ')', ']'])
            .len();
        let (url, tail) = after.split_at(url_end);
        if scheme == 0 {
            out.push_str(url);
        } else {
            let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
            let (authority, path) = url.split_at(authority_end);
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            let path = &path[..path.find(['?', '#']).unwrap_or(path.len())];
            out.push_str(host);
            out.push_str(path);
        }
        rest = tail;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::redact_urls;

    #[test]
    fn credentials_queries_and_fragments_are_left_out() {
        for (given, shown) in [
            ("plain text", "plain text"),
            (
                "rules.yaml:3:5: error: https://u:p@h.example:8443/a/b.tar.gz?token=s3cret#x: 500",
                "rules.yaml:3:5: error: https://h.example:8443/a/b.tar.gz: 500",
            ),
            (
                "`http://h/x?k=v` and http://u@h2?q",
                "`http://h/x` and http://h2",
            ),
            ("s3://bucket/key?X-Amz-Signature=abc", "s3://bucket/key"),
            ("://odd?x", "://odd?x"),
        ] {
            assert_eq!(redact_urls(given), shown, "{given}");
        }
    }
}
