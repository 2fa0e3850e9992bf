//! Refuses nested-loop joins too large to finish: a cross join, or a join on anything
//! but equalities, compares every row of one side with every row of the other.
//!
//! The timeout alone does not protect the node from these. DataFusion's nested-loop
//! join probes one batch against the whole other side inside a single poll, and returns
//! only when it has output; with a filter that matches nothing it can loop for minutes
//! without yielding, so a query cancelled at its deadline keeps its threads busy until
//! the loop ends. Refusing at planning time, from row counts DataFusion already has
//! (exact for files and memory, estimated above filters), keeps a careless query from
//! taking the query runtime away from everyone else.

use std::sync::Arc;

use datafusion::physical_plan::joins::{CrossJoinExec, NestedLoopJoinExec};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Error;

/// Fails if any nested-loop or cross join in `plan` would compare more than `pairs_max`
/// row pairs, by the row counts known at planning time. Joins over inputs of unknown
/// size pass (the timeout still applies).
pub(crate) fn check_join_sizes(plan: &Arc<dyn ExecutionPlan>, pairs_max: u64) -> Result<(), Error> {
    rows_upper(plan, pairs_max, &StatisticsContext::new()).map(|_| ())
}

/// An estimate of the rows `plan` produces, checking every join below it on the way.
fn rows_upper(
    plan: &Arc<dyn ExecutionPlan>,
    pairs_max: u64,
    stats: &StatisticsContext,
) -> Result<Option<u128>, Error> {
    let children: Vec<Option<u128>> = plan
        .children()
        .into_iter()
        .map(|child| rows_upper(child, pairs_max, stats))
        .collect::<Result<_, _>>()?;
    if plan.is::<NestedLoopJoinExec>() || plan.is::<CrossJoinExec>() {
        debug_assert_eq!(children.len(), 2, "a join has two inputs");
        let (Some(Some(left)), Some(Some(right))) = (children.first(), children.get(1)) else {
            return Ok(None);
        };
        let pairs = left.saturating_mul(*right);
        if pairs > u128::from(pairs_max) {
            return Err(Error::Refused(format!(
                "this join compares every row of one side with every row of the other: \
                 about {left} x {right} = {pairs} row pairs, over the limit of {pairs_max} \
                 (query.join_pairs_max); join on equal columns, or narrow both sides \
                 (a time range, fewer series) first"
            )));
        }
        return Ok(Some(pairs));
    }
    let own = stats
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .ok()
        .and_then(|stats| stats.num_rows.get_value().copied())
        .map(|rows| rows as u128);
    if own.is_some() {
        return Ok(own);
    }
    // Unknown here: at most what all inputs together hold, for the operators that can
    // only keep, drop or combine rows (a hash join's output is bounded by the build side
    // times its duplicates, which this does not see; it yields as it goes anyway).
    Ok(children
        .into_iter()
        .try_fold(0u128, |sum, rows| rows.map(|r| sum.saturating_add(r)))
        .filter(|_| !plan.children().is_empty()))
}
