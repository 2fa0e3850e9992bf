//! Helpers for tests on the simulated disk (`quiver_wal::testing`).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use quiver_wal::{
    testing::{PowerLoss, SimFs},
    Error, SyncMode, Wal, WalConfig, WalFs,
};
use tokio::sync::Mutex as TurnLock;

use crate::common::{callback, payload};

/// Where the WAL lives on the simulated disk (created by `Wal::open`).
pub const DIR: &str = "/data/wal";

/// A config on [`DIR`]: small segments so ordinary runs rotate, a short batch interval.
pub fn sim_config(sync: SyncMode, segment_bytes_max: u64) -> WalConfig {
    WalConfig {
        dir: PathBuf::from(DIR),
        sync,
        sync_interval_ms: 2,
        segment_bytes_max,
        queue_len_max: 64,
    }
}

/// Opens a WAL on `fs`.
pub fn open_on(fs: Arc<dyn WalFs>, config: &WalConfig) -> Result<Wal, Error> {
    Wal::open_with_fs(config.clone(), fs)
}

/// Opens a WAL on a [`SimFs`].
pub fn open_sim(fs: &SimFs, config: &WalConfig) -> Result<Wal, Error> {
    open_on(Arc::new(fs.clone()), config)
}

/// How a run ends before the log is reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reboot {
    /// The process dies; the OS keeps every write.
    Restart,
    /// The machine loses power.
    PowerLoss(PowerLoss),
}

impl Reboot {
    /// Every way a run can end.
    pub const ALL: [Reboot; 3] = [
        Reboot::Restart,
        Reboot::PowerLoss(PowerLoss::Strict),
        Reboot::PowerLoss(PowerLoss::Torn),
    ];

    /// Applies it to `fs`.
    pub fn apply(self, fs: &SimFs) {
        match self {
            Reboot::Restart => fs.restart(),
            Reboot::PowerLoss(mode) => fs.power_loss(mode),
        }
    }
}

/// splitmix64, for the tests' own seeded choices.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }
}

/// The payload every test on the simulated disk writes at `index`: 0 to 299 bytes,
/// a function of the index alone, so any surviving record can be checked.
pub fn record(index: u64) -> Bytes {
    let len = (index.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) % 300;
    payload(index, len as usize)
}

/// `tasks` concurrent appenders, each making up to `appends_per_task` appends of one or
/// two records (indexes taken in turn, as openraft does), each waiting for its append
/// to be durable before the next. An appender stops at its first error. Returns the
/// indexes whose append was acknowledged (`on_durable(Ok)`).
pub async fn append_concurrently(wal: &Wal, tasks: usize, appends_per_task: usize) -> Vec<u64> {
    let turn = Arc::new(TurnLock::new(()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (wal, turn, acked) = (wal.clone(), Arc::clone(&turn), Arc::clone(&acked));
        handles.push(tokio::spawn(async move {
            for _ in 0..appends_per_task {
                let (on_durable, durable) = callback();
                let indexes = {
                    let _turn = turn.lock().await;
                    let first = wal.next_index().max(1);
                    let indexes: Vec<u64> = (first..first + 1 + first % 2).collect();
                    let records = indexes.iter().map(|&i| (i, record(i))).collect();
                    if wal.append(records, on_durable).await.is_err() {
                        return;
                    }
                    indexes
                };
                match durable.await {
                    Ok(Ok(())) => acked.lock().expect("acked").extend(indexes),
                    Ok(Err(_)) | Err(_) => return,
                }
            }
        }));
    }
    for handle in handles {
        handle.await.expect("appender task");
    }
    let mut acked = acked.lock().expect("acked").clone();
    acked.sort_unstable();
    acked
}

/// What a reopened log holds, checked: indexes contiguous, each payload the one
/// [`record`] gives. Panics with `context` otherwise.
pub fn contents(wal: &Wal, context: &str) -> Vec<u64> {
    let records = wal.read_range(0..u64::MAX).expect("read_range");
    let indexes: Vec<u64> = records.iter().map(|(i, _)| *i).collect();
    for pair in indexes.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{context}: gap in {indexes:?}");
    }
    for (index, bytes) in &records {
        assert!(
            *bytes == record(*index),
            "{context}: record {index} differs"
        );
    }
    if let (Some(first), Some(last)) = (indexes.first(), indexes.last()) {
        assert_eq!(wal.first_index(), Some(*first), "{context}");
        assert_eq!(wal.last_index(), Some(*last), "{context}");
        assert_eq!(wal.next_index(), last + 1, "{context}");
    }
    indexes
}

/// The journal of `fs`, for failure messages.
pub fn journal(fs: &SimFs) -> String {
    fs.journal().join("\n")
}
