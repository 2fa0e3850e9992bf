//! Write limits through the public API: names that become path components, the limits
//! that refuse a body as a whole, the column cap that refuses single lines, and the
//! memory a body of ever-new fields costs (measured by a counting allocator).

use std::collections::{BTreeSet, HashSet};

use proptest::prelude::*;
use quiver_storage::{
    decode_msgpack, parquet_path, parse_line_protocol, validate_database_name,
    validate_measurement_name, Error, LogIndex, LpOutput, Precision, TimestampNs, WriteLimits,
    MEASUREMENT_NAME_BYTES_MAX, PATH_COMPONENT_BYTES_MAX,
};
use serde_json::json;

use crate::heap::peak_heap_bytes;

const HOUR_NS: i64 = TimestampNs::HOUR_NS;

fn parse(body: &str, limits: &WriteLimits) -> quiver_storage::Result<LpOutput> {
    parse_line_protocol(body.as_bytes(), Precision::Nanoseconds, 0, limits)
}

/// What the limit an error names, or `None` when the write was accepted.
fn refused_by<T>(result: &quiver_storage::Result<T>) -> Option<&'static str> {
    match result {
        Ok(_) => None,
        Err(Error::LimitExceeded { limit, .. }) => Some(limit),
        Err(e) => panic!("refused, but not by a limit: {e}"),
    }
}

#[test]
fn each_line_adding_a_field_is_linear() {
    // Issue "Nothing stops a node", item 9: 100,000 lines each adding a field made the
    // row builder pad every earlier column on every line, holding rows × columns nulls
    // (tens of GB). Now the lines past the column cap are refused one by one, and the
    // heap the parse holds is measured, not timed.
    const LINES: usize = 100_000;
    let body: String = (0..LINES).map(|i| format!("m f{i}=1 {i}\n")).collect();
    let limits = WriteLimits::default();
    let (out, peak_bytes) = peak_heap_bytes(|| parse(&body, &limits).unwrap());
    let accepted = limits.columns_per_table_max - 1;
    assert_eq!(out.tables[0].batch.num_rows(), accepted);
    assert_eq!(out.rejected.len(), LINES - accepted);
    // Most of the peak is the 99,501 rejections reported back (about 200 bytes each);
    // the batch itself is 499 × 500 slots. Quadratic padding would be 80 GB.
    let batch_bytes = out.tables[0].batch.get_array_memory_size();
    eprintln!(
        "{LINES} lines each adding a field ({} body bytes): peak heap {peak_bytes} bytes, batch {batch_bytes} bytes",
        body.len()
    );
    assert!(batch_bytes < 4 << 20, "{batch_bytes}");
    assert!(peak_bytes < 64 << 20, "{peak_bytes}");
    drop(out);

    // Without the cap, the padded size is counted as the lines arrive and the body is
    // refused once it passes `write_decoded_bytes_max`, before any padding exists.
    let wide = WriteLimits {
        columns_per_table_max: usize::MAX,
        ..WriteLimits::default()
    };
    let (result, peak_bytes) = peak_heap_bytes(|| parse(&body, &wide));
    eprintln!("the same without a column cap: refused, peak heap {peak_bytes} bytes");
    assert_eq!(refused_by(&result), Some("write_decoded_bytes_max"));
    assert!(peak_bytes < 32 << 20, "{peak_bytes}");
}

#[test]
fn a_dense_body_decodes_to_about_its_padded_estimate() {
    // The estimate the byte limit charges stays close to what Arrow really allocates.
    let body: String = (0..20_000)
        .map(|i| format!("cpu,host=h{} usage={i}.5,idle={i}i {i}\n", i % 50))
        .collect();
    let out = parse(&body, &WriteLimits::default()).unwrap();
    let batch = &out.tables[0].batch;
    let slots = batch.num_rows() * (8 + 4 + 8 + 8);
    let arrow_bytes = batch.get_array_memory_size();
    assert!(
        arrow_bytes >= slots && arrow_bytes < 2 * slots,
        "{arrow_bytes} vs {slots}"
    );
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,130}",
        "[a-z .~é日_-]{0,200}",
        proptest::collection::vec(any::<char>(), 0..140).prop_map(|c| c.into_iter().collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_accepted_measurement_name_fits_in_a_path_component(
        name in name(),
        hour in any::<i64>(),
        log in any::<u64>(),
    ) {
        let database = format!("a{}", "b".repeat(63));
        prop_assert!(validate_database_name(&database).is_ok());
        let accepted = validate_measurement_name(&name).is_ok();
        let raw_ok = !name.is_empty()
            && name.len() <= MEASUREMENT_NAME_BYTES_MAX
            && name != "."
            && name != ".."
            && !name.chars().any(|c| c.is_control() || c == '/' || c == '\\');
        // Refused exactly when a raw rule says so: every other name gets a path that fits.
        prop_assert_eq!(accepted, raw_ok);
        if accepted {
            let path = parquet_path(
                &database,
                &name,
                TimestampNs(hour).hour_floor(),
                LogIndex(log / 2),
                LogIndex(log),
            );
            let parts: Vec<&str> = path.split('/').collect();
            prop_assert_eq!(parts.len(), 6, "{}", path);
            for part in parts {
                prop_assert!(!part.is_empty() && part != "." && part != "..", "{}", path);
            }
            // As the object store writes it (`~` and non-ASCII bytes percent-encoded),
            // which is what the file system and S3 see.
            let stored = object_store::path::Path::from(path.as_str());
            prop_assert_eq!(stored.parts().count(), 6, "{}", path);
            for part in stored.parts() {
                prop_assert!(part.as_ref().len() <= PATH_COMPONENT_BYTES_MAX, "{}", path);
            }
            // S3 and most object stores take keys up to 1,024 bytes.
            prop_assert!(stored.as_ref().len() <= 1024);
        }
    }

    #[test]
    fn line_protocol_is_refused_exactly_past_the_body_limits(
        lines in proptest::collection::vec((0..5usize, 0..6i64, 0..4usize), 1..60),
        measurements_max in 1..6usize,
        hours_max in 1..7usize,
    ) {
        let limits = WriteLimits {
            measurements_per_write_max: measurements_max,
            write_files_max: hours_max,
            ..WriteLimits::default()
        };
        let body: String = lines
            .iter()
            .enumerate()
            .map(|(i, (m, h, f))| format!("m{m} f{f}=1 {}\n", h * HOUR_NS + i as i64))
            .collect();
        // The model: in body order, the first line that would cross the measurement
        // limit refuses the body; if none does, the files the rows make at flush (here
        // one per distinct hour: six hours are all recent) are counted at the end.
        let mut expected = None;
        let (mut seen_m, mut seen_h) = (HashSet::new(), HashSet::new());
        for (m, h, _) in &lines {
            if !seen_m.contains(m) && seen_m.len() == measurements_max {
                expected = Some("measurements_per_write_max");
                break;
            }
            seen_m.insert(*m);
            seen_h.insert(*h);
        }
        if expected.is_none() && seen_h.len() > hours_max {
            expected = Some("write_files_max");
        }
        let result = parse(&body, &limits);
        prop_assert_eq!(refused_by(&result), expected);
        if let Ok(out) = result {
            prop_assert!(out.rejected.is_empty());
            prop_assert_eq!(out.tables.len(), seen_m.len());
        }
    }

    #[test]
    fn the_column_cap_rejects_exactly_the_lines_that_would_widen_past_it(
        lines in proptest::collection::vec(proptest::collection::btree_set(0..8usize, 1..4), 1..40),
        columns_max in 2..8usize,
    ) {
        let limits = WriteLimits {
            columns_per_table_max: columns_max,
            ..WriteLimits::default()
        };
        let body: String = lines
            .iter()
            .map(|fields| {
                let fields: Vec<String> = fields.iter().map(|f| format!("f{f}=1")).collect();
                format!("m {}\n", fields.join(","))
            })
            .collect();
        let mut columns: BTreeSet<usize> = BTreeSet::new();
        let mut want_rejected = Vec::new();
        for (i, fields) in lines.iter().enumerate() {
            let new = fields.difference(&columns).count();
            if 1 + columns.len() + new > columns_max {
                want_rejected.push(i + 1);
            } else {
                columns.extend(fields);
            }
        }
        let out = parse(&body, &limits).unwrap();
        let rejected: Vec<usize> = out.rejected.iter().map(|e| e.line).collect();
        prop_assert_eq!(&rejected, &want_rejected);
        prop_assert!(out.rejected.iter().all(|e| e.error.contains("columns_per_table_max")));
        if let Some(table) = out.tables.first() {
            prop_assert_eq!(table.batch.num_columns(), 1 + columns.len());
            prop_assert!(table.batch.num_columns() <= columns_max);
        }
    }

    #[test]
    fn msgpack_is_refused_exactly_past_the_limits(
        rows in proptest::collection::vec((0..5usize, 0..6i64, 0..4usize), 1..40),
        measurements_max in 1..6usize,
        hours_max in 1..7usize,
        columns_max in 2..6usize,
    ) {
        let limits = WriteLimits {
            measurements_per_write_max: measurements_max,
            write_files_max: hours_max,
            columns_per_table_max: columns_max,
            ..WriteLimits::default()
        };
        const HOUR_MS: i64 = 3_600_000;
        let objects: Vec<serde_json::Value> = rows
            .iter()
            .map(|(m, h, f)| {
                let mut fields = serde_json::Map::new();
                fields.insert(format!("f{f}"), json!(1.5));
                json!({"m": format!("m{m}"), "t": 1_700_000_000_000i64 + h * HOUR_MS, "fields": fields})
            })
            .collect();
        let payload = rmp_serde::to_vec_named(&json!({"batch": objects})).unwrap();
        let mut expected = None;
        let (mut seen_m, mut seen_h) = (HashSet::new(), HashSet::new());
        let mut seen_days = HashSet::new();
        let mut columns: Vec<HashSet<usize>> = vec![HashSet::new(); 5];
        for (m, h, f) in &rows {
            if !seen_m.contains(m) && seen_m.len() == measurements_max {
                expected = Some("measurements_per_write_max");
                break;
            }
            seen_m.insert(*m);
            // Every UTC day makes a file at least: a day past the limit is refused as
            // it comes (the base time is 22:13, so the hours cross midnight).
            let day = (1_700_000_000_000i64 + h * HOUR_MS).div_euclid(24 * HOUR_MS);
            if !seen_days.contains(&day) && seen_days.len() == hours_max {
                expected = Some("write_files_max");
                break;
            }
            seen_days.insert(day);
            seen_h.insert(*h);
            columns[*m].insert(*f);
            if 1 + columns[*m].len() > columns_max {
                expected = Some("columns_per_table_max");
                break;
            }
        }
        // The files at flush (one per distinct hour: all recent) are counted at the end.
        if expected.is_none() && seen_h.len() > hours_max {
            expected = Some("write_files_max");
        }
        let result = decode_msgpack(&payload, 0, &limits, &|_| None);
        match (expected, &result) {
            // A row widening its table is refused by the row builder, naming the limit
            // in an invalid-payload message.
            (Some("columns_per_table_max"), Err(e)) => {
                prop_assert!(e.to_string().contains("columns_per_table_max"), "{}", e)
            }
            _ => prop_assert_eq!(refused_by(&result), expected),
        }
    }
}
