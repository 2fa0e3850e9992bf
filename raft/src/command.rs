//! What a log entry asks the state machine to do, and what it answers.
//!
//! Commands carry data already decoded and validated on the node that received the
//! request: a write holds Arrow IPC batches, so followers and replays never parse text.

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use quiver_storage::compaction::{CompactionOutcome, CompactionRequest};
use quiver_storage::lifecycle::{CqWindowOutcome, DeletePredicate};
use quiver_storage::{
    decode_batch, encode_batch_packed, DeleteOutcome, EntryCompression, PolicyChange,
    PolicyOutcome, TableKey, TimestampNs,
};
use serde::{Deserialize, Serialize};

/// One measurement's rows inside a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablePayload {
    /// Measurement name.
    pub measurement: String,
    /// Rows in the batch (for accounting without decoding).
    pub rows: u64,
    /// The batch as an Arrow IPC stream, possibly packed in a zstd frame.
    pub ipc: Bytes,
}

/// Rows for one database, possibly several measurements; applied all or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteCommand {
    /// Database the rows belong to.
    pub database: String,
    /// The rows, per measurement.
    pub tables: Vec<TablePayload>,
    /// The retention (ns) the database gets if this write creates it
    /// (`retention.default` of the node that encoded it).
    #[serde(default)]
    pub new_database_retention_ns: Option<i64>,
    /// Set by the leader as it proposes the entry (0: not yet): lets the proposer tell,
    /// when openraft answers "forward to leader", whether its entry was appended here
    /// and later removed (outcome unknown, 504) or never appended (nothing written).
    #[serde(default)]
    pub proposal: u64,
    /// The client's id for this write (`Idempotency-Key`), when it sent one: a group
    /// that applied a write with the same id lately skips this one (the retry of a
    /// write whose answer was lost is stored once).
    #[serde(default)]
    pub write_id: Option<String>,
}

impl WriteCommand {
    /// Encodes decoded batches into a command, packed as `compression` says (readers
    /// accept either form, so the setting may differ between nodes).
    pub fn encode(
        database: &str,
        tables: &[(String, RecordBatch)],
        compression: EntryCompression,
    ) -> quiver_storage::Result<Self> {
        let tables = tables
            .iter()
            .map(|(measurement, batch)| {
                Ok(TablePayload {
                    measurement: measurement.clone(),
                    rows: batch.num_rows() as u64,
                    ipc: Bytes::from(encode_batch_packed(batch, compression)?),
                })
            })
            .collect::<quiver_storage::Result<_>>()?;
        Ok(WriteCommand {
            database: database.to_string(),
            tables,
            new_database_retention_ns: None,
            proposal: 0,
            write_id: None,
        })
    }

    /// Decodes the batches back.
    pub fn decode(&self) -> quiver_storage::Result<Vec<(String, RecordBatch)>> {
        self.tables
            .iter()
            .map(|t| Ok((t.measurement.clone(), decode_batch(&t.ipc)?)))
            .collect()
    }

    /// Rows in the command.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// Payload bytes in the command.
    pub fn bytes(&self) -> usize {
        self.tables.iter().map(|t| t.ipc.len()).sum()
    }
}

/// A replicated decision to freeze tables' buffers (made by the leader).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushCommand {
    /// Tables whose live buffer becomes a frozen segment at this entry.
    pub tables: Vec<TableKey>,
}

/// A state-machine command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Append rows.
    Write(WriteCommand),
    /// Freeze buffers for flushing.
    Flush(FlushCommand),
    /// Change the replicated settings (tokens, lifecycle rules).
    Policy(PolicyChange),
    /// Merge files of a table (decided by the leader's compaction policy).
    Compact(CompactionRequest),
    /// Delete rows of a table (a tombstone).
    Delete(DeleteCommand),
    /// One window of a continuous query: its rows and its progress (decided by the
    /// leader, which ran the query).
    CqWindow(CqWindowCommand),
}

/// One computed window of a continuous query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqWindowCommand {
    /// The query's name (its database is `rows.database`).
    pub name: String,
    /// The window's start (inclusive).
    pub window_start: TimestampNs,
    /// The window's end (exclusive).
    pub window_end: TimestampNs,
    /// The rows for the query's target measurement (possibly none).
    pub rows: WriteCommand,
}

/// A delete: rows of one measurement matching a predicate, written before the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteCommand {
    /// The measurement.
    pub table: TableKey,
    /// Which rows.
    pub predicate: DeletePredicate,
    /// See [`WriteCommand::proposal`].
    #[serde(default)]
    pub proposal: u64,
}

impl Command {
    /// Gives a client's write or delete a fresh proposal id (see
    /// [`WriteCommand::proposal`]) and returns it; `None` for other commands, which a
    /// proposer may simply propose again.
    pub(crate) fn stamp_proposal(&mut self) -> Option<u64> {
        let slot = match self {
            Command::Write(w) => &mut w.proposal,
            Command::Delete(d) => &mut d.proposal,
            _ => return None,
        };
        *slot = rand::random::<u64>() | 1;
        Some(*slot)
    }

    /// The proposal id a leader gave this entry, if any.
    pub(crate) fn proposal(&self) -> Option<u64> {
        match self {
            Command::Write(w) if w.proposal != 0 => Some(w.proposal),
            Command::Delete(d) if d.proposal != 0 => Some(d.proposal),
            _ => None,
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Write(w) => write!(f, "write {} rows to {}", w.rows(), w.database),
            Command::Flush(fl) => write!(f, "flush {} tables", fl.tables.len()),
            Command::Policy(change) => write!(f, "policy change {change:?}"),
            Command::Compact(c) => write!(f, "compact {} files of {}", c.inputs.len(), c.table),
            Command::Delete(d) => write!(f, "delete from {}", d.table),
            Command::CqWindow(w) => write!(
                f,
                "continuous query {}/{} window at {}",
                w.rows.database, w.name, w.window_start.0
            ),
        }
    }
}

/// What applying a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// Rows were added (fewer than sent only when replaying rows already in Parquet).
    Written {
        /// Rows added.
        rows: u64,
    },
    /// Buffers were frozen.
    Flushed,
    /// A replicated setting was changed (or the change was refused, identically).
    Policy(PolicyOutcome),
    /// A compaction was queued (or refused).
    Compaction(CompactionOutcome),
    /// A delete was recorded (or named no table).
    Deleted(DeleteOutcome),
    /// A continuous query's window was written (or was already).
    CqWindow(CqWindowOutcome),
    /// A blank or membership entry: nothing for the client.
    Noop,
    /// The command was refused, identically on every replica (e.g. a schema conflict).
    Rejected {
        /// Why, for the client.
        message: String,
    },
}
