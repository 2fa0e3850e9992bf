//! How long a database's rows live, with per-measurement overrides.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::TimestampNs;

/// One database's retention: a default for its measurements and overrides by name.
/// Durations in nanoseconds; `None` keeps rows forever.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRule {
    /// For every measurement without an override.
    #[serde(default)]
    pub duration_ns: Option<i64>,
    /// Per measurement, winning over `duration_ns`.
    #[serde(default)]
    pub measurements: BTreeMap<String, i64>,
}

impl RetentionRule {
    /// How long rows of `measurement` live, if not forever.
    pub fn for_measurement(&self, measurement: &str) -> Option<i64> {
        self.measurements
            .get(measurement)
            .copied()
            .or(self.duration_ns)
    }

    /// Whether the rule keeps everything forever (and can be forgotten).
    pub fn is_empty(&self) -> bool {
        self.duration_ns.is_none() && self.measurements.is_empty()
    }
}

/// The oldest time still visible at `now` for rows that live `duration_ns`.
pub fn retention_cutoff(now: TimestampNs, duration_ns: i64) -> TimestampNs {
    TimestampNs(now.0.saturating_sub(duration_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_wins_over_the_database_default() {
        let rule = RetentionRule {
            duration_ns: Some(10),
            measurements: [("cpu".to_string(), 3)].into_iter().collect(),
        };
        assert_eq!(rule.for_measurement("cpu"), Some(3));
        assert_eq!(rule.for_measurement("mem"), Some(10));
        assert_eq!(retention_cutoff(TimestampNs(100), 30), TimestampNs(70));
        assert_eq!(
            retention_cutoff(TimestampNs(i64::MIN + 1), 30),
            TimestampNs(i64::MIN)
        );
        assert!(RetentionRule::default().is_empty());
    }
}
