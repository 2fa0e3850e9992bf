//! The smaller sections of the configuration: the Postgres and Flight SQL doors, the
//! retention given to new databases, and compaction (kept apart from `config.rs`, which
//! holds the node's main sections and their checks).

use serde::{Deserialize, Serialize};

/// `[pg]`: the Postgres wire protocol door.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PgSection {
    /// Listen address (`127.0.0.1:5433`); none: no Postgres listener.
    pub addr: Option<String>,
    /// Postgres connections open at once; more are refused with an error.
    pub connections_max: usize,
    /// Postgres connections open at once from one client address; more are refused.
    pub connections_per_address_max: usize,
}

impl Default for PgSection {
    fn default() -> Self {
        PgSection {
            addr: None,
            connections_max: 256,
            connections_per_address_max: 64,
        }
    }
}

/// `[flight]`: the Arrow Flight SQL door.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlightSection {
    /// Listen address (`127.0.0.1:8082`); none: no Flight SQL listener.
    pub addr: Option<String>,
    /// Flight connections open at once; more are closed at once.
    pub connections_max: usize,
    /// Flight connections open at once from one client address; more are closed.
    pub connections_per_address_max: usize,
}

impl Default for FlightSection {
    fn default() -> Self {
        FlightSection {
            addr: None,
            connections_max: 256,
            connections_per_address_max: 64,
        }
    }
}

/// `[retention]`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSection {
    /// The retention a database gets when its first row is written (`"30d"`; none:
    /// rows live forever). Existing databases keep theirs; change one with
    /// `PUT /api/v1/retention/{db}`.
    pub default: Option<String>,
}

/// `[compaction]`: see `quiver_storage::compaction::CompactionSettings`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionSection {
    /// Whether the leader merges files at all.
    pub enabled: bool,
    /// How often the leader looks for files to merge.
    pub check_interval_ms: u64,
    /// An hour with this many files is merged while still open.
    pub hour_files_min: usize,
    /// An hour or day is closed this long after it ends; then all its files merge.
    pub closed_after_ms: u64,
    /// A closed day becomes one file if its files total at most this many bytes.
    pub day_file_bytes_max: u64,
    /// Most memory one merge may hold (estimated before it starts).
    pub memory_bytes_max: u64,
    /// How long replaced files stay for queries already reading them.
    pub input_grace_ms: u64,
}

impl Default for CompactionSection {
    fn default() -> Self {
        let d = quiver_storage::compaction::CompactionSettings::default();
        CompactionSection {
            enabled: d.enabled,
            check_interval_ms: quiver_raft::RaftConfig::default().compaction_check_interval_ms,
            hour_files_min: d.hour_files_min,
            closed_after_ms: d.closed_after_ms,
            day_file_bytes_max: d.day_file_bytes_max,
            memory_bytes_max: d.memory_bytes_max,
            input_grace_ms: d.input_grace_ms,
        }
    }
}
