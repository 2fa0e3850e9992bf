//! Turns a query into a streamed HTTP response, shared by every query endpoint.
//!
//! The query is admitted, planned and started, then the handler waits for the first
//! chunk of the encoded result (the format's header plus the first rows, or the whole
//! result when it is empty or the format needs all of it). Until then every failure gets
//! its own status (400, 429, 504, 507, ...). After that the status line (200) is on the
//! wire and the rest streams as the query produces it, at most a couple of chunks ahead
//! of the client, so memory stays bounded however large the result.
//!
//! An error after streaming began cannot change the status any more. The body is then
//! cut off: hyper ends the connection without the final empty chunk, so every HTTP
//! client reports an incomplete response instead of taking a truncated result for a
//! whole one. The error is logged and counted (`quiver_query_aborted_total`).

use std::time::Instant;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use quiver_query::encode::Format;
use quiver_query::{EncodedStream, QueryAccess};

use super::error::ApiError;
use super::AppState;

/// The API's answer for a query error: its status and message, with `Retry-After` when
/// the node is busy or its stored files cannot be read now.
pub fn query_error(e: quiver_query::Error) -> ApiError {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(retry_after_s) = e.retry_after_s() {
        metrics::counter!("quiver_queries_refused_total").increment(1);
        return ApiError::overloaded(status, e.to_string(), retry_after_s);
    }
    ApiError::with_status(status, e.to_string())
}

/// Runs `sql` against `database` (seeing only what `access` allows) and answers with its result in `format`, streamed.
/// `started` is when the request arrived.
pub async fn stream_query(
    app: &AppState,
    database: &str,
    access: &QueryAccess,
    sql: &str,
    format: Format,
    started: Instant,
) -> Result<Response, ApiError> {
    let mut stream = app
        .query
        .execute_encoded_as(database, sql, format.encoder(started), access)
        .await
        .map_err(query_error)?;
    let first = match stream.next().await {
        Some(Ok(chunk)) => Some(chunk),
        Some(Err(e)) => return Err(query_error(e)),
        None => None,
    };
    let body = futures::stream::unfold(
        Some(BodyState {
            stream,
            first,
            started,
        }),
        next_chunk,
    );
    Ok((
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(body),
    )
        .into_response())
}

struct BodyState {
    stream: EncodedStream,
    first: Option<Bytes>,
    started: Instant,
}

/// One step of the response body: the next chunk, an error that cuts the body off, or
/// the end (which records the query's duration).
async fn next_chunk(
    state: Option<BodyState>,
) -> Option<(Result<Bytes, quiver_query::Error>, Option<BodyState>)> {
    let mut state = state?;
    if let Some(chunk) = state.first.take() {
        return Some((Ok(chunk), Some(state)));
    }
    match state.stream.next().await {
        Some(Ok(chunk)) => Some((Ok(chunk), Some(state))),
        Some(Err(e)) => {
            metrics::counter!("quiver_query_aborted_total").increment(1);
            tracing::warn!(error = %e, "query failed while its result was streaming; response cut off");
            Some((Err(e), None))
        }
        None => {
            metrics::histogram!("quiver_query_seconds")
                .record(state.started.elapsed().as_secs_f64());
            None
        }
    }
}
