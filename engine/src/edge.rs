//! What the edges (the decision service, the proxies) check of a request before they read
//! it, besides its [bearer token](crate::BearerToken): that its body is declared JSON, and that
//! it names this machine when a browser could have sent it.

/// Whether a `Content-Type` value declares JSON: `application/json` or `application/<x>+json`,
/// in any case, whatever its parameters.
///
/// A web page can send a "simple" cross-site request (`text/plain`, a form, no type at all)
/// without the browser asking the server first, but not one with a JSON type: an edge that
/// requires it refuses such forged requests before it reads them.
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    let suffix = subtype
        .len()
        .checked_sub(5)
        .and_then(|at| subtype.get(at..));
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || suffix.is_some_and(|suffix| suffix.eq_ignore_ascii_case("+json")))
}

/// Whether a `Host` header value (`name`, `name:port`, `[v6]` or `[v6]:port`) names this
/// machine's loopback: `localhost` (and its subdomains), an address of `127.0.0.0/8`, or `::1`.
///
/// A page whose own name an attacker re-points at 127.0.0.1 (DNS rebinding) reaches a
/// loopback listener as the same origin, but its requests still carry the attacker's name
/// in `Host`: a listener without a token answers only requests naming the loopback.
pub fn is_loopback_host(host: &str) -> bool {
    let Some(name) = host_name(host) else {
        return false;
    };
    if let Ok(address) = name.parse::<std::net::IpAddr>() {
        return address.is_loopback();
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost")
        || name
            .len()
            .checked_sub(".localhost".len())
            .and_then(|at| name.get(at..))
            .is_some_and(|tail| tail.eq_ignore_ascii_case(".localhost"))
}

/// Why an edge without a token refuses a request a web page could have sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrowserRefusal {
    /// The request carries `Origin`: a browser sent it for a page.
    Origin,
    /// The request's `Host` (given here; empty when it had none) is neither a loopback name
    /// nor one the edge allows.
    Host(String),
}

/// Checks a request that an edge without a token received: `has_origin`, whether it carries
/// `Origin`; `host`, its `Host` value (empty when missing); `allowed`, the host names the edge
/// answers besides the loopback ones (compared without case). See [`is_loopback_host`].
pub fn check_browser(
    has_origin: bool,
    host: &str,
    allowed: &[String],
) -> Result<(), BrowserRefusal> {
    if has_origin {
        return Err(BrowserRefusal::Origin);
    }
    let named = is_loopback_host(host)
        || host_name(host).is_some_and(|name| {
            allowed
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name))
        });
    if named {
        Ok(())
    } else {
        Err(BrowserRefusal::Host(host.to_owned()))
    }
}

/// The host of a `Host` header value, without its port or an IPv6 address's brackets; `None`
/// when the value is not one.
pub fn host_name(host: &str) -> Option<&str> {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        return (after.is_empty() || port(after.strip_prefix(':')?)).then_some(address);
    }
    let (name, given_port) = match host.split_once(':') {
        Some((name, given_port)) => (name, Some(given_port)),
        None => (host, None),
    };
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_'))
        && given_port.is_none_or(port);
    valid.then_some(name)
}

fn port(text: &str) -> bool {
    !text.is_empty() && text.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::{BrowserRefusal, check_browser, host_name, is_json_media_type, is_loopback_host};

    #[test]
    fn json_types_are_json_in_any_case_with_parameters() {
        for json in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
            " application/json ",
        ] {
            assert!(is_json_media_type(json), "{json}");
        }
        for other in [
            "",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/json5",
            "text/json+x",
            "json",
            "application/+jso",
        ] {
            assert!(!is_json_media_type(other), "{other}");
        }
    }

    #[test]
    fn loopback_names_and_addresses_with_or_without_a_port() {
        for loopback in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "api.localhost:1",
            "127.0.0.1",
            "127.1.2.3:8787",
            "[::1]",
            "[::1]:8787",
        ] {
            assert!(is_loopback_host(loopback), "{loopback}");
        }
        for other in [
            "",
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "notlocalhost",
            "10.0.0.1",
            "0.0.0.0:8787",
            "[::]:1",
            "[::1",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "127.0.0.1:80:80",
            "user@127.0.0.1",
            "127.0.0.1 evil",
        ] {
            assert!(!is_loopback_host(other), "{other}");
        }
    }

    #[test]
    fn a_page_is_refused_by_its_origin_or_its_host() {
        let allowed = ["Proxy.Internal".to_owned()];
        assert_eq!(check_browser(false, "localhost:8080", &allowed), Ok(()));
        assert_eq!(check_browser(false, "proxy.internal", &allowed), Ok(()));
        assert_eq!(
            check_browser(true, "localhost", &allowed),
            Err(BrowserRefusal::Origin)
        );
        assert_eq!(
            check_browser(false, "evil.example", &allowed),
            Err(BrowserRefusal::Host("evil.example".to_owned()))
        );
        assert_eq!(
            check_browser(false, "", &[]),
            Err(BrowserRefusal::Host(String::new()))
        );
    }

    #[test]
    fn a_host_name_is_read_without_its_port() {
        assert_eq!(host_name("Example.COM:443"), Some("Example.COM"));
        assert_eq!(host_name("[fe80::1]:80"), Some("fe80::1"));
        assert_eq!(host_name("a b"), None);
    }
}
