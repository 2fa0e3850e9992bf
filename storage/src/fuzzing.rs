//! What the fuzz targets run (`fuzz/fuzz_targets/*.rs`), shared with the test that
//! replays their corpora (`tests/it/fuzz_corpus.rs`), so a corpus file checked in CI is
//! checked exactly as the fuzzer checked it.
//!
//! Each function takes arbitrary bytes, runs them through a decoder with the default
//! limits and with [`tight_limits`] (small enough for a few-byte input to cross them),
//! and panics on a violated invariant. Not for production use: panicking is the point.

use std::collections::HashSet;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::TimestampNanosecondType;

use crate::error::Error;
use crate::file_span::FileSpans;
use crate::limits::WriteLimits;
use crate::line_protocol::{parse_line_protocol, LpOutput, Precision};
use crate::msgpack::decode_msgpack;
use crate::prom_remote::{decode_prom_write, VALUE_COLUMN};
use crate::schema::TIME_COLUMN;

/// The server time the fuzz targets stamp rows without a timestamp with.
pub const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// Limits a fuzz input of a few hundred bytes can cross: 4 columns, 3 measurements,
/// 3 files at flush, 16 KiB decoded.
pub fn tight_limits() -> WriteLimits {
    WriteLimits {
        columns_per_table_max: 4,
        measurements_per_write_max: 3,
        write_files_max: 3,
        write_decoded_bytes_max: 16 * 1024,
    }
}

/// Arbitrary bytes through the line-protocol parser with every precision and both sets
/// of limits: no panic; a body refused as a whole only for a limit; otherwise every
/// record is a row or a rejection exactly once, rejections are in line order with
/// bounded excerpts, and the output respects the limits.
pub fn line_protocol(data: &[u8]) {
    for limits in [WriteLimits::default(), tight_limits()] {
        for precision in [
            Precision::Nanoseconds,
            Precision::Microseconds,
            Precision::Milliseconds,
            Precision::Seconds,
            Precision::Auto,
        ] {
            match parse_line_protocol(data, precision, NOW_NS, &limits) {
                Ok(out) => check_line_protocol(data, &out, &limits),
                Err(Error::LimitExceeded { value, max, .. }) => {
                    assert!(value > max, "a limit refused {value} <= {max}")
                }
                Err(e) => panic!("a body may fail as a whole only on a limit, not: {e}"),
            }
        }
    }
}

fn check_line_protocol(data: &[u8], out: &LpOutput, limits: &WriteLimits) {
    let rows: usize = out.tables.iter().map(|t| t.batch.num_rows()).sum();
    assert!(out.rejected.len() <= out.lines_total);
    assert!(out
        .tables
        .iter()
        .all(|t| t.batch.num_rows() > 0 && t.lines.len() == t.batch.num_rows()));
    assert_eq!(rows + out.rejected.len(), out.lines_total);
    let physical_lines = data.iter().filter(|&&c| c == b'\n').count() + 1;
    let mut last = 0;
    for e in &out.rejected {
        assert!(
            e.line > last && e.line <= physical_lines,
            "{:?}",
            out.rejected
        );
        assert!(e.text.len() <= 64);
        last = e.line;
    }
    check_limits(
        out.tables
            .iter()
            .map(|t| (t.measurement.as_str(), &t.batch)),
        limits,
    );
}

/// Arbitrary bytes through the MessagePack decoder with both sets of limits: an error is
/// fine, a panic is not; a decoded payload has rows in every batch and respects the
/// limits.
pub fn msgpack(data: &[u8]) {
    for limits in [WriteLimits::default(), tight_limits()] {
        match decode_msgpack(data, NOW_NS, &limits, &|_| None) {
            Ok(out) => {
                assert!(!out.is_empty());
                assert!(out.iter().all(|(_, b)| b.num_rows() > 0));
                check_limits(out.iter().map(|(m, b)| (m.as_str(), b)), &limits);
            }
            Err(Error::LimitExceeded { value, max, .. }) => {
                assert!(value > max, "a limit refused {value} <= {max}")
            }
            Err(_) => {}
        }
    }
}

/// Arbitrary bytes through the Prometheus remote-write decoder with both sets of
/// limits: an error is fine, a panic is not; a decoded request lists each refused series
/// once, in order, has rows in every batch, a float `value` column in each, and respects
/// the limits.
pub fn prom_remote(data: &[u8]) {
    for limits in [WriteLimits::default(), tight_limits()] {
        match decode_prom_write(data, &limits, &|_| None) {
            Ok(out) => {
                assert!(out.rejected.len() <= out.series_total);
                assert!(out.rejected.windows(2).all(|w| w[0].series < w[1].series));
                assert!(out
                    .rejected
                    .iter()
                    .all(|r| r.series >= 1 && r.series <= out.series_total));
                assert!(out.tables.iter().all(|(_, b)| b.num_rows() > 0));
                assert!(out.tables.iter().all(|(_, b)| b
                    .column_by_name(VALUE_COLUMN)
                    .is_some_and(|c| c.data_type() == &arrow::datatypes::DataType::Float64)));
                check_limits(out.tables.iter().map(|(m, b)| (m.as_str(), b)), &limits);
            }
            Err(Error::LimitExceeded { value, max, .. }) => {
                assert!(value > max, "a limit refused {value} <= {max}")
            }
            Err(_) => {}
        }
    }
}

/// Measurements, columns per measurement and hours of decoded batches are within
/// `limits`.
fn check_limits<'a>(
    tables: impl Iterator<Item = (&'a str, &'a RecordBatch)>,
    limits: &WriteLimits,
) {
    let mut measurements: HashSet<&str> = HashSet::new();
    let mut columns: std::collections::HashMap<&str, HashSet<String>> = Default::default();
    let mut times: Vec<i64> = Vec::new();
    for (measurement, batch) in tables {
        measurements.insert(measurement);
        let names = columns.entry(measurement).or_default();
        names.extend(batch.schema().fields().iter().map(|f| f.name().clone()));
        assert!(
            names.len() <= limits.columns_per_table_max,
            "{measurement:?} has {} columns",
            names.len()
        );
        let Some(time) = batch.column_by_name(TIME_COLUMN) else {
            panic!("{measurement:?} has no time column");
        };
        let time = time.as_primitive::<TimestampNanosecondType>();
        times.extend(time.values().iter());
    }
    assert!(measurements.len() <= limits.measurements_per_write_max);
    let spans = FileSpans::of(times.iter().copied());
    let files: HashSet<i64> = times.iter().map(|&t| spans.bucket(t)).collect();
    assert!(
        files.len() <= limits.write_files_max,
        "{} files",
        files.len()
    );
}
