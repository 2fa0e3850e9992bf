//! `POST /api/v1/prom/write`: Prometheus remote write 1.0 through the one write
//! pipeline (auth, limits, snappy, 400 for malformed bodies, stale markers counted).
//! Requests are built with prost from Prometheus's message definitions and compressed
//! with snappy's block format, as Prometheus sends them. The real Prometheus server is
//! exercised by `tests/compat/test_prometheus.py`.

use prost::Message;
use quiver_storage::prom_remote::proto::{Label, Sample, TimeSeries, WriteRequest};
use quiver_storage::prom_remote::STALE_NAN_BITS;
use serde_json::json;

use crate::common::{Node, NodeSpec};

const T0_MS: i64 = 1_700_000_000_000;

fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(n, v)| Label {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(value, timestamp)| Sample { value, timestamp })
            .collect(),
    }
}

fn snappy(request: &WriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .expect("snappy")
}

/// Posts a body the way Prometheus does; returns status and body text.
async fn post(node: &Node, db: &str, body: Vec<u8>) -> (u16, String) {
    let (status, text, _) = node
        .post(
            &format!("/api/v1/prom/write?db={db}"),
            &[
                ("content-encoding", "snappy"),
                ("content-type", "application/x-protobuf"),
                ("x-prometheus-remote-write-version", "0.1.0"),
            ],
            body,
        )
        .await;
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_stores_one_measurement_per_metric() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let stale = f64::from_bits(STALE_NAN_BITS);
    let request = WriteRequest {
        timeseries: vec![
            series(
                &[("__name__", "up"), ("instance", "a:9100"), ("job", "node")],
                &[(1.0, T0_MS), (0.0, T0_MS + 15_000), (stale, T0_MS + 30_000)],
            ),
            series(
                &[("__name__", "up"), ("job", "prometheus")],
                &[(1.0, T0_MS + 1)],
            ),
            series(
                &[("__name__", "node_load1"), ("instance", "a:9100")],
                &[(0.25, T0_MS + 2)],
            ),
        ],
    };
    assert_eq!(
        post(&node, "prom", snappy(&request)).await,
        (204, String::new())
    );
    let up = node
        .rows(
            "prom",
            "SELECT time, job, instance, value FROM up ORDER BY time",
        )
        .await;
    assert_eq!(
        up,
        vec![
            vec![
                json!("2023-11-14T22:13:20Z"),
                json!("node"),
                json!("a:9100"),
                json!(1.0)
            ],
            vec![
                json!("2023-11-14T22:13:20.001Z"),
                json!("prometheus"),
                json!(null),
                json!(1.0)
            ],
            vec![
                json!("2023-11-14T22:13:35Z"),
                json!("node"),
                json!("a:9100"),
                json!(0.0)
            ],
        ]
    );
    let load = node
        .rows("prom", "SELECT value, arrow_typeof(value) FROM node_load1")
        .await;
    assert_eq!(load, vec![vec![json!(0.25), json!("Float64")]]);
    assert_eq!(
        node.metric("quiver_prom_stale_samples_skipped_total").await,
        1.0
    );
    assert_eq!(node.metric("quiver_rows_written_total").await, 4.0);

    // Metadata-only requests (Prometheus sends them every minute) write nothing: 204.
    let metadata_only = snap::raw::Encoder::new()
        .compress_vec(&[0x1a, 0x04, 0x08, 0x01, 0x12, 0x00])
        .unwrap();
    assert_eq!(post(&node, "prom", metadata_only).await.0, 204);
    assert_eq!(
        node.rows("prom", "SELECT count(*) FROM up").await[0][0],
        json!(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_remote_writes_get_400_naming_each_refused_series() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let good = WriteRequest {
        timeseries: vec![series(&[("__name__", "ok")], &[(1.0, T0_MS)])],
    };
    // Not snappy at all.
    let (status, body) = post(&node, "prom", b"\xff\xff\xff\xff".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("snappy"), "{body}");
    // Snappy, but not a WriteRequest.
    let garbage = snap::raw::Encoder::new()
        .compress_vec(b"\x0a\xff\x01")
        .unwrap();
    let (status, body) = post(&node, "prom", garbage).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("WriteRequest"), "{body}");
    // An uncompressed protobuf is refused with a hint about Content-Encoding.
    let (status, body, _) = node
        .post(
            "/api/v1/prom/write?db=prom",
            &[],
            b"\x0a\x02\x0a\x00\xff".to_vec(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(body.contains("Content-Encoding: snappy"), "{body}");
    // Nothing of the refused requests was written.
    let (status, _) = node.query("prom", "SELECT count(*) FROM ok").await;
    assert_eq!(status, 400, "the table must not exist");
    // Malformed series are refused alone, each named; the series around them are
    // written (Prometheus drops a 4xx request: refusing it whole would lose them).
    let partial = WriteRequest {
        timeseries: vec![
            good.timeseries[0].clone(),
            series(&[("job", "x")], &[(1.0, T0_MS)]),
            series(&[("__name__", "ok"), ("value", "v")], &[(1.0, T0_MS)]),
            series(&[("__name__", "ok"), ("job", "y")], &[(2.0, T0_MS + 1)]),
        ],
    };
    let (status, body) = post(&node, "prom", snappy(&partial)).await;
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["error"],
        json!("partial write: 2 of 4 series rejected")
    );
    assert_eq!(body["rejected"][0]["line"], json!(2));
    assert_eq!(body["rejected"][0]["text"], json!(""));
    assert!(
        body["rejected"][0]["error"]
            .as_str()
            .unwrap()
            .contains("__name__"),
        "{body}"
    );
    assert_eq!(body["rejected"][1]["line"], json!(3));
    assert_eq!(body["rejected"][1]["text"], json!("ok"));
    assert!(
        body["rejected"][1]["error"]
            .as_str()
            .unwrap()
            .contains("\"value\""),
        "{body}"
    );
    assert_eq!(
        node.rows("prom", "SELECT job, value FROM ok ORDER BY time")
            .await,
        vec![vec![json!(null), json!(1.0)], vec![json!("y"), json!(2.0)]]
    );
    // A `value` label stored as something else is a schema conflict.
    let ints =
        rmp_serde::to_vec_named(&json!({"m": "ints", "columns": {"time": [T0_MS], "value": [1]}}))
            .unwrap();
    assert_eq!(node.write_msgpack("prom", ints).await.0, 204);
    let conflict = WriteRequest {
        timeseries: vec![series(&[("__name__", "ints")], &[(1.5, T0_MS + 1)])],
    };
    let (status, body) = post(&node, "prom", snappy(&conflict)).await;
    assert_eq!(status, 400);
    assert!(body.contains("\\\"value\\\""), "{body}");
    // Without a token: 401, like every write.
    let r = node
        .client
        .post(format!("{}/api/v1/prom/write?db=prom", node.url))
        .header("content-encoding", "snappy")
        .body(snappy(&good))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The good request still goes through.
    assert_eq!(post(&node, "prom", snappy(&good)).await.0, 204);
    assert_eq!(
        node.rows("prom", "SELECT count(*) FROM ok").await[0][0],
        json!(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_writes_obey_the_write_limits() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_LIMITS_MEASUREMENTS_PER_WRITE_MAX", 2)
            .with("QUIVER_HTTP_DECOMPRESSED_BYTES_MAX", 64 * 1024),
    )
    .await;
    let three = WriteRequest {
        timeseries: ["a", "b", "c"]
            .iter()
            .map(|m| series(&[("__name__", m)], &[(1.0, T0_MS)]))
            .collect(),
    };
    let (status, body) = post(&node, "prom", snappy(&three)).await;
    assert_eq!(status, 400);
    assert!(body.contains("measurements_per_write_max"), "{body}");
    // A snappy block declaring more than http.decompressed_bytes_max: 413 before it
    // is inflated.
    let big = snap::raw::Encoder::new()
        .compress_vec(&vec![0u8; 128 * 1024])
        .unwrap();
    assert_eq!(post(&node, "prom", big).await.0, 413);
}
