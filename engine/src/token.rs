//! A bearer token the edges (the decision service, the proxies) require of their clients.

use sha2::{Digest, Sha256};

/// A shared secret clients present, kept only as its SHA-256 digest and compared in constant
/// time: both sides are hashed to digests of one size and every byte is compared, so how long
/// a refusal takes tells neither how much of the token was right nor how long it is.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl BearerToken {
    /// Keeps the digest of `token`.
    pub fn new(token: impl AsRef<[u8]>) -> Self {
        Self {
            digest: Sha256::digest(token.as_ref()).into(),
        }
    }

    /// Whether `presented` is this token.
    pub fn matches(&self, presented: impl AsRef<[u8]>) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_ref()).into();
        let difference = self
            .digest
            .iter()
            .zip(presented)
            .fold(0_u8, |difference, (expected, given)| {
                difference | (expected ^ given)
            });
        std::hint::black_box(difference) == 0
    }

    /// A name for the token that does not give it away: the first 8 bytes of its digest in
    /// hex (16 characters), for a session or a log line to tell clients apart by.
    pub fn fingerprint(&self) -> String {
        use std::fmt::Write;
        self.digest[..8]
            .iter()
            .fold(String::with_capacity(16), |mut text, byte| {
                let _ = write!(text, "{byte:02x}");
                text
            })
    }

    /// The token of an `Authorization` header's value when its scheme is `Bearer` (in any
    /// case), if it has a non-empty one.
    pub fn from_authorization(value: &str) -> Option<&str> {
        let (scheme, token) = value.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim())
            .filter(|token| !token.is_empty())
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<secret>)")
    }
}

#[cfg(test)]
mod tests {
    use super::BearerToken;

    #[test]
    fn only_the_exact_token_matches() {
        let token = BearerToken::new("s3cret");
        assert!(token.matches("s3cret"));
        for other in ["", "s3cre", "s3cret ", "S3CRET", "s3cret\0"] {
            assert!(!token.matches(other), "{other:?}");
        }
    }

    #[test]
    fn the_scheme_is_read_in_any_case_and_an_empty_token_is_none() {
        assert_eq!(BearerToken::from_authorization("Bearer abc"), Some("abc"));
        assert_eq!(BearerToken::from_authorization("bEaReR  abc "), Some("abc"));
        assert_eq!(BearerToken::from_authorization("Basic abc"), None);
        assert_eq!(BearerToken::from_authorization("Bearer "), None);
        assert_eq!(BearerToken::from_authorization("Bearer"), None);
    }

    #[test]
    fn the_fingerprint_is_sixteen_hex_digits_of_the_digest() {
        let fingerprint = BearerToken::new("s3cret").fingerprint();
        assert_eq!(fingerprint.len(), 16);
        assert!(fingerprint.bytes().all(|byte| byte.is_ascii_hexdigit()));
        assert_ne!(fingerprint, BearerToken::new("s3cret2").fingerprint());
    }

    #[test]
    fn its_debug_form_hides_the_secret() {
        assert_eq!(
            format!("{:?}", BearerToken::new("s3cret")),
            "BearerToken(<secret>)"
        );
    }
}
