//! Where an engine's audit records go: to the JavaScript `onAudit` with each call, and to a
//! native sink (the observability platform exporter) without crossing into JavaScript.

use napi::bindgen_prelude::{Env, PromiseRaw};
use napi::{Error, Result, Status};
use napi_derive::napi;
use portcullis_engine::AuditHandler;
use portcullis_engine::error::error_chain;
use portcullis_observability::ObservabilityAuditHandler;

/// The audit handler of an engine: records kept for `onAudit` when `keep`, and exported by
/// `sink` when there is one. `None` when neither.
pub(crate) fn audit_handler(
    keep: bool,
    sink: Option<&NativeAuditSink>,
) -> Option<impl AuditHandler> {
    portcullis_bindings::audit_handler(keep, sink.map(|sink| sink.handler.clone()))
}

/// The observability platform's settings, as `createObservabilityAuditHandler` takes them.
#[napi(object)]
pub struct ObservabilitySettings {
    /// The public key (HTTP Basic user).
    pub public_key: Option<String>,
    /// The secret key (HTTP Basic password).
    pub secret_key: Option<String>,
    /// The platform's address (default `https://cloud.langfuse.com`).
    pub base_url: Option<String>,
}

/// An audit sink that exports records as spans to an observability platform over OTLP/HTTP,
/// on a thread of its own: an engine given it hands it every record without a call into
/// JavaScript.
#[napi]
pub struct NativeAuditSink {
    handler: ObservabilityAuditHandler,
}

#[napi]
impl NativeAuditSink {
    /// Where spans are posted.
    #[napi(getter)]
    pub fn endpoint(&self) -> String {
        self.handler.endpoint().to_owned()
    }

    /// Exports every span buffered so far; rejects with why an export failed.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn flush<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let handler = self.handler.clone();
        env.spawn_future(async move {
            handler
                .flush()
                .await
                .map_err(|error| Error::new(Status::GenericFailure, error_chain(&error)))
        })
    }
}

/// A sink for the observability platform of `settings`, or of the `OBS_PUBLIC_KEY`,
/// `OBS_SECRET_KEY` and `OBS_BASE_URL` variables without settings. Throws when a key is
/// missing or the address is invalid.
#[napi]
pub fn observability_sink(settings: Option<ObservabilitySettings>) -> Result<NativeAuditSink> {
    let handler = portcullis_bindings::observability_handler(settings.map(|settings| {
        portcullis_bindings::ObservabilitySettings {
            public_key: settings.public_key,
            secret_key: settings.secret_key,
            base_url: settings.base_url,
        }
    }))
    .map_err(|error| Error::new(Status::InvalidArg, error_chain(&error)))?;
    Ok(NativeAuditSink { handler })
}
