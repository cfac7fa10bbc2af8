//! The policy the binding adds to the engine: a policy written in JavaScript, a
//! `portcullis_bindings::HostPolicy` over [`JsCall`]. The policy a rule that could not be
//! loaded gives is `portcullis_bindings::FailedPolicy`.
//!
//! A JavaScript policy is always called on the JavaScript thread. While the engine's
//! evaluation is polled on that thread (the first poll of [`crate::engine::NativeEngine`]'s
//! `evaluate`, inside [`on_js_thread`]), it is called there and then; once the evaluation went
//! on to the addon's runtime (it waited on a promise or on I/O), it is called through a
//! threadsafe function, which queues the call for the JavaScript thread.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use napi::Status;
use napi::bindgen_prelude::{Either3, Env, Function, FunctionRef, Promise};
use napi::threadsafe_function::ThreadsafeFunction;
use portcullis_bindings::{HostCall, HostPolicy, describe, is_call_context};
use portcullis_engine::{BoxError, PolicyContext, PolicyDecision, async_trait};
use serde::Deserialize;
use serde_json::Value;

/// How long a JavaScript policy may take when it names no `deadline` of its own: a promise
/// that never settles fails its evaluation after this long.
pub const DEFAULT_JS_DEADLINE: Duration = Duration::from_secs(30);

/// What the package's dispatcher of a JavaScript policy returns: `true` when `evaluate`
/// returned a plain `{ decision: "allow" }`; otherwise a report of what it gave, as JSON
/// (`{"value": ..}`, `{"not_json": ..}` or `{"threw": ..}`), at once when `evaluate` returned
/// a value, or a promise of it when `evaluate` returned one.
pub type Report = Either3<bool, String, Promise<String>>;

/// The JavaScript side of a JavaScript policy, as the package's layer hands it over: called
/// on the JavaScript thread with the context as JSON, or `null` for the same context as the
/// last one handed to a policy within the same call from JavaScript, it calls the policy's
/// `evaluate` and gives its [`Report`].
pub type HostEvaluate<'scope> = Function<'scope, Option<String>, Report>;

/// [`HostEvaluate`] as a call from another thread queues it. Weak: an engine holding it never
/// keeps Node running.
type QueuedEvaluate =
    ThreadsafeFunction<Option<String>, Report, Option<String>, Status, false, true>;

/// A call from JavaScript whose evaluation is being polled on this thread.
struct Frame {
    /// The JavaScript environment (its address).
    env: usize,
    /// Whether the last context handed to a policy within this call was the call's own: the
    /// next policy given it is told "the same" (`null`) instead of being given the text.
    last_was_call_context: bool,
}

thread_local! {
    /// The call from JavaScript whose evaluation this thread is polling, if any: see
    /// [`on_js_thread`].
    static FRAME: RefCell<Option<Frame>> = const { RefCell::new(None) };
}

/// Runs `poll` (a poll of an evaluation, inside a call from JavaScript) with the JavaScript
/// policies it reaches called directly on this thread, in `env`.
pub(crate) fn on_js_thread<T>(env: &Env, poll: impl FnOnce() -> T) -> T {
    /// Puts back the frame of the call this one is inside, if any, however `poll` ends.
    struct Restore(Option<Frame>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            FRAME.with(|frame| *frame.borrow_mut() = outer);
        }
    }
    let frame = Frame {
        env: env_address(env),
        last_was_call_context: false,
    };
    let _restore = Restore(FRAME.with(|current| current.borrow_mut().replace(frame)));
    poll()
}

fn env_address(env: &Env) -> usize {
    env.raw() as usize
}

/// What a JavaScript policy's `evaluate` gave, as the package's layer reports it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Settled {
    /// It returned (or its promise resolved to) this JSON value.
    Value(Value),
    /// It returned something JSON cannot carry (`undefined`, a function, a cycle), described.
    NotJson(String),
    /// It threw, or its promise rejected.
    Threw(Thrown),
}

/// What a JavaScript policy threw: its description, and the token under which the package's
/// layer keeps the thrown value itself (to hand it back as the error's `cause`).
#[derive(Debug, Clone, Deserialize)]
pub struct Thrown {
    /// The thrown value, described (`RangeError: out of range`).
    pub message: String,
    /// The token of the thrown value in the package's layer, when it kept it.
    #[serde(default)]
    pub token: Option<u64>,
}

/// Why a JavaScript policy gave no decision.
#[derive(Debug)]
pub enum HostPolicyError {
    /// It threw, or its promise rejected.
    Threw(Thrown),
    /// It gave something that is not a decision.
    NotADecision {
        /// What it gave, described (JSON, cut short when long).
        returned: String,
        /// Why that is not a decision.
        problem: String,
    },
    /// The call into JavaScript failed (Node is shutting down, or the binding is broken).
    Call(String),
}

impl fmt::Display for HostPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPolicyError::Threw(thrown) => write!(f, "the policy threw: {}", thrown.message),
            HostPolicyError::NotADecision { returned, problem } => {
                write!(
                    f,
                    "the policy returned {returned}, which is not a decision ({problem})"
                )
            }
            HostPolicyError::Call(problem) => {
                write!(f, "the policy could not be called: {problem}")
            }
        }
    }
}

impl std::error::Error for HostPolicyError {}

impl HostPolicyError {
    /// The token of the value a JavaScript policy threw, if `error` or one of its causes is
    /// such a throw.
    pub fn thrown_token(error: &(dyn std::error::Error + 'static)) -> Option<u64> {
        std::iter::successors(Some(error), |error| error.source()).find_map(|error| {
            match error.downcast_ref::<HostPolicyError>() {
                Some(HostPolicyError::Threw(thrown)) => thrown.token,
                _ => None,
            }
        })
    }
}

/// The report of a plain `{ decision: "allow" }`, which the package's layer writes as it is.
const ALLOW_REPORT: &str = r#"{"value":{"decision":"allow"}}"#;

/// Reads what the package's layer reported into a decision.
fn read_settled(settled: &str) -> Result<PolicyDecision, HostPolicyError> {
    if settled == ALLOW_REPORT {
        return Ok(PolicyDecision::allow());
    }
    let settled: Settled = serde_json::from_str(settled)
        .map_err(|error| HostPolicyError::Call(format!("unreadable report: {error}")))?;
    match settled {
        Settled::Value(value) => {
            PolicyDecision::deserialize(&value).map_err(|error| HostPolicyError::NotADecision {
                returned: describe(&value),
                problem: error.to_string(),
            })
        }
        Settled::NotJson(returned) => Err(HostPolicyError::NotADecision {
            returned,
            problem: "a decision is an object such as { decision: \"allow\" }".to_owned(),
        }),
        Settled::Threw(thrown) => Err(HostPolicyError::Threw(thrown)),
    }
}

/// A policy written in JavaScript, as the engine holds it (its id, deadline, and the call).
pub type JsPolicy = HostPolicy<JsCall>;

/// The call of a policy written in JavaScript: an object's `evaluate(ctx)` returning a
/// decision or a promise of one. It is called on the JavaScript thread: directly when the
/// evaluation is polled there, else queued from the runtime's thread.
pub struct JsCall {
    direct: FunctionRef<Option<String>, Report>,
    queued: QueuedEvaluate,
    /// The environment the function belongs to (its address).
    env: usize,
}

/// A policy with `id` whose decisions `evaluate` (of `env`) gives, failing after `deadline`
/// (or [`DEFAULT_JS_DEADLINE`]).
pub fn js_policy(
    env: &Env,
    id: String,
    evaluate: &HostEvaluate<'_>,
    deadline: Option<Duration>,
) -> napi::Result<JsPolicy> {
    let call = JsCall {
        direct: evaluate.create_ref()?,
        queued: evaluate
            .build_threadsafe_function::<Option<String>>()
            .weak::<true>()
            .build()?,
        env: env_address(env),
    };
    Ok(HostPolicy::new(
        id,
        call,
        deadline.unwrap_or(DEFAULT_JS_DEADLINE),
    ))
}

impl JsCall {
    /// Whether this is the function's JavaScript thread, inside a call from JavaScript: then
    /// it may be called here and now.
    fn callable_here(&self) -> bool {
        FRAME.with(|frame| {
            frame
                .borrow()
                .as_ref()
                .is_some_and(|frame| frame.env == self.env)
        })
    }

    /// `context` as JSON for a call on this thread, or `None` when it is the call's own
    /// context and the last policy called within this call was given it too: the package's
    /// layer then hands the policy the object it read for that one.
    fn json_here<C: PolicyContext>(context: &C) -> Result<Option<String>, BoxError> {
        let own = is_call_context(context);
        let last_was_own = FRAME.with(|frame| {
            frame
                .borrow_mut()
                .as_mut()
                .is_some_and(|frame| std::mem::replace(&mut frame.last_was_call_context, own))
        });
        if own && last_was_own {
            return Ok(None);
        }
        Ok(Some(portcullis_engine::json::to_string(context)?))
    }

    /// Calls the dispatcher on this thread (see [`callable_here`](Self::callable_here)).
    /// When the call fails, the package's layer may not have read the context it was handed:
    /// the next policy is handed its context as text.
    fn call_here(&self, context: Option<String>) -> napi::Result<Report> {
        let env = Env::from_raw(self.env as napi::sys::napi_env);
        let called = self
            .direct
            .borrow_back(&env)
            .and_then(|dispatcher| dispatcher.call(context));
        if called.is_err() {
            FRAME.with(|frame| {
                if let Some(frame) = frame.borrow_mut().as_mut() {
                    frame.last_was_call_context = false;
                }
            });
        }
        called
    }
}

fn call_failed(error: napi::Error) -> HostPolicyError {
    HostPolicyError::Call(error.reason.clone())
}

#[async_trait]
impl HostCall for JsCall {
    async fn decide<C: PolicyContext>(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        let report = if self.callable_here() {
            let context = Self::json_here(context)?;
            self.call_here(context).map_err(call_failed)?
        } else {
            let context = portcullis_engine::json::to_string(context)?;
            self.queued
                .call_async(Some(context))
                .await
                .map_err(call_failed)?
        };
        let settled = match report {
            Either3::A(true) => return Ok(PolicyDecision::allow()),
            Either3::A(false) => {
                return Err(
                    HostPolicyError::Call("the dispatcher returned false".to_owned()).into(),
                );
            }
            Either3::B(settled) => settled,
            Either3::C(pending) => pending.await.map_err(call_failed)?,
        };
        Ok(read_settled(&settled)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_decisions_and_says_what_is_not_one() {
        // The plain allow the package's layer writes as it is reads as the same decision
        // written any other way.
        assert_eq!(read_settled(ALLOW_REPORT).unwrap(), PolicyDecision::allow());
        assert_eq!(
            read_settled(r#"{ "value": { "decision": "allow" } }"#).unwrap(),
            PolicyDecision::allow()
        );

        let decision = read_settled(r#"{"value":{"decision":"deny","reason":"no"}}"#).unwrap();
        assert_eq!(decision, PolicyDecision::deny("no"));

        let error = read_settled(r#"{"value":{"decision":"maybe"}}"#).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with(
                r#"the policy returned {"decision":"maybe"}, which is not a decision"#
            ),
            "{message}"
        );

        let error = read_settled(r#"{"not_json":"undefined"}"#).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the policy returned undefined, which is not a decision")
        );

        let error = read_settled(r#"{"threw":{"message":"Error: boom","token":7}}"#).unwrap_err();
        assert_eq!(error.to_string(), "the policy threw: Error: boom");
        assert_eq!(HostPolicyError::thrown_token(&error), Some(7));
    }
}
