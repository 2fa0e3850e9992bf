use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};
use serde_json::json;

use super::decode_msgpack as decode_with;
use crate::limits::WriteLimits;

/// Decodes with the default limits and no stored schema.
fn decode_msgpack(
    payload: &[u8],
    now_ns: i64,
) -> crate::error::Result<Vec<(String, arrow::array::RecordBatch)>> {
    decode_with(payload, now_ns, &WriteLimits::default(), &|_| None)
}

fn mp(v: serde_json::Value) -> Vec<u8> {
    rmp_serde::to_vec(&v).unwrap()
}

const NOW: i64 = 1_700_000_000_000_000_000;

#[test]
fn columnar_object_decodes_with_string_columns_as_tags() {
    let payload = mp(json!({"m": "cpu", "columns": {
        "time": [1_700_000_000_000i64, 1_700_000_001_000i64],
        "host": ["a", "b"],
        "usage": [1.5, 2.5],
        "count": [1, 2]
    }}));
    let out = decode_msgpack(&payload, NOW).unwrap();
    assert_eq!(out.len(), 1);
    let (m, batch) = &out[0];
    assert_eq!(m, "cpu");
    let names: Vec<_> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["time", "host", "count", "usage"]);
    let time = batch.column(0).as_primitive::<TimestampNanosecondType>();
    assert_eq!(time.value(1), 1_700_000_001_000_000_000);
    assert!(matches!(
        batch.column(1).data_type(),
        arrow::datatypes::DataType::Dictionary(_, _)
    ));
    assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(1), 2);
    assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(0), 1.5);
}

#[test]
fn tags_list_makes_other_strings_fields() {
    let payload = mp(json!({"m": "log", "columns": {
        "time": [1, 2], "host": ["a", "b"], "msg": ["x", null]
    }, "tags": ["host"]}));
    let (_, batch) = &decode_msgpack(&payload, NOW).unwrap()[0];
    let msg = batch.column_by_name("msg").unwrap();
    assert_eq!(msg.data_type(), &arrow::datatypes::DataType::Utf8);
    assert!(msg.is_null(1));
}

#[test]
fn unequal_arrays_name_the_column() {
    let payload = mp(json!({"m": "cpu", "columns": {"time": [1, 2], "usage": [1.0]}}));
    let err = decode_msgpack(&payload, NOW).unwrap_err().to_string();
    assert!(
        err.contains("\"usage\"") && err.contains("equal length"),
        "{err}"
    );
}

#[test]
fn mixed_types_name_the_column() {
    let payload = mp(json!({"m": "cpu", "columns": {"time": [1, 2], "v": [1.0, "x"]}}));
    let err = decode_msgpack(&payload, NOW).unwrap_err().to_string();
    assert!(err.contains("\"v\"") && err.contains("row 1"), "{err}");
}

#[test]
fn integer_measurement_is_rejected() {
    let payload = mp(json!({"m": 5, "columns": {"v": [1.0]}}));
    let err = decode_msgpack(&payload, NOW).unwrap_err().to_string();
    assert!(err.contains("\"m\""), "{err}");
}

#[test]
fn missing_time_is_server_time() {
    let payload = mp(json!({"m": "cpu", "columns": {"v": [1.0, 2.0]}}));
    let (_, batch) = &decode_msgpack(&payload, NOW).unwrap()[0];
    let time = batch.column(0).as_primitive::<TimestampNanosecondType>();
    assert_eq!(time.values().to_vec(), vec![NOW, NOW]);
}

#[test]
fn rows_batches_and_arrays_group_by_measurement() {
    let rows = json!([
        {"m": "cpu", "t": 1_700_000_000, "h": "a", "fields": {"v": 1.0}},
        {"m": "mem", "t": 1_700_000_000, "tags": {"host": "b"}, "fields": {"free": 10}},
        {"m": "cpu", "t": 1_700_000_001, "tags": {"host": "c", "dc": "x"}, "fields": {"v": 2, "w": true}}
    ]);
    for payload in [mp(rows.clone()), mp(json!({"batch": rows}))] {
        let out = decode_msgpack(&payload, NOW).unwrap();
        assert_eq!(out.len(), 2);
        let (m, cpu) = &out[0];
        assert_eq!(m, "cpu");
        assert_eq!(cpu.num_rows(), 2);
        // 1.0 then 2: a float column stays float (writers do not tell 1 from 1.0).
        let v = cpu
            .column_by_name("v")
            .unwrap()
            .as_primitive::<Float64Type>();
        assert_eq!(v.values().to_vec(), vec![1.0, 2.0]);
        assert!(cpu.column_by_name("w").unwrap().is_null(0));
        assert!(cpu.column_by_name("dc").unwrap().is_null(0));
        assert_eq!(out[1].0, "mem");
    }
}

#[test]
fn nil_values_are_nulls() {
    let payload = mp(json!({"m": "cpu", "columns": {"time": [1, 2, 3], "v": [null, 1.0, null]}}));
    let (_, batch) = &decode_msgpack(&payload, NOW).unwrap()[0];
    let v = batch.column_by_name("v").unwrap();
    assert_eq!(v.null_count(), 2);
    assert!(v.is_valid(1));
}

#[test]
fn garbage_is_an_error() {
    for payload in [
        vec![],
        vec![0xc1],
        vec![0x93, 0x01],
        b"hello".to_vec(),
        mp(json!({"x": 1})),
    ] {
        assert!(decode_msgpack(&payload, NOW).is_err());
    }
    let mut trailing = mp(json!({"m": "cpu", "columns": {"v": [1.0]}}));
    trailing.push(0);
    assert!(decode_msgpack(&trailing, NOW)
        .unwrap_err()
        .to_string()
        .contains("trailing"));
}

#[test]
fn a_huge_declared_array_length_is_not_allocated() {
    // Found by cargo fuzz: `columns.time` declared as an array32 of 1.87 billion
    // elements in a 47-byte body made the decoder reserve 15 GB before reading a value.
    let body: [u8; 47] = [
        130, 161, 109, 163, 99, 112, 117, 167, 99, 111, 108, 117, 109, 110, 115, 132, 164, 116,
        105, 109, 101, 221, 111, 108, 117, 109, 47, 115, 132, 164, 0, 211, 0, 0, 1, 139, 207, 229,
        140, 158, 152, 154, 84, 116, 105, 35, 109,
    ];
    assert!(decode_msgpack(&body, 0).is_err());
}

fn limit_of(
    result: crate::error::Result<Vec<(String, arrow::array::RecordBatch)>>,
) -> &'static str {
    match result {
        Err(crate::error::Error::LimitExceeded { limit, .. }) => limit,
        Err(e) => panic!("not a limit: {e}"),
        Ok(out) => panic!("accepted {} batches", out.len()),
    }
}

#[test]
fn too_many_measurements_refuse_the_payload() {
    let limits = WriteLimits {
        measurements_per_write_max: 2,
        ..WriteLimits::default()
    };
    let row = |m: &str| json!({"m": m, "t": 1, "fields": {"v": 1.0}});
    let col = |m: &str| json!({"m": m, "columns": {"v": [1.0]}});
    let ok = mp(json!([row("a"), col("b"), row("a"), col("b")]));
    assert_eq!(decode_with(&ok, NOW, &limits, &|_| None).unwrap().len(), 3);
    for over in [
        mp(json!({"batch": [row("a"), row("b"), row("c")]})),
        mp(json!([col("a"), row("b"), col("c")])),
    ] {
        assert_eq!(
            limit_of(decode_with(&over, NOW, &limits, &|_| None)),
            "measurements_per_write_max"
        );
    }
}

#[test]
fn too_many_files_refuse_the_payload() {
    const HOUR_MS: i64 = 3_600_000;
    let limits = WriteLimits {
        write_files_max: 2,
        ..WriteLimits::default()
    };
    let base = 1_700_000_000_000i64;
    let ok = mp(
        json!({"m": "m", "columns": {"time": [base, base + 1, base + HOUR_MS], "v": [1.0, 2.0, 3.0]}}),
    );
    assert!(decode_with(&ok, NOW, &limits, &|_| None).is_ok());
    let over = mp(
        json!({"m": "m", "columns": {"time": [base, base + HOUR_MS, base + 2 * HOUR_MS], "v": [1.0, 2.0, 3.0]}}),
    );
    let err = decode_with(&over, NOW, &limits, &|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("write_files_max = 2") && err.contains("split"),
        "{err}"
    );
    // `NOW` is `base`'s instant: a row without time falls in the same hour.
    let rows = mp(json!({"batch": [
        {"m": "m", "t": base, "fields": {"v": 1.0}},
        {"m": "m", "fields": {"v": 1.0}},
        {"m": "m", "t": base + 5 * HOUR_MS, "fields": {"v": 1.0}},
    ]}));
    assert!(decode_with(&rows, NOW, &limits, &|_| None).is_ok());
    let rows = mp(json!({"batch": [
        {"m": "m", "t": base, "fields": {"v": 1.0}},
        {"m": "m", "fields": {"v": 1.0}},
        {"m": "m", "t": base + 5 * HOUR_MS, "fields": {"v": 1.0}},
        {"m": "m", "t": base + 7 * HOUR_MS, "fields": {"v": 1.0}},
    ]}));
    assert_eq!(
        limit_of(decode_with(&rows, NOW, &limits, &|_| None)),
        "write_files_max"
    );
}

#[test]
fn too_many_columns_refuse_the_payload_counting_stored_and_every_part() {
    let limits = WriteLimits {
        columns_per_table_max: 3,
        ..WriteLimits::default()
    };
    let none = |_: &str| None;
    // Columnar: time + a + b fits; a third field does not.
    let ok = mp(json!({"m": "m", "columns": {"a": [1.0], "b": [1.0]}}));
    assert!(decode_with(&ok, NOW, &limits, &none).is_ok());
    let wide = mp(json!({"m": "m", "columns": {"a": [1.0], "b": [1.0], "c": [1.0]}}));
    assert_eq!(
        limit_of(decode_with(&wide, NOW, &limits, &none)),
        "columns_per_table_max"
    );
    // Rows: the third field is refused naming the limit.
    let rows = mp(json!([
        {"m": "m", "fields": {"a": 1.0}},
        {"m": "m", "fields": {"b": 1.0}},
        {"m": "m", "fields": {"c": 1.0}},
    ]));
    let err = decode_with(&rows, NOW, &limits, &none)
        .unwrap_err()
        .to_string();
    assert!(err.contains("columns_per_table_max"), "{err}");
    // Two parts of one measurement, each narrow enough, are too wide together.
    let parts = mp(json!([
        {"m": "m", "columns": {"a": [1.0]}},
        {"m": "m", "fields": {"b": 1.0}},
        {"m": "m", "columns": {"c": [1.0]}},
    ]));
    assert_eq!(
        limit_of(decode_with(&parts, NOW, &limits, &none)),
        "columns_per_table_max"
    );
    // Stored columns count; writing only stored ones is fine whatever the width.
    let stored = crate::schema::MeasurementSchema::default()
        .merge(
            "m",
            &crate::schema::canonical_schema([
                (
                    "a",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
                (
                    "b",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
                (
                    "z",
                    crate::schema::ColumnKind::Field(crate::schema::FieldType::Float),
                ),
            ]),
        )
        .unwrap()
        .unwrap();
    let lookup = |m: &str| (m == "m").then(|| stored.clone());
    assert!(decode_with(&ok, NOW, &limits, &lookup).is_ok());
    let new = mp(json!({"m": "m", "columns": {"a": [1.0], "n": [1.0]}}));
    assert_eq!(
        limit_of(decode_with(&new, NOW, &limits, &lookup)),
        "columns_per_table_max"
    );
}

#[test]
fn nils_and_small_integers_are_charged_at_their_arrow_width() {
    let limits = WriteLimits {
        write_decoded_bytes_max: 64 * 1024,
        ..WriteLimits::default()
    };
    // 10,000 one-byte integers are 80,000 bytes as Int64: over 64 KiB.
    let ints = mp(json!({"m": "m", "columns": {"v": vec![1; 10_000]}}));
    assert!(ints.len() < 11_000);
    assert_eq!(
        limit_of(decode_with(&ints, NOW, &limits, &|_| None)),
        "write_decoded_bytes_max"
    );
    let small = mp(json!({"m": "m", "columns": {"v": vec![1; 1_000]}}));
    assert!(decode_with(&small, NOW, &limits, &|_| None).is_ok());
    // Many tiny objects pay for their columns too.
    let objects: Vec<_> = (0..1_000)
        .map(|_| json!({"m": "m", "columns": {"v": [1]}}))
        .collect();
    assert_eq!(
        limit_of(decode_with(&mp(json!(objects)), NOW, &limits, &|_| None)),
        "write_decoded_bytes_max"
    );
}
