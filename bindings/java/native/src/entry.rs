//! The native methods of `dev.portcullis.core.internal.Native`. Each runs its body through
//! `entry`, which turns an error into a Java exception and catches panics.
//!
//! Points are passed as their index (0 `input`, 1 `tool_call`, 2 `tool_result`, 3 `output`);
//! handles as `long`s (0 is none).
#![allow(non_snake_case)]

use std::time::Duration;

use jni::errors::{Error as JniError, ThrowRuntimeExAndDefault};
use jni::objects::{JByteArray, JClass, JObject, JObjectArray, JString, JThrowable};
use jni::strings::{JNIStr, JNIString};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned, jni_str};
use portcullis_engine::InterceptionPoint;
use portcullis_observability::ObservabilityAuditHandler;
use serde::Deserialize;

use crate::handles::{EngineHandle, NativePolicy, PolicySetHandle};
use crate::policy::{java_policy, with_caller_context};
use crate::runtime::run_blocking;

/// What an entry point's body can fail with.
enum Failure {
    /// A JNI call failed (an exception may be pending).
    Jni(JniError),
    /// The input is not valid: `IllegalArgumentException`.
    Invalid(String),
    /// Anything else: `IllegalStateException`.
    State(String),
}

impl From<JniError> for Failure {
    fn from(error: JniError) -> Failure {
        Failure::Jni(error)
    }
}

const ILLEGAL_ARGUMENT: &JNIStr = jni_str!("java/lang/IllegalArgumentException");
const ILLEGAL_STATE: &JNIStr = jni_str!("java/lang/IllegalStateException");

/// Throws `class` with `message`; the error to return after it.
fn throw(env: &mut Env<'_>, class: &JNIStr, message: &str) -> JniError {
    match env.throw_new(class, JNIString::from(message)) {
        Ok(()) => JniError::JavaException,
        Err(error) => error,
    }
}

/// Runs an entry point's body: an error becomes a Java exception (and `T::default()` is
/// returned to a caller that will see the exception), a panic too.
fn entry<'local, T: Default>(
    env: &mut EnvUnowned<'local>,
    body: impl FnOnce(&mut Env<'local>) -> Result<T, Failure>,
) -> T {
    env.with_env(|env| -> Result<T, JniError> {
        match body(env) {
            Ok(value) => Ok(value),
            Err(Failure::Jni(error)) => Err(error),
            Err(Failure::Invalid(message)) => Err(throw(env, ILLEGAL_ARGUMENT, &message)),
            Err(Failure::State(message)) => Err(throw(env, ILLEGAL_STATE, &message)),
        }
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

fn string(env: &Env<'_>, value: &JString<'_>, what: &str) -> Result<String, Failure> {
    if value.is_null() {
        return Err(Failure::Invalid(format!("{what} must not be null")));
    }
    Ok(value.try_to_string(env)?)
}

/// The text of a UTF-8 byte array Java gave (`String.getBytes(UTF_8)`).
fn utf8(env: &Env<'_>, value: &JByteArray<'_>, what: &str) -> Result<String, Failure> {
    if value.is_null() {
        return Err(Failure::Invalid(format!("{what} must not be null")));
    }
    String::from_utf8(env.convert_byte_array(value)?)
        .map_err(|error| Failure::Invalid(format!("{what} is not UTF-8: {error}")))
}

fn point(index: jint) -> Result<InterceptionPoint, Failure> {
    match index {
        0 => Ok(InterceptionPoint::Input),
        1 => Ok(InterceptionPoint::ToolCall),
        2 => Ok(InterceptionPoint::ToolResult),
        3 => Ok(InterceptionPoint::Output),
        other => Err(Failure::Invalid(format!(
            "unknown interception point {other}"
        ))),
    }
}

/// A handle given to Java: the boxed value, as a `long`.
fn into_handle<T>(value: T) -> jlong {
    Box::into_raw(Box::new(value)) as jlong
}

/// The value behind a handle Java holds (it keeps the handle's owner reachable for the call).
fn borrow<'a, T>(handle: jlong, what: &str) -> Result<&'a T, Failure> {
    if handle == 0 {
        return Err(Failure::State(format!("this {what} was closed")));
    }
    // SAFETY: a non-zero handle is one `into_handle::<T>` made for this kind of object, which
    // Java frees once (`free`), only after its owner is unreachable or closed.
    Ok(unsafe { &*(handle as *const T) })
}

/// Frees the value behind a handle.
fn free<T>(handle: jlong) {
    if handle != 0 {
        // SAFETY: as in `borrow`; Java calls this once per handle, after its last use.
        drop(unsafe { Box::from_raw(handle as *mut T) });
    }
}

fn sink(handle: jlong) -> Result<Option<ObservabilityAuditHandler>, Failure> {
    if handle == 0 {
        return Ok(None);
    }
    Ok(Some(
        borrow::<ObservabilityAuditHandler>(handle, "audit handler")?.clone(),
    ))
}

fn text<'local>(env: &mut Env<'local>, value: &str) -> Result<JObject<'local>, Failure> {
    Ok(JObject::from(env.new_string(value)?))
}

/// `long policySetNew(String onError)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policySetNew<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    on_error: JString<'local>,
) -> jlong {
    entry(&mut env, |env| {
        let on_error = string(env, &on_error, "onError")?;
        PolicySetHandle::new(&on_error)
            .map(into_handle)
            .map_err(Failure::Invalid)
    })
}

/// `void policySetAddJava(long set, int point, String id, Object adapter, long deadlineMillis)`:
/// a deadline of 0 or less is none.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policySetAddJava<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    set: jlong,
    index: jint,
    id: JString<'local>,
    adapter: JObject<'local>,
    deadline_millis: jlong,
) {
    entry(&mut env, |env| {
        let set = borrow::<PolicySetHandle>(set, "policy set")?;
        let point = point(index)?;
        let id = string(env, &id, "a policy's id")?;
        if adapter.is_null() {
            return Err(Failure::Invalid(format!("policy {id:?} is null")));
        }
        let deadline = u64::try_from(deadline_millis)
            .ok()
            .filter(|millis| *millis > 0)
            .map(Duration::from_millis);
        let policy = java_policy(env, id, &adapter, deadline).map_err(|_| {
            if env.exception_check() {
                env.exception_clear();
            }
            Failure::Invalid(
                "a Java policy's adapter must be a dev.portcullis.core.internal.HostPolicyAdapter"
                    .to_owned(),
            )
        })?;
        set.add(portcullis_bindings::PointPolicy::at(point, policy))
            .map_err(Failure::State)
    })
}

/// `void policySetAddNative(long set, int point, long policy)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policySetAddNative<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    set: jlong,
    index: jint,
    policy: jlong,
) {
    entry(&mut env, |_env| {
        let set = borrow::<PolicySetHandle>(set, "policy set")?;
        let point = point(index)?;
        let policy = borrow::<NativePolicy>(policy, "policy")?;
        let own = policy.policy.point();
        if own != point {
            return Err(Failure::Invalid(format!(
                "it is a {own} policy; it cannot go in {point}"
            )));
        }
        set.add(policy.policy.clone()).map_err(Failure::State)
    })
}

/// `void policySetFree(long set)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policySetFree<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    set: jlong,
) {
    entry(&mut env, |_env| {
        free::<PolicySetHandle>(set);
        Ok(())
    })
}

/// `long engineNew(long set, boolean audit, long sink)`: the set cannot be used again.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_engineNew<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    set: jlong,
    audit: jboolean,
    sink_handle: jlong,
) -> jlong {
    entry(&mut env, |_env| {
        let set = borrow::<PolicySetHandle>(set, "policy set")?;
        EngineHandle::new(set, audit, sink(sink_handle)?)
            .map(into_handle)
            .map_err(Failure::State)
    })
}

/// `long engineFromManifest(String path, boolean audit, long sink)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_engineFromManifest<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    path: JString<'local>,
    audit: jboolean,
    sink_handle: jlong,
) -> jlong {
    entry(&mut env, |env| {
        let path = string(env, &path, "the manifest's path")?;
        EngineHandle::from_manifest(&path, audit, sink(sink_handle)?)
            .map(into_handle)
            .map_err(Failure::Invalid)
    })
}

/// `byte[] engineEvaluate(long engine, int point, Object context, byte[] contextJson,
/// Throwable[] thrown)`: the outcome as JSON in UTF-8, or `null` for
/// [`FORWARD_UNCHANGED`](portcullis_bindings::FORWARD_UNCHANGED) (the usual outcome, which
/// Java then need not read); `contextJson` is the context as JSON in UTF-8; `context` is the
/// caller's context object, handed to Java policies while no policy has changed it;
/// `thrown[0]` is set to the exception a Java policy threw when the outcome is an evaluation
/// error it caused.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_engineEvaluate<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    engine: jlong,
    index: jint,
    caller: JObject<'local>,
    context: JByteArray<'local>,
    thrown_out: JObjectArray<'local, JThrowable<'local>>,
) -> JObject<'local> {
    entry(&mut env, |env| {
        let engine = borrow::<EngineHandle>(engine, "engine")?;
        let point = point(index)?;
        let context = utf8(env, &context, "the context")?;
        let (outcome, thrown) =
            with_caller_context(caller.as_raw(), || engine.evaluate(point, &context))
                .map_err(Failure::State)?;
        if let Some(thrown) = thrown
            && !thrown_out.is_null()
        {
            let exception = env.new_local_ref(&**thrown)?;
            thrown_out.set_element(env, 0, &exception)?;
        }
        if outcome == portcullis_bindings::FORWARD_UNCHANGED {
            return Ok(JObject::null());
        }
        Ok(JObject::from(
            env.byte_array_from_slice(outcome.as_bytes())?,
        ))
    })
}

/// `void engineGrant(long engine, String actionDigest, String by, long ttlNanos)`: records that
/// `by` approved the action whose digest is `actionDigest`, for one call within the lifetime.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_engineGrant<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    engine: jlong,
    digest: JString<'local>,
    by: JString<'local>,
    ttl_nanos: jlong,
) {
    entry(&mut env, |env| {
        let engine = borrow::<EngineHandle>(engine, "engine")?;
        let digest = string(env, &digest, "the action digest")?;
        let by = string(env, &by, "who approved")?;
        let ttl = u64::try_from(ttl_nanos)
            .ok()
            .filter(|nanos| *nanos > 0)
            .map(Duration::from_nanos)
            .ok_or_else(|| Failure::Invalid(format!("ttl must be positive, not {ttl_nanos} ns")))?;
        engine.grant(&digest, &by, ttl).map_err(Failure::State)
    })
}

/// `void engineFree(long engine)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_engineFree<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    engine: jlong,
) {
    entry(&mut env, |_env| {
        free::<EngineHandle>(engine);
        Ok(())
    })
}

/// Builds a native policy of the point at `index` with `id` and the string arguments `args`
/// (each with what it is, for the error when it is null): its handle.
fn native_policy<'local, const N: usize>(
    env: &mut EnvUnowned<'local>,
    index: jint,
    id: &JString<'local>,
    args: [(&JString<'local>, &str); N],
    build: impl FnOnce(InterceptionPoint, &str, [String; N]) -> Result<NativePolicy, String>,
) -> jlong {
    entry(env, |env| {
        let point = point(index)?;
        let id = string(env, id, "a policy's id")?;
        let mut read = [const { String::new() }; N];
        for (slot, (value, what)) in read.iter_mut().zip(args) {
            *slot = string(env, value, what)?;
        }
        build(point, &id, read)
            .map(into_handle)
            .map_err(Failure::Invalid)
    })
}

/// `long dslPolicy(int point, String id, String dir)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_dslPolicy<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    index: jint,
    id: JString<'local>,
    dir: JString<'local>,
) -> jlong {
    native_policy(
        &mut env,
        index,
        &id,
        [(&dir, "the policy directory")],
        |point, id, [dir]| Ok(NativePolicy::dsl(point, id, &dir)),
    )
}

/// `long regoPolicy(int point, String id, String bundle)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_regoPolicy<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    index: jint,
    id: JString<'local>,
    bundle: JString<'local>,
) -> jlong {
    native_policy(
        &mut env,
        index,
        &id,
        [(&bundle, "the bundle's path")],
        |point, id, [bundle]| NativePolicy::rego(point, id, &bundle),
    )
}

/// `long regoServerPolicy(int point, String id, String optionsJson, String packagePath)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_regoServerPolicy<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    index: jint,
    id: JString<'local>,
    options: JString<'local>,
    package: JString<'local>,
) -> jlong {
    native_policy(
        &mut env,
        index,
        &id,
        [
            (&options, "the client options"),
            (&package, "the package path"),
        ],
        |point, id, [options, package]| NativePolicy::rego_server(point, id, &options, &package),
    )
}

/// `long httpPolicy(int point, String id, String optionsJson)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_httpPolicy<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    index: jint,
    id: JString<'local>,
    options: JString<'local>,
) -> jlong {
    native_policy(
        &mut env,
        index,
        &id,
        [(&options, "the client options")],
        |point, id, [options]| NativePolicy::http(point, id, &options),
    )
}

/// `String policyInfo(long policy)`: `{"id", "point", "problems", "warnings"}`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policyInfo<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    policy: jlong,
) -> JObject<'local> {
    entry(&mut env, |env| {
        let info = borrow::<NativePolicy>(policy, "policy")?.info();
        text(env, &info)
    })
}

/// `String policyEvaluate(long policy, String contextJson)`: `{"decision": ..}` or
/// `{"error": ..}`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policyEvaluate<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    policy: jlong,
    context: JString<'local>,
) -> JObject<'local> {
    entry(&mut env, |env| {
        let policy = borrow::<NativePolicy>(policy, "policy")?;
        let context = string(env, &context, "the context")?;
        let decided = policy.evaluate(&context).map_err(Failure::State)?;
        text(env, &decided)
    })
}

/// `void policyFree(long policy)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_policyFree<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    policy: jlong,
) {
    entry(&mut env, |_env| {
        free::<NativePolicy>(policy);
        Ok(())
    })
}

/// The observability platform's settings, as `ObservabilityOptions` gives them (JSON).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObservabilitySettings {
    #[serde(default)]
    public_key: Option<String>,
    #[serde(default)]
    secret_key: Option<String>,
    #[serde(default)]
    base_url: Option<String>,
}

/// `long observabilitySink(String settingsJson)`: from the `OBS_*` variables when `null`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_observabilitySink<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    settings: JString<'local>,
) -> jlong {
    entry(&mut env, |env| {
        let settings = if settings.is_null() {
            None
        } else {
            let settings = string(env, &settings, "the settings")?;
            let settings: ObservabilitySettings = serde_json::from_str(&settings)
                .map_err(|error| Failure::Invalid(format!("invalid settings: {error}")))?;
            Some(portcullis_bindings::ObservabilitySettings {
                public_key: settings.public_key,
                secret_key: settings.secret_key,
                base_url: settings.base_url,
            })
        };
        let handler = {
            let _entered = crate::runtime::runtime().map_err(Failure::State)?.enter();
            portcullis_bindings::observability_handler(settings)
        };
        handler
            .map(into_handle)
            .map_err(|error| Failure::Invalid(portcullis_engine::error::error_chain(&error)))
    })
}

/// `String sinkEndpoint(long sink)`: where spans are posted.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_sinkEndpoint<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    sink: jlong,
) -> JObject<'local> {
    entry(&mut env, |env| {
        let endpoint = borrow::<ObservabilityAuditHandler>(sink, "audit handler")?
            .endpoint()
            .to_owned();
        text(env, &endpoint)
    })
}

/// `void sinkFlush(long sink)`: exports every span buffered so far; throws why an export
/// failed.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_sinkFlush<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    sink: jlong,
) {
    entry(&mut env, |_env| {
        let handler = borrow::<ObservabilityAuditHandler>(sink, "audit handler")?;
        run_blocking(handler.flush())
            .map_err(Failure::State)?
            .map_err(|error| Failure::State(portcullis_engine::error::error_chain(&error)))
    })
}

/// `void sinkFree(long sink)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_portcullis_core_internal_Native_sinkFree<'local>(
    mut env: EnvUnowned<'local>,
    _class: JClass<'local>,
    sink: jlong,
) {
    entry(&mut env, |_env| {
        free::<ObservabilityAuditHandler>(sink);
        Ok(())
    })
}
