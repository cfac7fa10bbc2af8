//! Audit records kept with the call they belong to, so a binding hands them to the host
//! language's handler before the call settles, and a native sink (the observability platform
//! exporter) that receives them without crossing into the host language.

use std::cell::RefCell;
use std::future::Future;

use portcullis_engine::{AuditHandler, AuditRecord};
use portcullis_observability::{
    ObservabilityAuditHandler, ObservabilityError, ObservabilityOptions,
};

tokio::task_local! {
    /// The audit records of the evaluation running in this task, each as its JSON text.
    static RECORDS: RefCell<Kept>;
}

/// How the records a call keeps write the context each policy evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordContexts {
    /// Whole, in every record.
    Whole,
    /// Whole, except the context the call was given while no policy has changed it: in its
    /// place the record has `0`, and the outcome carries that context once, as
    /// `call_context` (see [`crate::outcome`]). A host language reads the context once and
    /// shares it among the records, as the policies that evaluated it shared it.
    CallContextOnce,
}

/// The audit records a call keeps, each as its JSON text.
#[derive(Debug)]
struct Kept {
    /// The records, in the order they were produced.
    records: Vec<String>,
    contexts: RecordContexts,
    /// Whether a record refers to the call's context instead of writing it.
    refers_to_call_context: bool,
}

/// Keeps a record with the call it belongs to, as JSON text: written once, straight from the
/// record (no JSON value built and dropped on the way), it is what a host language reads.
fn keep_record(record: &AuditRecord<'_>) {
    // Outside a call of a binding (a task the engine spawned) there is no call to report to.
    let _ = RECORDS.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        let refer = kept.contexts == RecordContexts::CallContextOnce
            && crate::outcome::is_call_audit_context(&record.context);
        // A record is plain data with string keys: writing it cannot fail.
        let written = if refer {
            portcullis_engine::json::to_string(&record.with_context(0))
        } else {
            portcullis_engine::json::to_string(record)
        };
        if let Ok(json) = written {
            kept.records.push(json);
            kept.refers_to_call_context |= refer;
        }
    });
}

/// The audit handler of an engine: records kept for the host's handler when `keep` (see
/// [`with_records`]), and exported by `sink` when there is one. `None` when neither.
pub fn audit_handler(
    keep: bool,
    sink: Option<ObservabilityAuditHandler>,
) -> Option<impl AuditHandler> {
    let active = keep || sink.is_some();
    let handler = move |record: &AuditRecord<'_>| {
        if keep {
            keep_record(record);
        }
        if let Some(sink) = &sink {
            sink.handle(record);
        }
    };
    active.then_some(handler)
}

/// Runs `call`, and with `keep`, returns the audit records it produced (each as its JSON text,
/// contexts whole) beside its output.
pub async fn with_records<F: Future>(keep: bool, call: F) -> (F::Output, Option<Vec<String>>) {
    if !keep {
        return (call.await, None);
    }
    let (output, records) = keeping(RecordContexts::Whole, call).await;
    (output, Some(records))
}

/// Runs `call`, keeping the audit records it produces (each as its JSON text) with their
/// contexts as `contexts` says.
pub(crate) async fn keeping<F: Future>(
    contexts: RecordContexts,
    call: F,
) -> (F::Output, Vec<String>) {
    let kept = Kept {
        records: Vec::new(),
        contexts,
        refers_to_call_context: false,
    };
    RECORDS
        .scope(RefCell::new(kept), async move {
            let output = call.await;
            let records = RECORDS.with(|kept| std::mem::take(&mut kept.borrow_mut().records));
            (output, records)
        })
        .await
}

/// Whether a record the call in this task kept refers to the call's context.
pub(crate) fn refers_to_call_context() -> bool {
    RECORDS
        .try_with(|kept| kept.borrow().refers_to_call_context)
        .unwrap_or(false)
}

/// The observability platform's settings a binding was given; each may be missing (the
/// exporter says which one it needs).
#[derive(Debug, Default)]
pub struct ObservabilitySettings {
    /// The public key (HTTP Basic user).
    pub public_key: Option<String>,
    /// The secret key (HTTP Basic password).
    pub secret_key: Option<String>,
    /// The platform's address (default `https://cloud.langfuse.com`).
    pub base_url: Option<String>,
}

/// The exporter of `settings`, or of the `OBS_PUBLIC_KEY`, `OBS_SECRET_KEY` and
/// `OBS_BASE_URL` variables without settings; the error says which key is missing or why the
/// address is invalid.
pub fn observability_handler(
    settings: Option<ObservabilitySettings>,
) -> Result<ObservabilityAuditHandler, ObservabilityError> {
    let Some(settings) = settings else {
        return ObservabilityAuditHandler::from_env();
    };
    let mut options = ObservabilityOptions::builder();
    if let Some(key) = settings.public_key {
        options = options.public_key(key);
    }
    if let Some(key) = settings.secret_key {
        options = options.secret_key(key);
    }
    if let Some(url) = settings.base_url {
        options = options.base_url(url);
    }
    ObservabilityAuditHandler::new(options.build())
}
