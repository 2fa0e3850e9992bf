//! Log-entry packing (issue 13): what packing a write's Arrow batch in a zstd frame
//! costs on the request thread (encode) and on the serial apply path (decode), against
//! the plain IPC stream measured in the same run, and the bytes per row each writes to
//! the WAL. The batch is the load generator's Arc shape: 5000 rows, 1000 hosts.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_sizing::{encode_columnar_batch, host_names, BatchShape, RowKind};
use quiver_storage::{decode_batch, encode_batch_packed, EntryCompression};

const ROWS: u64 = 5000;

fn bench(c: &mut Criterion) {
    let shape = BatchShape {
        measurement: "cpu".into(),
        hosts: 1000,
        start_ns: 1_700_000_000_000_000_000,
        interval_ns: 10_000_000,
        kind: RowKind::Arc,
    };
    let payload = encode_columnar_batch(&shape, &host_names(1000), 0, ROWS);
    let (_, batch) = quiver_storage::decode_msgpack(
        &payload,
        0,
        &quiver_storage::WriteLimits::default(),
        &|_| None,
    )
    .expect("decodes")
    .remove(0);
    let mut group = c.benchmark_group("entry_pack_5000_rows");
    group.throughput(Throughput::Elements(ROWS));
    for (label, compression) in [
        ("none", EntryCompression::None),
        ("zstd", EntryCompression::Zstd),
    ] {
        let packed = encode_batch_packed(&batch, compression).expect("packs");
        println!(
            "{label}: {} bytes for {ROWS} rows ({:.2} bytes/row)",
            packed.len(),
            packed.len() as f64 / ROWS as f64
        );
        group.bench_function(format!("encode_{label}"), |b| {
            b.iter(|| {
                encode_batch_packed(std::hint::black_box(&batch), compression).expect("packs")
            })
        });
        group.bench_function(format!("decode_{label}"), |b| {
            b.iter(|| decode_batch(std::hint::black_box(&packed)).expect("unpacks"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
