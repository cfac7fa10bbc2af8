//! The approval routes: the requests an escalation left waiting, and a person's grant or
//! refusal of one, on the engine's grant store (shared by every replica and proxy that names
//! the same Redis).

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use portcullis_engine::duration::parse_duration;
use portcullis_engine::{ApprovalRecord, ApprovalStatus, ApprovalVerdict, DecideError};
use serde_json::{Value, json};

use crate::service::{
    ApiError, Shared, authorize, json_body, json_response, read_body, require_json,
};

/// How long a grant stays valid when the request does not say: 15 minutes.
pub const DEFAULT_GRANT_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest validity a grant may be given: 30 days.
pub const MAX_GRANT_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// The longest name of an approver, and the longest reason, in bytes.
const MAX_TEXT: usize = 1024;

/// The `status` a query asks for (`status=pending`), if it asks.
fn status_of(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("status="))
}

fn store_failed(error: &dyn std::fmt::Display) -> ApiError {
    tracing::warn!(%error, "the grant store failed");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "approval_store_unavailable",
        format!("the grant store failed: {error}"),
    )
}

fn record_response(record: &ApprovalRecord) -> Response {
    json_response(StatusCode::OK, json_body(&record.to_json()))
}

/// `GET /v1/approvals?status=pending|granted|refused|all`: the records kept, newest first.
pub(crate) async fn list(shared: &Shared, headers: &HeaderMap, query: Option<&str>) -> Response {
    if let Err(error) = authorize(shared, headers) {
        return error.into_response();
    }
    let status = match status_of(query) {
        None | Some("all") => None,
        Some(name) => match ApprovalStatus::from_name(name) {
            Some(status) => Some(status),
            None => {
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    format!("`status` must be pending, granted, refused or all, not {name:?}"),
                )
                .into_response();
            }
        },
    };
    match shared.engine.approvals().list(status).await {
        Ok(records) => {
            let approvals: Vec<Value> = records.iter().map(ApprovalRecord::to_json).collect();
            json_response(
                StatusCode::OK,
                json_body(&json!({ "approvals": approvals })),
            )
        }
        Err(error) => store_failed(&error).into_response(),
    }
}

/// `GET /v1/approvals/{id}`.
pub(crate) async fn one(shared: &Shared, headers: &HeaderMap, id: &str) -> Response {
    if let Err(error) = authorize(shared, headers) {
        return error.into_response();
    }
    match shared.engine.approvals().get(id).await {
        Ok(Some(record)) => record_response(&record),
        Ok(None) => unknown(id).into_response(),
        Err(error) => store_failed(&error).into_response(),
    }
}

fn unknown(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_approval",
        format!("no approval request {id:?} is kept (never made, or expired)"),
    )
}

/// `POST /v1/approvals/{id}/grant` with `{"by", "ttl"}` (`ttl` a duration such as `"15m"`, or
/// a number of seconds; default [`DEFAULT_GRANT_TTL`]), and `POST /v1/approvals/{id}/refuse`
/// with `{"by", "reason"}`.
pub(crate) async fn decide(
    shared: &Shared,
    headers: &HeaderMap,
    id: &str,
    decision: &str,
    body: Body,
) -> Response {
    let verdict: fn(&serde_json::Map<String, Value>) -> Result<ApprovalVerdict, ApiError> =
        match decision {
            "grant" => grant,
            "refuse" => refuse,
            _ => {
                return ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no route /v1/approvals/{{id}}/{decision}: grant or refuse"),
                )
                .into_response();
            }
        };
    apply(shared, headers, id, body, verdict).await
}

/// A grant's verdict from its body's fields.
fn grant(fields: &serde_json::Map<String, Value>) -> Result<ApprovalVerdict, ApiError> {
    let by = approver(fields)?;
    let ttl = match fields.get("ttl") {
        None | Some(Value::Null) => DEFAULT_GRANT_TTL,
        Some(Value::String(text)) => parse_duration(text)
            .map_err(|problem| invalid(format!("`ttl` is not a duration: {problem}")))?,
        Some(Value::Number(seconds)) => seconds
            .as_u64()
            .map(Duration::from_secs)
            .ok_or_else(|| invalid("`ttl` in seconds must be a whole number"))?,
        Some(_) => {
            return Err(invalid(
                "`ttl` must be a duration (\"15m\") or a number of seconds",
            ));
        }
    };
    if ttl.is_zero() || ttl > MAX_GRANT_TTL {
        return Err(invalid("`ttl` must be longer than 0 and at most 30 days"));
    }
    Ok(ApprovalVerdict::Grant { by, ttl })
}

/// A refusal's verdict from its body's fields.
fn refuse(fields: &serde_json::Map<String, Value>) -> Result<ApprovalVerdict, ApiError> {
    let by = approver(fields)?;
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.len() <= MAX_TEXT => {
            Some(text.trim().to_owned()).filter(|text| !text.is_empty())
        }
        Some(Value::String(_)) => {
            return Err(invalid(format!(
                "`reason` must be at most {MAX_TEXT} bytes"
            )));
        }
        Some(_) => return Err(invalid("`reason` must be a string")),
    };
    Ok(ApprovalVerdict::Refuse { by, reason })
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

/// The body's `by`: who decides, a non-empty string.
fn approver(fields: &serde_json::Map<String, Value>) -> Result<String, ApiError> {
    match fields.get("by") {
        Some(Value::String(by)) if !by.trim().is_empty() && by.len() <= MAX_TEXT => {
            Ok(by.trim().to_owned())
        }
        Some(Value::String(_)) => Err(invalid(format!(
            "`by` must name who decides, in 1 to {MAX_TEXT} bytes"
        ))),
        _ => Err(invalid("`by` (who decides) is missing")),
    }
}

/// Reads a decision's body (JSON, within the body limit and read time), makes the verdict of
/// its fields with `verdict`, and applies it to the request `id`.
async fn apply(
    shared: &Shared,
    headers: &HeaderMap,
    id: &str,
    body: Body,
    verdict: impl FnOnce(&serde_json::Map<String, Value>) -> Result<ApprovalVerdict, ApiError>,
) -> Response {
    if let Err(error) = authorize(shared, headers).and_then(|()| require_json(headers)) {
        return error.into_response();
    }
    let read_by = Instant::now() + shared.limits.body_read_timeout;
    let bytes = match read_body(shared, body, read_by).await {
        Ok(bytes) => bytes,
        Err(error) => return error.into_response(),
    };
    let fields = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => return invalid("the body must be a JSON object").into_response(),
        Err(error) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_json",
                format!("the request body is not JSON: {error}"),
            )
            .into_response();
        }
    };
    let verdict = match verdict(&fields) {
        Ok(verdict) => verdict,
        Err(error) => return error.into_response(),
    };
    let by = match &verdict {
        ApprovalVerdict::Grant { by, .. } | ApprovalVerdict::Refuse { by, .. } => by.clone(),
    };
    match shared.engine.approvals().decide(id, verdict).await {
        Ok(record) => {
            tracing::info!(approval = %id, status = %record.status, %by, "approval decided");
            record_response(&record)
        }
        Err(DecideError::Unknown(_)) => unknown(id).into_response(),
        Err(DecideError::AlreadyDecided(record)) => {
            let body = json!({"error": {
                "code": "already_decided",
                "message": format!("approval request {id:?} was {} already", record.status),
            }, "approval": record.to_json()});
            json_response(StatusCode::CONFLICT, json_body(&body))
        }
        Err(DecideError::Invalid(message)) => invalid(message).into_response(),
        Err(DecideError::Store(error)) => store_failed(&error).into_response(),
    }
}
