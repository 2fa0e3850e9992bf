//! What every Parquet file says about itself, so the catalog can be rebuilt from files.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{LogIndex, TimestampNs};
use crate::schema::{ColumnKind, FieldType};

/// Key under which [`FileMeta`] is stored in a Parquet file's key-value metadata.
pub const FILE_META_KEY: &str = "quiver.file";
/// Version of the [`FileMeta`] encoding; bumped on any incompatible change.
pub const FILE_META_VERSION: u32 = 1;

/// A column as recorded in file metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnMeta {
    /// Column name.
    pub name: String,
    /// `tag`, or the field type's name.
    pub kind: String,
}

impl ColumnMeta {
    /// Records a column.
    pub fn new(name: &str, kind: ColumnKind) -> Self {
        ColumnMeta {
            name: name.to_string(),
            kind: kind.name().to_string(),
        }
    }

    /// The column's kind, if the name is one Quiver writes.
    pub fn kind(&self) -> Option<ColumnKind> {
        Some(match self.kind.as_str() {
            "time" => ColumnKind::Time,
            "tag" => ColumnKind::Tag,
            "float" => ColumnKind::Field(FieldType::Float),
            "integer" => ColumnKind::Field(FieldType::Integer),
            "unsigned" => ColumnKind::Field(FieldType::UInteger),
            "boolean" => ColumnKind::Field(FieldType::Boolean),
            "string" => ColumnKind::Field(FieldType::String),
            _ => return None,
        })
    }
}

/// One Parquet file's self-description: enough to rebuild its catalog entry and to know
/// which log entries it makes durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Encoding version ([`FILE_META_VERSION`]).
    pub version: u32,
    /// Object path of the file.
    pub path: String,
    /// Database of the rows.
    pub database: String,
    /// Measurement of the rows.
    pub measurement: String,
    /// Rows in the file.
    pub rows: u64,
    /// Smallest `time`.
    pub time_min: TimestampNs,
    /// Largest `time`.
    pub time_max: TimestampNs,
    /// First log index of the flushed segment this file belongs to.
    pub log_first: LogIndex,
    /// Last log index of that segment (the flush entry's index).
    pub log_last: LogIndex,
    /// How many files the segment was split into (one per hour); a segment is durable
    /// only when all of them exist.
    pub segment_files: u32,
    /// Columns of the file, in file order. Shared: the files of one table nearly always
    /// have the same columns, and a list of a million files held one copy each (with
    /// 21 columns, 2.3 KB per file); [`crate::file_list::FileList`] shares them.
    #[serde(with = "shared_columns")]
    pub columns: Arc<[ColumnMeta]>,
    /// File size in bytes (known after writing; 0 inside the file itself).
    #[serde(default)]
    pub size_bytes: u64,
    /// Set on a file written by compaction: it holds every row of the files of its
    /// table whose log range lies within `log_first..=log_last` and whose times lie in
    /// its bucket, so any such file still on disk is dead (see `compaction::supersedes`).
    /// Absent on flushed files (their bytes are unchanged by this field's existence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionMark>,
    /// Distinct values of each tag column, in the order the tags appear in `columns`
    /// (see `tag_distinct`): the planner's estimate of how many groups a `GROUP BY` on
    /// tags makes. Empty on files written before it was counted (then nothing is
    /// estimated); a count of [`crate::TAG_DISTINCT_COUNTED_MAX`] means at least that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_distinct: Vec<u32>,
    /// The tag the rows are sorted by first, before the other tags in name order
    /// (see `sort_lead`); absent: tags in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_lead: Option<String>,
}

impl FileMeta {
    /// Every tombstone at or below this index is already applied to the file's rows
    /// (or older than all of them): its last log index for a flushed file, the index of
    /// the compaction that wrote it for an output (see [`crate::lifecycle`]).
    pub fn deletes_through(&self) -> LogIndex {
        self.compaction.map_or(self.log_last, |c| c.index)
    }
}

/// What a compaction output covers, recorded in its footer so that the files it
/// replaced are recognised as dead after a crash, transitively, without any other record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionMark {
    /// Index of the `Compact` log entry that produced the file.
    pub index: LogIndex,
    /// Start of the time bucket (an hour or a day) the file covers.
    pub bucket_start: TimestampNs,
    /// Width of the bucket in nanoseconds.
    pub bucket_ns: i64,
}

impl CompactionMark {
    /// Whether `t` lies in the bucket.
    pub fn bucket_contains(&self, t: TimestampNs) -> bool {
        t.0 >= self.bucket_start.0 && (t.0 - self.bucket_start.0) < self.bucket_ns
    }
}

/// (De)serializes shared columns as the plain list they are on disk and in the catalog
/// (serde's own `Arc` support would need its `rc` feature, for the whole tree).
mod shared_columns {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ColumnMeta;

    pub fn serialize<S: Serializer>(columns: &Arc<[ColumnMeta]>, s: S) -> Result<S::Ok, S::Error> {
        columns[..].serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[ColumnMeta]>, D::Error> {
        Vec::<ColumnMeta>::deserialize(d).map(Arc::from)
    }
}
