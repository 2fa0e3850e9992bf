//! Continuous queries: a rollup the leader computes for each completed time window and
//! writes through the log into another measurement, exactly once per window.

use serde::{Deserialize, Serialize};

use crate::ids::{LogIndex, TimestampNs};

/// A continuous query as every replica holds it, with its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuousQuery {
    /// Its name, unique within the database.
    pub name: String,
    /// The database it reads and writes.
    pub database: String,
    /// The SQL, run for each window over rows in `[start, start + every)`.
    pub query: String,
    /// The measurement its rows are written to.
    pub into: String,
    /// Window width in nanoseconds; windows are aligned to multiples of it.
    pub every_ns: i64,
    /// How long after a window ends it is computed (late rows arrive meanwhile).
    pub lag_ns: i64,
    /// Start of the next window to compute: every window before it is done.
    pub next_window: TimestampNs,
    /// End of the last window written, if any.
    #[serde(default)]
    pub last_window_end: Option<TimestampNs>,
    /// Windows written so far.
    #[serde(default)]
    pub windows_written: u64,
    /// Index of the entry that created it.
    #[serde(default)]
    pub created_index: LogIndex,
}

impl ContinuousQuery {
    /// The key it is stored under (`database/name`).
    pub fn key(&self) -> String {
        cq_key(&self.database, &self.name)
    }

    /// The window starting at `start`.
    pub fn window(&self, start: TimestampNs) -> (TimestampNs, TimestampNs) {
        (start, TimestampNs(start.0.saturating_add(self.every_ns)))
    }

    /// The start of the window `t` falls in.
    pub fn window_start_of(&self, t: TimestampNs) -> TimestampNs {
        TimestampNs(t.0.div_euclid(self.every_ns).saturating_mul(self.every_ns))
    }

    /// Whether the window starting at `start` is complete (ended `lag` ago) at `now`.
    pub fn is_due(&self, start: TimestampNs, now: TimestampNs) -> bool {
        start
            .0
            .saturating_add(self.every_ns)
            .saturating_add(self.lag_ns)
            <= now.0
    }
}

/// The key a continuous query is stored under.
pub fn cq_key(database: &str, name: &str) -> String {
    format!("{database}/{name}")
}

/// What applying one window's result did; identical on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CqWindowOutcome {
    /// The window's rows are written and the query's progress moved past it.
    Written {
        /// Rows written.
        rows: u64,
    },
    /// The window was already written (a leader that ran it again after a failover):
    /// nothing changed.
    AlreadyDone,
    /// The continuous query no longer exists.
    NoSuchQuery,
    /// The rows were refused (a schema conflict with the target measurement).
    Rejected(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_their_width_and_wait_for_the_lag() {
        let cq = ContinuousQuery {
            name: "r".into(),
            database: "db".into(),
            query: String::new(),
            into: "cpu_1h".into(),
            every_ns: 10,
            lag_ns: 3,
            next_window: TimestampNs(0),
            last_window_end: None,
            windows_written: 0,
            created_index: LogIndex(0),
        };
        assert_eq!(cq.window_start_of(TimestampNs(27)), TimestampNs(20));
        assert_eq!(cq.window_start_of(TimestampNs(-1)), TimestampNs(-10));
        assert_eq!(
            cq.window(TimestampNs(20)),
            (TimestampNs(20), TimestampNs(30))
        );
        assert!(!cq.is_due(TimestampNs(20), TimestampNs(32)));
        assert!(cq.is_due(TimestampNs(20), TimestampNs(33)));
    }
}
