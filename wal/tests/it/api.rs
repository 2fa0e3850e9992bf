//! Properties of the public API that the Raft log storage relies on.

use quiver_wal::{SyncMode, Wal};

use crate::common::{append_durable, callback, open, open_small, payload};

fn assert_send<T: Send>(value: T) -> T {
    value
}

fn assert_send_sync_clone<T: Send + Sync + Clone + 'static>() {}

#[tokio::test]
async fn handle_is_send_sync_and_futures_are_send() {
    assert_send_sync_clone::<Wal>();
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    let (cb, durable) = callback();
    assert_send(wal.append(vec![(1, payload(1, 4))], cb))
        .await
        .expect("append");
    durable.await.expect("callback").expect("durable");
    assert_send(wal.sync()).await.expect("sync");
    assert_send(wal.truncate_from(2)).await.expect("truncate");
    assert_send(wal.purge_to(0)).await.expect("purge");
    assert_eq!((wal.first_index(), wal.last_index()), (Some(1), Some(1)));
}

#[tokio::test]
async fn empty_append_is_acknowledged_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    let (first, first_durable) = callback();
    wal.append(vec![(1, payload(1, 4))], first)
        .await
        .expect("append");
    let (empty, empty_durable) = callback();
    wal.append(Vec::new(), empty).await.expect("empty append");
    empty_durable.await.expect("callback").expect("durable");
    // The empty append's callback ran, so the one before it had run already.
    assert!(matches!(first_durable.await, Ok(Ok(()))));
    assert_eq!(wal.stats().appends, 2);
}

#[tokio::test]
async fn an_erased_log_opens_empty_and_starts_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    {
        let wal = open_small(dir.path(), 4 << 10);
        let records: Vec<_> = (0..40).map(|i| (i, payload(i, 500))).collect();
        append_durable(&wal, records).await.unwrap();
        wal.purge_to(9).await.unwrap();
        assert!(wal.stats().segments > 2, "several segments to delete");
    }
    let deleted = Wal::erase_with_fs(dir.path(), &quiver_wal::OsFs).unwrap();
    assert!(deleted > 2, "segments and the purge marker: {deleted}");
    let wal = open_small(dir.path(), 4 << 10);
    assert_eq!((wal.first_index(), wal.next_index()), (None, 0));
    append_durable(&wal, vec![(0, payload(0, 10))])
        .await
        .unwrap();
    assert_eq!(wal.read(0).unwrap(), Some(payload(0, 10)));
    // Erasing a directory that does not exist is nothing to do.
    assert_eq!(
        Wal::erase_with_fs(&dir.path().join("absent"), &quiver_wal::OsFs).unwrap(),
        0
    );
}
