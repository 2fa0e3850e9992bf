//! The handle: opening the log, and turning calls into queued operations.
//!
//! Every mutating call updates the logical state and queues its op while holding the
//! state lock, so queue order is the order in which calls changed the log.

use std::{
    ops::Range,
    path::Path,
    sync::Arc,
    thread::{self, JoinHandle},
};

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};

use crate::{
    config::{SyncMode, WalConfig},
    error::{Error, Result},
    format::{self, PAYLOAD_BYTES_MAX},
    fs::{create_dir_durably, OsFs, WalFs},
    marker, reader,
    recovery::{self, RecoveryReport},
    state::{Shared, State},
    stats::{Counters, WalStats},
    writer::{AppendOp, Control, Op, Writer, WriterRuntime},
};

/// Called exactly once with the outcome of an accepted append: `Ok` once its records
/// are durable per the [`SyncMode`], or the error that stopped them. Runs on the writer
/// thread, so it should be short (send on a channel, complete a future).
pub type DurableCallback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

/// A handle to an open write-ahead log. Cheap to clone; all clones share one log.
///
/// Dropping the last handle lets the writer thread finish every queued operation (and,
/// in batch mode, fsync) and waits for it, so the directory can be reopened at once.
#[derive(Clone)]
pub struct Wal {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    // Field order matters: `queue` drops before `_writer`, which closes the queue so the
    // writer thread can finish before `WriterThread::drop` joins it.
    queue: mpsc::Sender<Op>,
    report: RecoveryReport,
    _writer: WriterThread,
}

/// Joins the writer thread on drop.
struct WriterThread(Option<JoinHandle<()>>);

impl Drop for WriterThread {
    fn drop(&mut self) {
        let Some(handle) = self.0.take() else { return };
        // A callback that drops the last handle runs on the writer thread itself.
        if handle.thread().id() == thread::current().id() {
            return;
        }
        if handle.join().is_err() {
            tracing::error!("WAL writer thread panicked");
        }
    }
}

impl Wal {
    /// Opens (or creates) the log in `config.dir`, recovering what is on disk: every
    /// record's CRC is verified, a torn tail is cut off (see [`Wal::recovery_report`]),
    /// corruption fails with [`Error::Corrupt`]. Starts the writer thread.
    pub fn open(config: WalConfig) -> Result<Wal> {
        Wal::open_with_fs(config, Arc::new(OsFs))
    }

    /// [`Wal::open`] on a given file system: every file and directory call of this log
    /// goes through `fs`. Tests pass `testing::SimFs` (feature `testing`) to
    /// cut power at any call; everyone else wants [`Wal::open`].
    pub fn open_with_fs(config: WalConfig, fs: Arc<dyn WalFs>) -> Result<Wal> {
        config.validate()?;
        create_dir_durably(&*fs, &config.dir, config.sync.syncs())?;
        if config.sync == SyncMode::None {
            tracing::warn!(
                dir = %config.dir.display(),
                "WAL sync mode is `none`: nothing is ever fsynced and an OS crash or power \
                 loss loses acknowledged writes. Use it only to benchmark the rest of the path."
            );
        }
        let recovered = recovery::recover(&*fs, &config.dir, config.sync.syncs())?;
        let (queue, queue_rx) = mpsc::channel(config.queue_len_max);
        let shared = Arc::new(Shared {
            state: RwLock::new(State::recovered(recovered.segments, recovered.purged_index)),
            config,
            fs,
            counters: Counters::default(),
        });
        let mut writer = Writer::new(Arc::clone(&shared));
        if let Some(purged_index) = recovered.purged_index {
            // Finish a purge a crash interrupted (a no-op when there is none).
            writer.purge(purged_index, false)?;
        }
        let runtime = WriterRuntime::new().map_err(|e| Error::io(&shared.config.dir, e))?;
        let handle = thread::Builder::new()
            .name("quiver-wal-writer".to_string())
            .spawn(move || writer.run(queue_rx, runtime))
            .map_err(|e| Error::io(&shared.config.dir, e))?;
        let state = shared.state.read();
        tracing::info!(
            dir = %shared.config.dir.display(),
            sync = %shared.config.sync,
            segments = recovered.report.segments,
            records = recovered.report.records,
            first_index = ?state.first_index(),
            next_index = state.next_index,
            "WAL opened"
        );
        drop(state);
        Ok(Wal {
            inner: Arc::new(Inner {
                shared,
                queue,
                report: recovered.report,
                _writer: WriterThread(Some(handle)),
            }),
        })
    }

    /// Deletes every file of the log in `dir` (segments from the newest down, then the
    /// purge marker) and fsyncs the directory: the next [`Wal::open`] finds an empty log
    /// that starts at index 0. For a replica whose log can no longer be used (it was
    /// purged past anything its snapshots hold) and that will be sent everything again.
    /// A crash part-way leaves a shorter log of contiguous older records; erasing again
    /// finishes. Returns how many files were deleted.
    pub fn erase_with_fs(dir: &Path, fs: &dyn WalFs) -> Result<usize> {
        if !fs.exists(dir).map_err(|e| Error::io(dir, e))? {
            return Ok(0);
        }
        let names = fs.list_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut segments: Vec<(u64, std::ffi::OsString)> = names
            .iter()
            .filter_map(|n| {
                let first = format::parse_segment_file_name(n.to_str()?)?;
                Some((first, n.clone()))
            })
            .collect();
        segments.sort_by_key(|s| std::cmp::Reverse(s.0));
        let mut deleted = 0;
        let mut remove = |name: &std::ffi::OsStr| -> Result<()> {
            let path = dir.join(name);
            match fs.remove_file(&path) {
                Ok(()) => {
                    deleted += 1;
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(&path, e)),
            }
        };
        for (_, name) in &segments {
            remove(name)?;
        }
        for name in [marker::MARKER_FILE, marker::MARKER_TMP_FILE] {
            if names.iter().any(|n| n == name) {
                remove(std::ffi::OsStr::new(name))?;
            }
        }
        fs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        Ok(deleted)
    }

    /// What recovery found and repaired when this log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// The settings the log was opened with.
    pub fn config(&self) -> &WalConfig {
        &self.inner.shared.config
    }

    /// Index of the first record, or `None` if the log holds none.
    pub fn first_index(&self) -> Option<u64> {
        self.inner.shared.state.read().first_index()
    }

    /// Index of the last record, or `None` if the log holds none.
    pub fn last_index(&self) -> Option<u64> {
        let state = self.inner.shared.state.read();
        state.first_index().map(|_| state.next_index - 1)
    }

    /// The index the next append must start at. A log that never held a record and was
    /// never purged accepts any first index; it returns 0 then.
    pub fn next_index(&self) -> u64 {
        let state = self.inner.shared.state.read();
        state.start_index.map_or(0, |_| state.next_index)
    }

    /// Appends consecutive records starting at [`Wal::next_index`].
    ///
    /// Returns once the records are queued for the writer and visible to [`Wal::read`]
    /// and [`Wal::read_range`]; waits (back-pressure) while the queue holds
    /// `queue_len_max` operations. `on_durable` runs later on the writer thread, exactly
    /// once, when the records are durable per the sync mode or failed. If `append`
    /// itself returns an error, nothing was queued and `on_durable` is dropped uncalled.
    pub async fn append(
        &self,
        records: Vec<(u64, Bytes)>,
        on_durable: DurableCallback,
    ) -> Result<()> {
        for (index, payload) in &records {
            if payload.len() > PAYLOAD_BYTES_MAX as usize {
                return Err(Error::RecordTooLarge {
                    index: *index,
                    bytes: payload.len(),
                    bytes_max: PAYLOAD_BYTES_MAX,
                });
            }
        }
        let permit = self
            .inner
            .queue
            .reserve()
            .await
            .map_err(|_| Error::Closed)?;
        let mut state = self.inner.shared.state.write();
        state.check_poisoned()?;
        let seq = state.accept_append(&records)?;
        permit.send(Op::Append(AppendOp {
            seq,
            records,
            on_durable,
        }));
        drop(state);
        self.inner.shared.counters.append();
        Ok(())
    }

    /// Reads record `index`: `None` if the log does not hold it (never written, purged or
    /// truncated). A checksum mismatch on the way back from disk is [`Error::Corrupt`].
    pub fn read(&self, index: u64) -> Result<Option<Bytes>> {
        reader::read(&self.inner.shared, index)
    }

    /// Reads the records of `range` that the log holds, in index order. Reads each
    /// segment's part of the range with one `pread`; the caller bounds the range.
    pub fn read_range(&self, range: Range<u64>) -> Result<Vec<(u64, Bytes)>> {
        reader::read_range(&self.inner.shared, range)
    }

    /// Removes every record with index `>= index`; durable when it returns (not fsynced
    /// in `none` mode). Afterwards the next append must use `index`.
    ///
    /// Out-of-range indexes: at or after [`Wal::next_index`] (or on a log that never held
    /// anything) it is a no-op. At or below the first index it removes every record but
    /// keeps the log's start: the next append must use the old first index, because
    /// records below it were purged and cannot come back.
    ///
    /// Once queued the truncation happens even if this future is dropped before it
    /// completes; the same holds for [`Wal::purge_to`] and [`Wal::sync`].
    pub async fn truncate_from(&self, index: u64) -> Result<()> {
        self.control(|state| {
            let next_index = state.accept_truncate(index)?;
            Some(Control::Truncate { next_index })
        })
        .await
    }

    /// Declares records `<= index` no longer needed. They stop being readable at once;
    /// segment files holding only such records are deleted, and the purge point is
    /// persisted so the log starts at `index + 1` after a restart. Purging at or past the
    /// last record empties the log, and the next append must use `index + 1`. Purging
    /// below the first index is a no-op.
    pub async fn purge_to(&self, index: u64) -> Result<()> {
        self.control(|state| {
            state.accept_purge(index).then_some(Control::Purge {
                purged_index: index,
            })
        })
        .await
    }

    /// Waits until everything queued before it is written and, except in `none` mode,
    /// fdatasynced. Useful in batch mode before a planned shutdown.
    pub async fn sync(&self) -> Result<()> {
        self.control(|_| Some(Control::Sync)).await
    }

    /// Applies `change` to the logical state and queues the control op it returns (none:
    /// nothing to do), then waits for the writer to finish it.
    async fn control(&self, change: impl FnOnce(&mut State) -> Option<Control>) -> Result<()> {
        let permit = self
            .inner
            .queue
            .reserve()
            .await
            .map_err(|_| Error::Closed)?;
        let done = {
            let mut state = self.inner.shared.state.write();
            state.check_poisoned()?;
            let Some(control) = change(&mut state) else {
                return Ok(());
            };
            let (done, done_rx) = oneshot::channel();
            permit.send(Op::Control { control, done });
            done_rx
        };
        done.await.map_err(|_| Error::Closed)?
    }

    /// Current sizes and counters.
    pub fn stats(&self) -> WalStats {
        let mut stats = {
            let state = self.inner.shared.state.read();
            WalStats {
                bytes_on_disk: state.segments.iter().map(|s| s.len_bytes).sum(),
                segments: state.segments.len(),
                records: state
                    .first_index()
                    .map_or(0, |first| state.next_index - first),
                records_pending: state.pending.len() as u64,
                ..WalStats::default()
            }
        };
        self.inner.shared.counters.fill(&mut stats);
        stats
    }
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.inner.shared.config.dir)
            .field("sync", &self.inner.shared.config.sync)
            .field("first_index", &self.first_index())
            .field("next_index", &self.next_index())
            .finish()
    }
}
