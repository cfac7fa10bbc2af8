//! The service's routes, matched by hand: a request's method and path are read once, with no
//! allocation (a path parameter is copied only when it is percent-encoded), and the handler is
//! called directly.
//!
//! A router of boxed handlers behind a cloned middleware stack costs several microseconds a
//! request; the service answers tens of thousands a second, and on `/healthz` that was most
//! of its time. [`DecisionService::router`](crate::DecisionService::router) wraps this same
//! table for applications that nest the service in their own router.

use std::borrow::Cow;

use http::Method;

/// A route of the service, with its path parameters: as they are in the path
/// (`Route<&str>`, still percent-encoded), then decoded (`Route<Cow<str>>`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route<P> {
    /// `POST /engine/evaluate`.
    EngineEvaluate,
    /// `POST /v1/evaluate/{point}`.
    Evaluate(P),
    /// `GET /v1/approvals`.
    Approvals,
    /// `GET /v1/approvals/{id}`.
    Approval(P),
    /// `POST /v1/approvals/{id}/{decision}`.
    ApprovalDecision(P, P),
    /// `GET /healthz`.
    Healthz,
    /// `GET /readyz`.
    Readyz,
    /// `GET /metrics`.
    Metrics,
    /// `GET /console` (with the console).
    ConsolePage,
    /// `GET /console/app.js` (with the console).
    ConsoleScript,
    /// `GET /console/app.css` (with the console).
    ConsoleStyles,
    /// `GET /v1/decisions/feed` (with the console).
    DecisionFeed,
}

/// What a request's method and path resolve to. Each carries the route's pattern, the label
/// of its metrics and log lines (`unmatched` when no route has the path).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolved<'a> {
    /// A route asked with a method it takes.
    Route(Route<Cow<'a, str>>, &'static str),
    /// A route's path asked with a method it does not take.
    WrongMethod(&'static str),
    /// A route's path whose parameter does not decode to UTF-8.
    BadPath(&'static str),
    /// No route has this path.
    NotFound,
}

impl Resolved<'_> {
    /// The label of the request's metrics and log lines.
    pub(crate) fn pattern(&self) -> &'static str {
        match self {
            Resolved::Route(_, pattern)
            | Resolved::WrongMethod(pattern)
            | Resolved::BadPath(pattern) => pattern,
            Resolved::NotFound => "unmatched",
        }
    }
}

/// The most segments a route's path has.
const MOST_SEGMENTS: usize = 4;

/// Resolves `method` on `path` (without its query); the console's routes exist only when
/// `console` is on.
pub(crate) fn resolve<'a>(method: &Method, path: &'a str, console: bool) -> Resolved<'a> {
    let Some((segments, count)) = segments(path) else {
        return Resolved::NotFound;
    };
    let (route, pattern, post) = match &segments[..count] {
        ["engine", "evaluate"] => (Route::EngineEvaluate, "/engine/evaluate", true),
        ["v1", "evaluate", point] if !point.is_empty() => {
            (Route::Evaluate(*point), "/v1/evaluate/{point}", true)
        }
        ["v1", "approvals"] => (Route::Approvals, "/v1/approvals", false),
        ["v1", "approvals", id] if !id.is_empty() => {
            (Route::Approval(*id), "/v1/approvals/{id}", false)
        }
        ["v1", "approvals", id, decision] if !id.is_empty() && !decision.is_empty() => (
            Route::ApprovalDecision(*id, *decision),
            "/v1/approvals/{id}/{decision}",
            true,
        ),
        ["healthz"] => (Route::Healthz, "/healthz", false),
        ["readyz"] => (Route::Readyz, "/readyz", false),
        ["metrics"] => (Route::Metrics, "/metrics", false),
        ["console"] if console => (Route::ConsolePage, "/console", false),
        ["console", "app.js"] if console => (Route::ConsoleScript, "/console/app.js", false),
        ["console", "app.css"] if console => (Route::ConsoleStyles, "/console/app.css", false),
        ["v1", "decisions", "feed"] if console => {
            (Route::DecisionFeed, "/v1/decisions/feed", false)
        }
        _ => return Resolved::NotFound,
    };
    let allowed = if post {
        method == Method::POST
    } else {
        method == Method::GET || method == Method::HEAD
    };
    if !allowed {
        return Resolved::WrongMethod(pattern);
    }
    match route.decoded() {
        Some(route) => Resolved::Route(route, pattern),
        None => Resolved::BadPath(pattern),
    }
}

/// The segments of `path` after its leading `/`, and how many there are; `None` when it does
/// not start with `/` or has more segments than any route.
fn segments(path: &str) -> Option<([&str; MOST_SEGMENTS], usize)> {
    let rest = path.strip_prefix('/')?;
    let mut found = [""; MOST_SEGMENTS];
    let mut count = 0;
    for segment in rest.split('/') {
        *found.get_mut(count)? = segment;
        count += 1;
    }
    Some((found, count))
}

impl<'a> Route<&'a str> {
    /// The route with its parameters decoded; `None` when one does not decode to UTF-8.
    fn decoded(self) -> Option<Route<Cow<'a, str>>> {
        Some(match self {
            Route::Evaluate(point) => Route::Evaluate(percent_decoded(point)?),
            Route::Approval(id) => Route::Approval(percent_decoded(id)?),
            Route::ApprovalDecision(id, decision) => {
                Route::ApprovalDecision(percent_decoded(id)?, percent_decoded(decision)?)
            }
            Route::EngineEvaluate => Route::EngineEvaluate,
            Route::Approvals => Route::Approvals,
            Route::Healthz => Route::Healthz,
            Route::Readyz => Route::Readyz,
            Route::Metrics => Route::Metrics,
            Route::ConsolePage => Route::ConsolePage,
            Route::ConsoleScript => Route::ConsoleScript,
            Route::ConsoleStyles => Route::ConsoleStyles,
            Route::DecisionFeed => Route::DecisionFeed,
        })
    }
}

/// `segment` with its `%XX` escapes decoded (a `%` not followed by two hex digits stays as
/// it is); `None` when the bytes decoded are not UTF-8.
fn percent_decoded(segment: &str) -> Option<Cow<'_, str>> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn route(method: Method, path: &str) -> Resolved<'_> {
        resolve(&method, path, true)
    }

    #[test]
    fn each_route_resolves_with_its_pattern_and_parameters() {
        let cases = [
            (
                "/engine/evaluate",
                Method::POST,
                Route::EngineEvaluate,
                "/engine/evaluate",
            ),
            (
                "/v1/evaluate/tool_call",
                Method::POST,
                Route::Evaluate("tool_call".into()),
                "/v1/evaluate/{point}",
            ),
            (
                "/v1/approvals",
                Method::GET,
                Route::Approvals,
                "/v1/approvals",
            ),
            (
                "/v1/approvals/ab12",
                Method::GET,
                Route::Approval("ab12".into()),
                "/v1/approvals/{id}",
            ),
            (
                "/v1/approvals/ab12/grant",
                Method::POST,
                Route::ApprovalDecision("ab12".into(), "grant".into()),
                "/v1/approvals/{id}/{decision}",
            ),
            ("/healthz", Method::GET, Route::Healthz, "/healthz"),
            ("/healthz", Method::HEAD, Route::Healthz, "/healthz"),
            ("/readyz", Method::GET, Route::Readyz, "/readyz"),
            ("/metrics", Method::GET, Route::Metrics, "/metrics"),
            ("/console", Method::GET, Route::ConsolePage, "/console"),
            (
                "/console/app.js",
                Method::GET,
                Route::ConsoleScript,
                "/console/app.js",
            ),
            (
                "/console/app.css",
                Method::GET,
                Route::ConsoleStyles,
                "/console/app.css",
            ),
            (
                "/v1/decisions/feed",
                Method::GET,
                Route::DecisionFeed,
                "/v1/decisions/feed",
            ),
        ];
        for (path, method, expected, pattern) in cases {
            assert_eq!(
                route(method, path),
                Resolved::Route(expected, pattern),
                "{path}"
            );
        }
    }

    #[test]
    fn other_paths_are_not_found_and_other_methods_are_wrong() {
        for path in [
            "",
            "healthz",
            "/",
            "/healthz/",
            "//healthz",
            "/v1/evaluate",
            "/v1/evaluate/",
            "/v1/evaluate/input/more",
            "/v1/approvals/",
            "/v1/approvals/ab12/",
            "/v1/approvals//grant",
            "/v1/approvals/a/b/c",
            "/health%7A",
            "/engine/evaluate/x",
        ] {
            assert_eq!(route(Method::POST, path), Resolved::NotFound, "{path:?}");
            assert_eq!(route(Method::GET, path), Resolved::NotFound, "{path:?}");
        }
        assert_eq!(
            route(Method::GET, "/v1/evaluate/input"),
            Resolved::WrongMethod("/v1/evaluate/{point}")
        );
        assert_eq!(
            route(Method::POST, "/healthz"),
            Resolved::WrongMethod("/healthz")
        );
        assert_eq!(
            route(Method::DELETE, "/v1/approvals/ab12"),
            Resolved::WrongMethod("/v1/approvals/{id}")
        );
        assert_eq!(
            route(Method::HEAD, "/engine/evaluate"),
            Resolved::WrongMethod("/engine/evaluate")
        );
    }

    #[test]
    fn the_console_routes_exist_only_with_the_console() {
        for path in [
            "/console",
            "/console/app.js",
            "/console/app.css",
            "/v1/decisions/feed",
        ] {
            assert_eq!(
                resolve(&Method::GET, path, false),
                Resolved::NotFound,
                "{path}"
            );
        }
    }

    #[test]
    fn parameters_are_percent_decoded_and_must_decode_to_utf8() {
        assert_eq!(
            route(Method::GET, "/v1/approvals/a%2Fb%20c%zz%4"),
            Resolved::Route(Route::Approval("a/b c%zz%4".into()), "/v1/approvals/{id}")
        );
        assert_eq!(
            route(Method::POST, "/v1/evaluate/%C3%A9"),
            Resolved::Route(Route::Evaluate("é".into()), "/v1/evaluate/{point}")
        );
        assert_eq!(
            route(Method::POST, "/v1/evaluate/%FF"),
            Resolved::BadPath("/v1/evaluate/{point}")
        );
        assert_eq!(Resolved::NotFound.pattern(), "unmatched");
    }
}
