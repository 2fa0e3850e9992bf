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
}

impl ApiError {
    /// 400 with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// 413 with a message.
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// 429 or 503 with `Retry-After`.
    pub fn overloaded(status: StatusCode, message: impl Into<String>, retry_after_s: u32) -> Self {
        debug_assert!(
            status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
        );
        ApiError {
            status,
            message: message.into(),
            retry_after_s: Some(retry_after_s),
        }
    }

    /// 500: a bug or an unexpected failure.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// Any status.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after_s: None,
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

/// API.md's error body, fields in the documented order.
#[derive(Serialize)]
struct ErrorBody<'a> {
    success: bool,
    error: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            success: false,
            error: &self.message,
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
