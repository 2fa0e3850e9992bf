//! One node against what stops nodes: refusals that must reach the client, one
//! oversized write, peers' routes probed by strangers, idle sockets, descriptor limits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Node, NodeSpec, TOKEN};

/// A line-protocol body of about `bytes` bytes, `lines` distinct series.
fn lp_body(bytes: usize, seed: usize) -> Vec<u8> {
    let mut out = String::with_capacity(bytes + 200);
    let mut i = 0usize;
    while out.len() < bytes {
        out.push_str(&format!(
            "cpu,host=h{},region=r{} usage={}.5,idle={}i {}\n",
            i % 97,
            i % 7,
            i % 100,
            i % 50,
            1_700_000_000_000_000_000i64 + (seed * 10_000_000 + i) as i64 * 1_000
        ));
        i += 1;
    }
    out.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_reach_clients_that_are_still_sending() {
    let dir = tempfile::tempdir().unwrap();
    // One write slot: most of the 8 senders are refused (429) while they send 1.6 MB.
    let node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_HTTP_WRITES_IN_FLIGHT_MAX", 1)).await;
    let statuses = Arc::new(tally::Counts::default());
    let mut tasks = Vec::new();
    for writer in 0..8usize {
        let url = format!("{}/api/v2/write?bucket=db&precision=ns", node.url);
        let statuses = statuses.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for round in 0..6usize {
                let body = lp_body(1_600_000, writer * 100 + round);
                let r = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .body(body)
                    .timeout(Duration::from_secs(60))
                    .send()
                    .await;
                match r {
                    Ok(r) => statuses.add(r.status().as_u16()),
                    Err(e) => {
                        statuses.transport_errors.fetch_add(1, Ordering::Relaxed);
                        eprintln!("transport error: {e}");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, refused, other, errors) = statuses.snapshot();
    assert_eq!(errors, 0, "every request must end with a status");
    assert_eq!(other, 0, "only 204 and 429 were expected");
    assert!(ok > 0, "some writes succeed");
    assert!(refused > 0, "with one slot and 8 senders some are refused");
}

/// Tallies of answers, without a lock.
mod tally {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    pub struct Counts {
        pub ok: AtomicUsize,
        pub refused: AtomicUsize,
        pub other: AtomicUsize,
        pub transport_errors: AtomicUsize,
    }

    impl Counts {
        pub fn add(&self, status: u16) {
            match status {
                204 => &self.ok,
                429 | 503 => &self.refused,
                _ => &self.other,
            }
            .fetch_add(1, Ordering::Relaxed);
        }

        pub fn snapshot(&self) -> (usize, usize, usize, usize) {
            (
                self.ok.load(Ordering::Relaxed),
                self.refused.load(Ordering::Relaxed),
                self.other.load(Ordering::Relaxed),
                self.transport_errors.load(Ordering::Relaxed),
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_to_a_client_expecting_100_continue_needs_no_body() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_WRITE_BYTES_IN_FLIGHT_MAX", 1 << 20)
            .with("QUIVER_RAFT_ENTRY_BYTES_MAX", 512 << 10),
    )
    .await;
    // Declares 8 MiB (over the 1 MiB budget) and waits for 100 Continue: the refusal
    // comes back at once, before any of the body is sent.
    let mut socket = TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        socket,
        "POST /api/v2/write?bucket=db HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        8 << 20
    )
    .unwrap();
    let mut answer = [0u8; 512];
    let n = socket.read(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(
        text.starts_with("HTTP/1.1 413"),
        "the write is larger than the whole budget: {text}"
    );
    assert!(text.contains("write_bytes_in_flight_max"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_larger_than_one_log_entry_is_refused_and_raft_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    // Plain entries: packed with zstd (the default), these small integers fit in the
    // limit; `a_packed_entry_over_the_limit_is_refused` covers the default.
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_RAFT_ENTRY_BYTES_MAX", 4 << 20)
            .with("QUIVER_RAFT_ENTRY_COMPRESSION", "none"),
    )
    .await;
    // 1 M small integers: about 1 MB of MessagePack, 8 MB of Arrow.
    let n = 1_000_000usize;
    let body = rmp_serde::to_vec_named(&json!({"m": "big", "columns": {
        "time": (0..n).map(|i| 1_700_000_000_000i64 + i as i64).collect::<Vec<_>>(),
        "v": (0..n).map(|i| (i % 100) as i64).collect::<Vec<_>>(),
    }}))
    .unwrap();
    assert!(
        body.len() < 12 << 20,
        "the body is far below http.body_bytes_max"
    );
    for attempt in 0..3 {
        let (status, text) = node.write_msgpack("db", body.clone()).await;
        assert_eq!(status, 413, "attempt {attempt}: {text}");
        assert!(text.contains("raft.entry_bytes_max"), "{text}");
    }
    // Raft still runs: a normal write commits and reads back.
    let small = crate::common::batch_payload("ok", 1, 100, 1_700_000_000_000_000_000, 3);
    let (status, text) = node.write_msgpack("db", small).await;
    assert_eq!(status, 204, "{text}\n{}", node.log_tail());
    let rows = node.rows("db", "SELECT count(*) FROM ok").await;
    assert_eq!(rows[0][0], json!(100));
    let ready = node
        .client
        .get(format!("{}/ready", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packed_entry_over_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_RAFT_ENTRY_BYTES_MAX", 4 << 20)).await;
    // 600,000 values of full 64-bit entropy: about 11 MB of MessagePack, 4.8 MB packed,
    // which zstd cannot shrink below the 4 MiB limit.
    let n = 600_000usize;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<i64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as i64
        })
        .collect();
    let body = rmp_serde::to_vec_named(&json!({"m": "noise", "columns": {
        "time": (0..n).map(|i| 1_700_000_000_000i64 + i as i64).collect::<Vec<_>>(),
        "v": noise,
    }}))
    .unwrap();
    let (status, text) = node.write_msgpack("db", body).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("raft.entry_bytes_max"), "{text}");
    let small = crate::common::batch_payload("ok", 1, 100, 1_700_000_000_000_000_000, 3);
    let (status, text) = node.write_msgpack("db", small).await;
    assert_eq!(status, 204, "{text}\n{}", node.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_do_not_exist_without_a_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    for path in [
        "/internal/raft/append",
        "/internal/forward",
        "/internal/raft/vote",
    ] {
        let (status, _, _) = node.post(path, &[], b"x".to_vec()).await;
        assert_eq!(
            status, 404,
            "{path} is not mounted on a node without a secret"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_check_the_secret_before_reading_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path()).with("QUIVER_CLUSTER_SECRET", "a-secret-of-sixteen-chars"),
    )
    .await;
    // A stranger declares a 1 GiB body and sends none of it: the answer must not wait.
    let mut socket = TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    write!(
        socket,
        "POST /internal/raft/append HTTP/1.1\r\nHost: x\r\nx-quiver-cluster-secret: wrong\r\n\
         Content-Length: {}\r\n\r\n",
        1u64 << 30
    )
    .unwrap();
    let mut answer = [0u8; 256];
    let n = socket
        .read(&mut answer)
        .expect("an answer before any body byte");
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_HEADER_TIMEOUT_MS", 1_000)
            .with("QUIVER_HTTP_CONNECTIONS_MAX", 8)
            .with("QUIVER_HTTP_CONNECTIONS_RESERVED_FOR_PEERS", 0),
    )
    .await;
    let addr = node.url.trim_start_matches("http://").to_string();
    // An idle socket is closed by the server after the header timeout.
    let mut idle = TcpStream::connect(&addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = idle.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server closes an idle connection");
    assert!(started.elapsed() < Duration::from_secs(8));
    // Hold every slot with idle sockets: a real request is answered at once, 503 while
    // they hold every slot (a status, never a hang in the accept queue), and served
    // once the idle ones time out, without exhausting descriptors.
    let hogs: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    // A fresh connection: the node's pooled client may hold a kept-alive one that the
    // server closes at its header deadline, and that one would skip the gate anyway.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let asked = Instant::now();
    let r = fresh
        .get(format!("{}/health", node.url))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer while every slot is held");
    assert!(r.status() == 503 || r.status() == 200, "{}", r.status());
    assert!(asked.elapsed() < Duration::from_secs(5));
    node.wait_for(
        "the request served once idle sockets are closed",
        Duration::from_secs(30),
        || async {
            fresh
                .get(format!("{}/health", node.url))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    drop(hogs);
    // The soft limit of open files was raised to the hard limit.
    let pid = node.pid().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        fields[3], fields[4],
        "soft limit raised to the hard one: {line}"
    );
}
