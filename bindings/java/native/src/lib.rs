//! The Java binding of Portcullis: the JNI library behind the `dev.portcullis` jars
//! (`bindings/java`), loaded by `dev.portcullis.core.internal.NativeLibrary`.
//!
//! The engine's loop, its decisions, redactions, transforms and audit records stay in Rust;
//! this crate only translates. Contexts, decisions and outcomes cross as JSON text; on the
//! paths of every call (an engine's evaluation, a Java policy's), as UTF-8 byte arrays, which
//! cost one copy each way where a Java string costs two. A policy written in
//! Java is a Rust policy whose evaluation calls the Java object through JNI ([`JavaCall`]); the
//! native policies are the Rust backends. An evaluation runs on the calling Java thread: it is
//! first polled there, and when a policy waits (on the network), the thread blocks on the
//! library's tokio runtime until the outcome is ready, so Java policies are called on the
//! caller's thread in the usual case, and from any thread at full concurrency.
//!
//! Every entry point catches Rust errors and panics and throws them as Java exceptions
//! (`IllegalArgumentException` for bad input, `IllegalStateException` otherwise): no input
//! crashes the JVM. A handle Java holds (an engine, a native policy, an audit sink) is a
//! pointer made here, freed once by its `free` entry point (Java's `Cleaner`).
//!
//! The Java classes in `dev.portcullis.*` are the public API; the names here are their
//! building blocks and may change in any release.

pub mod entry;
mod handles;
mod policy;
mod runtime;

pub use handles::{EngineHandle, NativePolicy, PolicySetHandle};
pub use policy::{
    JavaCall, JavaPolicy, JavaPolicyError, Thrown, java_policy, read_decision, with_caller_context,
};
pub use runtime::{check_not_nested, run_blocking, runtime};
