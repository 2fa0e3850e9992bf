//! Writes decoding at once share the node's write memory budget (issue 36, item 5).
//!
//! Eight concurrent 9.6 MB line-protocol bodies, each line one of 499 sparse fields
//! (every row padded with nulls for all of them), were each refused at their own
//! `write_decoded_bytes_max` only after decoding up to it: 5.8 GB resident against a
//! 1 GiB `http.write_bytes_in_flight_max`. Now what the decoders build is reserved from
//! that budget as it grows, so the node's peak resident size stays within its idle size,
//! the budget and the constant below, whatever the number of writers.

use std::time::Duration;

use crate::common::{Node, NodeSpec, TOKEN};

/// The node's write memory budget in this test.
const BUDGET_BYTES: u64 = 512 << 20;
/// What the node may hold beyond its idle size and the budget: allocator slack for
/// bodies and builders being read and freed on many threads. glibc's per-thread arenas
/// and its moving mmap threshold keep freed blocks resident: with 64 writers the peak
/// measured 170-390 MiB over idle + budget (682-899 MiB against 44 MiB idle), and
/// 10-110 MiB with `MALLOC_MMAP_THRESHOLD_=131072` (mimalloc measured worse: 928-983).
/// Before decoders shared the budget, eight writers alone reached 5.8 GB.
const BEYOND_BUDGET_BYTES: u64 = 512 << 20;
/// Concurrent writers.
const WRITERS: usize = 64;

/// A 9.6 MB body whose 320,000 lines each set one of 499 fields.
fn sparse_body() -> String {
    let mut body = String::with_capacity(10 << 20);
    let mut i = 0u64;
    while body.len() < 9_600_000 {
        body.push_str(&format!(
            "wide,host=h{} f{}=1 {}\n",
            i % 10,
            i % 499,
            1_700_000_000_000_000_000u64 + i
        ));
        i += 1;
    }
    body
}

/// One of the process's resident sizes (`VmRSS:` now, `VmHWM:` its peak), in bytes.
fn resident_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect(key);
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sparse_writers_decode_within_the_write_budget() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_HTTP_WRITE_BYTES_IN_FLIGHT_MAX", BUDGET_BYTES)
            .with("QUIVER_HTTP_WRITES_IN_FLIGHT_MAX", 256),
    )
    .await;
    let pid = node.pid().expect("the node runs");
    let idle = resident_bytes(pid, "VmRSS:");
    let body = bytes::Bytes::from(sparse_body());
    let url = format!("{}/api/v2/write?bucket=db&precision=ns", node.url);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let writers = (0..WRITERS).map(|_| {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        async move {
            let r = client
                .post(&url)
                .header("Authorization", format!("Token {TOKEN}"))
                .body(body)
                .send()
                .await
                .expect("every writer gets an answer, not a reset");
            r.status().as_u16()
        }
    });
    let statuses = futures::future::join_all(writers).await;
    let peak = resident_bytes(pid, "VmHWM:");
    eprintln!(
        "{WRITERS} sparse writers: statuses {:?}; resident {} MiB idle, {} MiB at peak, against a budget of {} MiB",
        {
            let mut counts = std::collections::BTreeMap::<u16, usize>::new();
            for s in &statuses {
                *counts.entry(*s).or_default() += 1;
            }
            counts
        },
        idle >> 20,
        peak >> 20,
        BUDGET_BYTES >> 20
    );
    for status in &statuses {
        assert!(
            matches!(status, 400 | 413 | 429),
            "a write answered {status}: {statuses:?}"
        );
    }
    assert!(
        peak <= idle + BUDGET_BYTES + BEYOND_BUDGET_BYTES,
        "peak resident {} MiB, over idle ({} MiB) plus the budget ({} MiB) plus {} MiB",
        peak >> 20,
        idle >> 20,
        BUDGET_BYTES >> 20,
        BEYOND_BUDGET_BYTES >> 20
    );
    // The node is well, and takes a normal write.
    let (status, text) = node
        .write_lp(
            "/api/v2/write?bucket=db&precision=ns",
            "cpu,host=a v=1 1700000000000000000",
        )
        .await;
    assert_eq!(status, 204, "{text}");
}
