//! Where and how to export: keys, base URL, timeouts.

use std::fmt;
use std::time::Duration;

use crate::ObservabilityError;

/// The platform's hosted cloud, used when no base URL is given.
pub const DEFAULT_BASE_URL: &str = "https://cloud.langfuse.com";

/// The path of the OTLP/HTTP trace endpoint below the base URL.
pub const TRACES_PATH: &str = "/api/public/otel/v1/traces";

/// Environment variable holding the public key (the HTTP Basic user).
pub const PUBLIC_KEY_VAR: &str = "OBS_PUBLIC_KEY";
/// Environment variable holding the secret key (the HTTP Basic password).
pub const SECRET_KEY_VAR: &str = "OBS_SECRET_KEY";
/// Environment variable holding the base URL (optional; default [`DEFAULT_BASE_URL`]).
pub const BASE_URL_VAR: &str = "OBS_BASE_URL";

/// The default timeout of one export request (retries included).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The default `service.name` of the exported resource.
pub const DEFAULT_SERVICE_NAME: &str = "portcullis";

/// How to reach the observability platform.
///
/// Build with [`ObservabilityOptions::builder`] or read from the environment with
/// [`ObservabilityOptions::from_env`]; the keys are checked when the handler is created.
///
/// ```
/// use portcullis_observability::ObservabilityOptions;
///
/// let options = ObservabilityOptions::builder()
///     .public_key("pk-lf-1234")
///     .secret_key("sk-lf-5678")
///     .base_url("https://langfuse.example.com/")
///     .build();
/// assert_eq!(options.endpoint(), "https://langfuse.example.com/api/public/otel/v1/traces");
/// ```
#[derive(Clone)]
pub struct ObservabilityOptions {
    pub(crate) public_key: Option<String>,
    pub(crate) secret_key: Option<String>,
    pub(crate) base_url: String,
    pub(crate) timeout: Duration,
    pub(crate) service_name: String,
    /// Names to use in the error when keys are missing: option names or variable names.
    pub(crate) key_names: [&'static str; 2],
}

impl fmt::Debug for ObservabilityOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret key stays out of logs.
        f.debug_struct("ObservabilityOptions")
            .field("public_key", &self.public_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .finish()
    }
}

impl ObservabilityOptions {
    /// A builder with the defaults: base URL [`DEFAULT_BASE_URL`], timeout
    /// [`DEFAULT_TIMEOUT`], service name [`DEFAULT_SERVICE_NAME`], no keys.
    pub fn builder() -> ObservabilityOptionsBuilder {
        ObservabilityOptionsBuilder {
            options: ObservabilityOptions {
                public_key: None,
                secret_key: None,
                base_url: DEFAULT_BASE_URL.to_owned(),
                timeout: DEFAULT_TIMEOUT,
                service_name: DEFAULT_SERVICE_NAME.to_owned(),
                key_names: ["public_key", "secret_key"],
            },
        }
    }

    /// Options from the environment: [`OBS_PUBLIC_KEY`](PUBLIC_KEY_VAR),
    /// [`OBS_SECRET_KEY`](SECRET_KEY_VAR) and, optionally, [`OBS_BASE_URL`](BASE_URL_VAR).
    ///
    /// Fails when a key is unset or empty, naming the variables to set.
    pub fn from_env() -> Result<Self, ObservabilityError> {
        let read = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let mut options = ObservabilityOptions::builder().build();
        options.key_names = [PUBLIC_KEY_VAR, SECRET_KEY_VAR];
        options.public_key = read(PUBLIC_KEY_VAR);
        options.secret_key = read(SECRET_KEY_VAR);
        if let Some(base_url) = read(BASE_URL_VAR) {
            options.base_url = base_url;
        }
        options.check_keys()?;
        Ok(options)
    }

    /// The public key, if set.
    pub fn public_key(&self) -> Option<&str> {
        self.public_key.as_deref()
    }

    /// The base URL of the platform.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The URL spans are posted to: the base URL followed by [`TRACES_PATH`].
    pub fn endpoint(&self) -> String {
        format!("{}{TRACES_PATH}", self.base_url.trim_end_matches('/'))
    }

    /// The timeout of one export request, retries included.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `service.name` of the exported resource.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }

    /// Both keys, or an error naming those that are missing.
    pub(crate) fn check_keys(&self) -> Result<(&str, &str), ObservabilityError> {
        let public = self.public_key.as_deref().filter(|key| !key.is_empty());
        let secret = self.secret_key.as_deref().filter(|key| !key.is_empty());
        match (public, secret) {
            (Some(public), Some(secret)) => Ok((public, secret)),
            _ => {
                let mut missing = Vec::new();
                if public.is_none() {
                    missing.push(self.key_names[0]);
                }
                if secret.is_none() {
                    missing.push(self.key_names[1]);
                }
                Err(ObservabilityError::MissingKeys { missing })
            }
        }
    }
}

/// Builds [`ObservabilityOptions`].
#[must_use]
#[derive(Debug, Clone)]
pub struct ObservabilityOptionsBuilder {
    options: ObservabilityOptions,
}

impl ObservabilityOptionsBuilder {
    /// The public key (HTTP Basic user). Required.
    pub fn public_key(mut self, key: impl Into<String>) -> Self {
        self.options.public_key = Some(key.into());
        self
    }

    /// The secret key (HTTP Basic password). Required.
    pub fn secret_key(mut self, key: impl Into<String>) -> Self {
        self.options.secret_key = Some(key.into());
        self
    }

    /// The platform's base URL, such as `https://cloud.langfuse.com` or a self-hosted
    /// instance; spans go to `{base_url}/api/public/otel/v1/traces`.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.options.base_url = url.into();
        self
    }

    /// The timeout of one export request, retries included (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// The `service.name` of the exported resource (default `portcullis`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.options.service_name = name.into();
        self
    }

    /// The options. Keys are checked when the handler is created.
    pub fn build(self) -> ObservabilityOptions {
        self.options
    }
}
