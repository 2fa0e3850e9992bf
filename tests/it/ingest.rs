//! The write and query endpoints' contract: success, errors, auth, limits.

use serde_json::json;

use crate::common::{Node, NodeSpec, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columnar_and_row_writes_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let columnar = rmp_serde::to_vec_named(&json!({"m": "cpu", "columns": {
        "time": [1_700_000_000_000i64, 1_700_000_001_000i64], "host": ["a", "b"], "usage": [1.5, 2.5]}}))
    .unwrap();
    assert_eq!(node.write_msgpack("default", columnar).await.0, 204);
    let rows = rmp_serde::to_vec_named(&json!({"batch": [
        {"m": "cpu", "t": 1_700_000_002_000i64, "h": "c", "fields": {"usage": 3.5}},
        {"m": "mem", "t": 1_700_000_002_000i64, "tags": {"host": "c"}, "fields": {"free": 7}}
    ]}))
    .unwrap();
    assert_eq!(node.write_msgpack("default", rows).await.0, 204);
    let got = node
        .rows("default", "SELECT host, usage, time FROM cpu ORDER BY time")
        .await;
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[0],
        vec![json!("a"), json!(1.5), json!("2023-11-14T22:13:20Z")]
    );
    assert_eq!(got[2][0], json!("c"));
    let mem = node.rows("default", "SELECT free FROM mem").await;
    assert_eq!(mem, vec![vec![json!(7)]]);
    let other_db = node
        .rows("default", "SELECT count(*) FROM default.cpu")
        .await;
    assert_eq!(other_db[0][0], json!(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_bad_tokens_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let unequal =
        rmp_serde::to_vec_named(&json!({"m": "cpu", "columns": {"time": [1, 2], "usage": [1.0]}}))
            .unwrap();
    let (status, body) = node.write_msgpack("default", unequal).await;
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["success"], json!(false));
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("\"usage\"") && message.contains("equal length"),
        "{message}"
    );
    let (status, body) = node.write_msgpack("default", b"\xc1garbage".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = node.write_msgpack("bad/name", vec![0x80]).await;
    assert_eq!(status, 400);

    // A type change is refused naming the column; the stored rows are untouched.
    let first =
        rmp_serde::to_vec_named(&json!({"m": "t", "columns": {"time": [1], "v": [1.0]}})).unwrap();
    assert_eq!(node.write_msgpack("default", first).await.0, 204);
    let conflict =
        rmp_serde::to_vec_named(&json!({"m": "t", "columns": {"time": [2], "v": [true]}})).unwrap();
    let (status, body) = node.write_msgpack("default", conflict).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("\\\"v\\\"") && body.contains("schema conflict"),
        "{body}"
    );
    assert_eq!(
        node.rows("default", "SELECT count(*) FROM t").await[0][0],
        json!(1)
    );
    // Whole numbers for a float column are floats (MessagePack cannot tell 3 from 3.0).
    let whole =
        rmp_serde::to_vec_named(&json!({"m": "t", "columns": {"time": [3], "v": [3]}})).unwrap();
    assert_eq!(node.write_msgpack("default", whole).await.0, 204);
    assert_eq!(
        node.rows("default", "SELECT sum(v), arrow_typeof(sum(v)) FROM t")
            .await[0],
        vec![json!(4.0), json!("Float64")]
    );

    let anonymous = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .json(&json!({"sql": "SELECT 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .bearer_auth("nope")
        .json(&json!({"sql": "SELECT 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let health = node
        .client
        .get(format!("{}/health", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    for sql in [
        "CREATE TABLE x (a INT)",
        "INSERT INTO t VALUES (1)",
        "COPY t TO '/tmp/x.csv'",
        "DROP TABLE t",
        "SET datafusion.execution.batch_size = 1",
    ] {
        let (status, body) = node.query("default", sql).await;
        assert_eq!(status, 400, "{sql} must be refused: {body}");
        assert_eq!(body["success"], json!(false));
    }
    let (status, body) = node.query("default", "SELEC nonsense").await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrow_endpoint_streams_ipc() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let body = rmp_serde::to_vec_named(
        &json!({"m": "cpu", "columns": {"time": [1, 2, 3], "v": [1.0, 2.0, 3.0]}}),
    )
    .unwrap();
    assert_eq!(node.write_msgpack("default", body).await.0, 204);
    let r = node
        .client
        .post(format!("{}/api/v1/query/arrow", node.url))
        .bearer_auth(TOKEN)
        .json(&json!({"sql": "SELECT v FROM cpu ORDER BY v"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.apache.arrow.stream"
    );
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 3);
}
