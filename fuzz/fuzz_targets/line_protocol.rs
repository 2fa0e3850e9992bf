//! Arbitrary bytes through the line-protocol parser with every precision: it must not
//! panic, and every line must be accounted for exactly once (or the body refused by a
//! limit).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_storage::{parse_line_protocol, Precision, WriteLimits};

const NOW_NS: i64 = 1_700_000_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    for precision in [
        Precision::Nanoseconds,
        Precision::Microseconds,
        Precision::Milliseconds,
        Precision::Seconds,
        Precision::Auto,
    ] {
        let Ok(out) = parse_line_protocol(data, precision, NOW_NS, &WriteLimits::default())
        else {
            continue;
        };
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
    }
});
