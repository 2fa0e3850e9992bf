//! The query endpoints over HTTP: `/api/v3/query_sql` in every format (GET and POST), and
//! the Arc envelope and Arrow IPC streamed for a result larger than one batch.

use arrow::ipc::reader::StreamReader;
use serde_json::{json, Value};

use crate::common::{batch_payload, Node, NodeSpec, TOKEN};

const DB: &str = "h";
/// 2024-01-01T00:00:00Z.
const T0_NS: i64 = 1_704_067_200_000_000_000;

struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let r = request
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request sent");
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = r.bytes().await.expect("whole body").to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

async fn sql_get(node: &Node, params: &[(&str, &str)]) -> Answer {
    let url = format!("{}/api/v3/query_sql", node.url);
    answer(node.client.get(url).query(params)).await
}

async fn sql_post(node: &Node, body: Value) -> Answer {
    let url = format!("{}/api/v3/query_sql", node.url);
    answer(node.client.post(url).json(&body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_sql_answers_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let (status, text) = node
        .write_msgpack(DB, batch_payload("cpu", 7, 3, T0_NS, 3))
        .await;
    assert_eq!(status, 204, "{text}");
    let sql = "SELECT host, seq, time FROM cpu ORDER BY seq";

    let cases: [(&str, &str, &str); 3] = [
        (
            "json",
            "application/json",
            concat!(
                r#"[{"host":"h0","seq":0,"time":"2024-01-01T00:00:00Z"},"#,
                r#"{"host":"h1","seq":1,"time":"2024-01-01T00:00:00.000001Z"},"#,
                r#"{"host":"h2","seq":2,"time":"2024-01-01T00:00:00.000002Z"}]"#
            ),
        ),
        (
            "jsonl",
            "application/jsonl",
            concat!(
                "{\"host\":\"h0\",\"seq\":0,\"time\":\"2024-01-01T00:00:00Z\"}\n",
                "{\"host\":\"h1\",\"seq\":1,\"time\":\"2024-01-01T00:00:00.000001Z\"}\n",
                "{\"host\":\"h2\",\"seq\":2,\"time\":\"2024-01-01T00:00:00.000002Z\"}\n"
            ),
        ),
        (
            "csv",
            "text/csv",
            concat!(
                "host,seq,time\n",
                "h0,0,2024-01-01T00:00:00Z\n",
                "h1,1,2024-01-01T00:00:00.000001Z\n",
                "h2,2,2024-01-01T00:00:00.000002Z\n"
            ),
        ),
    ];
    for (format, content_type, expected) in cases {
        let got = sql_get(&node, &[("db", DB), ("q", sql), ("format", format)]).await;
        assert_eq!(got.status, 200, "{format}: {}", got.text());
        assert!(
            got.content_type.starts_with(content_type),
            "{format}: {}",
            got.content_type
        );
        assert_eq!(got.text(), expected, "GET {format}");
        let posted = sql_post(&node, json!({"db": DB, "q": sql, "format": format})).await;
        assert_eq!(posted.text(), expected, "POST {format}");
    }

    // JSON is the default format.
    let got = sql_get(&node, &[("db", DB), ("q", sql)]).await;
    assert_eq!(got.text(), cases[0].2);

    let pretty = sql_get(&node, &[("db", DB), ("q", sql), ("format", "pretty")]).await;
    assert_eq!(pretty.status, 200);
    let table = pretty.text();
    assert!(table.contains("| host | seq | time"), "{table}");
    assert!(
        table.contains("| h2   | 2   | 2024-01-01T00:00:00.000002 "),
        "{table}"
    );

    let parquet = sql_post(&node, json!({"db": DB, "q": sql, "format": "parquet"})).await;
    assert_eq!(parquet.status, 200);
    assert_eq!(parquet.content_type, "application/vnd.apache.parquet");
    assert!(parquet.body.starts_with(b"PAR1") && parquet.body.ends_with(b"PAR1"));

    for (params, expected) in [
        (vec![("q", sql)], "`db`"),
        (vec![("db", DB)], "`q`"),
        (vec![("db", DB), ("q", sql), ("format", "xml")], "xml"),
        (vec![("db", DB), ("q", "DROP TABLE cpu")], "read-only"),
    ] {
        let got = sql_get(&node, &params).await;
        assert_eq!(got.status, 400, "{params:?}: {}", got.text());
        assert!(got.text().contains(expected), "{params:?}: {}", got.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_results_stream_in_the_envelope_and_as_arrow() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    const BATCHES: i64 = 3;
    const ROWS: usize = 20_000;
    for b in 0..BATCHES {
        let base = T0_NS + b * ROWS as i64 * 1_000;
        let (status, text) = node
            .write_msgpack(DB, batch_payload("big", b, ROWS, base, 50))
            .await;
        assert_eq!(status, 204, "{text}");
    }
    let total = BATCHES as usize * ROWS;

    let sql = json!({"sql": "SELECT time, host, seq, value FROM big"});
    let post = |path: &str| {
        node.client
            .post(format!("{}{path}", node.url))
            .bearer_auth(TOKEN)
            .header("x-arc-database", DB)
            .json(&sql)
            .send()
    };
    let r = post("/api/v1/query").await.expect("sent");
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("content-length").is_none(),
        "a streamed body has no length up front: {:?}",
        r.headers()
    );
    let text = r.text().await.expect("body");
    // The envelope's fields, in API.md's order.
    assert!(
        text.starts_with(r#"{"success":true,"columns":["time","host","seq","value"],"data":[["#),
        "{}",
        &text[..200.min(text.len())]
    );
    let tail = &text[text.len().saturating_sub(120)..];
    assert!(
        tail.contains(&format!(r#"]],"row_count":{total},"execution_time_ms":"#)),
        "{tail}"
    );
    let envelope: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(envelope["data"].as_array().map(Vec::len), Some(total));
    assert!(envelope["timestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    let seqs: u64 = envelope["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row[2].as_u64())
        .sum();
    assert_eq!(seqs, BATCHES as u64 * (ROWS as u64 * (ROWS as u64 - 1) / 2));

    let r = post("/api/v1/query/arrow").await.expect("sent");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/vnd.apache.arrow.stream")
    );
    let bytes = r.bytes().await.expect("body");
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).expect("IPC stream");
    // Tags are string views inside the engine; clients get plain strings, which every
    // Arrow reader understands.
    assert_eq!(
        reader
            .schema()
            .field_with_name("host")
            .map(|f| f.data_type().clone())
            .ok(),
        Some(arrow::datatypes::DataType::Utf8)
    );
    let mut rows = 0;
    for batch in reader {
        rows += batch.expect("batch").num_rows();
    }
    assert_eq!(rows, total);
}
