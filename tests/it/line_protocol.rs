//! Line-protocol endpoints end to end: every dialect, partial writes, per-row schema
//! conflicts across restarts and Parquet, compression and its limits.

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{Node, NodeSpec};

fn lines_of(body: &Value) -> Vec<u64> {
    body["rejected"]
        .as_array()
        .map(|a| a.iter().map(|e| e["line"].as_u64().unwrap_or(0)).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dialect_writes_with_its_precision_and_database() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    // v1: db + precision=s; escapes, every value type, comment, blank and CRLF lines.
    let body = "# a comment\r\n\
                cpu\\ load,host=a\\,b,region=eu\\=1 usage=1.5,count=3i,big=7u,ok=T,msg=\"say \\\"hi\\\"\" 1700000000\r\n\
                \r\n\
                cpu\\ load,host=c usage=2,ok=false 1700000001\n";
    let (status, answer) = node.write_lp("/write?db=v1db&precision=s", body).await;
    assert_eq!(status, 204, "{answer}");
    let rows = node
        .rows(
            "v1db",
            "SELECT host, region, usage, count, big, ok, msg, time FROM \"cpu load\" ORDER BY time",
        )
        .await;
    assert_eq!(
        rows,
        vec![
            vec![
                json!("a,b"),
                json!("eu=1"),
                json!(1.5),
                json!(3),
                json!(7),
                json!(true),
                json!("say \"hi\""),
                json!("2023-11-14T22:13:20Z")
            ],
            vec![
                json!("c"),
                Value::Null,
                json!(2.0),
                Value::Null,
                Value::Null,
                json!(false),
                Value::Null,
                json!("2023-11-14T22:13:21Z")
            ],
        ]
    );
    let types = node
        .rows(
            "v1db",
            "SELECT arrow_typeof(usage), arrow_typeof(count), arrow_typeof(big), arrow_typeof(ok), arrow_typeof(msg) FROM \"cpu load\" LIMIT 1",
        )
        .await;
    assert_eq!(
        types[0],
        vec![
            json!("Float64"),
            json!("Int64"),
            json!("UInt64"),
            json!("Boolean"),
            json!("Utf8")
        ]
    );

    // v2: bucket + precision=ms; v3: db + precision=auto (magnitude); Arc: header.
    let (status, answer) = node
        .write_lp(
            "/api/v2/write?bucket=v2db&org=ignored&precision=ms",
            "m v=1 1700000000123",
        )
        .await;
    assert_eq!(status, 204, "{answer}");
    let (status, answer) = node
        .write_lp(
            "/api/v3/write_lp?db=v3db&precision=auto",
            "m v=2 1700000000",
        )
        .await;
    assert_eq!(status, 204, "{answer}");
    let (status, text, _) = node
        .post(
            "/api/v1/write/line-protocol",
            &[("x-arc-database", "arcdb")],
            b"m v=3 1700000000000000000".to_vec(),
        )
        .await;
    assert_eq!(status, 204, "{text}");
    for (db, want) in [
        ("v2db", "2023-11-14T22:13:20.123Z"),
        ("v3db", "2023-11-14T22:13:20Z"),
        ("arcdb", "2023-11-14T22:13:20Z"),
    ] {
        let rows = node.rows(db, "SELECT time FROM m").await;
        assert_eq!(rows, vec![vec![json!(want)]], "{db}");
    }
    // No database named anywhere: `default`. A bad precision: 400 naming it.
    assert_eq!(node.write_lp("/write", "m v=4 1").await.0, 204);
    assert_eq!(
        node.rows("default", "SELECT v FROM m").await,
        vec![vec![json!(4.0)]]
    );
    let (status, answer) = node.write_lp("/write?precision=fortnight", "m v=5 1").await;
    assert_eq!(status, 400);
    assert!(
        answer["error"].as_str().unwrap().contains("precision"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_writes_keep_the_valid_lines_and_list_the_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let body = "m,host=a v=1 1\n\
                m,host=a v=2 2\n\
                m,host=a v=NaN 3\n\
                m,host=a v=4 4\n\
                m,host=a v=5,v=6 5\n\
                m,host=a v=6 99999999999999999999\n\
                m,host=a v=7 7\n";
    let (status, answer) = node.write_lp("/api/v3/write_lp?db=p", body).await;
    assert_eq!(status, 400);
    assert_eq!(answer["success"], json!(false));
    assert_eq!(
        answer["error"],
        json!("partial write: 3 of 7 lines rejected")
    );
    assert_eq!(lines_of(&answer), [3, 5, 6]);
    assert_eq!(answer["rejected"][0]["text"], json!("m,host=a v=NaN 3"));
    assert!(answer["rejected"][1]["error"]
        .as_str()
        .unwrap()
        .contains("\"v\""));
    let sum = node.rows("p", "SELECT count(*), sum(v) FROM m").await;
    assert_eq!(sum, vec![vec![json!(4), json!(14.0)]]);

    // accept_partial=false: the same body writes nothing and lists the same lines.
    let (status, answer) = node
        .write_lp("/api/v3/write_lp?db=q&accept_partial=false", body)
        .await;
    assert_eq!(status, 400);
    assert_eq!(lines_of(&answer), [3, 5, 6]);
    let (status, answer) = node.query("q", "SELECT count(*) FROM m").await;
    assert_eq!(status, 400, "nothing may exist in q: {answer}");

    // More than 100 bad lines: all counted, 100 listed.
    let many: String = (0..150).map(|i| format!("m v=x{i}\n")).collect();
    let (status, answer) = node.write_lp("/write?db=r", &many).await;
    assert_eq!(status, 400);
    assert_eq!(
        answer["error"],
        json!("partial write: 150 of 150 lines rejected")
    );
    assert_eq!(answer["rejected"].as_array().unwrap().len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_conflicts_reject_only_their_rows_across_restart_and_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let mut node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_STORAGE_FLUSH_AGE_MS", 3_600_000)).await;
    let (status, answer) = node
        .write_lp("/write?db=s", "m,host=a v=1.5 1\nm,host=a v=2.5 2")
        .await;
    assert_eq!(status, 204, "{answer}");

    // v is float in the buffer: an integer v is refused for its rows only; a new field
    // becomes a nullable column; a tag written as a field is refused.
    let body = "m,host=a v=3i 3\n\
                m,host=a v=4.5 4\n\
                m,host=a w=1i 5\n\
                m host=\"x\" 6\n";
    let (status, answer) = node.write_lp("/write?db=s", body).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(lines_of(&answer), [1, 4]);
    let first = answer["rejected"][0]["error"].as_str().unwrap();
    assert!(
        first.contains("\"v\"") && first.contains("float") && first.contains("integer"),
        "{first}"
    );
    assert_eq!(answer["rejected"][0]["text"], json!("m,host=a v=3i 3"));
    assert!(answer["rejected"][1]["error"]
        .as_str()
        .unwrap()
        .contains("\"host\""));
    let rows = node.rows("s", "SELECT v, w FROM m ORDER BY time").await;
    assert_eq!(
        rows,
        vec![
            vec![json!(1.5), Value::Null],
            vec![json!(2.5), Value::Null],
            vec![json!(4.5), Value::Null],
            vec![Value::Null, json!(1)],
        ]
    );

    // The rule survives a crash (schema rebuilt from the log) ...
    node.kill();
    node.restart().await;
    let (status, answer) = node.write_lp("/write?db=s", "m v=\"text\" 7").await;
    assert_eq!(status, 400);
    assert_eq!(lines_of(&answer), [1]);

    // ... and a flush to Parquet followed by a restart (schema from the files).
    node.spec = node
        .spec
        .clone()
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", 100)
        .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 100);
    node.restart().await;
    node.wait_for("a Parquet file", Duration::from_secs(30), || async {
        node.metric("quiver_parquet_files").await >= 1.0
    })
    .await;
    node.wait_for("the buffer emptied", Duration::from_secs(30), || async {
        node.metric("quiver_buffer_rows").await == 0.0
    })
    .await;
    node.kill();
    node.restart().await;
    let (status, answer) = node
        .write_lp("/write?db=s", "m v=1u 8\nm v=9.5,w=2i 9")
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(lines_of(&answer), [1]);
    let rows = node
        .rows("s", "SELECT count(*), sum(v), sum(w) FROM m")
        .await;
    assert_eq!(rows, vec![vec![json!(5), json!(18.0), json!(3)]]);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_bodies_and_their_limits() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_BODY_BYTES_MAX", 64 * 1024)
            .with("QUIVER_HTTP_DECOMPRESSED_BYTES_MAX", 1024 * 1024),
    )
    .await;
    let body: String = (0..1000).map(|i| format!("m,h=x v={i} {i}\n")).collect();
    // gzip by header, gzip by magic alone, zstd by magic alone.
    let (status, text, _) = node
        .post(
            "/write?db=z",
            &[("content-encoding", "gzip")],
            gzip(body.as_bytes()),
        )
        .await;
    assert_eq!(status, 204, "{text}");
    let (status, text, _) = node.post("/write?db=z", &[], gzip(body.as_bytes())).await;
    assert_eq!(status, 204, "{text}");
    let zstd_body = zstd::encode_all(body.as_bytes(), 3).unwrap();
    let (status, text, _) = node.post("/api/v2/write?bucket=z", &[], zstd_body).await;
    assert_eq!(status, 204, "{text}");
    assert_eq!(
        node.rows("z", "SELECT count(*) FROM m").await,
        vec![vec![json!(3000)]]
    );

    // A gzip bomb: a few KiB that inflate to 64 MiB, far past the 1 MiB limit.
    let bomb = gzip(&vec![b'a'; 64 * 1024 * 1024]);
    assert!(bomb.len() < 64 * 1024, "bomb is {} bytes", bomb.len());
    let (status, text, _) = node.post("/write?db=z", &[], bomb).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("decompressed_bytes_max"), "{text}");
    // A body over the raw limit, and an unknown encoding.
    let (status, _, _) = node.post("/write?db=z", &[], vec![b'#'; 65 * 1024]).await;
    assert_eq!(status, 413);
    let (status, text, _) = node
        .post(
            "/write?db=z",
            &[("content-encoding", "br")],
            b"m v=1".to_vec(),
        )
        .await;
    assert_eq!(status, 415, "{text}");
    // Nothing of the refused requests was written.
    assert_eq!(
        node.rows("z", "SELECT count(*) FROM m").await,
        vec![vec![json!(3000)]]
    );
}
