//! Full disks, on small tmpfs volumes the test mounts (skipped, saying why, where
//! mounting is not permitted): below the free-space watermark writes are refused
//! before anything is appended and flushes wait; when space returns, writes resume
//! without a restart. And when a volume fills with no watermark at all, the node says
//! so, exits for its supervisor, and loses no acknowledged row.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::common::{batch_payload, Node, NodeSpec};

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts `size_mib` MiB at `path`, or says why it cannot.
    fn mount(path: &Path, size_mib: u64) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }

    /// Grows the volume in place (its files stay), as an operator resizing it would.
    fn grow(&self, size_mib: u64) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size_mib}m")])
            .arg(&self.path)
            .status()
            .unwrap();
        assert!(status.success(), "remount to {size_mib} MiB");
    }

    /// Fills the volume until `leave_bytes` remain, with a file that can be removed.
    fn fill_leaving(&self, leave_bytes: u64) -> PathBuf {
        let filler = self.path.join("filler");
        let free = fs2::available_space(&self.path).unwrap();
        let size = free.saturating_sub(leave_bytes);
        let file = std::fs::File::create(&filler).unwrap();
        // tmpfs allocates on write, so write real bytes.
        let chunk = vec![7u8; 1 << 20];
        let mut written = 0u64;
        use std::io::Write;
        let mut w = std::io::BufWriter::new(file);
        while written + chunk.len() as u64 <= size {
            w.write_all(&chunk).unwrap();
            written += chunk.len() as u64;
        }
        w.write_all(&chunk[..(size - written) as usize]).unwrap();
        w.flush().unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Mounts a tmpfs or ends the test. A skip is a failure unless
/// `QUIVER_TESTS_ALLOW_SKIP=1` says this machine cannot mount (CI and the README's test
/// command run as root, where these tests must run): a silent skip would let a
/// regression through.
macro_rules! tmpfs_or_skip {
    ($path:expr, $mib:expr) => {
        match Tmpfs::mount($path, $mib) {
            Ok(t) => t,
            Err(reason) if std::env::var("QUIVER_TESTS_ALLOW_SKIP").is_ok_and(|v| v == "1") => {
                eprintln!("SKIPPED: {reason} (this test needs permission to mount tmpfs)");
                return;
            }
            Err(reason) => panic!(
                "{reason}: this test needs permission to mount tmpfs; set \
                 QUIVER_TESTS_ALLOW_SKIP=1 to skip it on a machine that has none"
            ),
        }
    };
}

async fn write_ok(node: &Node, id: i64) {
    let body = batch_payload(
        "cpu",
        id,
        500,
        1_700_000_000_000_000_000 + id * 1_000_000_000,
        5,
    );
    let (status, text) = node.write_msgpack("db", body).await;
    assert_eq!(status, 204, "batch {id}: {text}\n{}", node.log_tail());
}

async fn ready_status(node: &Node) -> u16 {
    node.client
        .get(format!("{}/ready", node.url))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_wal_volume_refuses_writes_until_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let wal = tmpfs_or_skip!(&dir.path().join("wal-volume"), 96);
    let mut spec = NodeSpec::new(dir.path())
        .with("QUIVER_WAL_SEGMENT_BYTES_MAX", 4 << 20)
        .with("QUIVER_WAL_FREE_BYTES_MIN", 32 << 20);
    spec.wal_dir = Some(wal.path.join("wal"));
    let node = Node::start(spec).await;
    for id in 0..5 {
        write_ok(&node, id).await;
    }
    let filler = wal.fill_leaving(16 << 20);
    node.wait_for(
        "the node to see the low volume",
        Duration::from_secs(10),
        || async { ready_status(&node).await == 503 },
    )
    .await;
    // Below the watermark: 503 with Retry-After, nothing appended; reads still work.
    let body = batch_payload("cpu", 99, 500, 1_800_000_000_000_000_000, 5);
    let (status, text, headers) = node
        .post("/api/v1/write/msgpack", &[("x-arc-database", "db")], body)
        .await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("wal.free_bytes_min"), "{text}");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(ready_status(&node).await, 503);
    let rows = node.rows("db", "SELECT count(*) FROM cpu").await;
    assert_eq!(rows[0][0], json!(2_500));
    // Space returns: writes resume by themselves.
    std::fs::remove_file(filler).unwrap();
    node.wait_for("writes to resume", Duration::from_secs(10), || async {
        ready_status(&node).await == 200
    })
    .await;
    for id in 5..8 {
        write_ok(&node, id).await;
    }
    let rows = node.rows("db", "SELECT count(*) FROM cpu").await;
    assert_eq!(rows[0][0], json!(4_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_data_volume_pauses_flushes_and_resumes_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = tmpfs_or_skip!(&dir.path().join("data-volume"), 96);
    let mut spec = NodeSpec::new(dir.path())
        .with("QUIVER_STORAGE_FREE_BYTES_MIN", 32 << 20)
        .with("QUIVER_STORAGE_FLUSH_ROWS_MAX", 400);
    spec.data_dir = data.path.join("data");
    spec.wal_dir = Some(dir.path().join("wal"));
    let node = Node::start(spec).await;
    write_ok(&node, 0).await;
    node.wait_for("a first flush", Duration::from_secs(30), || async {
        node.metric("quiver_parquet_files").await >= 1.0
    })
    .await;
    let filler = data.fill_leaving(16 << 20);
    node.wait_for(
        "the node to see the low volume",
        Duration::from_secs(10),
        || async { ready_status(&node).await == 503 },
    )
    .await;
    let body = batch_payload("cpu", 1, 500, 1_700_000_100_000_000_000, 5);
    let (status, text) = node.write_msgpack("db", body).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("storage.free_bytes_min"), "{text}");
    assert_eq!(
        node.metric("quiver_flush_failures_total").await.max(0.0),
        0.0
    );
    std::fs::remove_file(filler).unwrap();
    node.wait_for("writes to resume", Duration::from_secs(10), || async {
        ready_status(&node).await == 200
    })
    .await;
    for id in 2..6 {
        write_ok(&node, id).await;
    }
    node.wait_for("flushes to resume", Duration::from_secs(30), || async {
        node.metric("quiver_parquet_rows").await >= 2_500.0
    })
    .await;
    let rows = node.rows("db", "SELECT count(*) FROM cpu").await;
    assert_eq!(rows[0][0], json!(2_500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wal_that_fills_without_a_watermark_stops_the_node_loudly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wal = tmpfs_or_skip!(&dir.path().join("wal-volume"), 24);
    let mut spec = NodeSpec::new(dir.path())
        .with("QUIVER_WAL_SEGMENT_BYTES_MAX", 4 << 20)
        .with("QUIVER_WAL_FREE_BYTES_MIN", 0)
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", 3_600_000)
        // Plain entries: 400 batches fill the 24 MiB volume; packed (the default) they
        // take a quarter of the bytes and the volume would need four times the writes.
        .with("QUIVER_RAFT_ENTRY_COMPRESSION", "none");
    spec.wal_dir = Some(wal.path.join("wal"));
    let mut node = Node::start(spec).await;
    let mut acked = Vec::new();
    let mut outcomes = std::collections::BTreeMap::<u16, usize>::new();
    for id in 0..400i64 {
        let body = batch_payload(
            "cpu",
            id,
            2_000,
            1_700_000_000_000_000_000 + id * 10_000_000_000,
            5,
        );
        let (status, _) = node.write_msgpack("db", body).await;
        *outcomes.entry(status).or_default() += 1;
        match status {
            204 => acked.push(id),
            // 503: refused before anything was appended; 504: outcome unknown.
            503 | 504 => {}
            0 => break, // the node has exited
            other => panic!("write {id}: unexpected {other}"),
        }
        if status != 204 {
            break;
        }
    }
    eprintln!("outcomes by status: {outcomes:?}");
    assert!(
        outcomes.keys().any(|s| *s != 204),
        "the 24 MiB volume must fill: {outcomes:?}"
    );
    let code = node.wait_exit(Duration::from_secs(30));
    assert_ne!(code, Some(0), "a node whose log failed exits non-zero");
    assert!(node.log().contains("raft stopped"), "{}", node.log_tail());
    // Room again, as an operator would make it: every acknowledged batch is there,
    // and none twice.
    wal.grow(128);
    node.restart().await;
    let rows = node
        .rows(
            "db",
            "SELECT batch, count(*) FROM cpu GROUP BY batch ORDER BY batch",
        )
        .await;
    let stored: Vec<i64> = rows.iter().map(|r| r[0].as_i64().unwrap()).collect();
    for id in &acked {
        assert!(stored.contains(id), "acknowledged batch {id} lost");
    }
    for r in &rows {
        assert_eq!(r[1], json!(2_000), "batch {} stored partly or twice", r[0]);
    }
    assert!(
        stored.len() <= acked.len() + 1,
        "at most the unknown-outcome write extra"
    );
}

async fn write_via(node: &Node, id: i64) -> (u16, String) {
    let body = batch_payload(
        "cpu",
        id,
        500,
        1_700_000_000_000_000_000 + id * 1_000_000_000,
        5,
    );
    node.write_msgpack("db", body).await
}

/// Regression (issue 36, item 6): admission held only on the node a write arrived at. A
/// write forwarded by a follower was proposed by a leader whose WAL volume was below its
/// watermark (acknowledged until the leader's WAL hit ENOSPC), and followers appended
/// entries whatever their own disks held. Now every path into the log checks the node
/// it enters: the leader refuses forwarded writes (503), a follower refuses entries (and
/// says so on `/ready`) without stopping, and a leader whose followers cannot take
/// entries refuses writes naming them; everything resumes when space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_path_into_the_log_checks_the_disk_of_the_node_it_enters() {
    let dir = tempfile::tempdir().unwrap();
    let mut volumes: Vec<Tmpfs> = Vec::new();
    for i in 1..=3 {
        volumes.push(tmpfs_or_skip!(
            &dir.path().join(format!("wal-volume-{i}")),
            96
        ));
    }
    let env = [
        ("QUIVER_WAL_FREE_BYTES_MIN", (32u64 << 20).to_string()),
        ("QUIVER_WAL_SEGMENT_BYTES_MAX", (4u64 << 20).to_string()),
    ];
    let mut specs = crate::cluster_support::specs(dir.path(), 3, &env);
    for (spec, volume) in specs.iter_mut().zip(&volumes) {
        spec.wal_dir = Some(volume.path.join("wal"));
    }
    let nodes = crate::cluster_support::start(specs).await;
    let l = crate::cluster_support::leader(&nodes, &[0, 1, 2]).await;
    let (f, g) = ((l + 1) % 3, (l + 2) % 3);
    write_ok(&nodes[l], 0).await;
    let count = "SELECT count(*) FROM cpu";

    // The leader's WAL volume is low: a write sent through a follower is refused.
    let filler = volumes[l].fill_leaving(16 << 20);
    let leader = &nodes[l];
    leader
        .wait_for(
            "the leader to see its low volume",
            Duration::from_secs(10),
            || async { ready_status(leader).await == 503 },
        )
        .await;
    let (status, text) = write_via(&nodes[f], 1).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("wal.free_bytes_min"), "{text}");
    assert_eq!(nodes[f].rows("db", count).await[0][0], json!(500));
    std::fs::remove_file(filler).unwrap();
    leader
        .wait_for(
            "the leader's volume to have room",
            Duration::from_secs(10),
            || async { ready_status(leader).await == 200 },
        )
        .await;

    // One follower's volume is low: it refuses entries and says so, and keeps running;
    // the other two acknowledge writes.
    let filler_f = volumes[f].fill_leaving(16 << 20);
    let low = &nodes[f];
    low.wait_for(
        "the follower to see its low volume",
        Duration::from_secs(10),
        || async { ready_status(low).await == 503 },
    )
    .await;
    for id in 2..5 {
        write_ok(&nodes[l], id).await;
    }
    assert_eq!(
        ready_status(low).await,
        503,
        "it says it cannot take entries"
    );
    assert!(low.status().await.is_object(), "it still runs");

    // Both followers are low: the leader refuses writes naming them (the first write
    // after the second one filled may time out, 504, while the leader learns it).
    let filler_g = volumes[g].fill_leaving(16 << 20);
    let other = &nodes[g];
    other
        .wait_for(
            "the other follower to see its low volume",
            Duration::from_secs(10),
            || async { ready_status(other).await == 503 },
        )
        .await;
    let mut refusal = None;
    for id in 5..15 {
        let (status, text) = write_via(&nodes[l], id).await;
        match status {
            503 => {
                refusal = Some(text);
                break;
            }
            504 => continue,
            other => panic!("write {id}: {other} {text}"),
        }
    }
    let refusal = refusal.expect("the leader never refused with both followers low");
    assert!(
        refusal.contains("too few voters can take entries"),
        "{refusal}"
    );
    assert!(refusal.contains("wal.free_bytes_min"), "{refusal}");

    // Space returns: writes resume, and every replica holds the same rows.
    std::fs::remove_file(filler_f).unwrap();
    std::fs::remove_file(filler_g).unwrap();
    let mut id = 100;
    leader
        .wait_for("writes to resume", Duration::from_secs(30), || {
            id += 1;
            let leader = &nodes[l];
            async move { write_via(leader, id).await.0 == 204 }
        })
        .await;
    let expected = nodes[l].rows("db", count).await;
    for node in &nodes {
        node.wait_for(
            "the replica to catch up",
            Duration::from_secs(30),
            || async { node.rows("db", count).await == expected },
        )
        .await;
        assert_eq!(node.metric("quiver_node_failed").await.max(0.0), 0.0);
    }
}
