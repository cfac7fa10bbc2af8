//! A loaded manifest → an engine builder: the policy set, the session store, the approval
//! time-out and the audit sinks.

use std::sync::{Arc, Mutex};

use portcullis_engine::session::MemorySessionStore;
use portcullis_engine::{AuditHandler, AuditRecord, BoxError, PolicyEngine, PolicyEngineBuilder};

use crate::JsonlAuditLog;
use crate::build::LoadedManifest;
use crate::diagnostic::{Diagnostic, ManifestErrors, Report};
use crate::model::{ApprovalStore, SessionStore};

impl LoadedManifest {
    /// An engine builder with everything the manifest configures:
    ///
    /// - the policy set;
    /// - `sessions`: a [`MemorySessionStore`] (with `ttl` and `capacity` when given), or a
    ///   Redis store for a `redis://` URL (feature `redis`; connected here, within its
    ///   time-out);
    /// - `approvals`: `timeout`, how long the engine waits for an approval resolver and a
    ///   request waits for a person; `store`, a Redis grant store for a `redis://` URL
    ///   (feature `redis`; connected here), shared with every replica and proxy naming it
    ///   (without one, the engine's own store in memory);
    /// - `audit`: every sink named, fanned out to one handler: `jsonl` appends each record
    ///   to the file ([`JsonlAuditLog`], created `0600` or made so, written by a thread of its own, with
    ///   `on_failure` deciding what a record it cannot write does to its call); `otlp` exports each record as a span
    ///   (`engine.policy.evaluate`, as the `otel` handler makes them) over OTLP/HTTP with
    ///   protobuf bodies to `<otlp>/v1/traces` (feature `otel`).
    ///
    /// A sink or store that cannot be opened (a log file in a folder that does not exist, a
    /// Redis that does not answer, a feature this build lacks) is an error with the
    /// manifest's file, line and column; every such problem is reported at once.
    ///
    /// The builder can take more before [`build`](PolicyEngineBuilder::build) (an approval
    /// resolver, a grant store); calling its `on_audit` would replace the manifest's sinks:
    /// use [`into_engine_builder_with_audit`](Self::into_engine_builder_with_audit) to add a
    /// handler of your own to them instead.
    ///
    /// # Exporting spans and shutting down
    ///
    /// Spans are batched and posted from a background thread. Take the
    /// [`AuditExport`] handle with [`audit_export`](Self::audit_export) *before* this call:
    /// `flush().await` posts what is buffered, `shutdown().await` posts what is left and
    /// stops the exporter; call it before the process exits. Without a call, the exporter
    /// shuts down (posting what is left) when the engine and every handle are dropped.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use portcullis_manifest::{CodeRegistry, Manifest};
    ///
    /// let loaded = Manifest::load("portcullis.yaml", &CodeRegistry::new())?;
    /// let export = loaded.audit_export();
    /// let engine = loaded.into_engine_builder().await?.build();
    /// // ... evaluate ...
    /// drop(engine);
    /// export.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn into_engine_builder(self) -> Result<PolicyEngineBuilder, ManifestErrors> {
        self.assemble(None).await
    }

    /// [`into_engine_builder`](Self::into_engine_builder), with `handler` receiving every
    /// audit record too (before the manifest's sinks).
    pub async fn into_engine_builder_with_audit(
        self,
        handler: impl AuditHandler,
    ) -> Result<PolicyEngineBuilder, ManifestErrors> {
        self.assemble(Some(Arc::new(handler))).await
    }

    /// The manifest for trial runs (test cases, what-if replays): no audit sink, and sessions
    /// kept in this process's memory even where the manifest names Redis (with the same
    /// `ttl`), so that a trial neither writes to the audit trail nor changes a session that
    /// real agents share; approvals kept in memory too (a trial neither spends a fleet's grant
    /// nor asks its approvers). The policy set, the session flow and the approval time-out
    /// stay.
    #[must_use]
    pub fn for_trials(mut self) -> Self {
        self.trial = true;
        self.manifest.audit = crate::AuditSettings::default();
        if let Some(sessions) = &mut self.manifest.sessions
            && matches!(sessions.store, SessionStore::Redis(_))
        {
            sessions.store = SessionStore::Memory;
        }
        if let Some(approvals) = &mut self.manifest.approvals {
            approvals.store = ApprovalStore::Memory;
        }
        self
    }

    /// The handle that flushes and shuts down the manifest's span export (`audit.otlp`);
    /// a handle with nothing to do when the manifest exports no spans. Take it before
    /// [`into_engine_builder`](Self::into_engine_builder): that call starts the exporter and
    /// every handle taken from this manifest controls it.
    pub fn audit_export(&self) -> AuditExport {
        self.export.clone()
    }

    async fn assemble(
        self,
        extra: Option<Arc<dyn AuditHandler>>,
    ) -> Result<PolicyEngineBuilder, ManifestErrors> {
        let LoadedManifest {
            manifest,
            set,
            warnings,
            export,
            trial,
            ..
        } = self;
        let mut report = Report::default();
        let mut builder = PolicyEngine::builder().policy_set(set);

        let mut sinks: Vec<Arc<dyn AuditHandler>> = extra.into_iter().collect();
        if let Some(path) = &manifest.audit.jsonl {
            match JsonlAuditLog::open_with(path, manifest.audit.on_failure) {
                Ok(log) => sinks.push(Arc::new(log)),
                Err(error) => report.push(
                    Diagnostic::error(
                        &manifest.path,
                        manifest.audit.jsonl_position,
                        format!(
                            "`audit.jsonl`: cannot open {} for appending: {}",
                            path.display(),
                            portcullis_engine::error::error_chain(&error)
                        ),
                    )
                    .with_help(
                        "the folder must exist and be writable, and an existing file be the \
                         service's own (it is set to mode 0600)",
                    ),
                ),
            }
        }
        if let Some(endpoint) = &manifest.audit.otlp {
            match otlp_sink(endpoint, &export) {
                Ok(sink) => sinks.push(sink),
                Err((message, help)) => report.push(
                    Diagnostic::error(&manifest.path, manifest.audit.otlp_position, message)
                        .with_help(help),
                ),
            }
        }
        match sinks.len() {
            0 => {}
            1 => {
                if let Some(sink) = sinks.pop() {
                    builder = builder.on_audit(Shared(sink));
                }
            }
            _ => builder = builder.on_audit(FanOut(sinks)),
        }

        if let Some(sessions) = &manifest.sessions {
            match &sessions.store {
                SessionStore::Memory => {
                    let mut store = MemorySessionStore::new();
                    if let Some(ttl) = sessions.ttl {
                        store = store.with_ttl(ttl);
                    }
                    if let Some(capacity) = sessions.capacity {
                        store = store.with_capacity(capacity);
                    }
                    builder = builder.sessions(store);
                }
                SessionStore::Redis(url) => match redis_store(url, sessions).await {
                    Ok(store) => builder = builder.shared_sessions(store),
                    Err((message, help)) => report.push(
                        Diagnostic::error(&manifest.path, Some(sessions.position), message)
                            .with_help(help),
                    ),
                },
            }
        }

        if let Some(approvals) = &manifest.approvals {
            if let Some(timeout) = approvals.timeout {
                builder = builder.approval_timeout(timeout);
            }
            if let ApprovalStore::Redis(url) = &approvals.store {
                match redis_grant_store(url, approvals.password_env.as_deref()).await {
                    Ok(store) => builder = builder.shared_grant_store(store),
                    Err((message, help)) => report.push(
                        Diagnostic::error(&manifest.path, Some(approvals.position), message)
                            .with_help(help),
                    ),
                }
            }
        }

        if report.has_errors() {
            let (errors, _) = report.split();
            // Nothing is exported for a builder that is not returned.
            export.clear();
            return Err(ManifestErrors::new(errors, warnings));
        }
        if !trial {
            // What a reload of this manifest will not change (see `reload`).
            crate::watch::note_assembled(&manifest);
        }
        Ok(builder)
    }
}

/// One handler shared with the caller.
struct Shared(Arc<dyn AuditHandler>);

impl AuditHandler for Shared {
    fn handle(&self, record: &AuditRecord<'_>) {
        self.0.handle(record);
    }

    fn try_handle(&self, record: &AuditRecord<'_>) -> Result<(), BoxError> {
        self.0.try_handle(record)
    }
}

/// Several handlers, each given every record, in order.
struct FanOut(Vec<Arc<dyn AuditHandler>>);

impl AuditHandler for FanOut {
    fn handle(&self, record: &AuditRecord<'_>) {
        for handler in &self.0 {
            handler.handle(record);
        }
    }

    /// Every handler takes the record; the first refusal is returned.
    fn try_handle(&self, record: &AuditRecord<'_>) -> Result<(), BoxError> {
        let mut outcome = Ok(());
        for handler in &self.0 {
            let taken = handler.try_handle(record);
            if outcome.is_ok() {
                outcome = taken;
            }
        }
        outcome
    }
}

/// A message and what to do about it.
type Problem = (String, String);

#[cfg(feature = "redis")]
async fn redis_store(
    url: &str,
    settings: &crate::SessionSettings,
) -> Result<Arc<dyn portcullis_engine::session::SessionStore>, Problem> {
    let mut builder = portcullis_redis::RedisSessionStore::builder(url);
    if let Some(ttl) = settings.ttl {
        builder = builder.ttl(ttl);
    }
    if let Some(password) = redis_password("sessions", settings.password_env.as_deref())? {
        builder = builder.password(password);
    }
    match builder.connect().await {
        Ok(store) => Ok(Arc::new(store)),
        Err(error) => Err((
            format!("`sessions.store`: {error}"),
            "start Redis, or check the URL (redis://host:port/db, rediss:// for TLS) and the password".to_owned(),
        )),
    }
}

/// The password a Redis store's `password_env` names, if it names one.
#[cfg(feature = "redis")]
fn redis_password(section: &str, variable: Option<&str>) -> Result<Option<String>, Problem> {
    let Some(variable) = variable else {
        return Ok(None);
    };
    match std::env::var(variable) {
        Ok(password) if !password.is_empty() => Ok(Some(password)),
        _ => Err((
            format!("`{section}.password_env`: the environment variable {variable} is not set"),
            format!("set {variable} to the Redis password"),
        )),
    }
}

#[cfg(feature = "redis")]
async fn redis_grant_store(
    url: &str,
    password_env: Option<&str>,
) -> Result<Arc<dyn portcullis_engine::GrantStore>, Problem> {
    let mut builder = portcullis_redis::RedisGrantStore::builder(url);
    if let Some(password) = redis_password("approvals", password_env)? {
        builder = builder.password(password);
    }
    match builder.connect().await {
        Ok(store) => Ok(Arc::new(store)),
        Err(error) => Err((
            format!("`approvals.store`: {error}"),
            "start Redis, or check the URL (redis://host:port/db, rediss:// for TLS) and the password".to_owned(),
        )),
    }
}

#[cfg(not(feature = "redis"))]
async fn redis_grant_store(
    _url: &str,
    _password_env: Option<&str>,
) -> Result<Arc<dyn portcullis_engine::GrantStore>, Problem> {
    Err((
        "this build cannot keep approvals in Redis".to_owned(),
        "build with the `redis` feature".to_owned(),
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis_store(
    _url: &str,
    _settings: &crate::SessionSettings,
) -> Result<Arc<dyn portcullis_engine::session::SessionStore>, Problem> {
    Err((
        "this build cannot keep sessions in Redis".to_owned(),
        "build with the `redis` feature".to_owned(),
    ))
}

#[cfg(feature = "otel")]
fn otlp_sink(endpoint: &str, export: &AuditExport) -> Result<Arc<dyn AuditHandler>, Problem> {
    let (provider, tracer, traces) = crate::otlp::start(endpoint)?;
    export.set(provider, traces);
    Ok(Arc::new(portcullis_otel::OtelAuditHandler::new(tracer)))
}

#[cfg(not(feature = "otel"))]
fn otlp_sink(_endpoint: &str, _export: &AuditExport) -> Result<Arc<dyn AuditHandler>, Problem> {
    Err((
        "this build cannot export spans over OTLP".to_owned(),
        "build with the `otel` feature".to_owned(),
    ))
}

/// Flushes and shuts down the span export a manifest's `audit.otlp` starts; see
/// [`LoadedManifest::into_engine_builder`].
///
/// Clones control the same exporter. Every method is a no-op when nothing is exported (no
/// `audit.otlp`, or the engine builder was not made yet).
#[derive(Clone, Default)]
pub struct AuditExport {
    slot: Arc<Mutex<Slot>>,
}

#[derive(Default)]
struct Slot {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    endpoint: Option<String>,
}

impl std::fmt::Debug for AuditExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditExport")
            .field("endpoint", &self.endpoint())
            .finish()
    }
}

impl AuditExport {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        match self.slot.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The URL spans are posted to, while exporting.
    pub fn endpoint(&self) -> Option<String> {
        self.lock().endpoint.clone()
    }

    #[cfg(feature = "otel")]
    fn set(&self, provider: opentelemetry_sdk::trace::SdkTracerProvider, endpoint: String) {
        let mut slot = self.lock();
        slot.provider = Some(provider);
        slot.endpoint = Some(endpoint);
    }

    fn clear(&self) {
        let mut slot = self.lock();
        #[cfg(feature = "otel")]
        {
            // Nothing was recorded with it: shutting down exports nothing.
            if let Some(provider) = slot.provider.take() {
                let _ = provider.shutdown();
            }
        }
        slot.endpoint = None;
    }

    /// Posts every span recorded so far and waits for the collector's answer (on a thread
    /// of its own: the async runtime is not blocked).
    pub async fn flush(&self) -> Result<(), AuditExportError> {
        #[cfg(feature = "otel")]
        {
            let (provider, endpoint) = {
                let slot = self.lock();
                (slot.provider.clone(), slot.endpoint.clone())
            };
            if let Some(provider) = provider {
                return off_thread(move || provider.force_flush())
                    .await
                    .map_err(|reason| AuditExportError {
                        endpoint: endpoint.unwrap_or_default(),
                        reason,
                    });
            }
        }
        Ok(())
    }

    /// Posts what is left and stops the exporter: records audited afterwards are not
    /// exported. Call it before the process exits.
    pub async fn shutdown(&self) -> Result<(), AuditExportError> {
        #[cfg(feature = "otel")]
        {
            let (provider, endpoint) = {
                let mut slot = self.lock();
                (slot.provider.take(), slot.endpoint.take())
            };
            if let Some(provider) = provider {
                return off_thread(move || provider.shutdown())
                    .await
                    .map_err(|reason| AuditExportError {
                        endpoint: endpoint.unwrap_or_default(),
                        reason,
                    });
            }
        }
        Ok(())
    }
}

/// Runs a blocking SDK call on a thread of its own and waits for it without blocking the
/// runtime.
#[cfg(feature = "otel")]
async fn off_thread(
    call: impl FnOnce() -> opentelemetry_sdk::error::OTelSdkResult + Send + 'static,
) -> Result<(), String> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("portcullis-audit-export".into())
        .spawn(move || {
            let _ = sender.send(call().map_err(|error| error.to_string()));
        })
        .map_err(|error| format!("cannot start a thread: {error}"))?;
    receiver
        .await
        .unwrap_or_else(|_| Err("the export thread stopped before it finished".to_owned()))
}

/// A span export that did not finish: where to, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditExportError {
    endpoint: String,
    reason: String,
}

impl AuditExportError {
    /// The URL spans were posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl std::fmt::Display for AuditExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exporting audit spans to {} failed: {}",
            self.endpoint, self.reason
        )
    }
}

impl std::error::Error for AuditExportError {}
