//! The write pipeline every ingest endpoint shares; only the decode step depends on the
//! format (MessagePack in `msgpack.rs`, line protocol in `line_protocol.rs`, Prometheus
//! remote write in `prom_write.rs`).
//!
//! A write, from handler to 204, in the files that do the work:
//!
//! 1. `admission.rs`: token, node health, writes in flight, buffer memory, free disk
//!    and the byte budget; a refusal is 429/503 with `Retry-After`, sent after the body
//!    is drained so it reaches the client;
//! 2. `body.rs`: the body within `http.body_bytes_max` and `http.body_timeout_ms`, then
//!    gzip/zstd/snappy within `http.decompressed_bytes_max`;
//! 3. `msgpack.rs` / `line_protocol.rs` / `prom_write.rs` → quiver-storage: decode into Arrow batches,
//!    validated against the stored schema (on a blocking thread);
//! 4. here: the batches become one log command of at most `raft.entry_bytes_max`
//!    (`quiver_raft::WriteCommand`, Arrow IPC);
//! 5. `raft/src/node.rs` `RaftNode::write`: proposed on the leader (forwarded when this
//!    node follows) within `http.write_timeout_ms`;
//! 6. `raft/src/log_store.rs` → `wal/src/writer.rs`: appended and fdatasynced (group
//!    commit) on a majority;
//! 7. `raft/src/state_machine.rs` → `storage/src/store.rs` `apply_write`: the rows join
//!    the table's live buffer, visible to queries;
//! 8. back here: 204, or 400 listing the rejected lines (or series) of a partial write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use quiver_raft::{CommandResult, WriteCommand, WriteError};

use super::admission::{admit, charge_error, RETRY_AFTER_S};
use super::body::{decompress, read_limited};
use super::error::{ApiError, RejectedLine};
use super::AppState;

/// What a format's decode step produced from one body.
pub struct Decoded {
    /// Rows per measurement, validated against the stored schemas.
    pub tables: Vec<(String, RecordBatch)>,
    /// Lines (line protocol) or series (remote write) refused, in body order.
    pub rejected: Vec<RejectedLine>,
    /// Lines or series in the body, for the partial-write message.
    pub lines_total: usize,
    /// What `rejected` counts, for the message: `"lines"` or `"series"`.
    pub unit: &'static str,
    /// Whether the valid rows are written when some lines were refused.
    pub accept_partial: bool,
    /// Rows refused as older than their retention (MessagePack; line protocol lists
    /// them as rejected lines).
    pub expired: Option<Expired>,
}

/// Rows of a MessagePack write older than their measurement's retention: not written
/// (the rest is), and the answer is 400 saying so.
pub struct Expired {
    /// Rows refused.
    pub rows: usize,
    /// Rows in the request.
    pub rows_total: usize,
    /// The first refused table and its cutoff, for the message.
    pub first: String,
}

/// A format's decode step: the decompressed body in, validated batches out. Runs on a
/// blocking thread.
pub type DecodeStep = Box<dyn FnOnce(Bytes) -> Result<Decoded, ApiError> + Send>;

/// Which counter a write's rows are added to.
#[derive(Debug, Clone, Copy)]
pub enum Format {
    /// Arc's MessagePack.
    MsgPack,
    /// InfluxDB line protocol.
    LineProtocol,
    /// Prometheus remote write 1.0.
    PromRemoteWrite,
}

impl Format {
    fn label(self) -> &'static str {
        match self {
            Format::MsgPack => "msgpack",
            Format::LineProtocol => "line_protocol",
            Format::PromRemoteWrite => "prometheus_remote_write",
        }
    }
}

/// What a decoder's error becomes: 429 when the node's write memory is held by other
/// writes (retry), 413 when the write alone needs more than all of it, else 400.
pub fn decode_error(e: quiver_storage::Error) -> ApiError {
    match e {
        quiver_storage::Error::NodeBusy(message) => {
            metrics::counter!("quiver_writes_refused_total", "reason" => "bytes_in_flight")
                .increment(1);
            ApiError::overloaded(StatusCode::TOO_MANY_REQUESTS, message, RETRY_AFTER_S)
        }
        e @ quiver_storage::Error::LimitExceeded {
            limit: "http.write_bytes_in_flight_max",
            ..
        } => ApiError::too_large(e.to_string()),
        e => ApiError::bad_request(e.to_string()),
    }
}

/// Runs one write through the pipeline (see the module documentation).
pub async fn write(
    app: &AppState,
    database: String,
    format: Format,
    params: &HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
    decode: DecodeStep,
) -> Result<StatusCode, ApiError> {
    let mut body = Some(body);
    let mut admitted = admit(app, &database, &headers, params, &mut body).await?;
    let Some(body) = body else {
        return Err(ApiError::internal("request body already taken"));
    };
    let http = &app.config.http;
    let deadline = Instant::now() + Duration::from_millis(http.body_timeout_ms);
    let raw = read_limited(
        body,
        &headers,
        http.body_bytes_max,
        deadline,
        &app.write_budget,
        &mut admitted.charge,
    )
    .await?;
    let decompressed_bytes_max = http.decompressed_bytes_max;
    let entry_bytes_max = app.config.raft.entry_bytes_max;
    let entry_compression = app.config.raft.entry_compression;
    let retention_default_ns = app
        .config
        .retention_default_ns()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let write_id = write_id_of(&headers, &database)?;
    let budget = app.write_budget.clone();
    let mut charge = std::mem::take(&mut admitted.charge);
    let (command, rejected, lines_total, unit, accept_partial, expired, charge) =
        tokio::task::spawn_blocking(move || {
            let payload = decompress(raw.clone(), &headers, decompressed_bytes_max)?;
            if payload.len() != raw.len() {
                budget
                    .try_charge(&mut charge, payload.len())
                    .map_err(charge_error)?;
            }
            drop(raw);
            // Everything the decoders build is reserved from the budget as it grows:
            // many writes decoding at once stay within it together.
            let shared: std::sync::Arc<dyn quiver_storage::DecodeMemory> =
                std::sync::Arc::new(budget.clone());
            let decoded = quiver_storage::decoding_within(shared, || decode(payload))?;
            let decoded_bytes: usize = decoded
                .tables
                .iter()
                .map(|(_, b)| b.get_array_memory_size())
                .sum();
            budget
                .try_charge(&mut charge, decoded_bytes)
                .map_err(charge_error)?;
            let refuse_all = !decoded.accept_partial && !decoded.rejected.is_empty();
            let command = if decoded.tables.is_empty() || refuse_all {
                None
            } else {
                let mut command = WriteCommand::encode(&database, &decoded.tables, entry_compression)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                command.new_database_retention_ns = retention_default_ns;
                command.write_id = write_id;
                if command.bytes() > entry_bytes_max {
                    return Err(ApiError::too_large(format!(
                        "this write encodes to {} bytes, more than one log entry may hold (raft.entry_bytes_max = {entry_bytes_max}); send fewer rows per request",
                        command.bytes()
                    )));
                }
                budget
                    .try_charge(&mut charge, command.bytes())
                    .map_err(charge_error)?;
                Some(command)
            };
            Ok::<_, ApiError>((
                command,
                decoded.rejected,
                decoded.lines_total,
                decoded.unit,
                decoded.accept_partial,
                decoded.expired,
                charge,
            ))
        })
        .await
        .map_err(|e| ApiError::internal(format!("decoder task failed: {e}")))??;
    if let Some(command) = command {
        let rows = command.rows();
        propose(app, command).await?;
        metrics::counter!("quiver_rows_written_total", "format" => format.label()).increment(rows);
    }
    drop(charge);
    drop(admitted);
    if let Some(expired) = expired {
        metrics::counter!("quiver_rows_refused_past_retention_total")
            .increment(expired.rows as u64);
        return Err(ApiError::bad_request(format!(
            "partial write: {} of {} rows not written: {}; the other rows were written",
            expired.rows, expired.rows_total, expired.first
        )));
    }
    if rejected.is_empty() {
        return Ok(StatusCode::NO_CONTENT);
    }
    metrics::counter!("quiver_lines_rejected_total").increment(rejected.len() as u64);
    let message = if accept_partial {
        format!(
            "partial write: {} of {lines_total} {unit} rejected",
            rejected.len()
        )
    } else {
        format!("write refused: {} of {lines_total} {unit} invalid; nothing was written (accept_partial=false)", rejected.len())
    };
    Err(ApiError::partial(message, rejected))
}

/// Longest `Idempotency-Key` accepted.
const WRITE_KEY_BYTES_MAX: usize = 256;

/// The write's id from its `Idempotency-Key` header (or `X-Quiver-Write-Id`), if it
/// has one: 128 bits of SHA-256 over the database and the key, so a key names one
/// write of one database. A group that applied a write with the same id lately stores
/// a retry of it once (`quiver_raft::WriteCommand::write_id`).
fn write_id_of(headers: &HeaderMap, database: &str) -> Result<Option<String>, ApiError> {
    use sha2::{Digest, Sha256};
    let Some(value) = headers
        .get("idempotency-key")
        .or_else(|| headers.get("x-quiver-write-id"))
    else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= WRITE_KEY_BYTES_MAX)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "Idempotency-Key must be 1 to {WRITE_KEY_BYTES_MAX} visible ASCII characters"
            ))
        })?;
    let digest = Sha256::new()
        .chain_update(database.as_bytes())
        .chain_update([0u8])
        .chain_update(key.as_bytes())
        .finalize();
    Ok(Some(
        digest[..16].iter().map(|b| format!("{b:02x}")).collect(),
    ))
}

/// Server time for rows that carry none.
pub fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
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

/// Proposes a decoded write and waits for it to be committed and applied: as one
/// entry of its group, or, when its measurements live in several data groups, as one
/// entry per group, proposed again while that can still make it whole (see
/// `write_parts.rs`).
async fn propose(app: &AppState, command: WriteCommand) -> Result<(), ApiError> {
    let deadline = Instant::now() + Duration::from_millis(app.config.http.write_timeout_ms);
    super::write_parts::propose_parts(app, command, deadline).await
}

/// One proposal's answer as the client would get it.
pub(super) fn written(result: Result<CommandResult, WriteError>) -> Result<(), ApiError> {
    match result {
        Ok(CommandResult::Written { .. }) => Ok(()),
        Ok(CommandResult::Rejected { message }) => Err(ApiError::bad_request(message)),
        Ok(other) => Err(ApiError::internal(format!(
            "unexpected apply result {other:?}"
        ))),
        Err(e) => Err(write_error(e)),
    }
}

/// The answer for a proposal that did not commit: 503 when nothing was appended, 504
/// when the outcome is unknown.
pub fn write_error(e: WriteError) -> ApiError {
    match e {
        WriteError::NotLeader { leader } => ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no leader reachable (last known: {leader:?}); retry"),
            RETRY_AFTER_S,
        ),
        WriteError::Unavailable(message) => ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot commit writes now: {message}"),
            RETRY_AFTER_S,
        ),
        // Not a 503: that would promise nothing was written.
        WriteError::Unknown(message) => ApiError::with_status(
            StatusCode::GATEWAY_TIMEOUT,
            format!("the change may or may not have been applied: {message}"),
        ),
    }
}
