//! The one error type of this crate.

use std::fmt;

/// What can go wrong creating the handler or exporting spans.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObservabilityError {
    /// A key is missing or empty. `missing` names what to set: the options
    /// (`public_key`, `secret_key`) or, from the environment, the variables
    /// (`OBS_PUBLIC_KEY`, `OBS_SECRET_KEY`).
    MissingKeys {
        /// The missing options or variables.
        missing: Vec<&'static str>,
    },
    /// The base URL is not an `http` or `https` URL.
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client or the exporter could not be built.
    Setup {
        /// What failed.
        reason: String,
    },
    /// Spans could not be delivered to the platform.
    Export {
        /// The URL spans were posted to.
        endpoint: String,
        /// How many spans were lost since the previous flush (0 when the failure happened
        /// before any batch was sent, such as a flush that timed out).
        lost_spans: u64,
        /// The first failure since the previous flush.
        reason: String,
    },
}

impl fmt::Display for ObservabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObservabilityError::MissingKeys { missing } => {
                write!(
                    f,
                    "observability platform keys are missing: set {}",
                    missing.join(" and ")
                )
            }
            ObservabilityError::InvalidBaseUrl { url, reason } => {
                write!(f, "invalid observability base URL `{url}`: {reason}")
            }
            ObservabilityError::Setup { reason } => {
                write!(f, "cannot set up the observability exporter: {reason}")
            }
            ObservabilityError::Export {
                endpoint,
                lost_spans,
                reason,
            } => {
                write!(f, "exporting spans to {endpoint} failed")?;
                if *lost_spans > 0 {
                    write!(f, " ({lost_spans} spans lost)")?;
                }
                write!(f, ": {reason}")
            }
        }
    }
}

impl std::error::Error for ObservabilityError {}
