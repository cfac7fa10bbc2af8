//! Policies evaluated by a remote decision endpoint over HTTP, so a platform team can run
//! policy centrally while agents only ask.
//!
//! Each evaluation is one request:
//!
//! ```text
//! POST {base_url}/engine/evaluate
//! Content-Type: application/json
//!
//! {"policy_id": "pii", "interception_point": "input", "context": { ..the context.. }}
//! ```
//!
//! and a 2xx answer whose body is a decision object (the wire form of a `PolicyDecision`: a
//! `decision` field naming its kind, and that kind's fields), such as
//! `{"decision": "deny", "reason": "contains an SSN"}`. Anything else is an evaluation error
//! (a [`RemoteError`] that says which request, the status and the first
//! bytes of the body): a connection refused, no complete answer within the time-out (5 s
//! unless set), a non-2xx status (redirects are not followed), a body that cannot be read, is
//! longer than the cap (1 MiB unless set; checked while reading, so an endless body costs at
//! most the cap), or is not a decision. The body is read as JSON whatever `Content-Type` the
//! answer declares (a decision labelled `text/plain`, or not labelled at all, is a decision). The policy
//! set's `on_error` then decides whether the call fails (the default) or goes on.
//!
//! All policies built from one [`HttpClientOptions`] value (or its clones) share one
//! connection pool: concurrent evaluations reuse kept-alive connections instead of opening one
//! each. The client is the one the policy-server Rego backend uses too (`portcullis-rego`'s
//! `server` feature; its options are `RegoServerClientOptions` there: one type under the name
//! of each backend).
//!
//! ```no_run
//! use std::time::Duration;
//! use portcullis_engine::{InputContext, Message, Metadata, OnError, PolicyEngine, PolicySet};
//! use portcullis_http::{HttpClientOptions, HttpInputPolicy, HttpToolCallPolicy};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let service = HttpClientOptions::new("https://policy.internal")
//!     .bearer_token(std::env::var("POLICY_TOKEN")?)
//!     .timeout(Duration::from_millis(300));
//! let engine = PolicyEngine::builder()
//!     .policy_set(
//!         PolicySet::builder()
//!             .input(HttpInputPolicy::new("pii", service.clone())?)
//!             .tool_call(HttpToolCallPolicy::new("tools", service)?)
//!             .on_error(OnError::Deny)
//!             .build(),
//!     )
//!     .build();
//! let context = InputContext::new(vec![Message::user("hello")], Metadata::new("agent", "session"));
//! let evaluation = engine.evaluate_input(&context).await?;
//! println!("forward: {:?}", evaluation.context());
//! # Ok(())
//! # }
//! ```
//!
//! A test run against a real endpoint on 127.0.0.1 (the one from the workspace's test
//! support), checking what was sent:
//!
//! ```
//! use portcullis_engine::{InputContext, Message, Metadata, Policy, PolicyDecision};
//! use portcullis_http::{HttpClientOptions, HttpInputPolicy};
//! use portcullis_testing::{EvaluateServer, Reply};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), portcullis_engine::BoxError> {
//! let server = EvaluateServer::replying(Reply::decision(&PolicyDecision::deny("no"))).await?;
//! let policy = HttpInputPolicy::new("pii", HttpClientOptions::new(server.url()))?;
//! let context = InputContext::new(vec![Message::user("hi")], Metadata::new("agent", "session"));
//! assert_eq!(policy.evaluate(&context).await?, PolicyDecision::deny("no"));
//!
//! let sent = server.requests()[0].json().unwrap();
//! assert_eq!(sent["policy_id"], "pii");
//! assert_eq!(sent["interception_point"], "input");
//! assert_eq!(sent["context"]["messages"][0]["content"], "hi");
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::marker::PhantomData;

use async_trait::async_trait;
use portcullis_engine::{
    BoxError, InputContext, InterceptionPoint, OutputContext, Policy, PolicyContext,
    PolicyDecision, ToolCallContext, ToolResultContext,
};
use serde::Serialize;
use url::Url;

use portcullis_http_client::RemoteClient;

/// The errors shared with the `rego-rest` backend: [`ClientError`] when a policy cannot be
/// built, [`RemoteError`] (with its [`RemoteErrorKind`]) when a request fails.
pub use portcullis_http_client::{ClientError, RemoteError, RemoteErrorKind, ServiceError};

/// The client's defaults: time-out, body cap and connection limit.
pub use portcullis_http_client::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_TIMEOUT,
};

/// Where the decision endpoint is and how to reach it: base URL, time-out, extra headers, body
/// cap, connection limit; clones share one connection pool. The same type as
/// `portcullis_rego::server::RegoServerClientOptions`.
#[doc(inline)]
pub use portcullis_http_client::ClientOptions as HttpClientOptions;

/// What one evaluation request carries: the policy id, the interception point and the context.
#[derive(Serialize)]
struct EvaluateRequest<'a, C> {
    policy_id: &'a str,
    interception_point: InterceptionPoint,
    context: &'a C,
}

/// A policy of the point of `C` decided by the remote endpoint: each evaluation posts the
/// policy id, the point (`interception_point: "input"`, `"tool_call"`, `"tool_result"` or
/// `"output"`) and the context. [`HttpInputPolicy`], [`HttpToolCallPolicy`],
/// [`HttpToolResultPolicy`] and [`HttpOutputPolicy`] name it at each point.
#[derive(Debug, Clone)]
pub struct HttpPolicy<C> {
    id: String,
    client: RemoteClient,
    endpoint: Url,
    point: PhantomData<fn(&C)>,
}

/// An input policy decided by the remote endpoint (`interception_point: "input"`).
pub type HttpInputPolicy = HttpPolicy<InputContext>;

/// A tool-call policy decided by the remote endpoint (`interception_point: "tool_call"`).
pub type HttpToolCallPolicy = HttpPolicy<ToolCallContext>;

/// A tool-result policy decided by the remote endpoint (`interception_point: "tool_result"`).
pub type HttpToolResultPolicy = HttpPolicy<ToolResultContext>;

/// An output policy decided by the remote endpoint (`interception_point: "output"`).
pub type HttpOutputPolicy = HttpPolicy<OutputContext>;

impl<C: PolicyContext> HttpPolicy<C> {
    /// A policy with id `id` (sent as `policy_id`) evaluated by the endpoint of `options`.
    /// Checks the options (base URL, headers) now and fails with what is wrong; no request is
    /// made until the first evaluation.
    pub fn new(id: impl Into<String>, options: HttpClientOptions) -> Result<Self, ClientError> {
        let client = options.connect()?;
        let endpoint = client.url(["engine", "evaluate"]);
        Ok(HttpPolicy {
            id: id.into(),
            client,
            endpoint,
            point: PhantomData,
        })
    }

    /// The URL evaluations are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    async fn ask(&self, context: &C) -> Result<PolicyDecision, RemoteError> {
        let request = EvaluateRequest {
            policy_id: &self.id,
            interception_point: C::POINT,
            context,
        };
        let response = self.client.post_json(&self.endpoint, &request).await?;
        // A decision is a decision whatever the answer's Content-Type says (or if it says
        // nothing): the body is read as JSON in every case, as the reference client does.
        let body: serde_json::Value = response.json_ignoring_content_type()?;
        serde_json::from_value(body)
            .map_err(|error| response.shape_error(format!("the body is not a decision: {error}")))
    }
}

#[async_trait]
impl<C: PolicyContext> Policy<C> for HttpPolicy<C> {
    fn id(&self) -> &str {
        &self.id
    }

    async fn evaluate(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        Ok(self.ask(context).await?)
    }
}
