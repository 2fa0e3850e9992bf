//! Telegraf's `outputs.arc` and `outputs.influxdb_v2`, replayed byte for byte
//! (`telegraf_wire.rs`) against a real node: what is stored, and what Telegraf's retry
//! rules make of Quiver's answers.

use std::time::Duration;

use serde_json::{json, Value as Json};

use crate::common::{Node, NodeSpec, TOKEN};
use crate::telegraf_wire::{
    arc_headers, arc_msgpack, arc_verdict, gzip, influx_v2_body, influx_v2_headers, influx_v2_path,
    influx_v2_verdict, Metric, Value, Verdict,
};

const T0_NS: i64 = 1_700_000_000_123_456_789;
const SECOND_NS: i64 = 1_000_000_000;

/// One flush of a host's usual inputs: several measurements, a field that appears only
/// from the second `disk` row on (backfilled with nil), a tag one row lacks, uint64
/// values of every msgp width, negative ints, a string field, a bool.
fn flush(host: &str, t: i64) -> Vec<Metric> {
    use Value::*;
    vec![
        Metric::new(
            "cpu",
            &[("cpu", "cpu0"), ("host", host)],
            vec![("usage_user", Float(12.5)), ("usage_idle", Float(80.0))],
            t,
        ),
        Metric::new(
            "cpu",
            &[("cpu", "cpu1"), ("host", host)],
            vec![("usage_user", Float(3.25)), ("usage_idle", Float(95.5))],
            t,
        ),
        Metric::new(
            "mem",
            &[("host", host)],
            vec![
                ("total", Uint(16_000_000_000)),
                ("available_percent", Float(42.5)),
                ("active", Int(5_000_000_000)),
                ("commit_limit", Uint(200)),
                ("dirty", Uint(40_000)),
                ("swap_cached", Int(-3)),
            ],
            t,
        ),
        Metric::new(
            "disk",
            &[
                ("device", "sda1"),
                ("fstype", "ext4"),
                ("host", host),
                ("path", "/"),
            ],
            vec![
                ("free", Uint(100)),
                ("used_percent", Float(50.5)),
                ("inodes_used", Uint(7)),
            ],
            t,
        ),
        Metric::new(
            "disk",
            &[("device", "sdb"), ("host", host), ("path", "/data dir")],
            vec![
                ("free", Uint(300)),
                ("used_percent", Float(60.0)),
                ("read_only", Bool(true)),
            ],
            t + 10_000_000,
        ),
        Metric::new(
            "system",
            &[("host", host)],
            vec![
                ("load1", Float(0.5)),
                ("n_cpus", Int(4)),
                ("uptime", Uint(123_456)),
                ("uptime_format", Str("1 day, 10:17".into())),
            ],
            t,
        ),
    ]
}

fn ms_rfc3339(ns: i64) -> Json {
    let ms = ns.div_euclid(1_000_000);
    let t = chrono::DateTime::from_timestamp_millis(ms).expect("time");
    json!(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

fn ns_rfc3339(ns: i64) -> Json {
    json!(chrono::DateTime::from_timestamp_nanos(ns)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Sends one request as Telegraf would: its path, headers and body, and no token but
/// the one in its own headers.
async fn send(
    node: &Node,
    path: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> (u16, Option<String>, String) {
    let mut request = node.client.post(format!("{}{path}", node.url)).body(body);
    for (k, v) in headers {
        request = request.header(k.as_str(), v.as_str());
    }
    let r = request.send().await.expect("request");
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, retry_after, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegraf_arc_batches_are_stored_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let metrics: Vec<Metric> = [flush("h1", T0_NS), flush("h1", T0_NS + 10 * SECOND_NS)].concat();
    let body = arc_msgpack(&metrics);
    // Several measurements: one array of columnar maps, the layout the decoder must take.
    assert_eq!(body[0], 0x94, "an array of 4 measurement maps");
    let (status, _, text) = send(
        &node,
        "/api/v1/write/msgpack",
        &arc_headers(TOKEN, "tg", true),
        gzip(&body),
    )
    .await;
    assert_eq!(arc_verdict(status), Verdict::Delivered, "{status} {text}");

    let cpu = node
        .rows(
            "tg",
            "SELECT time, cpu, host, usage_user, usage_idle FROM cpu ORDER BY time, cpu",
        )
        .await;
    assert_eq!(cpu.len(), 4);
    assert_eq!(
        cpu[0],
        vec![
            ms_rfc3339(T0_NS),
            json!("cpu0"),
            json!("h1"),
            json!(12.5),
            json!(80.0)
        ]
    );
    assert_eq!(cpu[3][0], ms_rfc3339(T0_NS + 10 * SECOND_NS));
    let mem = node
        .rows("tg", "SELECT total, available_percent, active, commit_limit, dirty, swap_cached, arrow_typeof(total) FROM mem LIMIT 1")
        .await;
    assert_eq!(
        mem,
        vec![vec![
            json!(16_000_000_000u64),
            json!(42.5),
            json!(5_000_000_000i64),
            json!(200),
            json!(40_000),
            json!(-3),
            json!("Int64")
        ]]
    );
    // The backfilled column is null where it was nil; the row without `fstype` has a
    // null tag.
    let disk = node
        .rows("tg", "SELECT time, device, fstype, path, free, inodes_used, read_only FROM disk ORDER BY time LIMIT 2")
        .await;
    assert_eq!(
        disk,
        vec![
            vec![
                ms_rfc3339(T0_NS),
                json!("sda1"),
                json!("ext4"),
                json!("/"),
                json!(100),
                json!(7),
                json!(null)
            ],
            vec![
                ms_rfc3339(T0_NS + 10_000_000),
                json!("sdb"),
                json!(null),
                json!("/data dir"),
                json!(300),
                json!(null),
                json!(true)
            ],
        ]
    );
    // Without a `"tags"` list, Arc's format makes every string column a tag: Telegraf's
    // string field `uptime_format` is one.
    let system = node
        .rows("tg", "SELECT uptime_format, load1, n_cpus, uptime FROM system WHERE uptime_format = '1 day, 10:17' LIMIT 1")
        .await;
    assert_eq!(
        system,
        vec![vec![
            json!("1 day, 10:17"),
            json!(0.5),
            json!(4),
            json!(123_456)
        ]]
    );
    assert_eq!(
        node.rows("tg", "SELECT count(*) FROM system").await[0][0],
        json!(2)
    );

    // One measurement alone is a map, and `content_encoding = "identity"` sends it raw.
    let one = [Metric::new(
        "swap",
        &[("host", "h1")],
        vec![("used", Value::Uint(0)), ("in", Value::Uint(1 << 40))],
        T0_NS,
    )];
    let body = arc_msgpack(&one);
    assert_eq!(body[0], 0x82, "a map of m and columns");
    let (status, _, text) = send(
        &node,
        "/api/v1/write/msgpack",
        &arc_headers(TOKEN, "tg", false),
        body,
    )
    .await;
    assert_eq!(status, 204, "{text}");
    assert_eq!(
        node.rows("tg", "SELECT used, \"in\" FROM swap").await,
        vec![vec![json!(0), json!(1u64 << 40)]]
    );

    // A wrong api_key: 401, which outputs.arc keeps retrying (it retries every error).
    let (status, _, _) = send(
        &node,
        "/api/v1/write/msgpack",
        &arc_headers("wrong", "tg", true),
        gzip(&arc_msgpack(&one)),
    )
    .await;
    assert_eq!(status, 401);
    assert!(matches!(arc_verdict(status), Verdict::Retry { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegraf_influxdb_v2_batches_are_stored_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let mut metrics: Vec<Metric> = flush("h1", T0_NS);
    // NaN fields are dropped by the serializer, a metric left without fields is skipped.
    metrics.push(Metric::new(
        "nan",
        &[("host", "h1")],
        vec![("v", Value::Float(f64::NAN))],
        T0_NS,
    ));
    metrics.push(Metric::new(
        "esc",
        &[("k y", "a,b=c")],
        vec![
            ("f x", Value::Str("say \"hi\" \\o/".into())),
            ("u", Value::Uint(u64::MAX)),
        ],
        T0_NS,
    ));
    let body = influx_v2_body(&metrics);
    let text = String::from_utf8(body.clone()).unwrap();
    assert!(
        text.starts_with(
            "cpu,cpu=cpu0,host=h1 usage_user=12.5,usage_idle=80 1700000000123456789\n"
        ),
        "{text}"
    );
    assert!(!text.contains("nan"), "{text}");
    let (status, _, answer) = send(
        &node,
        &influx_v2_path("tg2", "acme"),
        &influx_v2_headers(TOKEN, true),
        gzip(&body),
    )
    .await;
    assert_eq!(
        influx_v2_verdict(status, None, &answer, 0),
        Verdict::Delivered,
        "{answer}"
    );

    let disk = node
        .rows(
            "tg2",
            "SELECT time, device, fstype, path, free, read_only FROM disk ORDER BY time",
        )
        .await;
    assert_eq!(
        disk,
        vec![
            vec![
                ns_rfc3339(T0_NS),
                json!("sda1"),
                json!("ext4"),
                json!("/"),
                json!(100),
                json!(null)
            ],
            vec![
                ns_rfc3339(T0_NS + 10_000_000),
                json!("sdb"),
                json!(null),
                json!("/data dir"),
                json!(300),
                json!(true)
            ],
        ]
    );
    // Line protocol keeps the string field a field, and uint64 travels as int64.
    let system = node
        .rows(
            "tg2",
            "SELECT uptime_format, arrow_typeof(uptime_format), arrow_typeof(uptime) FROM system",
        )
        .await;
    assert_eq!(
        system,
        vec![vec![json!("1 day, 10:17"), json!("Utf8"), json!("Int64")]]
    );
    let esc = node
        .rows("tg2", "SELECT \"k y\", \"f x\", u FROM esc")
        .await;
    assert_eq!(
        esc,
        vec![vec![
            json!("a,b=c"),
            json!("say \"hi\" \\o/"),
            json!(i64::MAX)
        ]]
    );
    let (status, _) = node.query("tg2", "SELECT * FROM nan").await;
    assert_eq!(status, 400, "a metric without fields is not sent");
}

/// Holds the node's only write slot with a request whose body never finishes, until
/// `release` is called.
struct SlotHolder {
    tx: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    task: tokio::task::JoinHandle<u16>,
}

impl SlotHolder {
    async fn hold(node: &Node) -> SlotHolder {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let request = node
            .client
            .post(format!("{}/api/v2/write?bucket=held", node.url))
            .bearer_auth(TOKEN)
            .body(reqwest::Body::wrap_stream(stream));
        let task = tokio::spawn(async move {
            request
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        });
        tx.send(Ok(b"held v=1i ".to_vec()))
            .await
            .expect("first chunk");
        // The slot is held once the first chunk is charged to the write budget (a probe
        // sent earlier could take the slot first and leave the holder refused).
        node.wait_for(
            "the held write to be admitted",
            Duration::from_secs(30),
            || async { node.metric("quiver_write_bytes_in_flight").await > 0.0 },
        )
        .await;
        let (status, _, _) = node
            .post("/api/v2/write?bucket=probe", &[], b"probe v=1i".to_vec())
            .await;
        assert_eq!(status, 429, "the only write slot is held");
        SlotHolder { tx, task }
    }

    async fn release(self) -> u16 {
        self.tx
            .send(Ok(b"1700000000000000000\n".to_vec()))
            .await
            .expect("last chunk");
        drop(self.tx);
        self.task.await.expect("held request")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegraf_retry_rules_meet_quivers_answers() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_WRITES_IN_FLIGHT_MAX", 1)
            .with("QUIVER_HTTP_BODY_BYTES_MAX", 4096),
    )
    .await;
    let metrics = flush("h2", T0_NS);

    // Overload: 429 with Retry-After. influxdb_v2 waits at least that long, arc keeps
    // the batch; nothing of a refused request is written, and the retry stores it once.
    let holder = SlotHolder::hold(&node).await;
    let arc_body = gzip(&arc_msgpack(&metrics));
    let (status, _, _) = send(
        &node,
        "/api/v1/write/msgpack",
        &arc_headers(TOKEN, "retry", true),
        arc_body.clone(),
    )
    .await;
    assert_eq!(status, 429);
    assert!(matches!(arc_verdict(status), Verdict::Retry { .. }));
    let v2_body = gzip(&influx_v2_body(&metrics));
    let (status, retry_after, answer) = send(
        &node,
        &influx_v2_path("retry2", "o"),
        &influx_v2_headers(TOKEN, true),
        v2_body.clone(),
    )
    .await;
    let verdict = influx_v2_verdict(status, retry_after.as_deref(), &answer, 1);
    assert_eq!(
        verdict,
        Verdict::Retry {
            after: Duration::from_secs(1)
        },
        "{status} {retry_after:?} {answer}"
    );
    assert_eq!(holder.release().await, 204);
    let (status, _, _) = send(
        &node,
        "/api/v1/write/msgpack",
        &arc_headers(TOKEN, "retry", true),
        arc_body,
    )
    .await;
    assert_eq!(arc_verdict(status), Verdict::Delivered);
    let (status, _, answer) = send(
        &node,
        &influx_v2_path("retry2", "o"),
        &influx_v2_headers(TOKEN, true),
        v2_body,
    )
    .await;
    assert_eq!(
        influx_v2_verdict(status, None, &answer, 0),
        Verdict::Delivered
    );
    for db in ["retry", "retry2"] {
        assert_eq!(
            node.rows(db, "SELECT count(*) FROM cpu").await[0][0],
            json!(2),
            "{db}"
        );
        assert_eq!(
            node.rows(db, "SELECT count(*) FROM disk").await[0][0],
            json!(2),
            "{db}"
        );
    }

    // A line the stored schema refuses: 400, which influxdb_v2 drops without retrying,
    // logging Quiver's reason; the other lines of the batch are written once.
    let bad = vec![
        Metric::new(
            "cpu",
            &[("cpu", "cpu0"), ("host", "h3")],
            vec![("usage_user", Value::Str("high".into()))],
            T0_NS + SECOND_NS,
        ),
        Metric::new(
            "cpu",
            &[("cpu", "cpu1"), ("host", "h3")],
            vec![("usage_user", Value::Float(1.0))],
            T0_NS + SECOND_NS,
        ),
    ];
    let (status, _, answer) = send(
        &node,
        &influx_v2_path("retry2", "o"),
        &influx_v2_headers(TOKEN, true),
        gzip(&influx_v2_body(&bad)),
    )
    .await;
    let Verdict::Dropped { reason } = influx_v2_verdict(status, None, &answer, 0) else {
        panic!("a 400 is dropped: {status} {answer}");
    };
    assert!(
        reason.starts_with("invalid: partial write: 1 of 2 lines rejected"),
        "Telegraf would log {reason:?}"
    );
    assert_eq!(
        node.rows("retry2", "SELECT count(*) FROM cpu WHERE host = 'h3'")
            .await[0][0],
        json!(1)
    );

    // A batch over http.body_bytes_max: 413, which influxdb_v2 answers by splitting the
    // batch in halves until each fits; every metric arrives once.
    let many: Vec<Metric> = (0..120)
        .map(|i| {
            Metric::new(
                "net",
                &[("host", "h4"), ("interface", "eth0")],
                vec![
                    ("bytes_recv", Value::Uint(1_000_000 + i)),
                    ("drop_in", Value::Int(0)),
                ],
                T0_NS + i as i64 * SECOND_NS,
            )
        })
        .collect();
    let mut queue = vec![many];
    let mut requests = 0;
    while let Some(batch) = queue.pop() {
        requests += 1;
        assert!(requests < 64, "splitting must converge");
        let (status, _, answer) = send(
            &node,
            &influx_v2_path("split", "o"),
            &influx_v2_headers(TOKEN, false),
            influx_v2_body(&batch),
        )
        .await;
        match influx_v2_verdict(status, None, &answer, 0) {
            Verdict::Delivered => {}
            Verdict::Split => {
                let (a, b) = batch.split_at(batch.len() / 2);
                queue.push(b.to_vec());
                queue.push(a.to_vec());
            }
            other => panic!("{other:?}: {answer}"),
        }
    }
    assert!(requests > 1, "the first request must have been too large");
    let net = node.rows("split", "SELECT count(*), count(DISTINCT bytes_recv), min(bytes_recv), max(bytes_recv) FROM net").await;
    assert_eq!(
        net,
        vec![vec![
            json!(120),
            json!(120),
            json!(1_000_000),
            json!(1_000_119)
        ]]
    );
}
