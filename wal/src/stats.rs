//! Counters, the stats snapshot, and the exported metrics.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// Counter: fsync/fdatasync calls on segment files, the marker and the directory.
pub(crate) const METRIC_FSYNCS_TOTAL: &str = "quiver_wal_fsyncs_total";
/// Counter: bytes written to segment files (headers and frames).
pub(crate) const METRIC_BYTES_WRITTEN_TOTAL: &str = "quiver_wal_bytes_written_total";
/// Histogram: seconds each fsync/fdatasync took.
pub(crate) const METRIC_FSYNC_SECONDS: &str = "quiver_wal_fsync_seconds";

/// A point-in-time view of one WAL, for `/metrics` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Valid bytes in all segment files (headers and frames).
    pub bytes_on_disk: u64,
    /// Segment files.
    pub segments: usize,
    /// Records in the log (written or still queued).
    pub records: u64,
    /// Records queued but not yet written.
    pub records_pending: u64,
    /// `append` calls accepted since open.
    pub appends: u64,
    /// fsync/fdatasync calls since open.
    pub fsyncs: u64,
    /// Bytes written to segment files since open.
    pub bytes_written: u64,
}

/// Monotonic counters updated by handles and the writer.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes_written: AtomicU64,
}

impl Counters {
    /// Counts one accepted append.
    pub fn append(&self) {
        self.appends.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one fsync that took `elapsed`.
    pub fn fsync(&self, elapsed: Duration) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(METRIC_FSYNCS_TOTAL).increment(1);
        metrics::histogram!(METRIC_FSYNC_SECONDS).record(elapsed.as_secs_f64());
    }

    /// Counts `bytes` written.
    pub fn written(&self, bytes: u64) {
        self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
        metrics::counter!(METRIC_BYTES_WRITTEN_TOTAL).increment(bytes);
    }

    /// Reads the counters into the matching fields of a [`WalStats`].
    pub fn fill(&self, stats: &mut WalStats) {
        stats.appends = self.appends.load(Ordering::Relaxed);
        stats.fsyncs = self.fsyncs.load(Ordering::Relaxed);
        stats.bytes_written = self.bytes_written.load(Ordering::Relaxed);
    }
}
