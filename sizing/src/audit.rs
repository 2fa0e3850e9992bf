//! Persisted == acknowledged, counted by the server, per batch.
//!
//! Every generated row belongs to exactly one batch (row `seq` is in batch
//! `seq / batch_rows`), and the batch can be computed back from the row's `host` and
//! `time` ([`crate::BatchShape`]). So after a run the tool asks the node for the rows
//! it stores per batch and compares each count with what the client was told: an
//! acknowledged batch must be there whole and once; a refused one (429/503, "nothing
//! written") must be absent; one whose answer never came may be either, but never in
//! part. A client's own counters can't show any of this.

use std::collections::BTreeMap;

use serde::Serialize;

/// What the client was told about one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchOutcome {
    /// Never sent (the run ended, or the generator gave up on a stalled server).
    NotSent,
    /// 2xx: every row must be stored, once.
    Acked,
    /// 429 or 503: the node promises nothing was written.
    Refused,
    /// Another 4xx: the request was rejected, nothing written.
    Rejected,
    /// No answer (transport error, timeout) or 504 / another 5xx: unknown outcome.
    Unanswered,
}

/// The comparison of the server's per-batch counts with the client's outcomes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Batches acknowledged.
    pub batches_acked: u64,
    /// Rows in acknowledged batches.
    pub acked_rows: u64,
    /// Rows the server stores of acknowledged batches (duplicates included).
    pub persisted_rows: u64,
    /// Acknowledged batches stored whole, once.
    pub batches_whole: u64,
    /// Acknowledged batches of which nothing is stored.
    pub batches_missing: u64,
    /// Batches (whatever their answer) stored in part.
    pub batches_partial: u64,
    /// Batches stored more than once.
    pub batches_duplicated: u64,
    /// Refused or rejected batches of which something is stored.
    pub refused_batches_stored: u64,
    /// Unanswered batches stored whole (allowed: the write committed, the answer was lost).
    pub unanswered_batches_stored: u64,
    /// Rows stored whose batch the run never sent.
    pub stray_rows: u64,
}

impl Audit {
    /// Every acknowledged row is stored exactly once and nothing else was written that
    /// should not have been.
    pub fn persisted_equals_acked(&self) -> bool {
        self.persisted_rows == self.acked_rows
            && self.batches_whole == self.batches_acked
            && self.batches_missing == 0
            && self.batches_partial == 0
            && self.batches_duplicated == 0
            && self.refused_batches_stored == 0
            && self.stray_rows == 0
    }
}

/// Compares `stored` (batch id → rows the server holds) with the outcome of each batch
/// (`outcomes[id]`), every batch holding `batch_rows` rows.
pub fn audit(outcomes: &[BatchOutcome], batch_rows: u64, stored: &BTreeMap<u64, u64>) -> Audit {
    let mut a = Audit::default();
    for (id, outcome) in outcomes.iter().enumerate() {
        let count = stored.get(&(id as u64)).copied().unwrap_or(0);
        if count > batch_rows {
            a.batches_duplicated += 1;
        } else if count > 0 && count < batch_rows {
            a.batches_partial += 1;
        }
        match outcome {
            BatchOutcome::Acked => {
                a.batches_acked += 1;
                a.acked_rows += batch_rows;
                a.persisted_rows += count;
                if count == batch_rows {
                    a.batches_whole += 1;
                } else if count == 0 {
                    a.batches_missing += 1;
                }
            }
            BatchOutcome::Refused | BatchOutcome::Rejected | BatchOutcome::NotSent => {
                if count > 0 {
                    a.refused_batches_stored += 1;
                }
            }
            BatchOutcome::Unanswered => {
                if count == batch_rows {
                    a.unanswered_batches_stored += 1;
                }
            }
        }
    }
    a.stray_rows = stored
        .range(outcomes.len() as u64..)
        .map(|(_, count)| *count)
        .sum();
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use BatchOutcome::*;

    fn stored(pairs: &[(u64, u64)]) -> BTreeMap<u64, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn every_acked_batch_whole_is_equal() {
        let a = audit(&[Acked, Acked, Refused], 10, &stored(&[(0, 10), (1, 10)]));
        assert!(a.persisted_equals_acked(), "{a:?}");
        assert_eq!((a.acked_rows, a.persisted_rows), (20, 20));
    }

    #[test]
    fn a_dropped_batch_is_missing() {
        let a = audit(&[Acked, Acked], 10, &stored(&[(0, 10)]));
        assert!(!a.persisted_equals_acked());
        assert_eq!((a.batches_missing, a.persisted_rows), (1, 10));
    }

    #[test]
    fn a_batch_stored_twice_is_a_duplicate_even_when_totals_match() {
        // Batch 1 lost, batch 0 stored twice: totals agree, the audit does not.
        let a = audit(&[Acked, Acked], 10, &stored(&[(0, 20)]));
        assert_eq!(a.persisted_rows, a.acked_rows);
        assert!(!a.persisted_equals_acked());
        assert_eq!((a.batches_duplicated, a.batches_missing), (1, 1));
    }

    #[test]
    fn part_of_a_batch_is_partial() {
        let a = audit(&[Acked, Unanswered], 10, &stored(&[(0, 10), (1, 4)]));
        assert_eq!(a.batches_partial, 1);
        assert!(!a.persisted_equals_acked());
    }

    #[test]
    fn a_refused_batch_that_was_written_breaks_the_promise() {
        let a = audit(&[Acked, Refused], 10, &stored(&[(0, 10), (1, 10)]));
        assert_eq!(a.refused_batches_stored, 1);
        assert!(!a.persisted_equals_acked());
    }

    #[test]
    fn an_unanswered_batch_may_be_stored_whole() {
        let a = audit(&[Acked, Unanswered], 10, &stored(&[(0, 10), (1, 10)]));
        assert_eq!(a.unanswered_batches_stored, 1);
        assert!(a.persisted_equals_acked());
    }

    #[test]
    fn rows_of_batches_never_sent_are_stray() {
        let a = audit(&[Acked], 10, &stored(&[(0, 10), (7, 3)]));
        assert_eq!(a.stray_rows, 3);
        assert!(!a.persisted_equals_acked());
    }
}
