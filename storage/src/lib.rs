//! quiver-storage: Quiver's data model and everything between decoded rows and Parquet.
//!
//! It decodes MessagePack, line protocol and Prometheus remote write into validated Arrow batches, keeps the
//! in-memory buffer per (database, measurement), freezes it into segments when a flush
//! entry is applied, writes segments as Parquet through `object_store`, and keeps the
//! sled catalog that indexes those files. It knows nothing of Raft: callers hand it log
//! indexes and it records them, so that the log and the files together are the truth.
//! What one write may ask of a node is bounded by [`WriteLimits`], checked while it is
//! decoded.
#![deny(missing_docs)]

mod catalog;
pub mod compaction;
pub mod durable;
mod error;
mod field_encoding;
mod file_list;
mod file_span;
mod file_store;
pub mod fuzzing;
pub mod heap;
mod ids;
mod image;
mod int_width;
mod ipc;
pub mod lifecycle;
mod limits;
mod line_protocol;
mod meta;
mod msgpack;
mod parquet_encode;
mod paths;
mod policies;
pub mod prom_remote;
mod restore;
mod row_order;
mod rows;
mod schema;
mod sort_lead;
mod store;
mod table;
mod table_state;
mod table_wire;
mod tag_distinct;
mod tag_keys;
pub mod write_ids;

pub use catalog::{CatalogReport, FileSet};
pub use durable::{
    create_dir_all_durably, install_file_durably, remove_stale_temp_files, replace_file_atomically,
    replace_file_durably,
};
pub use error::{Error, Result};
pub use file_list::FileList;
pub use file_store::{
    open_at_url, BucketSettings, FileStore, INSTANCE_FILE, OWNER_BEAT_MS_DEFAULT,
};
pub use ids::{
    validate_database_name, validate_measurement_name, LogIndex, TimestampNs,
    DATABASE_NAME_CHARS_MAX, MEASUREMENT_NAME_BYTES_MAX,
};
pub use image::{read_image, write_image};
pub use ipc::{decode_batch, encode_batch, encode_batch_packed, EntryCompression};
pub use limits::{decoding_within, DecodeMemory, DecodeMemoryRefusal, WriteLimits};
pub use line_protocol::{
    fill_excerpts, parse_line_protocol, parse_line_protocol_for, reject_conflicting_rows,
    reject_expired_rows, LineError, LpOutput, LpTable, Precision,
};
pub use meta::{ColumnMeta, CompactionMark, FileMeta, FILE_META_KEY};
pub use msgpack::decode_msgpack;
pub use parquet_encode::{encode_segment, EncodedFile, ParquetSettings, SegmentSource};
pub use paths::{
    check_paths_fit, log_end_of, measurement_component, parquet_path, PATH_COMPONENT_BYTES_MAX,
};
pub use policies::{Policies, PolicyChange, PolicyOutcome, Scope, ScramSecret, TokenRecord};
pub use prom_remote::{decode_prom_write, PromWrite, RejectedSeries};
pub use restore::{adopt_files, claim_files, Adoption};
pub use rows::{FieldValue, RowBatchBuilder, RowError};
pub use schema::{
    canonical_schema, conform, tag_type, widen_integers_to_stored, with_tags_as, ColumnKind,
    FieldType, MeasurementSchema, TIME_COLUMN, TIME_TYPE,
};
pub use sort_lead::{choose_lead, SortDecision};
pub use store::{
    rows_at_or_after, split_past_retention, DeleteOutcome, IoGuard, MemoryImage, OpenReport,
    Storage, StorageConfig, StorageStats, SweepReport, TableImage, TableKey, TableSummary,
    UnaccountedFiles, View, ViewSource,
};
pub use table::{
    resolve_name, HeldElsewhere, ParquetFileRef, SnapshotFiles, TableFiles, TableSnapshot,
    TableSource,
};
pub use table_state::{held_bytes, Buffered, Frozen};
pub use table_wire::{FileWire, TableSnapshotWire};
pub use tag_distinct::TAG_DISTINCT_COUNTED_MAX;
