//! One error type for every handler, rendered as API.md's JSON error body.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::auth::AuthError;

/// An error answer: status, message, and for overload the seconds to wait.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Message for `{"success": false, "error": ...}`.
    pub message: String,
    /// `Retry-After` seconds, for 429/503.
    pub retry_after_s: Option<u32>,
    /// Rejected lines of a line-protocol write (at most [`REJECTED_LISTED_MAX`]).
    pub rejected: Vec<RejectedLine>,
}

/// Most rejected lines listed in one answer (API.md).
pub const REJECTED_LISTED_MAX: usize = 100;

/// One rejected line in a partial-write answer.
#[derive(Debug, Clone, Serialize)]
pub struct RejectedLine {
    /// 1-based line number.
    pub line: usize,
    /// Why.
    pub error: String,
    /// The first 64 bytes of the line.
    pub text: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>, retry_after_s: Option<u32>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after_s,
            rejected: Vec::new(),
        }
    }

    /// 400 with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message, None)
    }

    /// 413 with a message.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message, None)
    }

    /// 429 or 503 with `Retry-After`.
    pub fn overloaded(status: StatusCode, message: impl Into<String>, retry_after_s: u32) -> Self {
        debug_assert!(
            status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
        );
        Self::new(status, message, Some(retry_after_s))
    }

    /// 500: a bug or an unexpected failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message, None)
    }

    /// Any status.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        Self::new(status, message, None)
    }

    /// 400 for a line-protocol write with rejected lines (the first
    /// [`REJECTED_LISTED_MAX`] are listed).
    pub fn partial(message: impl Into<String>, mut rejected: Vec<RejectedLine>) -> Self {
        rejected.truncate(REJECTED_LISTED_MAX);
        ApiError {
            rejected,
            ..Self::new(StatusCode::BAD_REQUEST, message, None)
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthenticated => {
                ApiError::with_status(StatusCode::UNAUTHORIZED, "missing or invalid token")
            }
            AuthError::Forbidden => ApiError::with_status(
                StatusCode::FORBIDDEN,
                "token lacks the permission for this request",
            ),
        }
    }
}

/// API.md's error body, fields in the documented order, then InfluxDB 2's `code` and
/// `message`: Telegraf's `outputs.influxdb_v2` and InfluxDB's client libraries read only
/// those two, so without them a dropped batch is logged with no reason. `line` (the first
/// rejected line, as InfluxDB 2 and QuestDB name it) is what QuestDB's clients show next
/// to the message.
#[derive(Serialize)]
struct ErrorBody<'a> {
    success: bool,
    error: &'a str,
    #[serde(skip_serializing_if = "<[RejectedLine]>::is_empty")]
    rejected: &'a [RejectedLine],
    code: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<usize>,
}

/// InfluxDB 2's error code for a status (its `platform/errors` names).
fn influx_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "invalid",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not found",
        StatusCode::PAYLOAD_TOO_LARGE => "request too large",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable entity",
        StatusCode::TOO_MANY_REQUESTS => "too many requests",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_client_error() => "invalid",
        _ => "internal error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            success: false,
            error: &self.message,
            rejected: &self.rejected,
            code: influx_code(self.status),
            message: &self.message,
            line: self.rejected.first().map(|r| r.line),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}
