use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};
use serde_json::json;

use super::decode_msgpack;

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
    assert!(super::decode_msgpack(&body, 0).is_err());
}
