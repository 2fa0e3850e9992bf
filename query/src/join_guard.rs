//! Refuses nested-loop joins that could compute for minutes without ever pausing.
//!
//! The timeout alone does not protect the node from these. DataFusion's nested-loop
//! (and cross) join buffers one side, then compares each batch of the other side with
//! every buffered row, inside one poll for as long as its filter matches nothing and the
//! other side has another batch ready. When that side is itself computed from buffered
//! rows (another join), it is always ready, so the whole join can run in a single poll:
//! a query cancelled at its deadline then keeps its threads busy until the join ends,
//! and every other query waits behind it. (Found this way: a three-way cross join over
//! 2,100 rows held both query threads for more than 30 s after its timeout.)
//!
//! So the pairs a nested-loop join may compare in total are limited. The row counts are
//! upper bounds, taken only where they are sound: table scans (counts from the catalog,
//! which pushed-down filters and limits only shrink) through operators that never add
//! rows. Where no sound bound exists (grouped aggregates, whose estimate DataFusion takes
//! from their input; other joins; unnest) the join passes, and the deadline is all there
//! is.

use std::sync::Arc;

use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::{CrossJoinExec, NestedLoopJoinExec};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Error;

/// Operators whose output has at most as many rows as all their inputs together.
const ROW_PRESERVING: &[&str] = &[
    "FilterExec",
    "ProjectionExec",
    "SortExec",
    "SortPreservingMergeExec",
    "CoalescePartitionsExec",
    "CoalesceBatchesExec",
    "RepartitionExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "UnionExec",
    "InterleaveExec",
    "WindowAggExec",
    "BoundedWindowAggExec",
    "CooperativeExec",
];

/// Fails if a nested-loop or cross join in `plan` could compare more than `pairs_max`
/// row pairs, by the sound upper bounds known at planning time.
pub(crate) fn check_join_sizes(plan: &Arc<dyn ExecutionPlan>, pairs_max: u64) -> Result<(), Error> {
    let limits = Limits {
        pairs_max,
        stats: StatisticsContext::new(),
    };
    limits.rows_bound(plan).map(|_| ())
}

struct Limits {
    pairs_max: u64,
    stats: StatisticsContext,
}

impl Limits {
    /// A sound upper bound of the rows `plan` produces, if one is known, checking every
    /// join below it on the way.
    fn rows_bound(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<Option<u128>, Error> {
        let children: Vec<Option<u128>> = plan
            .children()
            .into_iter()
            .map(|child| self.rows_bound(child))
            .collect::<Result<_, _>>()?;
        if plan.is::<NestedLoopJoinExec>() || plan.is::<CrossJoinExec>() {
            return self.check_pairs(&children);
        }
        if children.is_empty() {
            // A scan: its count is exact, or an upper bound made inexact by the filters
            // and limits pushed into it.
            return Ok(self
                .stats
                .compute(plan.as_ref(), &StatisticsArgs::new())
                .ok()
                .and_then(|stats| stats.num_rows.get_value().map(|&rows| rows as u128)));
        }
        if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
            // One row without groups; with groups, DataFusion's estimate is the input's
            // row count (no distinct counts), far too high to refuse anything on.
            return Ok(aggregate.group_expr().is_empty().then_some(1));
        }
        if !ROW_PRESERVING.contains(&plan.name()) {
            return Ok(None);
        }
        Ok(children
            .into_iter()
            .try_fold(0u128, |sum, rows| rows.map(|r| sum.saturating_add(r))))
    }

    /// Checks a nested-loop join over `children` and returns the bound of its output:
    /// every pair at most.
    fn check_pairs(&self, children: &[Option<u128>]) -> Result<Option<u128>, Error> {
        debug_assert_eq!(children.len(), 2, "a join has two inputs");
        let (Some(Some(left)), Some(Some(right))) = (children.first(), children.get(1)) else {
            return Ok(None);
        };
        let pairs = left.saturating_mul(*right);
        if pairs > u128::from(self.pairs_max) {
            return Err(Error::Refused(format!(
                "this join compares every row of one side with every row of the other: \
                 up to {left} x {right} = {pairs} row pairs, over the limit of {} \
                 (query.join_pairs_max); join on equal columns, or narrow both sides \
                 (a time range, fewer series) first",
                self.pairs_max
            )));
        }
        Ok(Some(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_bounded_and_unknown_sizes_pass() {
        let limits = Limits {
            pairs_max: 1_000_000,
            stats: StatisticsContext::new(),
        };
        assert_eq!(
            limits.check_pairs(&[Some(1000), Some(1000)]).ok(),
            Some(Some(1_000_000))
        );
        let err = limits
            .check_pairs(&[Some(1000), Some(1001)])
            .expect_err("over the limit");
        assert!(err.to_string().contains("1000 x 1001"), "{err}");
        assert_eq!(
            limits.check_pairs(&[None, Some(u128::MAX)]).ok(),
            Some(None)
        );
        // Saturates instead of overflowing.
        assert!(limits.check_pairs(&[Some(u128::MAX), Some(2)]).is_err());
    }
}
