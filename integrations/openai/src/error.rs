//! The errors the guard adds to async-openai's, and how to find a denial in an `OpenAIError`.

use std::error::Error as StdError;
use std::fmt;

use async_openai::error::OpenAIError;
use portcullis_engine::{
    ApprovalRequest, EngineError, InterceptionPoint, PolicyDenialError, PolicyEvaluationError,
};
use serde_json::{Value, json};

/// A request or answer the guard cannot map to or from the policy contexts, or a request it
/// does not guard.
///
/// The guard fails closed: a request or answer it cannot evaluate is not forwarded. The
/// error reaches the caller as [`OpenAIError::Boxed`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardError {
    /// The request body is not a JSON object of the endpoint's shape (a chat completion
    /// without a `messages` array, a Responses API request whose `input` is neither a string
    /// nor a list).
    InvalidRequest {
        /// What is wrong with it.
        problem: String,
    },
    /// A tool call's `arguments` are not a JSON object, so tool-call policies cannot see them.
    InvalidToolArguments {
        /// The tool the model called.
        tool_name: String,
        /// The id of the call in the answer.
        call_id: String,
        /// What is wrong with the arguments.
        problem: String,
    },
    /// An input transformation added or removed messages; the guard can only rewrite the
    /// text of the messages the request already had.
    MessagesReshaped {
        /// Messages the policies saw.
        before: usize,
        /// Messages after the policies ran.
        after: usize,
    },
    /// The answer from the server could not be read.
    Body {
        /// What went wrong.
        problem: String,
    },
    /// A request to an endpoint the guard does not map to the policy contexts (anything but
    /// `POST …/chat/completions` and `POST …/responses`) that the application did not list
    /// with [`PortcullisLayer::pass_through`](crate::PortcullisLayer::pass_through). It was
    /// not sent.
    Unguarded {
        /// The request's method.
        method: String,
        /// The request's URL path.
        path: String,
    },
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::InvalidRequest { problem } => {
                write!(f, "portcullis: cannot evaluate the request: {problem}")
            }
            GuardError::InvalidToolArguments {
                tool_name,
                call_id,
                problem,
            } => write!(
                f,
                "portcullis: the arguments of tool call {call_id:?} to {tool_name:?} are not a JSON object ({problem}); the call is not forwarded"
            ),
            GuardError::MessagesReshaped { before, after } => write!(
                f,
                "portcullis: an input policy turned {before} messages into {after}; the OpenAI integration can rewrite message text but not add or remove messages"
            ),
            GuardError::Body { problem } => {
                write!(f, "portcullis: cannot read the model's answer: {problem}")
            }
            GuardError::Unguarded { method, path } => write!(
                f,
                "portcullis: refused {method} {path}: only chat completions and the Responses API are guarded; list the path with PortcullisLayer::pass_through to forward it unguarded"
            ),
        }
    }
}

impl StdError for GuardError {}

/// Why a guarded exchange failed: what a policy decided, or what the guard could not do.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A policy denied the request or the answer.
    Denied(PolicyDenialError),
    /// A policy could not be evaluated.
    Evaluation(PolicyEvaluationError),
    /// A policy escalated and no approval came.
    ApprovalRequired(Box<ApprovalRequest>),
    /// The guard could not map the request or the answer, or refused the request.
    Guard(GuardError),
}

impl From<EngineError> for Failure {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Denied(denial) => Failure::Denied(denial),
            EngineError::Evaluation(error) => Failure::Evaluation(error),
            EngineError::ApprovalRequired(request) => Failure::ApprovalRequired(request),
        }
    }
}

impl From<GuardError> for Failure {
    fn from(error: GuardError) -> Self {
        Failure::Guard(error)
    }
}

impl Failure {
    /// The error an async-openai caller receives in [`OpenAIError::Boxed`]: the engine's
    /// denial, evaluation error or approval request, or the guard's error, as each is
    /// documented ([`denial`], [`evaluation_error`], [`approval_request`] find them).
    pub(crate) fn into_boxed(self) -> Box<dyn StdError + Send + Sync> {
        match self {
            Failure::Denied(denial) => Box::new(denial),
            Failure::Evaluation(error) => Box::new(error),
            Failure::ApprovalRequired(request) => Box::new(EngineError::ApprovalRequired(request)),
            Failure::Guard(error) => Box::new(error),
        }
    }
}

/// The policy denial behind an error returned by a guarded client, if it is one.
///
/// Finds input denials, output denials, tool-call denials with
/// [`ToolDenial::Fail`](crate::ToolDenial::Fail) (the error is
/// [`OpenAIError::Boxed`] around the [`PolicyDenialError`]), and denials that ended a stream
/// (chat or Responses API: the stream's last item is an `OpenAIError::JSONDeserialize`
/// carrying the guard's error event, since async-openai does not read such events).
///
/// ```
/// use async_openai::error::OpenAIError;
/// use portcullis_engine::{InterceptionPoint, PolicyDenialError};
///
/// let denial = PolicyDenialError::new("no_secrets", InterceptionPoint::Input, None);
/// let error = OpenAIError::Boxed(Box::new(denial));
/// let found = portcullis_openai::denial(&error).map(|denial| denial.policy_id().to_owned());
/// assert_eq!(found.as_deref(), Some("no_secrets"));
/// ```
pub fn denial(error: &OpenAIError) -> Option<PolicyDenialError> {
    match error {
        OpenAIError::Boxed(inner) => inner.downcast_ref::<PolicyDenialError>().cloned(),
        OpenAIError::JSONDeserialize(_, content) => denial_of_event(content),
        _ => None,
    }
}

/// The denial in an error event written by [`error_event`].
fn denial_of_event(content: &str) -> Option<PolicyDenialError> {
    let event: Value = serde_json::from_str(content).ok()?;
    let error = event.get("error")?;
    if error.get("type").and_then(Value::as_str) != Some(DENIAL_TYPE) {
        return None;
    }
    let details = error.get("portcullis")?;
    let policy_id = details.get("policy_id")?.as_str()?;
    let point: InterceptionPoint =
        serde_json::from_value(details.get("interception_point")?.clone()).ok()?;
    let reason = details
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(PolicyDenialError::new(policy_id, point, reason))
}

/// The `error.type` of a denial event.
const DENIAL_TYPE: &str = "policy_denied";

/// The `error.type` of the event that ends a stream waiting for an approval.
const APPROVAL_TYPE: &str = "approval_required";

/// The approval request inside an error returned by a guarded client, if a policy escalated
/// and no approval came (no stored grant, no resolver, a pending answer or the time-out).
///
/// The application shows the request to a person, records a grant for its digest with
/// [`Approvals::grant`](portcullis_engine::Approvals::grant), and sends the request again:
/// the retried call with the same action proceeds once. Whole answers carry the engine's
/// [`EngineError::ApprovalRequired`] as [`OpenAIError::Boxed`], in process, whole; streams
/// end with an error event of type `approval_required` that names the request (its id,
/// point, policy ids, reasons and digest) without the held action: the request found there
/// has a `null` context.
///
/// ```
/// use async_openai::error::OpenAIError;
/// use portcullis_engine::{ApprovalRequest, EngineError, InterceptionPoint};
///
/// let request = ApprovalRequest::new(
///     InterceptionPoint::ToolCall,
///     vec!["ask_before_email".into()],
///     vec![],
///     serde_json::json!({"tool_name": "send_email"}),
/// );
/// let error = OpenAIError::Boxed(Box::new(EngineError::ApprovalRequired(Box::new(request.clone()))));
/// assert_eq!(portcullis_openai::approval_request(&error), Some(request));
/// ```
pub fn approval_request(error: &OpenAIError) -> Option<ApprovalRequest> {
    match error {
        OpenAIError::Boxed(inner) => inner
            .downcast_ref::<EngineError>()
            .and_then(EngineError::as_approval_request)
            .cloned(),
        OpenAIError::JSONDeserialize(_, content) => {
            let event: Value = serde_json::from_str(content).ok()?;
            let error = event.get("error")?;
            if error.get("type").and_then(Value::as_str) != Some(APPROVAL_TYPE) {
                return None;
            }
            let mut request = error.get("portcullis")?.get("approval_request")?.clone();
            // The event names the request without its context (see `named_request`).
            request
                .as_object_mut()?
                .entry("context")
                .or_insert(Value::Null);
            serde_json::from_value(request).ok()
        }
        _ => None,
    }
}

/// The OpenAI-style error event that ends a guarded stream early.
pub(crate) fn error_event(failure: &Failure) -> Value {
    let (message, kind) = match failure {
        Failure::Denied(denial) => {
            return json!({ "error": {
                "message": format!("denied by policy \"{}\": {denial}", denial.policy_id()),
                "type": DENIAL_TYPE,
                "code": denial.policy_id(),
                "param": null,
                "portcullis": {
                    "policy_id": denial.policy_id(),
                    "interception_point": denial.interception_point(),
                    "reason": denial.reason(),
                },
            }});
        }
        Failure::ApprovalRequired(request) => {
            return json!({ "error": {
                "message": request.to_string(),
                "type": APPROVAL_TYPE,
                "code": request.policy_ids.first(),
                "param": null,
                "portcullis": { "approval_request": named_request(request) },
            }});
        }
        Failure::Evaluation(error) => (
            portcullis_engine::error::error_chain(error),
            "policy_evaluation_error",
        ),
        Failure::Guard(error) => (
            portcullis_engine::error::error_chain(error),
            "portcullis_error",
        ),
    };
    json!({ "error": {
        "message": message,
        "type": kind,
        "code": null,
        "param": null,
    }})
}

/// What an error event says of an approval request: what names it (its id, its point, the
/// policies that escalated, their reasons, the action's digest), never its `context`. The
/// context holds what the escalation holds back (an answer waiting for a person, a tool
/// call's arguments): the client that would receive it is the party the approval guards
/// against, so it learns which action waits, not what the action says.
fn named_request(request: &ApprovalRequest) -> Value {
    json!({
        "id": request.id,
        "interception_point": request.interception_point,
        "policy_ids": request.policy_ids,
        "reasons": request.reasons,
        "action_digest": request.action_digest,
    })
}

/// The evaluation error inside an error returned by a guarded client, if it is one
/// (whole answers only: in a stream it is an error event whose `type` is
/// `policy_evaluation_error`).
pub fn evaluation_error(error: &OpenAIError) -> Option<&PolicyEvaluationError> {
    match error {
        OpenAIError::Boxed(inner) => inner.downcast_ref::<PolicyEvaluationError>(),
        _ => None,
    }
}

pub(crate) fn from_guard(error: GuardError) -> OpenAIError {
    OpenAIError::Boxed(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_event_names_the_request_without_what_it_holds() {
        let request = ApprovalRequest::new(
            InterceptionPoint::Output,
            vec!["approve_wires".into()],
            vec!["wire transfers need a person".into()],
            json!({ "response": { "role": "assistant", "content": "wire to account 4242" } }),
        );
        let failure = Failure::ApprovalRequired(Box::new(request.clone()));
        let event = error_event(&failure).to_string();
        assert!(!event.contains("4242"), "{event}");
        assert!(!event.contains("context"), "{event}");

        // Read back from a stream's last item: the same request, its context left out.
        let error = OpenAIError::JSONDeserialize(
            serde_json::from_str::<Value>("{").expect_err("not JSON"),
            event,
        );
        let found = approval_request(&error).expect("the request");
        assert_eq!(found.context, Value::Null);
        assert_eq!(
            ApprovalRequest {
                context: Value::Null,
                ..request
            },
            found
        );
    }
}
