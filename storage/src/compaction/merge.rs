//! Producing a compaction's output: read the inputs, give them the union of their
//! columns, sort by tags then time (the order every file declares), and encode exactly
//! as a flush does. Deterministic: the same input files give the same bytes on every
//! replica, so replicas never need to ship compaction outputs to each other.

use std::path::Path;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::CompactionJob;
use crate::error::{Error, Result};
use crate::meta::{ColumnMeta, FileMeta, FILE_META_VERSION};
use crate::parquet_encode::{
    min_max, sort_by_tags_time, time_values, write_parquet, EncodedFile, ParquetSettings,
};
use crate::schema::{canonical_schema, ColumnKind};

/// Rows per batch while reading inputs.
const READ_BATCH_ROWS: usize = 64 * 1024;

/// Rows a filter keeps of a batch read from an input (`None`: all of them).
pub type RowFilter<'a> =
    dyn Fn(&FileMeta, &RecordBatch) -> Result<Option<BooleanArray>> + Sync + 'a;

/// Merges the inputs (each `(file on disk, its metadata)`, in log order) into the
/// output `job` names, keeping the rows `keep` keeps; `None` when no row is left.
pub fn merge_files(
    job: &CompactionJob,
    inputs: &[(std::path::PathBuf, FileMeta)],
    settings: &ParquetSettings,
    keep: &RowFilter<'_>,
) -> Result<Option<EncodedFile>> {
    debug_assert_eq!(inputs.len(), job.request.inputs.len());
    let schema = union_schema(inputs.iter().map(|(_, m)| m))?;
    let mut batches = Vec::new();
    for (path, meta) in inputs {
        read_conformed(path, meta, &schema, keep, &mut batches)?;
    }
    let all = concat_batches(&schema, &batches)?;
    if all.num_rows() == 0 {
        return Ok(None);
    }
    drop(batches);
    let sorted = sort_by_tags_time(&all)?;
    drop(all);
    let (time_min, time_max) = min_max(time_values(&sorted)?);
    let columns: Vec<ColumnMeta> = schema
        .fields()
        .iter()
        .filter_map(|f| {
            ColumnKind::from_arrow(f.name(), f.data_type()).map(|k| ColumnMeta::new(f.name(), k))
        })
        .collect();
    let meta = FileMeta {
        version: FILE_META_VERSION,
        path: job.output.clone(),
        database: job.request.table.database.clone(),
        measurement: job.request.table.measurement.clone(),
        rows: sorted.num_rows() as u64,
        time_min: crate::ids::TimestampNs(time_min),
        time_max: crate::ids::TimestampNs(time_max),
        log_first: job.log_first,
        log_last: job.log_last,
        segment_files: 1,
        columns,
        size_bytes: 0,
        compaction: Some(job.mark()),
    };
    let bytes = write_parquet(&sorted, &meta, settings)?;
    Ok(Some(EncodedFile {
        meta: FileMeta {
            size_bytes: bytes.len() as u64,
            ..meta
        },
        bytes,
    }))
}

/// The canonical schema holding every column of every input.
fn union_schema<'a>(metas: impl Iterator<Item = &'a FileMeta>) -> Result<SchemaRef> {
    let mut columns: Vec<(String, ColumnKind)> = Vec::new();
    for meta in metas {
        for column in &meta.columns {
            let kind = column.kind().ok_or_else(|| Error::Corrupt {
                path: meta.path.clone(),
                reason: format!(
                    "column {:?} has unknown kind {:?}",
                    column.name, column.kind
                ),
            })?;
            match columns.iter().find(|(n, _)| *n == column.name) {
                Some((_, existing)) if *existing != kind => {
                    return Err(Error::Corrupt {
                        path: meta.path.clone(),
                        reason: format!(
                            "column {:?} is {} here and {} in another input",
                            column.name,
                            kind.name(),
                            existing.name()
                        ),
                    })
                }
                Some(_) => {}
                None => columns.push((column.name.clone(), kind)),
            }
        }
    }
    Ok(canonical_schema(
        columns.iter().map(|(n, k)| (n.as_str(), *k)),
    ))
}

/// Reads one input, casting its columns to `schema` (tags are stored as plain strings
/// and held as dictionaries) and filling the columns it lacks with nulls.
fn read_conformed(
    path: &Path,
    meta: &FileMeta,
    schema: &SchemaRef,
    keep: &RowFilter<'_>,
    out: &mut Vec<RecordBatch>,
) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(READ_BATCH_ROWS)
        .build()?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|field| match batch.column_by_name(field.name()) {
                Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
                Some(column) => Ok(cast(column, field.data_type())?),
                None => Ok(arrow::array::new_null_array(
                    field.data_type(),
                    batch.num_rows(),
                )),
            })
            .collect::<Result<_>>()?;
        let conformed = RecordBatch::try_new(schema.clone(), columns)?;
        match keep(meta, &conformed)? {
            Some(mask) => out.push(arrow::compute::filter_record_batch(&conformed, &mask)?),
            None => out.push(conformed),
        }
    }
    if rows != meta.rows {
        return Err(Error::Corrupt {
            path: meta.path.clone(),
            reason: format!("holds {rows} rows, its footer says {}", meta.rows),
        });
    }
    Ok(())
}
