//! Exact bytes of the encoders for timestamps, nulls, dictionary strings and numbers.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, TimeUnit};
use arrow::ipc::reader::StreamReader;
use futures::StreamExt;
use quiver_query::encode::{self, Format};
use quiver_query::{QueryConfig, QueryOutput};

use crate::support::{query, Fixture};

fn sample() -> QueryOutput {
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new(
            "host",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ),
        Field::new("value", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
        Field::new("big", DataType::UInt64, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("note", DataType::Utf8, true),
    ]));
    let batch = |times: Vec<i64>,
                 hosts: Vec<Option<&str>>,
                 values: Vec<Option<f64>>,
                 ns: Vec<Option<i64>>,
                 bigs: Vec<Option<u64>>,
                 oks: Vec<Option<bool>>,
                 notes: Vec<Option<&str>>| {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from(times)),
            Arc::new(hosts.into_iter().collect::<DictionaryArray<Int32Type>>()),
            Arc::new(Float64Array::from(values)),
            Arc::new(Int64Array::from(ns)),
            Arc::new(UInt64Array::from(bigs)),
            Arc::new(BooleanArray::from(oks)),
            Arc::new(StringArray::from(notes)),
        ];
        RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch")
    };
    let first = batch(
        vec![1_704_067_200_123_456_789, 1_704_067_200_120_000_000],
        vec![Some("a"), None],
        vec![Some(1.5), Some(f64::NAN)],
        vec![Some(-3), None],
        vec![Some(u64::MAX), Some(0)],
        vec![Some(true), None],
        vec![Some("say \"hi\"\n"), None],
    );
    let second = batch(
        vec![1_704_067_200_000_000_000],
        vec![Some("b")],
        vec![Some(f64::INFINITY)],
        vec![Some(i64::MIN)],
        vec![Some(7)],
        vec![Some(false)],
        vec![Some("x,y")],
    );
    QueryOutput {
        schema,
        batches: vec![first, second],
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("utf-8")
}

#[test]
fn arc_json_envelope_is_exact() {
    let json = encode::arc_json_at(&sample(), 12.5, 1_704_067_200, 5_000).expect("encode");
    let expected = concat!(
        r#"{"success":true,"columns":["time","host","value","n","big","ok","note"],"data":["#,
        r#"["2024-01-01T00:00:00.123456789Z","a",1.5,-3,18446744073709551615,true,"say \"hi\"\n"],"#,
        r#"["2024-01-01T00:00:00.12Z",null,null,null,0,null,null],"#,
        r#"["2024-01-01T00:00:00Z","b",null,-9223372036854775808,7,false,"x,y"]],"#,
        r#""row_count":3,"execution_time_ms":12.5,"timestamp":"2024-01-01T00:00:00.000005Z"}"#
    );
    assert_eq!(text(json), expected);
}

#[test]
fn arc_json_of_an_empty_result_has_columns_and_no_rows() {
    let mut output = sample();
    output.batches.clear();
    let json = text(encode::arc_json_at(&output, 0.25, 0, 0).expect("encode"));
    assert!(
        json.contains(r#""data":[],"row_count":0,"execution_time_ms":0.25"#),
        "{json}"
    );
    assert!(
        json.ends_with(r#""timestamp":"1970-01-01T00:00:00Z"}"#),
        "{json}"
    );
}

#[test]
fn arc_json_now_is_rfc3339() {
    let json = text(encode::arc_json(&sample(), 1.0).expect("encode"));
    let stamp = json
        .rsplit("\"timestamp\":\"")
        .next()
        .and_then(|rest| rest.strip_suffix("\"}"))
        .expect("timestamp");
    assert!(
        chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
        "{stamp}"
    );
}

#[test]
fn jsonl_and_json_objects_write_one_object_per_row() {
    let lines = text(encode::jsonl(&sample()).expect("jsonl"));
    let first = r#"{"time":"2024-01-01T00:00:00.123456789Z","host":"a","value":1.5,"n":-3,"big":18446744073709551615,"ok":true,"note":"say \"hi\"\n"}"#;
    assert_eq!(lines.lines().count(), 3);
    assert_eq!(lines.lines().next(), Some(first));
    let array = text(encode::json_objects(&sample()).expect("json"));
    assert!(array.starts_with(&format!("[{first},")), "{array}");
    assert!(array.ends_with(r#""note":"x,y"}]"#), "{array}");
    let mut empty = sample();
    empty.batches.clear();
    assert_eq!(text(encode::json_objects(&empty).expect("json")), "[]");
}

#[test]
fn csv_quotes_only_when_needed() {
    let csv = text(encode::csv(&sample()).expect("csv"));
    let expected = concat!(
        "time,host,value,n,big,ok,note\n",
        "2024-01-01T00:00:00.123456789Z,a,1.5,-3,18446744073709551615,true,\"say \"\"hi\"\"\n\"\n",
        "2024-01-01T00:00:00.12Z,,,,0,,\n",
        "2024-01-01T00:00:00Z,b,,-9223372036854775808,7,false,\"x,y\"\n",
    );
    assert_eq!(csv, expected);
}

#[test]
fn arrow_ipc_stream_round_trips() {
    let output = sample();
    let bytes = encode::arrow_ipc_stream(&output).expect("ipc");
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).expect("reader");
    assert_eq!(reader.schema(), output.schema);
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
    assert_eq!(batches, output.batches);
}

#[test]
fn pretty_and_parquet_encode() {
    let table = text(encode::pretty(&sample()).expect("pretty"));
    assert!(table.contains("| time"), "{table}");
    assert!(
        table.contains("| 2024-01-01T00:00:00           | b    |"),
        "{table}"
    );
    let parquet = encode::parquet(&sample()).expect("parquet");
    assert_eq!(&parquet[..4], b"PAR1");
}

#[tokio::test]
async fn query_results_encode_with_dictionary_tags() {
    let fixture = Fixture::new();
    let engine = fixture.engine();
    let sql = "SELECT time, host, count FROM cpu ORDER BY time, host LIMIT 2";
    let output = query(&engine, "db1", sql).await;
    let json = text(encode::arc_json_at(&output, 1.0, 0, 0).expect("encode"));
    let expected_data = concat!(
        r#""data":[["2024-01-01T00:00:00Z","host-a",0],"#,
        r#"["2024-01-01T00:00:00.001000123Z","host-b",100]]"#
    );
    assert!(json.contains(expected_data), "{json}");
    assert!(
        json.contains(r#""columns":["time","host","count"]"#),
        "{json}"
    );
}

/// An encoder of a whole result.
type WholeEncoding = fn(&QueryOutput) -> Result<Vec<u8>, quiver_query::Error>;

/// Streamed (encoded on the query runtime, chunk by chunk) and whole-result encodings of
/// the same rows are the same bytes, and a multi-batch result arrives in several chunks.
#[tokio::test]
async fn streamed_encodings_equal_whole_result_encodings() {
    let fixture = Fixture::new();
    let engine = fixture.engine_with(QueryConfig {
        target_partitions: 2,
        batch_size: 100,
        ..QueryConfig::default()
    });
    let sql = "SELECT * FROM cpu ORDER BY time, host";
    let whole = query(&engine, "db1", sql).await;
    assert!(whole.batches.len() > 1, "the result spans batches");
    let cases: [(Format, WholeEncoding); 5] = [
        (Format::Json, encode::json_objects),
        (Format::Jsonl, encode::jsonl),
        (Format::Csv, encode::csv),
        (Format::Pretty, encode::pretty),
        (Format::ArrowIpc, encode::arrow_ipc_stream),
    ];
    for (format, whole_encoding) in cases {
        let mut stream = engine
            .execute_encoded("db1", sql, format.encoder(std::time::Instant::now()))
            .await
            .expect("starts");
        let mut streamed = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = stream.next().await {
            streamed.extend_from_slice(&chunk.expect("chunk"));
            chunks += 1;
        }
        let expected = whole_encoding(&whole).expect("encode");
        if format == Format::ArrowIpc {
            let read = |bytes: Vec<u8>| -> Vec<RecordBatch> {
                StreamReader::try_new(std::io::Cursor::new(bytes), None)
                    .expect("reader")
                    .map(|b| b.expect("batch"))
                    .collect()
            };
            let concat = |batches: Vec<RecordBatch>| {
                arrow::compute::concat_batches(&whole.schema, &batches).expect("concat")
            };
            assert_eq!(concat(read(streamed)), concat(read(expected)));
        } else {
            assert_eq!(text(streamed), text(expected), "{format:?}");
        }
        let expected_chunks = if format == Format::Pretty { 1 } else { 2 };
        assert!(chunks >= expected_chunks, "{format:?}: {chunks} chunks");
    }
}
