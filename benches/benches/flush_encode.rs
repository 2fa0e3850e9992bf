//! A flush's CPU (issue 13): one segment of buffered write batches sorted and encoded
//! into Parquet, as the persister does it, for Arc's shape (one tag, three floats) and
//! TSBS's cpu-only shape (ten tags, ten integers). A flush must keep up with ingest:
//! whatever it cannot write stays in memory.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_sizing::{encode_columnar_batch, BatchShape, RowKind};
use quiver_storage::{
    choose_lead, decode_batch, encode_batch_packed, encode_segment, EntryCompression, LogIndex,
    ParquetSettings, SegmentSource,
};

/// Rows per write batch, as the load generator sends them.
const BATCH_ROWS: u64 = 5000;
/// Batches per segment: 2,000,000 rows, a segment of `storage.flush_rows_max` by default.
const BATCHES: u64 = 400;

fn segment(kind: RowKind) -> Vec<arrow::array::RecordBatch> {
    let shape = BatchShape {
        measurement: "cpu".into(),
        hosts: 1000,
        start_ns: 1_451_606_400_000_000_000,
        interval_ns: 10_000_000_000,
        kind,
    };
    let names = kind.host_names(shape.hosts);
    (0..BATCHES)
        .map(|b| {
            let payload = encode_columnar_batch(&shape, &names, b * BATCH_ROWS, BATCH_ROWS);
            let (_, batch) = quiver_storage::decode_msgpack(
                &payload,
                0,
                &quiver_storage::WriteLimits::default(),
                &|_| None,
            )
            .expect("decodes")
            .remove(0);
            // Buffered batches come from log entries: decoded from IPC, as applied.
            let entry = encode_batch_packed(&batch, EntryCompression::Zstd).expect("packs");
            decode_batch(&entry).expect("unpacks")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("flush_encode_2m_rows");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BATCH_ROWS * BATCHES));
    let settings = ParquetSettings::default();
    for (label, kind) in [("arc", RowKind::Arc), ("tsbs", RowKind::Tsbs)] {
        let batches = segment(kind);
        let schema = batches[0].schema();
        // The lead a freeze of this segment decides (the host tag).
        let lead = choose_lead(&schema, &batches);
        let source = SegmentSource {
            database: "bench",
            measurement: "cpu",
            schema: &schema,
            batches: &batches,
            log_first: LogIndex(1),
            log_last: LogIndex(BATCHES),
            sort_lead: lead.as_deref(),
        };
        let files = encode_segment(&source, &settings).expect("encodes");
        let bytes: u64 = files.iter().map(|f| f.meta.size_bytes).sum();
        println!(
            "{label}: {} files, {:.2} bytes/row",
            files.len(),
            bytes as f64 / (BATCH_ROWS * BATCHES) as f64
        );
        group.bench_function(label, |b| {
            b.iter(|| encode_segment(&source, &settings).expect("encodes"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
