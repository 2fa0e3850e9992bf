//! Concurrent writers that remember exactly which batches were acknowledged, and the
//! check that the node holds every acknowledged batch exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use crate::common::{batch_payload, Node, TOKEN};

/// Rows per batch the writers send.
pub const ROWS_PER_BATCH: usize = 500;

/// What the writers saw.
#[derive(Default, Debug)]
pub struct Outcome {
    /// Batches answered 204.
    pub acked: BTreeSet<i64>,
    /// Batches whose answer never came (in flight at a kill), or was 504 or another
    /// error: may or may not be stored, but never partially.
    pub unknown: BTreeSet<i64>,
    /// Batches answered 503 or 429: the node promises nothing of them was written, and
    /// [`verify_exactly_once`] holds it to that.
    pub refused: BTreeSet<i64>,
}

impl Outcome {
    /// Merges another run's outcome.
    pub fn merge(&mut self, other: Outcome) {
        self.acked.extend(other.acked);
        self.unknown.extend(other.unknown);
        self.refused.extend(other.refused);
    }

    /// Records a failed answer: 503 and 429 as refused (nothing written), anything else
    /// (no answer, 504, 500) as unknown.
    fn failed(&mut self, id: i64, status: Option<u16>) {
        match status {
            Some(503 | 429) => self.refused.insert(id),
            _ => self.unknown.insert(id),
        };
    }
}

/// Writers posting batches until stopped or until the node goes away.
pub struct Writers {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Outcome>>,
    /// Batches acknowledged so far, across writers.
    pub acked_count: Arc<AtomicI64>,
}

impl Writers {
    /// Starts `n` writers against `node`, drawing batch ids from `next_batch`.
    pub fn start(
        node: &Node,
        database: &str,
        measurement: &str,
        n: usize,
        next_batch: Arc<AtomicI64>,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked_count = Arc::new(AtomicI64::new(0));
        let mut handles = Vec::new();
        for _ in 0..n {
            let (stop, next, acked_count) = (stop.clone(), next_batch.clone(), acked_count.clone());
            let url = format!("{}/api/v1/write/msgpack", node.url);
            let (db, m) = (database.to_string(), measurement.to_string());
            let client = reqwest::Client::new();
            handles.push(tokio::spawn(async move {
                let mut out = Outcome::default();
                while !stop.load(Ordering::Relaxed) {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    let base = 1_700_000_000_000_000_000 + id * ROWS_PER_BATCH as i64 * 1_000;
                    let body = batch_payload(&m, id, ROWS_PER_BATCH, base, 7);
                    let response = client
                        .post(&url)
                        .bearer_auth(TOKEN)
                        .header("x-arc-database", &db)
                        .body(body)
                        .send()
                        .await;
                    match response {
                        Ok(r) if r.status().as_u16() == 204 => {
                            out.acked.insert(id);
                            acked_count.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) if r.status().is_client_error() => {
                            panic!(
                                "batch {id} refused: {} {}",
                                r.status(),
                                r.text().await.unwrap_or_default()
                            )
                        }
                        Ok(r) => {
                            // 5xx: the node is going away; stop this writer.
                            out.failed(id, Some(r.status().as_u16()));
                            break;
                        }
                        Err(_) => {
                            out.failed(id, None);
                            break;
                        }
                    }
                }
                out
            }));
        }
        Writers {
            stop,
            handles,
            acked_count,
        }
    }

    /// Starts `n` writers against a cluster: each posts to one node and, when a request
    /// fails (no answer, 5xx), records the batch as unknown and moves on to the next
    /// node, the way a client with a list of endpoints reconnects by itself.
    pub fn start_cluster(
        urls: Vec<String>,
        database: &str,
        measurement: &str,
        n: usize,
        next_batch: Arc<AtomicI64>,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked_count = Arc::new(AtomicI64::new(0));
        let mut handles = Vec::new();
        for w in 0..n {
            let (stop, next, acked_count) = (stop.clone(), next_batch.clone(), acked_count.clone());
            let urls = urls.clone();
            let (db, m) = (database.to_string(), measurement.to_string());
            let client = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .expect("client");
            handles.push(tokio::spawn(async move {
                let mut out = Outcome::default();
                let mut at = w % urls.len();
                while !stop.load(Ordering::Relaxed) {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    let base = 1_700_000_000_000_000_000 + id * ROWS_PER_BATCH as i64 * 1_000;
                    let body = batch_payload(&m, id, ROWS_PER_BATCH, base, 7);
                    let response = client
                        .post(format!("{}/api/v1/write/msgpack", urls[at]))
                        .bearer_auth(TOKEN)
                        .header("x-arc-database", &db)
                        .body(body)
                        .send()
                        .await;
                    match response {
                        Ok(r) if r.status().as_u16() == 204 => {
                            out.acked.insert(id);
                            acked_count.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) if r.status().is_client_error() => {
                            panic!(
                                "batch {id} refused: {} {}",
                                r.status(),
                                r.text().await.unwrap_or_default()
                            )
                        }
                        other => {
                            out.failed(id, other.ok().map(|r| r.status().as_u16()));
                            at = (at + 1) % urls.len();
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    }
                }
                out
            }));
        }
        Writers {
            stop,
            handles,
            acked_count,
        }
    }

    /// Stops the writers (after their current request) and collects what they saw.
    pub async fn finish(self) -> Outcome {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Outcome::default();
        for h in self.handles {
            out.merge(h.await.expect("writer task"));
        }
        out
    }
}

/// Asserts every acknowledged batch is stored exactly once and whole, and that nothing
/// else is stored except whole batches whose answer was lost.
pub async fn verify_exactly_once(
    node: &Node,
    database: &str,
    measurement: &str,
    outcome: &Outcome,
) {
    let rows = node
        .rows(
            database,
            &format!(
                "SELECT batch, count(*), count(DISTINCT seq) FROM {measurement} GROUP BY batch"
            ),
        )
        .await;
    let mut stored: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for row in rows {
        let batch = row[0].as_i64().expect("batch id");
        stored.insert(
            batch,
            (
                row[1].as_u64().expect("count"),
                row[2].as_u64().expect("distinct"),
            ),
        );
    }
    for id in &outcome.acked {
        match stored.get(id) {
            None => panic!(
                "acknowledged batch {id} is missing ({} acked, {} stored)\nlog:\n{}",
                outcome.acked.len(),
                stored.len(),
                node.log_tail()
            ),
            Some(&(count, distinct)) => {
                assert_eq!(
                    count, ROWS_PER_BATCH as u64,
                    "acknowledged batch {id} has {count} rows (duplicates or loss)"
                );
                assert_eq!(
                    distinct, ROWS_PER_BATCH as u64,
                    "acknowledged batch {id} has duplicate rows"
                );
            }
        }
    }
    for (id, (count, _)) in &stored {
        assert!(
            !outcome.refused.contains(id),
            "batch {id} was refused with 503/429 (\"nothing was written\"), yet it is stored"
        );
        assert!(
            outcome.acked.contains(id) || outcome.unknown.contains(id),
            "batch {id} was never sent, yet stored"
        );
        assert_eq!(
            *count, ROWS_PER_BATCH as u64,
            "batch {id} stored partially or twice: {count} rows"
        );
    }
}
