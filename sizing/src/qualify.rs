//! The qualification rule: which runs count. A run qualifies when every gate holds:
//!
//! - acknowledged ≥ 99.9 % of offered rows;
//! - no 5xx other than refusals (429/503), and no request left without an answer;
//! - p99 latency (from the scheduled send time) under its limit;
//! - persisted == acknowledged, counted per batch by the server ([`crate::audit`]);
//! - no failure counter (flush, compaction, a failed node) moved in `/metrics`;
//! - the node's resident memory stayed under its budget.
//!
//! Pure, so each gate is pinned by a test with a run that must fail it. The durability
//! gates (a drop, a duplicate, a refused write stored, a failure counter) fail the
//! campaign wherever they happen; the capacity gates only on a chosen operating point,
//! since finding where they start failing is what a sweep is for.

use serde::Serialize;

use crate::audit::Audit;

/// The limits a run is held to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    /// Least share of offered rows that must be acknowledged.
    pub acked_fraction_min: f64,
    /// Highest p99 latency, in milliseconds.
    pub latency_p99_ms_max: f64,
    /// Highest resident memory of any node, in MB.
    pub memory_budget_mb: f64,
}

/// Failure counters and gauges of `/metrics`: how much each moved during the run
/// (counters) or its highest value (gauges), summed over nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FailureCounters {
    /// `quiver_flush_failures_total` increase.
    pub flush_failures: f64,
    /// `quiver_compaction_failures_total` increase.
    pub compaction_failures: f64,
    /// Highest `quiver_tables_failing_to_flush`.
    pub tables_failing_to_flush: f64,
    /// Highest `quiver_node_failed` (1 once Raft stopped for good, e.g. a WAL failure).
    pub node_failed: f64,
}

impl FailureCounters {
    /// Each counter with its metric name.
    pub fn named(&self) -> [(&'static str, f64); 4] {
        [
            ("quiver_flush_failures_total", self.flush_failures),
            ("quiver_compaction_failures_total", self.compaction_failures),
            (
                "quiver_tables_failing_to_flush",
                self.tables_failing_to_flush,
            ),
            ("quiver_node_failed", self.node_failed),
        ]
    }
}

/// What a run showed, as far as the rule is concerned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Rows the schedule offered.
    pub offered_rows: u64,
    /// Rows in 2xx answers.
    pub acked_rows: u64,
    /// 5xx answers other than 503 (refusal), including 504 (outcome unknown).
    pub server_errors: u64,
    /// Requests that got no answer at all (transport error or client timeout).
    pub unanswered: u64,
    /// p99 latency from the scheduled send time, in milliseconds.
    pub latency_p99_ms: f64,
    /// The server's per-batch count against the client's outcomes; `None` when the
    /// audit could not run (which fails the run).
    pub audit: Option<Audit>,
    /// Failure counters during the run.
    pub counters: FailureCounters,
    /// Highest resident memory of any node, in MB; `None` if not sampled.
    pub node_rss_mb_max: Option<f64>,
}

/// One gate a run failed, with the numbers that failed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "gate", rename_all = "snake_case")]
pub enum Gate {
    /// Too few rows acknowledged.
    AckedBelowOffered {
        /// Acknowledged rows.
        acked_rows: u64,
        /// Offered rows.
        offered_rows: u64,
        /// The required share.
        fraction_min: f64,
    },
    /// 5xx answers other than refusals.
    ServerErrors {
        /// How many.
        count: u64,
    },
    /// Requests without an answer.
    Unanswered {
        /// How many.
        count: u64,
    },
    /// p99 over its limit.
    LatencyOverLimit {
        /// Measured p99, ms.
        p99_ms: f64,
        /// The limit, ms.
        limit_ms: f64,
    },
    /// Persisted ≠ acknowledged per batch (a drop, a partial or duplicated batch, a
    /// refused batch stored, rows of batches never sent).
    PersistedNotAcked {
        /// The audit that showed it.
        audit: Audit,
    },
    /// The per-batch count could not be taken.
    AuditMissing,
    /// A failure counter moved.
    FailureCounter {
        /// Metric name.
        metric: String,
        /// Increase (counters) or highest value (gauges).
        value: f64,
    },
    /// A node's resident memory passed its budget.
    MemoryOverBudget {
        /// Highest resident memory, MB.
        rss_mb: f64,
        /// Budget, MB.
        budget_mb: f64,
    },
}

impl Gate {
    /// True for gates that mean lost or unpromised data, not a lack of capacity: they
    /// fail a campaign wherever they happen.
    pub fn is_durability(&self) -> bool {
        matches!(
            self,
            Gate::PersistedNotAcked { .. } | Gate::AuditMissing | Gate::FailureCounter { .. }
        )
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gate::AckedBelowOffered { acked_rows, offered_rows, fraction_min } => write!(
                f,
                "acknowledged {} of {} offered rows, below {:.1} %",
                crate::units::thousands(*acked_rows as f64),
                crate::units::thousands(*offered_rows as f64),
                fraction_min * 100.0
            ),
            Gate::ServerErrors { count } => write!(f, "{count} 5xx answers other than refusals"),
            Gate::Unanswered { count } => write!(f, "{count} requests without an answer"),
            Gate::LatencyOverLimit { p99_ms, limit_ms } => {
                write!(f, "p99 {p99_ms:.0} ms over the {limit_ms:.0} ms limit")
            }
            Gate::PersistedNotAcked { audit: a } => write!(
                f,
                "persisted {} rows of {} acknowledged ({} batches missing, {} partial, {} duplicated, {} refused but stored, {} stray rows)",
                a.persisted_rows,
                a.acked_rows,
                a.batches_missing,
                a.batches_partial,
                a.batches_duplicated,
                a.refused_batches_stored,
                a.stray_rows
            ),
            Gate::AuditMissing => write!(f, "the per-batch count could not be taken"),
            Gate::FailureCounter { metric, value } => write!(f, "{metric} moved by {value}"),
            Gate::MemoryOverBudget { rss_mb, budget_mb } => write!(
                f,
                "resident memory {rss_mb:.0} MB over the {budget_mb:.0} MB budget"
            ),
        }
    }
}

/// Every gate `evidence` fails under `limits`; empty when the run qualifies.
pub fn qualify(evidence: &Evidence, limits: &Limits) -> Vec<Gate> {
    let mut failed = Vec::new();
    // A relative epsilon: 0.999 × 100,000 is 99,900.00000000001 in binary.
    let needed = evidence.offered_rows as f64 * limits.acked_fraction_min * (1.0 - 1e-12);
    if (evidence.acked_rows as f64) < needed || evidence.offered_rows == 0 {
        failed.push(Gate::AckedBelowOffered {
            acked_rows: evidence.acked_rows,
            offered_rows: evidence.offered_rows,
            fraction_min: limits.acked_fraction_min,
        });
    }
    if evidence.server_errors > 0 {
        failed.push(Gate::ServerErrors {
            count: evidence.server_errors,
        });
    }
    if evidence.unanswered > 0 {
        failed.push(Gate::Unanswered {
            count: evidence.unanswered,
        });
    }
    // An unknown p99 (NaN: nothing answered) cannot pass.
    if evidence.latency_p99_ms.is_nan() || evidence.latency_p99_ms > limits.latency_p99_ms_max {
        failed.push(Gate::LatencyOverLimit {
            p99_ms: evidence.latency_p99_ms,
            limit_ms: limits.latency_p99_ms_max,
        });
    }
    match &evidence.audit {
        Some(audit)
            if audit.persisted_equals_acked() && audit.acked_rows == evidence.acked_rows => {}
        Some(audit) => failed.push(Gate::PersistedNotAcked {
            audit: audit.clone(),
        }),
        None => failed.push(Gate::AuditMissing),
    }
    for (metric, value) in evidence.counters.named() {
        if value > 0.0 {
            failed.push(Gate::FailureCounter {
                metric: metric.to_string(),
                value,
            });
        }
    }
    if let Some(rss_mb) = evidence.node_rss_mb_max {
        if rss_mb > limits.memory_budget_mb {
            failed.push(Gate::MemoryOverBudget {
                rss_mb,
                budget_mb: limits.memory_budget_mb,
            });
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{audit, BatchOutcome};
    use std::collections::BTreeMap;

    fn limits() -> Limits {
        Limits {
            acked_fraction_min: 0.999,
            latency_p99_ms_max: 1_000.0,
            memory_budget_mb: 4_096.0,
        }
    }

    /// 1,000 batches of 100 rows, all acknowledged and stored whole.
    fn clean() -> Evidence {
        let outcomes = vec![BatchOutcome::Acked; 1_000];
        let stored: BTreeMap<u64, u64> = (0..1_000).map(|b| (b, 100)).collect();
        Evidence {
            offered_rows: 100_000,
            acked_rows: 100_000,
            server_errors: 0,
            unanswered: 0,
            latency_p99_ms: 80.0,
            audit: Some(audit(&outcomes, 100, &stored)),
            counters: FailureCounters::default(),
            node_rss_mb_max: Some(900.0),
        }
    }

    fn gates(e: &Evidence) -> Vec<Gate> {
        qualify(e, &limits())
    }

    #[test]
    fn a_clean_run_qualifies() {
        assert_eq!(gates(&clean()), vec![]);
    }

    #[test]
    fn a_drop_fails_persisted_and_is_a_durability_failure() {
        let mut e = clean();
        let outcomes = vec![BatchOutcome::Acked; 1_000];
        let stored: BTreeMap<u64, u64> = (0..999).map(|b| (b, 100)).collect();
        e.audit = Some(audit(&outcomes, 100, &stored));
        let g = gates(&e);
        assert!(
            matches!(&g[..], [Gate::PersistedNotAcked { audit }] if audit.batches_missing == 1)
        );
        assert!(g[0].is_durability());
        assert!(
            g[0].to_string().contains("persisted 99900 rows of 100000"),
            "{}",
            g[0]
        );
    }

    #[test]
    fn persisted_below_acked_fails_even_with_whole_batches() {
        // The client counted a batch the audit never saw acknowledged.
        let mut e = clean();
        e.acked_rows = 100_100;
        e.offered_rows = 100_100;
        assert!(matches!(&gates(&e)[..], [Gate::PersistedNotAcked { .. }]));
    }

    #[test]
    fn a_500_fails_even_when_every_row_was_acknowledged_in_the_end() {
        let mut e = clean();
        e.server_errors = 1;
        let g = gates(&e);
        assert_eq!(g, vec![Gate::ServerErrors { count: 1 }]);
        assert!(!g[0].is_durability());
    }

    #[test]
    fn refusals_alone_fail_only_when_they_cost_more_than_a_thousandth() {
        let mut e = clean();
        e.acked_rows = 99_900; // exactly 99.9 %
        let outcomes: Vec<BatchOutcome> = (0..1_000)
            .map(|b| {
                if b == 0 {
                    BatchOutcome::Refused
                } else {
                    BatchOutcome::Acked
                }
            })
            .collect();
        let stored: BTreeMap<u64, u64> = (1..1_000).map(|b| (b, 100)).collect();
        e.audit = Some(audit(&outcomes, 100, &stored));
        assert_eq!(gates(&e), vec![]);
        e.acked_rows = 99_800;
        let outcomes: Vec<BatchOutcome> = (0..1_000)
            .map(|b| {
                if b < 2 {
                    BatchOutcome::Refused
                } else {
                    BatchOutcome::Acked
                }
            })
            .collect();
        let stored: BTreeMap<u64, u64> = (2..1_000).map(|b| (b, 100)).collect();
        e.audit = Some(audit(&outcomes, 100, &stored));
        assert!(matches!(&gates(&e)[..], [Gate::AckedBelowOffered { .. }]));
    }

    #[test]
    fn a_failure_counter_fails_and_names_its_metric() {
        let mut e = clean();
        e.counters.flush_failures = 2.0;
        let g = gates(&e);
        assert_eq!(g.len(), 1);
        assert!(g[0].is_durability());
        assert_eq!(g[0].to_string(), "quiver_flush_failures_total moved by 2");
        let mut e = clean();
        e.counters.node_failed = 1.0;
        assert!(gates(&e)[0].to_string().contains("quiver_node_failed"));
    }

    #[test]
    fn memory_over_budget_fails() {
        let mut e = clean();
        e.node_rss_mb_max = Some(5_000.0);
        assert_eq!(
            gates(&e),
            vec![Gate::MemoryOverBudget {
                rss_mb: 5_000.0,
                budget_mb: 4_096.0
            }]
        );
    }

    #[test]
    fn slow_answers_unanswered_requests_and_a_missing_audit_fail() {
        let mut e = clean();
        e.latency_p99_ms = 1_500.0;
        e.unanswered = 3;
        e.audit = None;
        let g = gates(&e);
        assert!(g.contains(&Gate::LatencyOverLimit {
            p99_ms: 1_500.0,
            limit_ms: 1_000.0
        }));
        assert!(g.contains(&Gate::Unanswered { count: 3 }));
        assert!(g.contains(&Gate::AuditMissing));
        let mut e = clean();
        e.latency_p99_ms = f64::NAN;
        assert_eq!(gates(&e).len(), 1, "an unknown p99 cannot pass");
    }

    #[test]
    fn nothing_offered_does_not_qualify() {
        let mut e = clean();
        e.offered_rows = 0;
        e.acked_rows = 0;
        e.audit = Some(audit(&[], 100, &BTreeMap::new()));
        assert!(matches!(gates(&e)[0], Gate::AckedBelowOffered { .. }));
    }
}
