//! Policies written in Rego and evaluated by a policy server speaking the Open Policy Agent
//! REST API: OPA itself (`opa run --server`) or anything compatible.
//!
//! # The OPA API calls used
//!
//! Two calls of the [OPA REST API](https://www.openpolicyagent.org/docs/latest/rest-api/), nothing
//! else:
//!
//! - [Create or Update a Policy](https://www.openpolicyagent.org/docs/latest/rest-api/#create-or-update-a-policy):
//!   `PUT {server}/v1/policies/{id}` with the raw Rego source as the body
//!   (`Content-Type: text/plain`), by [`RegoServerClient::put_policy`];
//!   [Delete a Policy](https://www.openpolicyagent.org/docs/latest/rest-api/#delete-a-policy),
//!   `DELETE {server}/v1/policies/{id}`, by [`RegoServerClient::delete_policy`].
//! - [Get a Document (with Input)](https://www.openpolicyagent.org/docs/latest/rest-api/#get-a-document-with-input):
//!   `POST {server}/v1/data/{package path}` with the body `{"input": <context>}`, answered
//!   `{"result": <document>}`, or `{}` when the document is undefined; by every evaluation.
//!
//! Errors come back as non-2xx answers with OPA's error body `{"code": .., "message": ..}` (and,
//! for a policy that does not compile, `errors` with each error's location); both are in the
//! error returned ([`RemoteError::service_error`] and its message). To authenticate, give
//! the options a bearer token ([`RegoServerClientOptions::bearer_token`]),
//! as OPA's `--authentication=token` expects.
//!
//! # Reading the decision
//!
//! The document at the package path is read as a decision:
//!
//! - its `decision` is an object shaped as a decision (the wire form of a `PolicyDecision`):
//!   that is the decision;
//! - its `decision` is a string naming the decision: the package's sibling rules `reason`,
//!   `redactions`, `transformation` and `labels` complete it;
//! - its `decision` is a boolean: `true` is allow, `false` is deny (with the sibling `reason`
//!   if there is one, else a reason naming the rule).
//!
//! The in-process backend (feature `wasm`) reads a document the same way: both use
//! [`read_decision`](crate::decision::read_decision).
//!
//! A package path that names the `decision` rule itself (`portcullis/input/decision`) works
//! too: its value is read the same way. No `result` (the package or rule is undefined: not
//! loaded, misspelt, or no rule matched and there is no default) is an evaluation error, and so
//! is a document of another shape. Both Rego authoring styles:
//!
//! ```rego
//! package portcullis.input
//!
//! # An object decision.
//! default decision := {"decision": "allow"}
//!
//! decision := {"decision": "deny", "reason": "no secrets"} if {
//!     some message in input.messages
//!     contains(lower(message.content), "password")
//! }
//! ```
//!
//! ```rego
//! package portcullis.output
//!
//! # A string decision with sibling rules.
//! default decision := "allow"
//!
//! decision := "redact" if regex.match(`\d{3}-\d{2}-\d{4}`, input.response.content)
//!
//! redactions := [{"field": "response.content", "strategy": "replace", "pattern": `\d{3}-\d{2}-\d{4}`}]
//! ```
//!
//! # Example
//!
//! Against a real server on 127.0.0.1 (the OPA-compatible one from the workspace's test
//! support; with OPA, start `opa run --server` and use `http://localhost:8181`):
//!
//! ```
//! use portcullis_engine::{InputContext, Message, Metadata, PolicyEngine, PolicySet};
//! use portcullis_rego::server::{RegoServerClient, RegoServerClientOptions, RegoServerInputPolicy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = portcullis_testing::RegoServer::start().await?;
//! # let base_url = server.url();
//! let options = RegoServerClientOptions::new(base_url);
//! RegoServerClient::new(options.clone())?
//!     .put_policy(
//!         "input",
//!         r#"
//!         package portcullis.input
//!
//!         default decision := "allow"
//!         decision := "deny" if contains(input.messages[0].content, "password")
//!         reason := "no passwords, please"
//!         "#,
//!     )
//!     .await?;
//!
//! let policy = RegoServerInputPolicy::new("no_passwords", options, "portcullis/input")?;
//! let engine = PolicyEngine::builder()
//!     .policy_set(PolicySet::builder().input(policy).build())
//!     .build();
//! let context = |text: &str| InputContext::new(vec![Message::user(text)], Metadata::new("a", "s"));
//!
//! assert!(engine.evaluate_input(&context("hello")).await.is_ok());
//! let denied = engine.evaluate_input(&context("my password is hunter2")).await.unwrap_err();
//! assert_eq!(denied.as_denial().and_then(|denial| denial.reason()), Some("no passwords, please"));
//! # Ok(())
//! # }
//! ```

use std::marker::PhantomData;

use async_trait::async_trait;
use portcullis_engine::{
    BoxError, InputContext, OutputContext, Policy, PolicyContext, PolicyDecision, ToolCallContext,
    ToolResultContext,
};
use portcullis_http_client::{Method, RemoteClient, RemoteResponse};
use serde::Serialize;
use serde_json::Value;
use url::Url;

/// The errors and error parts shared with the `http` backend: [`ClientError`] when a client or
/// policy cannot be built, [`RemoteError`] when a request fails.
pub use portcullis_http_client::{ClientError, RemoteError, RemoteErrorKind, ServiceError};

/// Where the policy server is and how to reach it: base URL, time-out, extra headers such as
/// a bearer token, body cap, connection limit; clones share one connection pool. The same type
/// as `portcullis_http::HttpClientOptions`.
#[doc(inline)]
pub use portcullis_http_client::ClientOptions as RegoServerClientOptions;

/// A client of a policy server: loads policies and evaluates documents.
///
/// ```
/// use portcullis_rego::server::{RegoServerClient, RegoServerClientOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = portcullis_testing::RegoServer::start().await?;
/// let client = RegoServerClient::new(RegoServerClientOptions::new(server.url()))?;
/// client.put_policy("limits", "package limits\n\nmax := 3\n").await?;
/// let max = client.evaluate("limits/max", &serde_json::json!({})).await?;
/// assert_eq!(max, Some(serde_json::json!(3)));
///
/// // A policy that does not compile: the server's error, with its location.
/// let error = client.put_policy("broken", "package broken\n\nx := \n").await.unwrap_err();
/// assert_eq!(error.status(), Some(400));
/// assert_eq!(error.service_error().unwrap().code, "invalid_parameter");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RegoServerClient {
    client: RemoteClient,
}

impl RegoServerClient {
    /// A client of the server at the options' base URL. Checks the options (base URL,
    /// headers) now; no request is made until the first call.
    pub fn new(options: RegoServerClientOptions) -> Result<RegoServerClient, ClientError> {
        Ok(RegoServerClient {
            client: options.connect()?,
        })
    }

    /// Loads or replaces policy module `id` with `source`: `PUT {server}/v1/policies/{id}`.
    /// A module the server does not accept (it does not compile, say) is an error carrying the
    /// server's `code`, `message` and per-error locations.
    pub async fn put_policy(&self, id: &str, source: &str) -> Result<(), RemoteError> {
        let url = self.policy_url(id, &Method::PUT)?;
        self.client
            .put(&url, "text/plain", source.as_bytes().to_vec())
            .await?;
        Ok(())
    }

    /// Removes policy module `id`: `DELETE {server}/v1/policies/{id}`.
    pub async fn delete_policy(&self, id: &str) -> Result<(), RemoteError> {
        let url = self.policy_url(id, &Method::DELETE)?;
        self.client.delete(&url).await?;
        Ok(())
    }

    /// Evaluates the document at `path` (`a/b` or `a.b`) with `input`:
    /// `POST {server}/v1/data/{path}`. `None` when the document is undefined.
    pub async fn evaluate(
        &self,
        path: &str,
        input: &(impl Serialize + Sync),
    ) -> Result<Option<Value>, RemoteError> {
        let url = data_url(&self.client, path).map_err(|error| {
            RemoteError::new(
                RemoteErrorKind::InvalidRequest,
                &Method::POST,
                self.client.base_url(),
            )
            .with_detail(error.to_string())
        })?;
        Ok(query(&self.client, &url, input).await?.1)
    }

    fn policy_url(&self, id: &str, method: &Method) -> Result<Url, RemoteError> {
        let segments = split_path(id, "policy id", '/').map_err(|error| {
            RemoteError::new(
                RemoteErrorKind::InvalidRequest,
                method,
                self.client.base_url(),
            )
            .with_detail(error.to_string())
        })?;
        Ok(self.client.url(
            ["v1", "policies"]
                .into_iter()
                .chain(segments.iter().map(String::as_str)),
        ))
    }
}

/// Splits `path` into non-empty segments at `/` (and at `.` for package paths, so
/// `portcullis.input` and `portcullis/input` are the same).
fn split_path(path: &str, what: &'static str, dot: char) -> Result<Vec<String>, ClientError> {
    let invalid = |problem: &str| ClientError::InvalidPath {
        what,
        path: path.to_owned(),
        problem: problem.to_owned(),
    };
    let trimmed = path.trim().trim_matches('/');
    let trimmed = trimmed.strip_prefix("data.").unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Err(invalid("it is empty"));
    }
    let segments: Vec<String> = trimmed.split(['/', dot]).map(str::to_owned).collect();
    if segments.iter().any(String::is_empty) {
        return Err(invalid("it has an empty segment"));
    }
    if segments
        .iter()
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(invalid(
            "it has a `.` or `..` segment, which would name another document of the server",
        ));
    }
    if segments
        .iter()
        .any(|segment| segment.chars().any(char::is_control))
    {
        return Err(invalid("it has a control character (such as NUL)"));
    }
    Ok(segments)
}

fn data_url(client: &RemoteClient, package_path: &str) -> Result<Url, ClientError> {
    let segments = split_path(package_path, "package path", '.')?;
    Ok(client.url(
        ["v1", "data"]
            .into_iter()
            .chain(segments.iter().map(String::as_str)),
    ))
}

#[derive(Serialize)]
struct DataRequest<'a, I> {
    input: &'a I,
}

/// `POST url {"input": input}`; the answer and its `result` (`None`: undefined).
async fn query(
    client: &RemoteClient,
    url: &Url,
    input: &(impl Serialize + Sync),
) -> Result<(RemoteResponse, Option<Value>), RemoteError> {
    let response = client.post_json(url, &DataRequest { input }).await?;
    let body: Value = response.json()?;
    let Value::Object(mut body) = body else {
        return Err(response.shape_error("the body is not a JSON object"));
    };
    let result = body.remove("result");
    Ok((response, result))
}

/// Reads the document at a package path (or the `decision` rule itself) as a decision, as
/// both Rego backends read it (see [`decision`](crate::decision)).
fn read_decision(document: Value, package: &str) -> Result<PolicyDecision, String> {
    crate::decision::read_decision(package, document).map_err(|error| error.to_string())
}

/// A policy of the point of `C` whose decision a policy server evaluates (input: the
/// context). [`RegoServerInputPolicy`], [`RegoServerToolCallPolicy`] and
/// [`RegoServerOutputPolicy`] name it at each point.
#[derive(Debug, Clone)]
pub struct RegoServerPolicy<C> {
    id: String,
    client: RemoteClient,
    url: Url,
    package: String,
    point: PhantomData<fn(&C)>,
}

/// An input policy whose decision a policy server evaluates (input: the [`InputContext`]).
pub type RegoServerInputPolicy = RegoServerPolicy<InputContext>;

/// A tool-call policy whose decision a policy server evaluates (input: the
/// [`ToolCallContext`]).
pub type RegoServerToolCallPolicy = RegoServerPolicy<ToolCallContext>;

/// A tool-result policy whose decision a policy server evaluates (input: the
/// [`ToolResultContext`]).
pub type RegoServerToolResultPolicy = RegoServerPolicy<ToolResultContext>;

/// An output policy whose decision a policy server evaluates (input: the [`OutputContext`]).
pub type RegoServerOutputPolicy = RegoServerPolicy<OutputContext>;

impl<C: PolicyContext> RegoServerPolicy<C> {
    /// A policy with id `id` whose decision is the document at `package_path`
    /// (`portcullis/input` or `portcullis.input`, optionally ending in `/decision`) on the
    /// server of `options`. Checks the options and the path now and fails with what is wrong;
    /// no request is made until the first evaluation.
    pub fn new(
        id: impl Into<String>,
        options: RegoServerClientOptions,
        package_path: &str,
    ) -> Result<Self, ClientError> {
        let client = options.connect()?;
        let url = data_url(&client, package_path)?;
        let package = split_path(package_path, "package path", '.')?.join(".");
        Ok(RegoServerPolicy {
            id: id.into(),
            client,
            url,
            package: format!("data.{package}"),
            point: PhantomData,
        })
    }

    /// The URL evaluations are posted to.
    pub fn endpoint(&self) -> &str {
        self.url.as_str()
    }

    async fn ask(&self, context: &C) -> Result<PolicyDecision, RemoteError> {
        let (response, result) = query(&self.client, &self.url, context).await?;
        let Some(document) = result else {
            return Err(response.shape_error(format!(
                "policy produced no decision: `{}` is undefined (no `result`); is the policy loaded, and does `decision` have a default?",
                self.package
            )));
        };
        read_decision(document, &self.package).map_err(|detail| response.shape_error(detail))
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for RegoServerPolicy<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        Ok(self.ask(context).await?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_are_read_in_every_shape() {
        let read = |value: Value| read_decision(value, "data.p");
        assert_eq!(
            read(json!({"decision": {"decision": "deny", "reason": "r"}})),
            Ok(PolicyDecision::deny("r"))
        );
        assert_eq!(
            read(json!({"decision": "audit", "reason": "look", "other": 1})),
            Ok(PolicyDecision::audit("look"))
        );
        assert_eq!(
            read(json!({"decision": "allow", "labels": ["untrusted"]})),
            Ok(PolicyDecision::allow().with_labels(["untrusted"]))
        );
        assert_eq!(
            read(json!({"decision": {"decision": "audit", "labels": ["seen"]}})),
            Ok(PolicyDecision::Audit {
                reason: None,
                labels: vec!["seen".into()]
            })
        );
        assert_eq!(read(json!({"decision": true})), Ok(PolicyDecision::allow()));
        assert_eq!(
            read(json!({"decision": {"decision": "escalate", "reason": "ask"}})),
            Ok(PolicyDecision::escalate("ask"))
        );
        assert_eq!(
            read(json!({"decision": "escalate"})),
            Ok(PolicyDecision::Escalate {
                reason: None,
                labels: Vec::new(),
            })
        );
        assert_eq!(
            read(json!({"decision": false})),
            Ok(PolicyDecision::deny("denied by data.p"))
        );
        assert_eq!(read(json!("allow")), Ok(PolicyDecision::allow()));
        let error = read(json!({"allow": true})).unwrap_err();
        assert!(
            error.contains("no `decision` rule (its rules: allow)"),
            "{error}"
        );
        let error = read(json!({"decision": 3})).unwrap_err();
        assert!(
            error.contains("expected an object, a string or a boolean"),
            "{error}"
        );
        let error = read(json!({"decision": "maybe"})).unwrap_err();
        assert!(error.contains("unknown variant"), "{error}");
    }

    #[test]
    fn paths_are_checked() {
        assert_eq!(
            split_path("data.portcullis.input", "package path", '.').ok(),
            Some(vec!["portcullis".to_owned(), "input".to_owned()])
        );
        assert_eq!(
            split_path("/portcullis/tool_call/", "package path", '.').ok(),
            Some(vec!["portcullis".to_owned(), "tool_call".to_owned()])
        );
        let error = split_path("  ", "package path", '.').unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid package path "  ": it is empty"#
        );
        assert!(split_path("a..b", "package path", '.').is_err());
        assert_eq!(
            split_path("team/pii.v2", "policy id", '/').ok(),
            Some(vec!["team".to_owned(), "pii.v2".to_owned()])
        );
    }
}
