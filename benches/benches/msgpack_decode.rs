//! MessagePack decode throughput: Arc-shaped 5000-row columnar batches (the load
//! generator's exact bytes) decoded into Arrow, against a baseline in the same run —
//! rmp-serde decoding the same bytes into plain Rust vectors, which is the least any
//! decoder must do.

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_sizing::{encode_columnar_batch, host_names, BatchShape, RowKind};

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Columnar {
    m: String,
    columns: BTreeMap<String, Column>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum Column {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Strings(Vec<String>),
}

fn bench(c: &mut Criterion) {
    let shape = BatchShape {
        measurement: "cpu".into(),
        hosts: 1000,
        start_ns: 1_700_000_000_000_000_000,
        interval_ns: 10_000_000,
        kind: RowKind::Arc,
    };
    let names = host_names(1000);
    let payload = encode_columnar_batch(&shape, &names, 0, 5000);
    let mut group = c.benchmark_group("msgpack_decode_5000_rows");
    group.throughput(Throughput::Elements(5000));
    group.bench_function("quiver_to_arrow", |b| {
        b.iter(|| {
            quiver_storage::decode_msgpack(
                std::hint::black_box(&payload),
                0,
                &quiver_storage::WriteLimits::default(),
                &|_| None,
            )
            .expect("decodes")
        })
    });
    group.bench_function("baseline_rmp_serde_to_vecs", |b| {
        b.iter(|| {
            rmp_serde::from_slice::<Columnar>(std::hint::black_box(&payload)).expect("decodes")
        })
    });
    group.finish();
    println!(
        "payload: {} bytes for 5000 rows ({:.1} bytes/row)",
        payload.len(),
        payload.len() as f64 / 5000.0
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
