//! The one error type of quiver-storage.

use std::path::PathBuf;

/// Why a storage operation failed. Variants split by who must act: the client (bad
/// input), the operator (disk, corruption) or the developer (a bug).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A database or measurement name breaks the naming rules.
    #[error("{0}")]
    InvalidName(String),
    /// A measurement lives in a group this node does not hold, and no member of that
    /// group answered: the query fails naming the group rather than answer without it.
    #[error("{0}")]
    GroupUnreachable(String),
    /// The payload could not be decoded; the message names the problem (column, row).
    #[error("invalid payload: {0}")]
    InvalidPayload(String),
    /// A write asks for more than a configured limit allows ([`crate::WriteLimits`]).
    /// The client's to fix: `detail` says what was counted and how to split the write.
    #[error("{limit} = {max} exceeded: {detail}")]
    LimitExceeded {
        /// The limit's name as configured, e.g. `write_files_max`.
        limit: &'static str,
        /// What the write needs (at least this much: decoders stop counting early).
        value: u64,
        /// The limit's value.
        max: u64,
        /// What was counted and what the client should do.
        detail: String,
    },
    /// The node cannot take this write now (its shared write memory is held by other
    /// writes): retry later. Nothing was written.
    #[error("{0}")]
    NodeBusy(String),
    /// A setting admits nothing (a limit of zero) or contradicts another: the
    /// operator's to fix, found when the configuration is loaded.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A column arrived with a type other than the one the measurement already has.
    #[error("schema conflict in {measurement}: column {column:?} is {existing}, got {got}")]
    SchemaConflict {
        /// Measurement the conflict is in.
        measurement: String,
        /// Column that conflicts.
        column: String,
        /// Type already stored.
        existing: String,
        /// Type that was offered.
        got: String,
    },
    /// Arrow failed to build, encode or decode a batch.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Parquet encoding or decoding failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// The object store refused a read or write.
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// zstd could not pack a log entry's batch (out of memory; never the client's
    /// input).
    #[error("packing a batch with zstd: {0}")]
    Pack(std::io::Error),
    /// A local file operation failed.
    #[error("io error on {path}: {source}")]
    Io {
        /// File or directory involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The sled catalog failed; callers rebuild it from the Parquet files.
    #[error("catalog: {0}")]
    Catalog(String),
    /// Another holder keeps the catalog open (in-process, a storage still closing);
    /// never a reason to rebuild it, so opening fails instead.
    #[error("catalog {}: still locked by another holder after {waited_ms} ms", dir.display())]
    CatalogLocked {
        /// The catalog's directory.
        dir: PathBuf,
        /// How long opening waited for the lock.
        waited_ms: u64,
    },
    /// Something to be written is larger than its reader accepts, so it is refused
    /// before it is written (the same bound applies on both sides).
    #[error("{what}: {size} is more than the {size_max} allowed")]
    TooLarge {
        /// What was too large, with the unit of its size ("frame header, in bytes").
        what: String,
        /// Its size.
        size: u64,
        /// The bound, shared by writer and reader.
        size_max: u64,
    },
    /// A table's frozen segment could not be written; it stays in memory and the table
    /// is tried again after `retry_ms`, while other tables go on.
    #[error("writing a segment of {table} failed ({failures} in a row, next try in {retry_ms} ms): {source}")]
    SegmentNotWritten {
        /// The table.
        table: String,
        /// Failures in a row.
        failures: u32,
        /// Wait before the next attempt.
        retry_ms: u64,
        /// What failed.
        source: Box<Error>,
    },
    /// The bucket prefix holds Parquet files this data directory did not write, and no
    /// process beats in its owner marker (see `file_store::owner`): a lost disk, or a
    /// prefix that belongs to another node. The operator's to decide.
    #[error(
        "{url} holds Parquet files this data directory did not write{}. Either this node          lost its disk: stop it and run `quiver restore` with the same settings, which adopts          the files (only rows that were not yet flushed are lost, and a replica may hold          them); or it was given another node's storage.object_store prefix or cluster.node_id:          fix the settings. Nothing was deleted",
        written_by.as_ref().map(|w| format!(" (last written by {w})")).unwrap_or_default()
    )]
    ForeignFiles {
        /// The prefix.
        url: String,
        /// The owner the marker names, if there is one.
        written_by: Option<String>,
    },
    /// Another running process writes under the bucket prefix.
    #[error(
        "{url} is being written by another running process: {by}. Two nodes must never share          a prefix: give this node its own cluster.node_id or storage.object_store prefix"
    )]
    PrefixInUse {
        /// The prefix.
        url: String,
        /// The owner the marker names.
        by: String,
    },
    /// Another process took the bucket prefix over while this one ran: this one writes no
    /// file there any more.
    #[error(
        "{url} was taken over by {by}: this node writes no more files there (its rows stay          in memory and in the log); stop it and check which node should own the prefix"
    )]
    PrefixTakenOver {
        /// The prefix.
        url: String,
        /// The owner the marker names now.
        by: String,
    },
    /// A file that storage wrote earlier no longer reads back as written.
    #[error("corrupt file {path}: {reason}")]
    Corrupt {
        /// File involved.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Result with the storage [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
