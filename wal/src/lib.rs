//! quiver-wal: Quiver's write-ahead log.
//!
//! A log of byte records keyed by contiguous `u64` indexes, kept in segment files under
//! one directory (`wal.dir`). What it guarantees:
//!
//! - a record is readable (`read`, `read_range`) as soon as [`Wal::append`] returns;
//! - an append's `on_durable` callback runs only once its records are on disk: after
//!   `fdatasync` in [`SyncMode::Fsync`] (many concurrent appends share one write and one
//!   fsync: group commit), after `write(2)` in [`SyncMode::Batch`], after `write(2)` and
//!   never synced in [`SyncMode::None`];
//! - appends, truncations and purges reach the disk in the order they were issued;
//! - every record carries a CRC32C that is checked on recovery and again on every read.
//!   On open, a torn tail (the expected artefact of a crash mid-write) is cut off and
//!   reported; damage anywhere else is reported as [`Error::Corrupt`] and never skipped;
//! - after an I/O error the log is poisoned: it fails every later operation rather than
//!   retry an fsync whose failure may already have dropped dirty pages;
//! - a crash or power loss at any point of an append, rotation, truncation, purge or
//!   recovery leaves a log that opens: new directories, files, renames and deletions are
//!   made durable by fsyncing their directory (the parent too, for a directory `open`
//!   creates), and recovery first deletes segments the purge marker wholly covers, so an
//!   interrupted purge never reads as a gap.
//!
//! Every file and directory call goes through [`WalFs`] ([`OsFs`] unless
//! [`Wal::open_with_fs`] is given another). With the `testing` feature, `testing::SimFs`
//! is a simulated disk that models power loss exactly and cuts any call; the crate's own
//! tests use it to check the guarantees above at every mutating call.
//!
//! What it is not: replication. The WAL knows bytes and indexes, nothing of Raft terms,
//! votes or rows; quiver-raft builds the replicated log on top of it. The on-disk format
//! is described in [`mod@format`].

#![deny(missing_docs)]

mod config;
mod error;
pub mod format;
mod fs;
mod marker;
mod reader;
mod recovery;
mod segment;
mod state;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod wal;
mod writer;

pub use crate::config::{SyncMode, WalConfig};
pub use crate::error::{Error, Result};
pub use crate::fs::{OsFs, WalFile, WalFs};
pub use crate::recovery::{RecoveryReport, TornTail};
pub use crate::stats::WalStats;
pub use crate::wal::{DurableCallback, Wal};
