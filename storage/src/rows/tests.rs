//! Tests of the row builder: lazy padding, the width cap, byte accounting.

use super::column::slot_bytes;
use super::*;
use crate::limits::COLUMN_BYTES_FIXED;
use crate::schema::TagKey;
use arrow::array::{Array, AsArray};
use arrow::datatypes::Float64Type;

#[test]
fn rows_with_missing_fields_get_nulls_not_zeros() {
    let mut b = RowBatchBuilder::new("cpu", false);
    b.push_row(1, &[("host", "a")], &[("x", FieldValue::Float(1.0))])
        .unwrap();
    b.push_row(2, &[], &[("y", FieldValue::Integer(7))])
        .unwrap();
    let batch = b.finish().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 2);
    let x = batch.column_by_name("x").unwrap();
    assert!(x.is_null(1));
    let y = batch.column_by_name("y").unwrap();
    assert!(y.is_null(0));
    assert!(batch.column_by_name("host").unwrap().is_null(1));
}

#[test]
fn a_rejected_row_leaves_no_trace() {
    let mut b = RowBatchBuilder::new("cpu", false);
    b.push_row(1, &[], &[("x", FieldValue::Float(1.0))])
        .unwrap();
    let err = b
        .push_row(2, &[("new", "t")], &[("x", FieldValue::String("s"))])
        .unwrap_err();
    assert!(err.0.contains("\"x\""), "{err}");
    let err = b.push_row(
        3,
        &[],
        &[("x", FieldValue::Float(1.0)), ("x", FieldValue::Float(2.0))],
    );
    assert!(err.unwrap_err().0.contains("duplicate"));
    b.push_row(4, &[], &[("x", FieldValue::Float(4.0))])
        .unwrap();
    let batch = b.finish().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 2);
    assert!(batch.column_by_name("new").is_none());
    let x = batch
        .column_by_name("x")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(x.values().to_vec(), vec![1.0, 4.0]);
}

#[test]
fn integers_widen_to_float_only_when_allowed() {
    let mut strict = RowBatchBuilder::new("m", false);
    strict
        .push_row(1, &[], &[("v", FieldValue::Integer(1))])
        .unwrap();
    assert!(strict
        .push_row(2, &[], &[("v", FieldValue::Float(1.5))])
        .is_err());

    let mut lenient = RowBatchBuilder::new("m", true);
    lenient
        .push_row(1, &[], &[("v", FieldValue::Integer(1))])
        .unwrap();
    lenient
        .push_row(2, &[], &[("v", FieldValue::Float(1.5))])
        .unwrap();
    lenient
        .push_row(3, &[], &[("v", FieldValue::Integer(2))])
        .unwrap();
    let batch = lenient.finish().unwrap().unwrap();
    let v = batch
        .column_by_name("v")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(v.values().to_vec(), vec![1.0, 1.5, 2.0]);
}

#[test]
fn tag_and_field_with_the_same_name_is_refused() {
    let mut b = RowBatchBuilder::new("m", false);
    let err = b
        .push_row(1, &[("a", "x")], &[("a", FieldValue::Float(1.0))])
        .unwrap_err();
    assert!(err.0.contains("duplicate"), "{err}");
}

#[test]
fn each_line_adding_a_field_is_linear() {
    // 100,000 rows, each bringing a new field: padding every column on every row, as
    // the builder once did, held 100,000² nulls (80 GB) and took minutes. Lazily
    // padded, the builders hold each value once, plus each column's fixed cost.
    const ROWS: usize = 100_000;
    let mut b = RowBatchBuilder::new("m", false).with_columns_max(usize::MAX);
    let mut names_bytes = 0;
    for i in 0..ROWS {
        let name = format!("f{i}");
        names_bytes += name.len();
        b.push_row(i as i64, &[], &[(name.as_str(), FieldValue::Float(1.0))])
            .unwrap();
    }
    let per_row = slot_bytes(ColumnKind::Time) + slot_bytes(ColumnKind::Field(FieldType::Float));
    assert_eq!(
        b.bytes_held(),
        ROWS * (per_row + COLUMN_BYTES_FIXED) + names_bytes
    );
    // What finishing would pad to: a decoder refuses that before it is allocated.
    assert!(b.bytes_when_finished() >= ROWS * ROWS * 8);
}

#[test]
fn columns_past_the_cap_are_refused_counting_time_and_stored_columns() {
    let stored = MeasurementSchema::default()
        .merge(
            "m",
            &canonical_schema([
                ("host", ColumnKind::Tag),
                ("a", ColumnKind::Field(FieldType::Float)),
            ]),
        )
        .unwrap()
        .unwrap();
    assert_eq!(stored.columns_len(), 3);
    let mut b = RowBatchBuilder::new("m", false)
        .with_stored_schema(stored)
        .with_columns_max(4);
    b.push_row(1, &[("host", "x")], &[("a", FieldValue::Float(1.0))])
        .unwrap();
    b.push_row(2, &[], &[("b", FieldValue::Float(2.0))])
        .unwrap();
    assert_eq!(b.columns_total(), 4);
    let err = b
        .push_row(3, &[("dc", "y")], &[("a", FieldValue::Float(3.0))])
        .unwrap_err();
    assert!(
        err.0.contains("\"dc\"")
            && err.0.contains("5 columns")
            && err.0.contains("the limit is 4 (columns_per_table_max"),
        "{err}"
    );
    // Nothing of the refused row stays; known columns still take rows.
    assert!(b.column_kind("dc").is_none());
    b.push_row(4, &[("host", "z")], &[("b", FieldValue::Float(4.0))])
        .unwrap();
    let batch = b.finish().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 3);
    assert_eq!(batch.num_columns(), 4);
}

#[test]
fn lazy_padding_puts_every_value_in_its_row() {
    let mut b = RowBatchBuilder::new("m", true);
    b.push_row(1, &[("t", "a")], &[("i", FieldValue::Integer(1))])
        .unwrap();
    b.push_row(2, &[], &[("s", FieldValue::String("x"))])
        .unwrap();
    b.push_row(3, &[], &[("s", FieldValue::String("y"))])
        .unwrap();
    // `i` catches up two rows, then widens to float with its nulls in place.
    b.push_row(4, &[("t", "a")], &[("i", FieldValue::Float(2.5))])
        .unwrap();
    b.push_row(
        5,
        &[("t", "b"), ("zone", "z1")],
        &[("late", FieldValue::Boolean(true))],
    )
    .unwrap();
    let estimate = b.bytes_when_finished();
    let batch = b.finish().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 5);
    let i = batch.column_by_name("i").unwrap();
    let i = i.as_primitive::<Float64Type>();
    let got: Vec<Option<f64>> = i.iter().collect();
    assert_eq!(got, [Some(1.0), None, None, Some(2.5), None]);
    let s = batch.column_by_name("s").unwrap();
    let s: Vec<Option<&str>> = s.as_string::<i32>().iter().collect();
    assert_eq!(s, [None, Some("x"), Some("y"), None, None]);
    let late = batch.column_by_name("late").unwrap();
    assert_eq!(late.null_count(), 4);
    assert!(late.is_valid(4));
    let t = batch.column_by_name("t").unwrap();
    let t = t.as_dictionary::<TagKey>();
    assert_eq!(t.values().len(), 2);
    assert_eq!(t.null_count(), 2);
    // A tag first seen on the last row: four leading nulls put in front at finish.
    let zone = batch.column_by_name("zone").unwrap();
    let zone = zone.as_dictionary::<TagKey>();
    let zone: Vec<Option<&str>> = zone
        .downcast_dict::<arrow::array::StringArray>()
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(zone, [None, None, None, None, Some("z1")]);
    // The estimate counts values and fixed costs, not Arrow's spare capacity.
    let slots = 5 * (8 + 4 + 8 + 4 + 1 + 4);
    let dictionaries = 2 * (4 + 1) + (4 + 2);
    let strings = 2;
    let fixed = 5 * COLUMN_BYTES_FIXED + "tislatezone".len();
    assert_eq!(estimate, slots + dictionaries + strings + fixed);
}

mod key_order {
    use std::collections::BTreeMap;

    use arrow::datatypes::Int64Type;
    use proptest::prelude::*;

    use super::*;

    const TAGS: [&str; 4] = ["a", "b", "c", "d"];
    const FIELDS: [&str; 4] = ["w", "x", "y", "z"];

    /// A row's tags (index into `TAGS`, value) and fields (index into `FIELDS`, value),
    /// in the order the row names them.
    type Row = (Vec<(usize, u8)>, Vec<(usize, i64)>);

    /// One row: which tags and fields it names, in which order, with which values.
    fn row() -> impl Strategy<Value = Row> {
        let tags = prop::sample::subsequence((0..TAGS.len()).collect::<Vec<_>>(), 0..=TAGS.len())
            .prop_shuffle()
            .prop_flat_map(|t| {
                let n = t.len();
                (Just(t), prop::collection::vec(0u8..3, n))
            })
            .prop_map(|(t, v)| t.into_iter().zip(v).collect::<Vec<_>>());
        let fields =
            prop::sample::subsequence((0..FIELDS.len()).collect::<Vec<_>>(), 1..=FIELDS.len())
                .prop_shuffle()
                .prop_flat_map(|f| {
                    let n = f.len();
                    (Just(f), prop::collection::vec(-5i64..5, n))
                })
                .prop_map(|(f, v)| f.into_iter().zip(v).collect::<Vec<_>>());
        (tags, fields)
    }

    proptest! {
        /// Rows that repeat, reorder, drop and add keys (the builder remembers the last
        /// row's layout) put every value in its own column and row.
        #[test]
        fn every_value_lands_in_its_column_whatever_the_key_order(
            rows in prop::collection::vec(row(), 1..40)
        ) {
            let mut b = RowBatchBuilder::new("m", false);
            let mut expected: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
            for (n, (tags, fields)) in rows.iter().enumerate() {
                let tag_values: Vec<String> = tags.iter().map(|(_, v)| format!("v{v}")).collect();
                let tag_pairs: Vec<(&str, &str)> = tags
                    .iter()
                    .zip(&tag_values)
                    .map(|((t, _), v)| (TAGS[*t], v.as_str()))
                    .collect();
                let field_pairs: Vec<(&str, FieldValue<'_>)> = fields
                    .iter()
                    .map(|(f, v)| (FIELDS[*f], FieldValue::Integer(*v)))
                    .collect();
                b.push_row(n as i64, &tag_pairs, &field_pairs).unwrap();
                for name in TAGS.iter().chain(FIELDS.iter()) {
                    expected.entry(name.to_string()).or_default().push(None);
                }
                for (name, value) in tag_pairs {
                    *expected.get_mut(name).unwrap().last_mut().unwrap() = Some(value.to_string());
                }
                for (f, v) in fields {
                    *expected.get_mut(FIELDS[*f]).unwrap().last_mut().unwrap() = Some(v.to_string());
                }
            }
            let batch = b.finish().unwrap().unwrap();
            for (name, want) in expected {
                let got: Vec<Option<String>> = match batch.column_by_name(&name) {
                    None => vec![None; rows.len()],
                    Some(column) if TAGS.contains(&name.as_str()) => {
                        let plain = arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8).unwrap();
                        plain.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect()
                    }
                    Some(column) => column
                        .as_primitive::<Int64Type>()
                        .iter()
                        .map(|v| v.map(|v| v.to_string()))
                        .collect(),
                };
                prop_assert_eq!(got, want, "column {}", name);
            }
        }
    }
}
