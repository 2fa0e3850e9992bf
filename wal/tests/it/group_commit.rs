//! Many concurrent appenders share writes and fsyncs; back-pressure bounds the queue.

use std::{sync::Arc, time::Duration};

use quiver_wal::{SyncMode, Wal, WalConfig};

use crate::common::{block_writer, callback, config, open, payload};

const TASKS: u64 = 32;
const APPENDS_PER_TASK: u64 = 50;
const LEN: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_share_fsyncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    // Indexes must be contiguous, so appenders take turns choosing one; the turn ends
    // when the append is queued, not when it is durable, so durability waits overlap.
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let wal = wal.clone();
        let turn = Arc::clone(&turn);
        tasks.push(tokio::spawn(async move {
            for _ in 0..APPENDS_PER_TASK {
                let (callback, durable) = callback();
                {
                    let _turn = turn.lock().await;
                    let index = wal.next_index().max(1);
                    wal.append(vec![(index, payload(index, LEN))], callback)
                        .await
                        .expect("append");
                }
                durable.await.expect("callback").expect("durable");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let total = TASKS * APPENDS_PER_TASK;
    let stats = wal.stats();
    assert_eq!(stats.appends, total);
    assert_eq!(stats.records, total);
    assert!(
        stats.fsyncs < stats.appends,
        "group commit should share fsyncs: {stats:?}"
    );
    drop(wal);

    let wal = open(dir.path(), SyncMode::Fsync);
    assert_eq!(
        (wal.first_index(), wal.last_index()),
        (Some(1), Some(total))
    );
    for index in 1..=total {
        assert_eq!(wal.read(index).expect("read"), Some(payload(index, LEN)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_waits_while_the_queue_is_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let queue_len_max = 4;
    let wal = Wal::open(WalConfig {
        queue_len_max,
        ..config(dir.path(), SyncMode::Fsync)
    })
    .expect("open");
    let release = block_writer(&wal, 1).await;
    let mut durable = Vec::new();
    for index in 2..2 + queue_len_max as u64 {
        let (callback, rx) = callback();
        wal.append(vec![(index, payload(index, 8))], callback)
            .await
            .expect("append while queue has room");
        durable.push(rx);
    }
    let index = 2 + queue_len_max as u64;
    let (callback, rx) = callback();
    let blocked = wal.append(vec![(index, payload(index, 8))], callback);
    tokio::pin!(blocked);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut blocked)
            .await
            .is_err(),
        "append must wait while the queue is full"
    );
    drop(release);
    blocked.await.expect("append after the writer drains");
    durable.push(rx);
    for rx in durable {
        rx.await.expect("callback").expect("durable");
    }
    assert_eq!(wal.last_index(), Some(index));
}
