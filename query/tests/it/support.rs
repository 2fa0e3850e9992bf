//! A hand-built `TableSource`: real zstd Parquet files (one per hour, sorted by host then
//! time) in a temp dir, plus in-memory batches, all generated from rows kept here so the
//! tests can compute expected answers themselves.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray,
};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use quiver_query::{QueryConfig, QueryEngine, QueryOutput};
use quiver_storage::{
    ColumnKind, ColumnMeta, FieldType, ParquetFileRef, TableSnapshot, TableSource, TimestampNs,
};

/// 2024-01-01T00:00:00Z.
pub const T0_NS: i64 = 1_704_067_200_000_000_000;
pub const HOUR_NS: i64 = 3_600_000_000_000;
pub const MINUTE_NS: i64 = 60_000_000_000;
pub const HOSTS: [&str; 5] = ["host-a", "host-b", "host-c", "host-d", "host-e"];
/// Hours 0..FILE_HOURS of `cpu` are in Parquet; hour FILE_HOURS is in memory.
pub const FILE_HOURS: i64 = 6;
/// Rows per host per hour (one a minute).
pub const ROWS_PER_HOST_HOUR: i64 = 60;

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub time_ns: i64,
    pub host: String,
    pub region: String,
    pub count: i64,
    pub temp: Option<f64>,
    pub usage: f64,
}

/// The rows of one hour, sorted by host then time (the order files are written in).
pub fn rows_for_hour(hour: i64) -> Vec<Row> {
    let mut rows = Vec::new();
    for (h, host) in HOSTS.iter().enumerate() {
        let h = h as i64;
        for minute in 0..ROWS_PER_HOST_HOUR {
            rows.push(Row {
                // Host a sits exactly on the minute; the others carry sub-ms fractions.
                time_ns: T0_NS + hour * HOUR_NS + minute * MINUTE_NS + h * 1_000_123,
                host: host.to_string(),
                region: if h % 2 == 0 { "eu" } else { "us" }.to_string(),
                count: hour * 1000 + h * 100 + minute,
                // `temp` was added after the first hour was written.
                temp: (hour > 0).then(|| 20.0 + h as f64 + minute as f64 / 100.0),
                usage: ((h * 7 + minute * 13 + hour * 3) % 100) as f64 + 0.25,
            });
        }
    }
    rows
}

pub fn schema(with_temp: bool) -> SchemaRef {
    let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let mut fields = vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new("host", dict.clone(), true),
        Field::new("region", dict, true),
        Field::new("count", DataType::Int64, true),
    ];
    if with_temp {
        fields.push(Field::new("temp", DataType::Float64, true));
    }
    fields.push(Field::new("usage", DataType::Float64, true));
    Arc::new(Schema::new(fields))
}

pub fn batch(rows: &[Row], with_temp: bool) -> RecordBatch {
    let dict = |f: fn(&Row) -> &str| -> ArrayRef {
        Arc::new(
            rows.iter()
                .map(|r| Some(f(r)))
                .collect::<DictionaryArray<Int32Type>>(),
        )
    };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|r| r.time_ns),
        )),
        dict(|r| r.host.as_str()),
        dict(|r| r.region.as_str()),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.count))),
    ];
    if with_temp {
        columns.push(Arc::new(
            rows.iter().map(|r| r.temp).collect::<Float64Array>(),
        ));
    }
    columns.push(Arc::new(Float64Array::from_iter_values(
        rows.iter().map(|r| r.usage),
    )));
    RecordBatch::try_new(schema(with_temp), columns).expect("fixture batch")
}

/// `batch` with its integer column `count` at the narrowest width that holds it, as
/// storage buffers integers.
pub fn narrow_count(batch: RecordBatch) -> RecordBatch {
    let schema = batch.schema();
    let i = schema.index_of("count").expect("count column");
    let count = batch.column(i);
    let max =
        arrow::compute::max(count.as_any().downcast_ref::<Int64Array>().expect("i64")).unwrap_or(0);
    let narrow = if max <= i64::from(i16::MAX) {
        DataType::Int16
    } else {
        DataType::Int32
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[i] = fields[i].clone().with_data_type(narrow.clone());
    let mut columns = batch.columns().to_vec();
    columns[i] = cast(count, &narrow).expect("narrow count");
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("narrow batch")
}

/// Writes `rows` as one Parquet file the way storage does and describes it.
pub fn write_parquet(root: &Path, path: &str, rows: &[Row], with_temp: bool) -> ParquetFileRef {
    let time_min = rows.iter().map(|r| r.time_ns).min().expect("rows");
    let time_max = rows.iter().map(|r| r.time_ns).max().expect("rows");
    let metadata = vec![
        KeyValue::new("quiver.time_min_ns".to_string(), time_min.to_string()),
        KeyValue::new("quiver.time_max_ns".to_string(), time_max.to_string()),
    ];
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        // One host per row group, so statistics can prune row groups by host.
        .set_max_row_group_row_count(Some(ROWS_PER_HOST_HOUR as usize))
        .set_key_value_metadata(Some(metadata))
        .build();
    let full = root.join(path);
    std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
    let file = std::fs::File::create(&full).expect("create parquet");
    let mut batch = batch(rows, with_temp);
    // Storage records tags as plain strings (over dictionary-encoded pages) since the
    // query engine reads them as views; older files record dictionaries. Odd hours are
    // written the new way, so every query reads both kinds of file together.
    let first_hour = (time_min - T0_NS).div_euclid(HOUR_NS);
    if first_hour % 2 == 1 {
        let plain = Arc::new(quiver_storage::with_tags_as(
            &batch.schema(),
            &DataType::Utf8,
        ));
        let columns = batch
            .columns()
            .iter()
            .zip(plain.fields())
            .map(|(c, f)| arrow::compute::cast(c, f.data_type()).expect("cast"))
            .collect();
        batch = RecordBatch::try_new(plain, columns).expect("plain batch");
    }
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    ParquetFileRef {
        path: path.to_string(),
        size_bytes: std::fs::metadata(&full).expect("stat").len(),
        rows: rows.len() as u64,
        time_min: TimestampNs(time_min),
        time_max: TimestampNs(time_max),
        tombstones: Vec::new(),
        columns: column_metas(with_temp),
        // What storage counts while writing (`FileMeta::tag_distinct`), tags in order.
        tag_distinct: vec![distinct(rows, |r| &r.host), distinct(rows, |r| &r.region)],
    }
}

/// The columns of [`schema`] as storage records them in a file's metadata.
fn column_metas(with_temp: bool) -> Arc<[ColumnMeta]> {
    let mut columns = vec![
        ColumnMeta::new("time", ColumnKind::Time),
        ColumnMeta::new("host", ColumnKind::Tag),
        ColumnMeta::new("region", ColumnKind::Tag),
        ColumnMeta::new("count", ColumnKind::Field(FieldType::Integer)),
    ];
    if with_temp {
        columns.push(ColumnMeta::new("temp", ColumnKind::Field(FieldType::Float)));
    }
    columns.push(ColumnMeta::new(
        "usage",
        ColumnKind::Field(FieldType::Float),
    ));
    columns.into()
}

fn distinct(rows: &[Row], tag: fn(&Row) -> &String) -> u32 {
    let values: std::collections::BTreeSet<&String> = rows.iter().map(tag).collect();
    values.len() as u32
}

/// A `TableSource` over a fixed set of snapshots; tables can be added while it is used.
#[derive(Debug)]
pub struct TestSource {
    store: Arc<dyn ObjectStore>,
    tables: RwLock<BTreeMap<(String, String), TableSnapshot>>,
}

impl TestSource {
    pub fn insert(&self, snapshot: TableSnapshot) {
        let key = (snapshot.database.clone(), snapshot.measurement.clone());
        self.tables.write().expect("lock").insert(key, snapshot);
    }
}

impl TableSource for TestSource {
    fn databases(&self) -> Vec<String> {
        let tables = self.tables.read().expect("lock");
        let mut names: Vec<String> = tables.keys().map(|(db, _)| db.clone()).collect();
        names.dedup();
        names
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        let tables = self.tables.read().expect("lock");
        tables
            .keys()
            .filter(|(db, _)| db == database)
            .map(|(_, m)| m.clone())
            .collect()
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        let tables = self.tables.read().expect("lock");
        tables
            .get(&(database.to_string(), measurement.to_string()))
            .cloned()
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }
}

pub fn snapshot(
    database: &str,
    measurement: &str,
    memory: Vec<RecordBatch>,
    files: Vec<ParquetFileRef>,
) -> TableSnapshot {
    TableSnapshot::unfiltered(
        database,
        measurement,
        schema(true),
        vec!["host".to_string(), "region".to_string()],
        memory,
        files,
    )
}

/// The data every test runs against.
///
/// - `db1.cpu`: hours 0..6 in six Parquet files (hour 0 without `temp`), hour 6 in two
///   memory batches.
/// - `db1.mem`: hours 0..2 in memory only.
/// - `db1.disk`: hours 0..2 in Parquet only.
/// - `other."CPU_Upper"`: hour 0 in memory, a name with upper case.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub source: Arc<TestSource>,
    /// Every row of `db1.cpu`.
    pub cpu: Vec<Row>,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalFileSystem::new_with_prefix(dir.path()).expect("store");
        let source = Arc::new(TestSource {
            store: Arc::new(store),
            tables: RwLock::new(BTreeMap::new()),
        });

        let mut cpu = Vec::new();
        let mut files = Vec::new();
        for hour in 0..FILE_HOURS {
            let rows = rows_for_hour(hour);
            let path = format!("db1/cpu/2024-01-01T{hour:02}.parquet");
            files.push(write_parquet(dir.path(), &path, &rows, hour > 0));
            cpu.extend(rows);
        }
        let live = rows_for_hour(FILE_HOURS);
        let (first, second) = live.split_at(live.len() / 3);
        // Storage buffers integers as narrow as their values allow (`int_width`): one
        // batch as it would hold them, one at full width.
        let memory = vec![batch(first, true), narrow_count(batch(second, true))];
        cpu.extend(live.clone());
        source.insert(snapshot("db1", "cpu", memory, files));

        let mem_rows: Vec<Row> = (0..2).flat_map(rows_for_hour).collect();
        source.insert(snapshot(
            "db1",
            "mem",
            vec![narrow_count(batch(&mem_rows, true))],
            vec![],
        ));

        let disk_files = (0..2)
            .map(|hour| {
                let path = format!("db1/disk/2024-01-01T{hour:02}.parquet");
                write_parquet(dir.path(), &path, &rows_for_hour(hour), true)
            })
            .collect();
        source.insert(snapshot("db1", "disk", vec![], disk_files));

        source.insert(snapshot(
            "other",
            "CPU_Upper",
            vec![batch(&rows_for_hour(0), true)],
            vec![],
        ));

        Fixture {
            _dir: dir,
            source,
            cpu,
        }
    }

    /// The directory the fixture's object store is rooted at.
    pub fn root(&self) -> &Path {
        self._dir.path()
    }

    pub fn engine(&self) -> QueryEngine {
        self.engine_with(QueryConfig {
            target_partitions: 2,
            ..QueryConfig::default()
        })
    }

    pub fn engine_with(&self, config: QueryConfig) -> QueryEngine {
        QueryEngine::new(Arc::clone(&self.source) as Arc<dyn TableSource>, config)
            .expect("engine starts")
    }
}

/// Runs a query that must succeed.
pub async fn query(engine: &QueryEngine, database: &str, sql: &str) -> QueryOutput {
    match engine.execute(database, sql).await {
        Ok(output) => output,
        Err(e) => panic!("query failed: {sql}\n{e}"),
    }
}

/// One column of the result, cast to `data_type`.
pub fn column(output: &QueryOutput, index: usize, data_type: &DataType) -> ArrayRef {
    let all = concat_batches(&output.schema, &output.batches).expect("concat");
    cast(all.column(index), data_type).expect("cast")
}

pub fn i64s(output: &QueryOutput, index: usize) -> Vec<Option<i64>> {
    let array = column(output, index, &DataType::Int64);
    let array = array.as_any().downcast_ref::<Int64Array>().expect("i64");
    array.iter().collect()
}

pub fn f64s(output: &QueryOutput, index: usize) -> Vec<Option<f64>> {
    let array = column(output, index, &DataType::Float64);
    let array = array.as_any().downcast_ref::<Float64Array>().expect("f64");
    array.iter().collect()
}

pub fn strings(output: &QueryOutput, index: usize) -> Vec<Option<String>> {
    let array = column(output, index, &DataType::Utf8);
    let array = array.as_any().downcast_ref::<StringArray>().expect("utf8");
    array.iter().map(|s| s.map(str::to_string)).collect()
}

/// The single value of a one-row, one-column integer result.
pub fn one_i64(output: &QueryOutput) -> i64 {
    let values = i64s(output, 0);
    assert_eq!(values.len(), 1, "expected one row");
    values[0].expect("not null")
}

pub fn assert_close(actual: f64, expected: f64) {
    let tolerance = 1e-9 * expected.abs().max(1.0);
    assert!(
        (actual - expected).abs() <= tolerance,
        "{actual} != {expected}"
    );
}

/// The physical plan DataFusion would run, as text.
pub async fn explain(engine: &QueryEngine, database: &str, sql: &str) -> String {
    let output = query(engine, database, &format!("EXPLAIN {sql}")).await;
    strings(&output, 1)
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The distinct Parquet files a plan reads.
pub fn files_in_plan(plan: &str) -> Vec<String> {
    let mut files: Vec<String> = plan
        .split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | ','))
        .filter(|word| word.ends_with(".parquet"))
        .map(str::to_string)
        .collect();
    files.sort();
    files.dedup();
    files
}
