//! The stages every write shares, whatever its format: admission (auth, overload
//! refusal before anything is read), the body within limits, the database name, and
//! proposing the decoded command through Raft.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use quiver_raft::{CommandResult, WriteCommand, WriteError};
use tokio::sync::OwnedSemaphorePermit;

use super::body::read_limited;
use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

/// Seconds a client is told to wait when the node is overloaded.
pub const RETRY_AFTER_S: u32 = 1;

/// A write let in: its raw body and the permit that counts it as in flight.
pub struct Admitted {
    /// The body as sent (maybe compressed).
    pub body: Bytes,
    _permit: OwnedSemaphorePermit,
}

/// The database a write or query addresses: `x-arc-database`, then `db`, then
/// `bucket`, then `default`.
pub fn database_of(
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<String, ApiError> {
    let db = headers
        .get("x-arc-database")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| params.get("db").cloned())
        .or_else(|| params.get("bucket").cloned())
        .unwrap_or_else(|| "default".to_string());
    quiver_storage::validate_database_name(&db)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(db)
}

/// Checks the token, refuses with 429/503 when the node cannot take more (before
/// reading the body), then reads the body within `http.body_bytes_max`.
pub async fn admit(
    app: &AppState,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    body: Body,
) -> Result<Admitted, ApiError> {
    app.auth.check_request(headers, params, Permission::Write)?;
    let permit = app.write_permits.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!("quiver_writes_refused_total", "reason" => "in_flight").increment(1);
        ApiError::overloaded(
            StatusCode::TOO_MANY_REQUESTS,
            "too many writes in flight; retry later",
            RETRY_AFTER_S,
        )
    })?;
    if app.storage.is_over_memory_limit() {
        metrics::counter!("quiver_writes_refused_total", "reason" => "memory").increment(1);
        return Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            "buffers are full while flushes catch up; retry later",
            RETRY_AFTER_S,
        ));
    }
    let body = read_limited(body, headers, app.config.http.body_bytes_max).await?;
    Ok(Admitted {
        body,
        _permit: permit,
    })
}

/// Server time for rows that carry none.
pub fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// Proposes a decoded write and waits for it to be committed and applied.
pub async fn propose(app: &AppState, command: WriteCommand) -> Result<(), ApiError> {
    match app.node.write(command).await {
        Ok(CommandResult::Written { .. }) => Ok(()),
        Ok(CommandResult::Rejected { message }) => Err(ApiError::bad_request(message)),
        Ok(other) => Err(ApiError::internal(format!(
            "unexpected apply result {other:?}"
        ))),
        Err(WriteError::NotLeader { leader }) => Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no leader reachable (last known: {leader:?}); retry"),
            RETRY_AFTER_S,
        )),
        Err(WriteError::Unavailable(message)) => Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot commit writes now: {message}"),
            RETRY_AFTER_S,
        )),
        // Not a 503: that would promise nothing was written.
        Err(WriteError::Unknown(message)) => Err(ApiError::with_status(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the leader did not answer; the write may or may not have been applied: {message}"
            ),
        )),
    }
}
