//! Property: random columnar and row payloads decode to exactly the values encoded.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType};
use proptest::prelude::*;
use serde_json::json;

/// Decodes with the default limits and no stored schema.
fn decode(payload: &[u8]) -> quiver_storage::Result<Vec<(String, arrow::array::RecordBatch)>> {
    quiver_storage::decode_msgpack(payload, 0, &quiver_storage::WriteLimits::default(), &|_| {
        None
    })
}

#[derive(Debug, Clone)]
struct Row {
    time_ms: i64,
    host: String,
    value: Option<f64>,
    count: i64,
}

fn row() -> impl Strategy<Value = Row> {
    (
        1_000_000_000_000i64..9_000_000_000_000,
        "[a-z]{1,8}",
        proptest::option::of(-1e12f64..1e12),
        any::<i64>(),
    )
        .prop_map(|(time_ms, host, value, count)| Row {
            time_ms,
            host,
            value,
            count,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn columnar_payloads_round_trip(rows in proptest::collection::vec(row(), 1..60)) {
        // A column of only nulls carries no type and is left out; keep one value.
        let mut rows = rows;
        if rows.iter().all(|r| r.value.is_none()) {
            rows[0].value = Some(0.5);
        }
        let payload = rmp_serde::to_vec_named(&json!({"m": "m", "columns": {
            "time": rows.iter().map(|r| r.time_ms).collect::<Vec<_>>(),
            "host": rows.iter().map(|r| r.host.clone()).collect::<Vec<_>>(),
            "value": rows.iter().map(|r| r.value).collect::<Vec<_>>(),
            "count": rows.iter().map(|r| r.count).collect::<Vec<_>>(),
        }})).unwrap();
        let out = decode(&payload).unwrap();
        prop_assert_eq!(out.len(), 1);
        let b = &out[0].1;
        let time = b.column_by_name("time").unwrap().as_primitive::<TimestampNanosecondType>();
        let host = b.column_by_name("host").unwrap().as_dictionary::<Int32Type>();
        let hosts = host.values().as_string::<i32>();
        let value = b.column_by_name("value").unwrap().as_primitive::<Float64Type>();
        let count = b.column_by_name("count").unwrap().as_primitive::<Int64Type>();
        for (i, r) in rows.iter().enumerate() {
            prop_assert_eq!(time.value(i), r.time_ms * 1_000_000);
            prop_assert_eq!(hosts.value(host.keys().value(i) as usize), r.host.as_str());
            prop_assert_eq!(value.is_valid(i).then(|| value.value(i)), r.value);
            prop_assert_eq!(count.value(i), r.count);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn row_payloads_round_trip(rows in proptest::collection::vec(row(), 1..40)) {
        let objects: Vec<serde_json::Value> = rows.iter().map(|r| {
            let mut fields = serde_json::Map::new();
            fields.insert("count".into(), json!(r.count));
            if let Some(v) = r.value { fields.insert("value".into(), json!(v)); }
            json!({"m": "m", "t": r.time_ms, "tags": {"host": r.host}, "fields": fields})
        }).collect();
        let payload = rmp_serde::to_vec_named(&json!({"batch": objects})).unwrap();
        let out = decode(&payload).unwrap();
        let b = &out[0].1;
        prop_assert_eq!(b.num_rows(), rows.len());
        let count = b.column_by_name("count").unwrap().as_primitive::<Int64Type>();
        for (i, r) in rows.iter().enumerate() {
            prop_assert_eq!(count.value(i), r.count);
        }
    }
}
