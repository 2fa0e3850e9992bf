//! Settings: where the log lives and how hard it tries to be durable.

use std::{fmt, path::PathBuf, str::FromStr};

use crate::error::{Error, Result};

/// When an append counts as durable (the `wal.sync` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// `on_durable` runs after `fdatasync`. Survives power loss. The default.
    #[default]
    Fsync,
    /// `on_durable` runs after `write(2)`; the writer fdatasyncs at least every
    /// `sync_interval_ms` and on segment rotation. Survives a process crash, not power
    /// loss.
    Batch,
    /// `on_durable` runs after `write(2)` and nothing is ever fsynced. Survives a process
    /// crash while the OS stays up. For benchmarking the rest of the write path only.
    None,
}

impl SyncMode {
    /// The setting's spelling: `fsync`, `batch` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Fsync => "fsync",
            SyncMode::Batch => "batch",
            SyncMode::None => "none",
        }
    }

    /// Whether this mode ever calls `fsync`/`fdatasync` (on data or directories).
    pub(crate) fn syncs(self) -> bool {
        self != SyncMode::None
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SyncMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<SyncMode> {
        match s {
            "fsync" => Ok(SyncMode::Fsync),
            "batch" => Ok(SyncMode::Batch),
            "none" => Ok(SyncMode::None),
            other => Err(Error::Config(format!(
                "unknown wal.sync mode {other:?}; expected \"fsync\", \"batch\" or \"none\""
            ))),
        }
    }
}

/// Settings of one WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// Directory holding the segment files; created if missing. Give it its own volume
    /// if you can: fsync latency is the write path's floor.
    pub dir: PathBuf,
    /// Durability mode.
    pub sync: SyncMode,
    /// In [`SyncMode::Batch`], the longest time written data stays unsynced.
    pub sync_interval_ms: u64,
    /// A segment that has reached this size is closed and a new one started. A segment
    /// can exceed it by at most one record.
    pub segment_bytes_max: u64,
    /// Capacity of the operation queue in front of the writer thread; appends wait
    /// (back-pressure) while it is full.
    pub queue_len_max: usize,
}

impl Default for WalConfig {
    fn default() -> WalConfig {
        WalConfig {
            dir: PathBuf::from("wal"),
            sync: SyncMode::Fsync,
            sync_interval_ms: 100,
            segment_bytes_max: 64 << 20,
            queue_len_max: 4096,
        }
    }
}

/// Upper bound on `queue_len_max`: a queue this long already holds far more than one
/// group commit can take, so anything larger only hides overload.
const QUEUE_LEN_MAX_LIMIT: usize = 1 << 20;

impl WalConfig {
    /// Rejects settings that cannot work.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.queue_len_max == 0 || self.queue_len_max > QUEUE_LEN_MAX_LIMIT {
            return Err(Error::Config(format!(
                "queue_len_max must be in 1..={QUEUE_LEN_MAX_LIMIT}, got {}",
                self.queue_len_max
            )));
        }
        if self.segment_bytes_max < crate::format::SEGMENT_HEADER_BYTES as u64 + 1 {
            return Err(Error::Config(format!(
                "segment_bytes_max must exceed the {}-byte segment header, got {}",
                crate::format::SEGMENT_HEADER_BYTES,
                self.segment_bytes_max
            )));
        }
        if self.sync == SyncMode::Batch && self.sync_interval_ms == 0 {
            return Err(Error::Config(
                "sync_interval_ms must be positive in batch mode".to_string(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_mode_round_trips_through_its_spelling() {
        for mode in [SyncMode::Fsync, SyncMode::Batch, SyncMode::None] {
            assert_eq!(mode.to_string().parse::<SyncMode>().ok(), Some(mode));
        }
        assert!("FSYNC".parse::<SyncMode>().is_err());
        assert!("".parse::<SyncMode>().is_err());
    }

    #[test]
    fn default_config_is_valid_and_zero_queue_is_not() {
        assert!(WalConfig::default().validate().is_ok());
        let config = WalConfig {
            queue_len_max: 0,
            ..WalConfig::default()
        };
        assert!(matches!(config.validate(), Err(Error::Config(_))));
    }
}
