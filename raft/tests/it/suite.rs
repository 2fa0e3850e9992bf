//! `openraft::testing::Suite` over the real log store (quiver-wal in fsync mode) and the
//! real state machine (quiver-storage in a temporary directory).

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use quiver_raft::{LogStore, StateMachine, StorageError, TypeConfig};
use quiver_storage::{Storage, StorageConfig};
use quiver_wal::{SyncMode, Wal, WalConfig};
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = TempDir::new().expect("temp dir");
        let wal_dir = dir.path().join("wal");
        let wal = Wal::open(WalConfig {
            dir: wal_dir.clone(),
            sync: SyncMode::Fsync,
            ..WalConfig::default()
        })
        .expect("open wal");
        let log = LogStore::open(wal, &wal_dir).await?;
        let storage = Storage::open(StorageConfig {
            dir: dir.path().join("data"),
            ..StorageConfig::default()
        })
        .await
        .expect("open storage");
        let sm = StateMachine::open(
            Arc::new(storage),
            &dir.path().join("data"),
            1,
            quiver_raft::PeerClient::new("", &quiver_raft::PeerTls::default())
                .expect("a plain HTTP client"),
        )
        .await?;
        Ok((dir, log, sm))
    }
}

#[test]
#[allow(clippy::result_large_err)] // openraft's error type, as the suite returns it
fn log_store_and_state_machine_pass_openraft_suite() -> Result<(), StorageError> {
    Suite::test_all(Builder)
}
