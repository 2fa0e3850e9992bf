//! Turning a frozen segment into Parquet files: one per hour of data (a day for history: `file_span`), rows sorted by
//! tags then time, tags dictionary-encoded, zstd, page statistics, and the file's own
//! [`FileMeta`] in its key-value metadata.

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef, TimestampNanosecondType};
use bytes::Bytes;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{encode_arrow_schema, ArrowWriter, ARROW_SCHEMA_META_KEY};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};
use crate::field_encoding;
use crate::ids::{LogIndex, TimestampNs};
use crate::meta::{ColumnMeta, FileMeta, FILE_META_KEY, FILE_META_VERSION};
use crate::paths::parquet_path;
use crate::row_order::{segment_order, RowRef};
use crate::schema::{align, with_tags_as, ColumnKind, TIME_COLUMN};
use crate::sort_lead::sort_tag_indices;
use crate::tag_distinct::TagDistinct;

/// Rows per data page by default: Parquet's own default (`docs/benchmarks.md`, "Page size",
/// measures others on the TSBS shape).
pub const PAGE_ROWS_MAX_DEFAULT: usize = 20_000;

/// Rows per row group by default. A query splits a file among its threads by row group,
/// so a file of few row groups leaves a thread idle: the 4.32 M-row TSBS file held 5
/// groups of 1 M rows, split 3 to 2, and with 17 groups of 256 K rows the TSBS query
/// types took 0.80 of the time (geometric mean, same run) for 0.2 % more bytes on
/// disk. The Parquet writer also buffers a row group fewer rows at a time.
pub const ROW_GROUP_ROWS_MAX_DEFAULT: usize = 256 * 1024;

/// How Parquet files are written.
#[derive(Debug, Clone)]
pub struct ParquetSettings {
    /// zstd level (1..=22); 3 is a good speed/size balance for time series.
    pub zstd_level: i32,
    /// Rows per row group at most ([`ROW_GROUP_ROWS_MAX_DEFAULT`] says why that much).
    pub row_group_rows_max: usize,
    /// Rows per data page at most: the unit the page index prunes by (a query for one
    /// series decodes the pages its rows share with their neighbours).
    pub page_rows_max: usize,
}

impl Default for ParquetSettings {
    fn default() -> Self {
        ParquetSettings {
            zstd_level: 3,
            row_group_rows_max: ROW_GROUP_ROWS_MAX_DEFAULT,
            page_rows_max: PAGE_ROWS_MAX_DEFAULT,
        }
    }
}

/// One encoded file, ready to put into the object store.
#[derive(Debug, Clone)]
pub struct EncodedFile {
    /// What the file holds (size filled in).
    pub meta: FileMeta,
    /// The whole file.
    pub bytes: Bytes,
}

/// What a segment is: one table's rows covering one log range.
pub struct SegmentSource<'a> {
    /// Database.
    pub database: &'a str,
    /// Measurement.
    pub measurement: &'a str,
    /// Schema every file of the segment gets (the table's at freeze time).
    pub schema: &'a SchemaRef,
    /// The rows.
    pub batches: &'a [RecordBatch],
    /// First log index the segment covers.
    pub log_first: LogIndex,
    /// Last log index the segment covers (the flush entry).
    pub log_last: LogIndex,
    /// The tag rows sort by first (the frozen segment's; `None`: tags in name order).
    pub sort_lead: Option<&'a str>,
}

/// Rows taken from a segment's batches at a time, in file order, while it is written:
/// the most a flush holds beyond the segment itself (a multiple of the writer's batch
/// of 1,024 rows and a divisor of the row-group size, so pages and row groups fall
/// where one write of the whole file would put them).
const FLUSH_CHUNK_ROWS: usize = 64 * 1024;

/// Encodes a segment into one Parquet file per bucket of data it holds: an hour, or a
/// day for rows older than the day before the segment's newest (see `file_span`).
///
/// The rows are never concatenated or copied whole: their order is computed from the
/// sort keys alone ([`segment_order`]) and each file is written from chunks of
/// [`FLUSH_CHUNK_ROWS`] taken in that order. A flush used to hold three copies of its
/// segment at once (the buffers, their concatenation and its sorted copy); now it holds
/// the buffers, one chunk and the encoded file.
pub fn encode_segment(
    source: &SegmentSource<'_>,
    settings: &ParquetSettings,
) -> Result<Vec<EncodedFile>> {
    debug_assert!(source.log_first <= source.log_last);
    let conformed: Vec<RecordBatch> = source
        .batches
        .iter()
        .map(|b| align(b, source.schema))
        .filter(|b| b.as_ref().map_or(true, |b| b.num_rows() > 0))
        .collect::<Result<_>>()?;
    let segment = segment_order(&conformed, source.sort_lead)?;
    let order = &segment.rows;
    if order.is_empty() {
        return Ok(Vec::new());
    }
    let times: Vec<&[i64]> = conformed
        .iter()
        .map(|b| time_values(b).map(|t| t.values().as_ref()))
        .collect::<Result<_>>()?;
    let time_of = |&(batch, row): &RowRef| times[batch as usize][row as usize];
    let bucket_of = |r: &RowRef| TimestampNs(segment.spans.bucket(time_of(r)));
    let mut runs: Vec<(TimestampNs, usize, usize)> = Vec::new();
    let mut start = 0;
    for i in 1..=order.len() {
        if i == order.len() || bucket_of(&order[i]) != bucket_of(&order[start]) {
            runs.push((bucket_of(&order[start]), start, i - start));
            start = i;
        }
    }
    debug_assert!(
        runs.windows(2).all(|w| w[0].0 < w[1].0),
        "one run per bucket"
    );
    let segment_files = u32::try_from(runs.len())
        .map_err(|_| Error::InvalidPayload("segment spans too many hours".into()))?;
    let columns: std::sync::Arc<[ColumnMeta]> = source
        .schema
        .fields()
        .iter()
        .filter_map(|f| {
            ColumnKind::from_arrow(f.name(), f.data_type()).map(|k| ColumnMeta::new(f.name(), k))
        })
        .collect();
    let mut out = Vec::with_capacity(runs.len());
    for (bucket, offset, len) in runs {
        let rows = &order[offset..offset + len];
        let (time_min, time_max) = rows
            .iter()
            .map(time_of)
            .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let mut bytes: Vec<u8> = Vec::new();
        let mut distinct = TagDistinct::new(source.schema);
        let mut writer =
            StreamingParquetWriter::new(&mut bytes, source.schema, settings, source.sort_lead)?;
        for chunk in rows.chunks(FLUSH_CHUNK_ROWS) {
            let part = segment.take(&conformed, source.schema, chunk)?;
            distinct.add(&part);
            writer.write(&part)?;
        }
        let meta = FileMeta {
            version: FILE_META_VERSION,
            path: parquet_path(
                source.database,
                source.measurement,
                bucket,
                source.log_first,
                source.log_last,
            ),
            database: source.database.to_string(),
            measurement: source.measurement.to_string(),
            rows: len as u64,
            time_min: TimestampNs(time_min),
            time_max: TimestampNs(time_max),
            log_first: source.log_first,
            log_last: source.log_last,
            segment_files,
            columns: columns.clone(),
            size_bytes: 0,
            compaction: None,
            tag_distinct: distinct.finish(),
            sort_lead: source.sort_lead.map(str::to_string),
        };
        writer.finish(&meta)?;
        let meta = FileMeta {
            size_bytes: bytes.len() as u64,
            ..meta
        };
        out.push(EncodedFile {
            meta,
            bytes: Bytes::from(bytes),
        });
    }
    Ok(out)
}

pub(crate) fn time_values(batch: &RecordBatch) -> Result<&arrow::array::TimestampNanosecondArray> {
    batch
        .column_by_name(TIME_COLUMN)
        .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
        .ok_or_else(|| Error::InvalidPayload("batch has no nanosecond time column".into()))
}

pub(crate) fn min_max(time: &arrow::array::TimestampNanosecondArray) -> (i64, i64) {
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    for &t in time.values().iter() {
        lo = lo.min(t);
        hi = hi.max(t);
    }
    (lo, hi)
}

/// Positions of the tag columns of `schema`, in schema order (name order; the sort
/// order is `sort_lead::sort_tag_indices`).
pub(crate) fn tag_column_indices(schema: &arrow::datatypes::Schema) -> Vec<usize> {
    schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| ColumnKind::from_arrow(f.name(), f.data_type()) == Some(ColumnKind::Tag))
        .map(|(i, _)| i)
        .collect()
}

/// Bytes a streamed file's open row group may hold (encoded) before it is closed
/// early. A constant, so row groups fall in the same places on every replica.
const STREAMED_ROW_GROUP_BYTES_MAX: usize = 128 << 20;

/// Writes one Parquet file a chunk at a time, encoded as flushes encode, for outputs
/// too large to hold in memory (compactions). Its [`FileMeta`] is added at the end,
/// once its rows and time range are known.
///
/// The file's first [`field_encoding::SAMPLE_ROWS`] rows are held until they choose the
/// field columns' encodings, so the choice depends on the rows alone, never on how
/// they were chunked.
pub(crate) struct StreamingParquetWriter<'a> {
    state: WriterState<'a>,
    schema: SchemaRef,
    settings: ParquetSettings,
    sort_lead: Option<String>,
}

enum WriterState<'a> {
    /// Rows held until the sample is complete.
    Sampling {
        sink: &'a mut (dyn std::io::Write + Send),
        held: Vec<RecordBatch>,
        rows: usize,
    },
    Writing(Box<ArrowWriter<&'a mut (dyn std::io::Write + Send)>>),
    /// Only while switching from one state to the other.
    Switching,
}

impl<'a> StreamingParquetWriter<'a> {
    /// Starts a file of `schema` in `sink`, its rows sorted by `sort_lead` first.
    pub(crate) fn new(
        sink: &'a mut (dyn std::io::Write + Send),
        schema: &SchemaRef,
        settings: &ParquetSettings,
        sort_lead: Option<&str>,
    ) -> Result<Self> {
        Ok(StreamingParquetWriter {
            state: WriterState::Sampling {
                sink,
                held: Vec::new(),
                rows: 0,
            },
            schema: schema.clone(),
            settings: settings.clone(),
            sort_lead: sort_lead.map(str::to_string),
        })
    }

    /// Appends rows (already in the file's sort order).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match &mut self.state {
            WriterState::Sampling { held, rows, .. } => {
                *rows += batch.num_rows();
                held.push(batch.clone());
                if *rows >= field_encoding::SAMPLE_ROWS {
                    self.start_writing()?;
                }
                Ok(())
            }
            WriterState::Writing(writer) => {
                writer.write(batch)?;
                if writer.in_progress_size() > STREAMED_ROW_GROUP_BYTES_MAX {
                    writer.flush()?;
                }
                Ok(())
            }
            WriterState::Switching => Err(Error::InvalidPayload(
                "parquet writer used after a failed write".into(),
            )),
        }
    }

    /// Chooses the encodings from the held rows, opens the Parquet writer and writes
    /// them.
    fn start_writing(&mut self) -> Result<()> {
        if !matches!(self.state, WriterState::Sampling { .. }) {
            return Ok(());
        }
        let WriterState::Sampling { sink, held, .. } =
            std::mem::replace(&mut self.state, WriterState::Switching)
        else {
            return Ok(());
        };
        let joined = arrow::compute::concat_batches(&self.schema, &held)?;
        let sample = joined.slice(0, joined.num_rows().min(field_encoding::SAMPLE_ROWS));
        let encodings = field_encoding::choose(&sample);
        let properties = writer_properties(
            &self.schema,
            &self.settings,
            None,
            self.sort_lead.as_deref(),
            &encodings,
        )?;
        let options = ArrowWriterOptions::new()
            .with_properties(properties)
            .with_skip_arrow_metadata(true);
        let mut writer = ArrowWriter::try_new_with_options(sink, self.schema.clone(), options)?;
        for batch in &held {
            writer.write(batch)?;
            if writer.in_progress_size() > STREAMED_ROW_GROUP_BYTES_MAX {
                writer.flush()?;
            }
        }
        self.state = WriterState::Writing(Box::new(writer));
        Ok(())
    }

    /// Records `meta` in the footer and ends the file.
    pub(crate) fn finish(mut self, meta: &FileMeta) -> Result<()> {
        self.start_writing()?;
        let WriterState::Writing(mut writer) = self.state else {
            return Err(Error::InvalidPayload(
                "parquet writer used after a failed write".into(),
            ));
        };
        writer
            .append_key_value_metadata(KeyValue::new(FILE_META_KEY.to_string(), meta_json(meta)?));
        writer.close()?;
        Ok(())
    }
}

fn meta_json(meta: &FileMeta) -> Result<String> {
    serde_json::to_string(meta)
        .map_err(|e| Error::InvalidPayload(format!("file metadata does not encode: {e}")))
}

/// How every Parquet file is encoded: zstd, page statistics, tags then time declared as
/// the sort order, dictionary tags, delta-encoded time. `meta` is put in the footer
/// when already known.
fn writer_properties(
    schema: &SchemaRef,
    settings: &ParquetSettings,
    meta: Option<&FileMeta>,
    sort_lead: Option<&str>,
    field_encodings: &[(String, Encoding)],
) -> Result<WriterProperties> {
    let mut sorting: Vec<SortingColumn> = sort_tag_indices(schema, sort_lead)
        .into_iter()
        .map(|i| SortingColumn {
            column_idx: i as i32,
            descending: false,
            nulls_first: true,
        })
        .collect();
    sorting.push(SortingColumn {
        column_idx: schema.index_of(TIME_COLUMN)? as i32,
        descending: false,
        nulls_first: true,
    });
    let mut metadata = Vec::with_capacity(2);
    if let Some(meta) = meta {
        metadata.push(KeyValue::new(FILE_META_KEY.to_string(), meta_json(meta)?));
    }
    metadata.push(KeyValue::new(
        ARROW_SCHEMA_META_KEY.to_string(),
        // Tags recorded as plain strings (the column chunks stay dictionary-encoded):
        // readers honour the recorded type, and `Utf8` lets the query engine decode tags
        // straight into string views (copying a 16-byte view per row from the decoded
        // dictionary page) instead of building dictionary arrays and casting them,
        // which was a third of the time of a `GROUP BY host` over 20 M rows.
        encode_arrow_schema(&with_tags_as(schema, &DataType::Utf8)),
    ));
    let time_path = ColumnPath::from(TIME_COLUMN);
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(settings.zstd_level)?))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(settings.row_group_rows_max))
        .set_data_page_row_count_limit(settings.page_rows_max.max(1))
        .set_sorting_columns(Some(sorting))
        .set_key_value_metadata(Some(metadata))
        .set_column_dictionary_enabled(time_path.clone(), false)
        .set_column_encoding(time_path, Encoding::DELTA_BINARY_PACKED);
    for (name, encoding) in field_encodings {
        let path = ColumnPath::from(name.as_str());
        builder = builder
            .set_column_dictionary_enabled(path.clone(), false)
            .set_column_encoding(path, *encoding);
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray};
    use arrow::array::{Int64Builder, TimestampNanosecondArray};
    use arrow::datatypes::{Field, Int32Type, Schema, TimeUnit};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::schema::tag_type;

    /// 2016-01-01T00:00:00Z.
    const START: i64 = 1_451_606_400_000_000_000;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(
                TIME_COLUMN,
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            ),
            Field::new("host", tag_type(), true),
            Field::new("noise", DataType::Int64, true),
            Field::new("walk", DataType::Int64, true),
        ]))
    }

    /// `hosts` series of `steps` rows 10 ms apart (all in one hour): a random walk and
    /// uniform noise, in batches of `batch_rows` in arrival order (time, then host).
    fn batches(hosts: u32, steps: i64, batch_rows: usize) -> Vec<RecordBatch> {
        let names: Vec<String> = (0..hosts).map(|h| format!("host_{h}")).collect();
        let mut level: Vec<i64> = vec![50; hosts as usize];
        let mut rows: Vec<(i64, i32, i64, i64)> = Vec::new();
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seed >> 33
        };
        for step in 0..steps {
            for (h, level) in level.iter_mut().enumerate() {
                *level = (*level + (next() % 7) as i64 - 3).clamp(0, 100);
                rows.push((
                    START + step * 10_000_000,
                    h as i32,
                    (next() % 101) as i64,
                    *level,
                ));
            }
        }
        let values = Arc::new(StringArray::from(names));
        rows.chunks(batch_rows)
            .map(|chunk| {
                let keys: Int32Array = chunk.iter().map(|r| Some(r.1)).collect();
                let mut noise = Int64Builder::new();
                let mut walk = Int64Builder::new();
                for r in chunk {
                    noise.append_value(r.2);
                    walk.append_value(r.3);
                }
                RecordBatch::try_new(
                    schema(),
                    vec![
                        Arc::new(TimestampNanosecondArray::from_iter_values(
                            chunk.iter().map(|r| r.0),
                        )),
                        Arc::new(DictionaryArray::<Int32Type>::new(keys, values.clone())),
                        Arc::new(noise.finish()),
                        Arc::new(walk.finish()),
                    ],
                )
                .unwrap()
            })
            .collect()
    }

    fn encode(batches: &[RecordBatch]) -> Vec<EncodedFile> {
        let schema = schema();
        encode_segment(
            &SegmentSource {
                database: "db",
                measurement: "cpu",
                schema: &schema,
                batches,
                log_first: LogIndex(1),
                log_last: LogIndex(9),
                sort_lead: None,
            },
            &ParquetSettings::default(),
        )
        .unwrap()
    }

    fn encodings_of(file: &EncodedFile, column: &str) -> Vec<Encoding> {
        let reader = SerializedFileReader::new(file.bytes.clone()).unwrap();
        let meta = reader.metadata();
        let index = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == column)
            .unwrap();
        meta.row_group(0).column(index).encodings().collect()
    }

    #[test]
    fn a_file_larger_than_the_sample_is_whole_and_its_fields_get_their_encodings() {
        // 150,000 rows in one hour: more than the 65,536 rows that choose the encodings.
        let input = batches(50, 3_000, 7_000);
        let files = encode(&input);
        assert_eq!(files.len(), 1);
        let file = &files[0];
        assert_eq!(file.meta.rows, 150_000);
        let read: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(file.bytes.clone())
            .unwrap()
            .build()
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let sum = |batches: &[RecordBatch], name: &str| -> i64 {
            batches
                .iter()
                .map(|b| {
                    let column = b.column_by_name(name).unwrap();
                    let values = column.as_any().downcast_ref::<Int64Array>().unwrap();
                    values.iter().flatten().sum::<i64>()
                })
                .sum()
        };
        assert_eq!(
            read.iter().map(RecordBatch::num_rows).sum::<usize>(),
            150_000
        );
        assert_eq!(sum(&read, "walk"), sum(&input, "walk"));
        assert_eq!(sum(&read, "noise"), sum(&input, "noise"));
        assert!(
            encodings_of(file, "walk").contains(&Encoding::DELTA_BINARY_PACKED),
            "{:?}",
            encodings_of(file, "walk")
        );
        assert!(
            encodings_of(file, "noise").contains(&Encoding::RLE_DICTIONARY),
            "{:?}",
            encodings_of(file, "noise")
        );
    }

    #[test]
    fn the_same_rows_make_the_same_bytes_however_they_were_batched() {
        let a = encode(&batches(40, 2_000, 3_000));
        let b = encode(&batches(40, 2_000, 65_536));
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].bytes, b[0].bytes);
    }
}
