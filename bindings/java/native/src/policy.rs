//! The policy the binding adds to the engine for a policy written in Java: a
//! `portcullis_bindings::HostPolicy` over [`JavaCall`], which calls the Java object through JNI
//! on whatever thread the engine evaluates on (the caller's, most of the time).

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jni::errors::Error as JniError;
use jni::ids::JMethodID;
use jni::objects::{JByteArray, JObject, JString, JThrowable};
use jni::refs::{Global, IntoAuto};
use jni::signature::ReturnType;
use jni::sys::jobject;
use jni::vm::{AttachConfig, AttachmentExceptionPolicy, JavaVM};
use jni::{Env, JValue, jni_sig, jni_str};
use portcullis_bindings::{HostCall, HostPolicy, describe};
use portcullis_engine::{BoxError, PolicyContext, PolicyDecision, async_trait};
use serde::Deserialize;
use serde_json::Value;

/// A Java exception, held for as long as the error that carries it.
pub type Thrown = Arc<Global<JThrowable<'static>>>;

/// Why a Java policy gave no decision.
#[derive(Debug)]
pub enum JavaPolicyError {
    /// It threw.
    Threw {
        /// The exception, described (`java.lang.IllegalStateException: boom`).
        message: String,
        /// The exception itself, handed back as the cause of the `PolicyEvaluationError`.
        exception: Thrown,
    },
    /// It returned `null`.
    ReturnedNull,
    /// It returned something that is not a decision.
    NotADecision {
        /// What it returned, described (JSON, cut short when long).
        returned: String,
        /// Why that is not a decision.
        problem: String,
    },
    /// The call into Java failed (the JVM refused it).
    Call(String),
}

impl fmt::Display for JavaPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JavaPolicyError::Threw { message, .. } => write!(f, "the policy threw {message}"),
            JavaPolicyError::ReturnedNull => {
                f.write_str("the policy returned null, which is not a decision")
            }
            JavaPolicyError::NotADecision { returned, problem } => write!(
                f,
                "the policy returned {returned}, which is not a decision ({problem})"
            ),
            JavaPolicyError::Call(problem) => {
                write!(f, "the policy could not be called: {problem}")
            }
        }
    }
}

impl std::error::Error for JavaPolicyError {}

impl JavaPolicyError {
    /// The exception a Java policy threw, if `error` or one of its causes is such a throw.
    pub fn thrown(error: &(dyn std::error::Error + 'static)) -> Option<Thrown> {
        std::iter::successors(Some(error), |error| error.source()).find_map(|error| {
            match error.downcast_ref::<JavaPolicyError>() {
                Some(JavaPolicyError::Threw { exception, .. }) => Some(Arc::clone(exception)),
                _ => None,
            }
        })
    }
}

thread_local! {
    /// The Java context object of the call this thread is evaluating (a local reference of
    /// the native method running on this thread), or null.
    static CALLER_CONTEXT: Cell<jobject> = const { Cell::new(std::ptr::null_mut()) };
}

/// Runs `call` with `context` (a local reference of the native method running on this thread,
/// valid until it returns) as the Java object of the call's context: a Java policy called on
/// this thread on that very context (no policy changed it) is given the object itself rather
/// than a copy read from JSON.
pub fn with_caller_context<T>(context: jobject, call: impl FnOnce() -> T) -> T {
    /// Puts the previous object back, even when `call` panics.
    struct Restore(jobject);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER_CONTEXT.set(self.0);
        }
    }
    let _restore = Restore(CALLER_CONTEXT.replace(context));
    call()
}

/// Reads the decision a Java policy gave (as JSON, `None` for `null`; the empty string is a
/// plain `allow`, which the adapter gives without writing it out).
pub fn read_decision(returned: Option<&str>) -> Result<PolicyDecision, JavaPolicyError> {
    let returned = returned.ok_or(JavaPolicyError::ReturnedNull)?;
    if returned.is_empty() {
        return Ok(PolicyDecision::allow());
    }
    let value: Value =
        serde_json::from_str(returned).map_err(|error| JavaPolicyError::NotADecision {
            returned: returned.chars().take(200).collect(),
            problem: error.to_string(),
        })?;
    PolicyDecision::deserialize(&value).map_err(|error| JavaPolicyError::NotADecision {
        returned: describe(&value),
        problem: error.to_string(),
    })
}

/// A policy written in Java, as the engine holds it (its id, deadline, and the call).
pub type JavaPolicy = HostPolicy<JavaCall>;

/// The call of a policy written in Java: its `dev.portcullis.core.internal.HostPolicyAdapter`,
/// whose `evaluate(byte[])` reads the context from JSON (UTF-8) and `evaluateCaller(Object)`
/// takes the caller's own object, calls the user's policy, and gives its decision as JSON in
/// UTF-8 (no bytes for a plain `allow`, `null` for `null`), or throws what it threw.
pub struct JavaCall {
    adapter: Global<JObject<'static>>,
    /// `byte[] evaluate(byte[])`.
    evaluate: JMethodID,
    /// `byte[] evaluateCaller(Object)`.
    evaluate_caller: JMethodID,
}

/// A policy with `id` whose decisions the Java `adapter` (a `HostPolicyAdapter`) gives; with a
/// `deadline`, a decision that comes later is an evaluation error (a Java policy runs on the
/// caller's thread and is not interrupted; its late answer is not used). Without one, the
/// engine keeps no timer. Fails when `adapter` is not an adapter.
pub fn java_policy(
    env: &mut Env<'_>,
    id: String,
    adapter: &JObject<'_>,
    deadline: Option<Duration>,
) -> Result<JavaPolicy, JniError> {
    let class = env.get_object_class(adapter)?;
    let evaluate = env.get_method_id(&class, jni_str!("evaluate"), jni_sig!("([B)[B"))?;
    let evaluate_caller = env.get_method_id(
        &class,
        jni_str!("evaluateCaller"),
        jni_sig!("(Ljava/lang/Object;)[B"),
    )?;
    let call = JavaCall {
        adapter: env.new_global_ref(adapter)?,
        evaluate,
        evaluate_caller,
    };
    Ok(match deadline {
        Some(deadline) => HostPolicy::new(id, call, deadline),
        None => HostPolicy::without_deadline(id, call),
    })
}

#[async_trait]
impl HostCall for JavaCall {
    async fn decide<C: PolicyContext>(&self, context: &C) -> Result<PolicyDecision, BoxError> {
        // On the caller's thread, on the caller's own context: the Java object itself.
        let caller = CALLER_CONTEXT.get();
        let argument = if !caller.is_null() && portcullis_bindings::is_call_context(context) {
            Argument::Caller(caller)
        } else {
            let mut json = Vec::with_capacity(256);
            portcullis_engine::json::to_writer(&mut json, context)?;
            Argument::Json(json)
        };
        let vm = JavaVM::singleton().map_err(|error| JavaPolicyError::Call(error.to_string()))?;
        // The caller's thread is attached already; a thread of the runtime is attached for the
        // call only, so that it never keeps the JVM from exiting. No local frame is pushed:
        // `call` deletes the references it makes (the ones a scoped attachment makes go with
        // it), and handles the exceptions the call raises itself.
        let config = || {
            AttachConfig::new()
                .scoped(true)
                .exceptions_policy(AttachmentExceptionPolicy::Ignore)
        };
        let returned = vm
            .attach_current_thread_with_config(config, None, |env| {
                let returned = self.call(env, &argument);
                if returned.is_err() && env.exception_check() {
                    env.exception_clear();
                }
                returned
            })
            .map_err(|error| JavaPolicyError::Call(error.to_string()))?;
        let returned = returned?
            .map(String::from_utf8)
            .transpose()
            .map_err(|error| JavaPolicyError::NotADecision {
                returned: String::from_utf8_lossy(error.as_bytes())
                    .chars()
                    .take(200)
                    .collect(),
                problem: error.utf8_error().to_string(),
            })?;
        Ok(read_decision(returned.as_deref())?)
    }
}

/// What a Java policy is given: the caller's context object, or a context as JSON.
enum Argument {
    /// The caller's object (a local reference of the native method on this thread).
    Caller(jobject),
    /// The context, as JSON (UTF-8).
    Json(Vec<u8>),
}

impl JavaCall {
    /// Calls `adapter.evaluateCaller(context)` or `adapter.evaluate(json)`: what it returned,
    /// or what it threw. The local references it makes are deleted before it returns (should
    /// a JNI call fail half-way, one may be left to the native method's frame or to the
    /// thread's scoped attachment, which free it).
    fn call(
        &self,
        env: &mut Env<'_>,
        argument: &Argument,
    ) -> Result<Result<Option<Vec<u8>>, JavaPolicyError>, JniError> {
        let returned = match argument {
            Argument::Caller(context) => {
                // SAFETY: `context` is a local reference of the native method running on this
                // thread (see `with_caller_context`), valid until it returns, which is after
                // this call; this wrapper does not delete it.
                let context = unsafe { JObject::from_raw(env, *context) };
                // SAFETY: the method was looked up on the adapter's class with this signature:
                // one object argument, an object (a string) returned.
                unsafe {
                    env.call_method_unchecked(
                        &*self.adapter,
                        self.evaluate_caller,
                        ReturnType::Object,
                        &[JValue::Object(&context).as_jni()],
                    )
                }
            }
            Argument::Json(json) => {
                let json = env.byte_array_from_slice(json)?;
                // SAFETY: as above, with a byte array argument.
                let returned = unsafe {
                    env.call_method_unchecked(
                        &*self.adapter,
                        self.evaluate,
                        ReturnType::Object,
                        &[JValue::Object(&json).as_jni()],
                    )
                };
                env.delete_local_ref(json);
                returned
            }
        };
        match returned {
            Ok(returned) => {
                let returned = returned.l()?;
                if returned.is_null() {
                    return Ok(Ok(None));
                }
                // SAFETY: both methods return a `byte[]` (their signatures were checked when
                // they were looked up), and `returned` is the only wrapper of this reference.
                let returned = unsafe { JByteArray::from_raw(env, returned.into_raw()) };
                // A plain allow, the usual answer, is no bytes: nothing to copy.
                let bytes = if returned.len(env)? == 0 {
                    Vec::new()
                } else {
                    env.convert_byte_array(&returned)?
                };
                env.delete_local_ref(returned);
                Ok(Ok(Some(bytes)))
            }
            Err(JniError::JavaException) => {
                let Some(exception) = env.exception_occurred() else {
                    return Err(JniError::JavaException);
                };
                env.exception_clear();
                let exception = exception.auto();
                let message = describe_throwable(env, &exception)
                    .unwrap_or_else(|_| "an exception that cannot be described".to_owned());
                let exception = env.new_global_ref(&*exception)?;
                Ok(Err(JavaPolicyError::Threw {
                    message,
                    exception: Arc::new(exception),
                }))
            }
            Err(error) => Err(error),
        }
    }
}

/// `throwable.toString()`: its class and message. What that throws is cleared.
fn describe_throwable(env: &mut Env<'_>, throwable: &JThrowable<'_>) -> Result<String, JniError> {
    let described = (|| {
        let text = env
            .call_method(
                throwable,
                jni_str!("toString"),
                jni_sig!("()Ljava/lang/String;"),
                &[],
            )?
            .l()?;
        let text = env.cast_local::<JString>(text)?.auto();
        text.try_to_string(env)
    })();
    if env.exception_check() {
        env.exception_clear();
    }
    described
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_decisions_and_says_what_is_not_one() {
        let decision = read_decision(Some(r#"{"decision":"deny","reason":"no"}"#)).unwrap();
        assert_eq!(decision, PolicyDecision::deny("no"));
        assert_eq!(read_decision(Some("")).unwrap(), PolicyDecision::allow());

        let error = read_decision(None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the policy returned null, which is not a decision"
        );

        let error = read_decision(Some(r#"{"decision":"maybe"}"#)).unwrap_err();
        assert!(
            error.to_string().starts_with(
                r#"the policy returned {"decision":"maybe"}, which is not a decision"#
            ),
            "{error}"
        );
        let error = read_decision(Some("{not json")).unwrap_err();
        assert!(error.to_string().contains("which is not a decision"));
    }
}
