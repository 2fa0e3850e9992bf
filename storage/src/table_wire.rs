//! A [`TableSnapshot`] as it travels between nodes: a node that does not hold a
//! measurement's group asks a member for the snapshot and plans the query over it as if
//! the table were local, reading the files through the member (or the bucket).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::ipc::{decode_batch, encode_batch};
use crate::lifecycle::DeletePredicate;
use crate::meta::ColumnMeta;
use crate::table::{ParquetFileRef, SnapshotFiles, TableSnapshot};
use crate::{Result, TimestampNs};

/// One Parquet file of a sent snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileWire {
    /// Path inside the member's store.
    pub path: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Its rows.
    pub rows: u64,
    /// Smallest time.
    pub time_min: i64,
    /// Largest time.
    pub time_max: i64,
    /// Indexes into the snapshot's tombstones.
    pub tombstones: Vec<usize>,
    /// Its columns.
    pub columns: Vec<ColumnMeta>,
    /// Distinct values per tag.
    pub tag_distinct: Vec<u32>,
}

/// A snapshot in the form it is sent in: batches as Arrow IPC, files listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableSnapshotWire {
    /// Database.
    pub database: String,
    /// Measurement.
    pub measurement: String,
    /// The schema, as an empty IPC batch.
    pub schema: Bytes,
    /// Tags in sort order.
    pub tag_columns: Vec<String>,
    /// Rows not in Parquet yet, one IPC stream each.
    pub memory: Vec<Bytes>,
    /// Every file the snapshot's view can read.
    pub files: Vec<FileWire>,
    /// Rows older are invisible.
    pub visible_from: Option<i64>,
    /// Rows at or after are invisible.
    pub visible_before: Option<i64>,
    /// Deletes hiding rows of some listed file.
    pub tombstones: Vec<DeletePredicate>,
}

impl TableSnapshotWire {
    /// The snapshot as it is sent (every file its view reads, whatever the query's
    /// time range: the receiver prunes them).
    pub fn from_snapshot(snapshot: &TableSnapshot) -> Result<Self> {
        let memory = snapshot
            .memory
            .iter()
            .map(|b| encode_batch(b).map(Bytes::from))
            .collect::<Result<Vec<_>>>()?;
        let files = snapshot
            .files
            .all()
            .into_iter()
            .map(|f| FileWire {
                path: f.path,
                size_bytes: f.size_bytes,
                rows: f.rows,
                time_min: f.time_min.0,
                time_max: f.time_max.0,
                tombstones: f.tombstones,
                columns: f.columns.to_vec(),
                tag_distinct: f.tag_distinct,
            })
            .collect();
        Ok(TableSnapshotWire {
            database: snapshot.database.clone(),
            measurement: snapshot.measurement.clone(),
            schema: Bytes::from(encode_batch(&RecordBatch::new_empty(Arc::clone(
                &snapshot.schema,
            )))?),
            tag_columns: snapshot.tag_columns.clone(),
            memory,
            files,
            visible_from: snapshot.visible_from.map(|t| t.0),
            visible_before: snapshot.visible_before.map(|t| t.0),
            tombstones: snapshot.tombstones.clone(),
        })
    }

    /// The snapshot again, each file's path under `prefix/` (the receiver's store
    /// routes that prefix to the member that sent it).
    pub fn into_snapshot(self, prefix: &str) -> Result<TableSnapshot> {
        let schema = decode_batch(&self.schema)?.schema();
        let memory = self
            .memory
            .iter()
            .map(|b| decode_batch(b))
            .collect::<Result<Vec<_>>>()?;
        let files = self
            .files
            .into_iter()
            .map(|f| ParquetFileRef {
                path: format!("{prefix}/{}", f.path),
                size_bytes: f.size_bytes,
                rows: f.rows,
                time_min: TimestampNs(f.time_min),
                time_max: TimestampNs(f.time_max),
                tombstones: f.tombstones,
                columns: Arc::from(f.columns),
                tag_distinct: f.tag_distinct,
            })
            .collect();
        Ok(TableSnapshot {
            database: self.database,
            measurement: self.measurement,
            schema,
            tag_columns: self.tag_columns,
            memory,
            files: SnapshotFiles::Listed(files),
            visible_from: self.visible_from.map(TimestampNs),
            visible_before: self.visible_before.map(TimestampNs),
            tombstones: self.tombstones,
            only_matching: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampNanosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    #[test]
    fn a_snapshot_crosses_the_wire_with_its_rows_files_and_view() {
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ),
            Field::new("v", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(TimestampNanosecondArray::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![Some(7), None])),
            ],
        )
        .expect("batch");
        let file = ParquetFileRef {
            path: "data/db/cpu/a.parquet".into(),
            size_bytes: 100,
            rows: 5,
            time_min: TimestampNs(1),
            time_max: TimestampNs(9),
            tombstones: vec![0],
            columns: Arc::from(vec![ColumnMeta {
                name: "v".into(),
                kind: "int".into(),
            }]),
            tag_distinct: vec![],
        };
        let mut snapshot = TableSnapshot::unfiltered(
            "db",
            "cpu",
            Arc::clone(&schema),
            vec![],
            vec![batch.clone()],
            vec![file.clone()],
        );
        snapshot.visible_from = Some(TimestampNs(1));
        snapshot.tombstones = vec![DeletePredicate::default()];
        let wire = TableSnapshotWire::from_snapshot(&snapshot).expect("to wire");
        let bytes = rmp_serde::to_vec_named(&wire).expect("encode");
        let back: TableSnapshotWire = rmp_serde::from_slice(&bytes).expect("decode");
        let back = back.into_snapshot("g3").expect("from wire");
        assert_eq!(back.schema, schema);
        assert_eq!(back.memory, vec![batch]);
        assert_eq!(
            back.files.all(),
            vec![ParquetFileRef {
                path: "g3/data/db/cpu/a.parquet".into(),
                ..file
            }]
        );
        assert_eq!(back.visible_from, Some(TimestampNs(1)));
        assert_eq!(back.tombstones.len(), 1);
    }
}
