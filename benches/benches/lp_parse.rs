//! Line-protocol parse throughput on one core: bodies of 5000 lines parsed into Arrow
//! batches, for (a) the Arc-shaped `cpu` row (1 tag, 3 float fields) and (b) the TSBS
//! `cpu` row (10 tags, 10 integer fields). Criterion reports bytes per second; rows per
//! second are printed after each case from a separate timed loop.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_storage::{parse_line_protocol, Precision};

const LINES: usize = 5000;

const ARC_LINE: &str =
    "cpu,host=host-123 usage_user=12.34,usage_system=56.78,usage_idle=90.12 1700000000000000000";

const TSBS_LINE: &str = "cpu,hostname=host_0,region=eu-west-1,datacenter=eu-west-1c,rack=87,os=Ubuntu16.04LTS,arch=x64,team=NYC,service=18,service_version=1,service_environment=production usage_user=58i,usage_system=2i,usage_idle=24i,usage_nice=61i,usage_iowait=22i,usage_irq=63i,usage_softirq=6i,usage_steal=44i,usage_guest=80i,usage_guest_nice=38i 1451606400000000000";

/// How long the rows-per-second loop runs.
const ROWS_TIMING: Duration = Duration::from_secs(2);

fn body_of(line: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity((line.len() + 1) * LINES);
    for _ in 0..LINES {
        body.extend_from_slice(line.as_bytes());
        body.push(b'\n');
    }
    body
}

fn parse(body: &[u8]) -> usize {
    let out = parse_line_protocol(
        std::hint::black_box(body),
        Precision::Nanoseconds,
        0,
        &quiver_storage::WriteLimits::default(),
    )
    .expect("within the limits");
    assert!(out.rejected.is_empty(), "{:?}", out.rejected.first());
    out.tables.iter().map(|t| t.batch.num_rows()).sum()
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("arc_cpu_1_tag_3_floats", ARC_LINE),
        ("tsbs_cpu_10_tags_10_ints", TSBS_LINE),
    ];
    let mut group = c.benchmark_group("lp_parse_5000_lines");
    let mut summary = Vec::new();
    for (name, line) in cases {
        let body = body_of(line);
        assert_eq!(parse(&body), LINES);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| b.iter(|| parse(&body)));

        let start = Instant::now();
        let mut rows = 0usize;
        while start.elapsed() < ROWS_TIMING {
            rows += parse(&body);
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = (rows / LINES * body.len()) as f64;
        summary.push(format!(
            "{name}: {:.2} M rows/s, {:.1} MB/s ({} bytes/line)",
            rows as f64 / secs / 1e6,
            bytes / secs / 1e6,
            line.len() + 1
        ));
    }
    group.finish();
    for line in summary {
        println!("{line}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
