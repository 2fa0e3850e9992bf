//! One simulated node: a real `RaftNode` over real storage in a temporary directory,
//! its WAL on a `SimFs` (a disk that models power loss exactly), its network a
//! [`SimLink`](super::net). Crashing it stops everything it runs, waits until nothing
//! holds its storage any more (no second instance ever opens the same directory while
//! the first still writes), then cuts power to its WAL disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_raft::{NodeId, RaftConfig, RaftNode, Recovered, ReplicationLimits, Seams};
use quiver_storage::compaction::CompactionSettings;
use quiver_storage::{Storage, StorageConfig};
use quiver_wal::testing::{PowerLoss, SimFs};
use quiver_wal::{SyncMode, WalConfig};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::net::SimNet;

/// Longest a crashed node's tasks may take to let go of its storage.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(30);

/// How a node goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// The process dies; the OS keeps everything written (synced or not).
    Process,
    /// The power goes: only what fsyncs covered survives (plus a torn part of the rest).
    Power,
    /// The machine is replaced: the node comes back with nothing.
    Wipe,
    /// The node's disks are put back as they were at an earlier stop (an operator
    /// restores last week's disk image) and `quiver restore` is run, as
    /// docs/operations.md says: its log, vote, snapshots and files are old. Without a
    /// copy yet, a process crash.
    OldCopy,
}

/// The node's disks as they were when it was once down: taken at its first process
/// crash after a start from scratch or the last restore, so it grows old.
struct DiskCopy {
    taken: Instant,
    wal_disk: SimFs,
    files: tempfile::TempDir,
    durable: Vec<(PathBuf, u64)>,
}

struct Running {
    node: RaftNode,
    storage: Arc<Storage>,
    tasks: Vec<JoinHandle<()>>,
}

pub struct SimNode {
    pub id: NodeId,
    pub addr: String,
    dir: PathBuf,
    peers: Vec<(NodeId, String)>,
    disk: SimFs,
    seed: u64,
    running: Option<Running>,
    old_copy: Option<DiskCopy>,
    /// `http.write_timeout_ms` of the node (scenarios that need a write to outlive an
    /// election raise it).
    pub write_timeout_ms: u64,
}

impl SimNode {
    pub fn new(root: &Path, id: NodeId, peers: Vec<(NodeId, String)>, seed: u64) -> Self {
        // Power losses take away every file not made durable (see below).
        quiver_storage::durable::testing::record_durable_writes();
        SimNode {
            id,
            addr: format!("sim-{id}"),
            dir: root.join(format!("n{id}")),
            peers,
            disk: SimFs::new(seed ^ id),
            seed,
            running: None,
            old_copy: None,
            write_timeout_ms: 700,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn wal_dir(&self) -> PathBuf {
        self.dir.join("wal")
    }

    pub fn node(&self) -> Option<&RaftNode> {
        self.running.as_ref().map(|r| &r.node)
    }

    pub fn storage(&self) -> Option<&Arc<Storage>> {
        self.running.as_ref().map(|r| &r.storage)
    }

    pub fn is_up(&self) -> bool {
        self.running.is_some()
    }

    /// Starts the node on what its directories and WAL disk hold.
    pub async fn start(&mut self, net: &SimNet) {
        assert!(
            self.running.is_none(),
            "node {} is already running",
            self.id
        );
        // The vote and purge point live beside the WAL on the real disk.
        std::fs::create_dir_all(self.wal_dir()).expect("create the WAL directory");
        let recovered =
            Recovered::load(&self.data_dir(), &self.wal_dir()).expect("read the newest snapshot");
        let seams = Seams {
            wal_fs: Some(Arc::new(self.disk.clone())),
            transport: Some(net.link_from(self.id)),
        };
        // Everything the node spawns logs in this span (with the seed's around it).
        let span = tracing::info_span!("node", id = self.id);
        let (storage, node, tasks) = async {
            let storage = Arc::new(
                Storage::open_with(self.storage_config(), recovered.file_set(true))
                    .await
                    .expect("open storage"),
            );
            let node = RaftNode::start_with(self.raft_config(), storage.clone(), recovered, seams)
                .await
                .expect("start raft");
            let tasks = node.spawn_background();
            (storage, node, tasks)
        }
        .instrument(span.clone())
        .await;
        net.attach(&self.addr, self.id, node.clone(), span);
        self.running = Some(Running {
            node,
            storage,
            tasks,
        });
    }

    /// Stops the node as `how` says; it stays down until [`SimNode::start`].
    pub async fn crash(&mut self, net: &SimNet, how: Crash) {
        let Some(running) = self.running.take() else {
            return;
        };
        // From here every WAL call fails, as in a process that is gone.
        self.disk.crash_after(0);
        net.detach(&self.addr);
        for task in &running.tasks {
            task.abort();
        }
        let _ = running.node.raft.shutdown().await;
        let Running {
            node,
            storage,
            tasks,
        } = running;
        drop(node);
        for task in tasks {
            let _ = task.await;
        }
        let released = Instant::now() + RELEASE_TIMEOUT;
        // A process that dies takes its threads with it; here they must finish first.
        while Arc::strong_count(&storage) > 1 || storage.io_in_flight() > 0 {
            assert!(
                Instant::now() < released,
                "node {}: its storage is still in use {RELEASE_TIMEOUT:?} after the crash",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(storage);
        match how {
            Crash::Process => {
                self.disk.restart();
                if self.old_copy.is_none() {
                    self.old_copy = Some(self.copy_disks());
                }
            }
            Crash::OldCopy => {
                self.disk.restart();
                if let Some(copy) = self.old_copy.take() {
                    self.put_back(copy, released).await;
                    // What an operator runs after putting a copy back (operations.md).
                    let settings = quiver_raft::RestoreSettings {
                        node_id: self.id,
                        advertise_addr: self.addr.clone(),
                        clustered: true,
                        data_dir: self.data_dir(),
                        wal: self.raft_config().wal,
                    };
                    quiver_raft::restore(&settings, &self.storage_config())
                        .await
                        .expect("quiver restore after putting back a copy");
                }
            }
            Crash::Power => {
                self.disk.power_loss(PowerLoss::Torn);
                lose_what_was_not_made_durable(&self.dir);
            }
            Crash::Wipe => {
                quiver_storage::durable::testing::forget_under(&self.dir);
                self.disk = SimFs::new(self.seed ^ self.id ^ 0xdead);
                // A thread outside the counted I/O (sled's flusher) may still create a
                // file while the tree is removed ("directory not empty"); a dead
                // process's threads would be gone, so try again until they are.
                while let Err(e) = std::fs::remove_dir_all(&self.dir) {
                    assert!(
                        Instant::now() < released,
                        "node {}: cannot wipe its directory: {e}",
                        self.id
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }

    /// How long ago the copy an [`Crash::OldCopy`] would put back was taken.
    pub fn old_copy_age(&self) -> Option<Duration> {
        self.old_copy.as_ref().map(|c| c.taken.elapsed())
    }

    /// A copy of the stopped node's disks (see [`DiskCopy`]).
    fn copy_disks(&self) -> DiskCopy {
        let files = tempfile::tempdir().expect("a directory for the copy");
        copy_tree(&self.dir, files.path());
        DiskCopy {
            taken: Instant::now(),
            wal_disk: self.disk.fork(),
            files,
            durable: quiver_storage::durable::testing::records_under(&self.dir)
                .into_iter()
                .map(|(p, len)| {
                    (
                        p.strip_prefix(&self.dir)
                            .map(Path::to_path_buf)
                            .unwrap_or(p),
                        len,
                    )
                })
                .collect(),
        }
    }

    /// Replaces the stopped node's disks by `copy`.
    async fn put_back(&mut self, copy: DiskCopy, released: Instant) {
        quiver_storage::durable::testing::forget_under(&self.dir);
        while let Err(e) = std::fs::remove_dir_all(&self.dir) {
            assert!(
                Instant::now() < released,
                "node {}: cannot replace its directory: {e}",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        copy_tree(copy.files.path(), &self.dir);
        let durable: Vec<(PathBuf, u64)> = copy
            .durable
            .iter()
            .map(|(relative, len)| (self.dir.join(relative), *len))
            .collect();
        quiver_storage::durable::testing::restore_records(&durable);
        self.disk = copy.wal_disk.fork();
    }

    /// The next WAL fdatasync fails (a disk error): the log is poisoned and Raft stops.
    pub fn fail_next_fsync(&self) {
        self.disk.fail_next(
            quiver_wal::testing::FsCall::SyncData,
            std::io::Error::other("simulated EIO on fdatasync"),
        );
    }

    fn storage_config(&self) -> StorageConfig {
        StorageConfig {
            dir: self.data_dir(),
            flush_rows_max: 400,
            flush_age_ms: 150,
            compaction: CompactionSettings {
                hour_files_min: 3,
                closed_after_ms: 500,
                input_grace_ms: 300,
                ..CompactionSettings::default()
            },
            ..StorageConfig::default()
        }
    }

    fn raft_config(&self) -> RaftConfig {
        RaftConfig {
            node_id: self.id,
            advertise_addr: self.addr.clone(),
            data_dir: self.data_dir(),
            wal: WalConfig {
                dir: self.wal_dir(),
                sync: SyncMode::Fsync,
                segment_bytes_max: 256 << 10,
                ..WalConfig::default()
            },
            heartbeat_interval_ms: 20,
            election_timeout_ms_min: 100,
            election_timeout_ms_max: 200,
            snapshot_interval_ms_min: 150,
            flush_check_interval_ms: 50,
            compaction_check_interval_ms: 200,
            peers: self.peers.clone(),
            secret: "sim".into(),
            leader_wait_ms: 100,
            write_timeout_ms: self.write_timeout_ms,
            replication: ReplicationLimits {
                bytes_max: 64 << 10,
                timeout_ms: 2_000,
            },
            ..RaftConfig::default()
        }
    }
}

/// What a power loss does to the node's real files (its WAL segments are on the
/// simulated disk, which loses its own unsynced writes): every file that no durable
/// write (temporary file, fsync, rename, directory fsync) left as it is now is gone,
/// as if its data or its directory entry never reached the disk; sled's catalog, which
/// the node must be able to rebuild, is gone whole; the commit hint, written without
/// fsync by design, is gone. Before this, Parquet files, snapshots, the vote and the
/// catalog survived every power loss intact, so a missing fsync there passed every seed.
/// Quarantined files and the caches are left: moving a file aside or not both leave it.
fn lose_what_was_not_made_durable(dir: &Path) {
    fn walk(dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                match name.to_str() {
                    Some("catalog") => {
                        let _ = std::fs::remove_dir_all(&path);
                    }
                    Some("quarantine" | "object-cache" | "incoming") => {}
                    _ => walk(&path),
                }
            } else if name == "raft-committed"
                || !quiver_storage::durable::testing::is_durable(&path)
            {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    walk(dir);
}

/// Copies the tree `from` into `to` (created), files and directories only.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    for entry in entries.flatten() {
        let target = to.join(entry.file_name());
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => copy_tree(&entry.path(), &target),
            Ok(kind) if kind.is_file() => {
                std::fs::copy(entry.path(), &target).expect("copy a file");
            }
            _ => {}
        }
    }
}
