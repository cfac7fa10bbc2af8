//! The HTTP client both remote backends of Portcullis use (`portcullis-http` and the `server`
//! feature of `portcullis-rego`): options, one connection pool per options value, a time-out on every
//! request, a cap on response bodies enforced while reading them, and errors that say what went
//! wrong with which request.
//!
//! This crate is internal to the workspace. An application meets its options under the name of
//! the backend it uses — `portcullis_http::HttpClientOptions` and
//! `portcullis_rego::server::RegoServerClientOptions` are both [`ClientOptions`] — and, when a
//! request fails, a [`RemoteError`] as the cause of a `PolicyEvaluationError`.
//!
//! One module per part:
//! - [`options`] has [`ClientOptions`] (base URL, time-out, headers, body cap, connection limit)
//!   and the connection pool they own;
//! - [`client`] has [`RemoteClient`], which sends requests on that pool;
//! - [`response`] has [`RemoteResponse`], a 2xx answer read whole;
//! - [`error`] has [`ClientError`] (options that cannot make a client) and [`RemoteError`] (a
//!   request that failed). Errors follow std's convention: `Display` says what went wrong at
//!   this level, the transport's own error is the `source()`.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod client;
pub mod error;
pub mod options;
pub mod response;

pub use client::RemoteClient;
pub use error::{ClientError, RemoteError, RemoteErrorKind, ServiceError};
pub use options::{
    ClientOptions, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_TIMEOUT,
};
pub use response::RemoteResponse;

/// HTTP request methods (from the `http` crate), as [`RemoteError::new`] takes them.
pub use reqwest::Method;
