//! After an I/O error the log fails everything rather than retry.

use quiver_wal::Error;

use crate::common::{append_all, append_durable, open_small, payload};

#[tokio::test]
async fn io_error_poisons_the_wal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal_dir = dir.path().join("wal");
    let wal = open_small(&wal_dir, 64);
    append_all(&wal, 1..=1, 100).await;
    // The next append must rotate into a new file, which cannot be created now.
    std::fs::remove_dir_all(&wal_dir).expect("remove dir");
    let err = append_durable(&wal, vec![(2, payload(2, 100))]).await;
    assert!(matches!(err, Err(Error::Io { .. })), "{err:?}");
    let err = append_durable(&wal, vec![(3, payload(3, 100))]).await;
    assert!(matches!(err, Err(Error::Poisoned(_))), "{err:?}");
    assert!(matches!(wal.read(1), Err(Error::Poisoned(_))));
    assert!(matches!(
        wal.truncate_from(1).await,
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(wal.purge_to(1).await, Err(Error::Poisoned(_))));
}
