//! Which side of a hash join its table is built on, when the estimates cannot tell.
//!
//! DataFusion builds a hash join's table on the side its statistics say is smaller.
//! A `GROUP BY` over a table gets the same row estimate as the table itself (the number
//! of groups is unknown), so a query joining a table to an aggregate of it (the newest
//! row per host: `t JOIN (SELECT host, max(time) ... GROUP BY host) ON ...`) ties, and
//! the table itself is built into memory: all of it, when the aggregate has a few
//! hundred rows. An aggregate never returns more rows than it reads, so when the
//! other side is known (exact row count, no filter) to be at least as large as what
//! the aggregate reads, this rule builds on the aggregated side; otherwise it changes
//! nothing.
//!
//! It runs right after DataFusion's `JoinSelection`, before filters are pushed into
//! joins (a join cannot be swapped once its dynamic filter exists).

use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct BuildOnAggregate;

impl PhysicalOptimizerRule for BuildOnAggregate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if !join.join_type().supports_swap()
                || join.null_aware
                || grouped_input(join.left()).is_some()
            {
                return Ok(Transformed::no(node));
            }
            let Some(aggregated) = grouped_input(join.right()) else {
                return Ok(Transformed::no(node));
            };
            if !at_least_as_large(join.left(), &aggregated)? {
                return Ok(Transformed::no(node));
            }
            let swapped = join.swap_inputs(*join.partition_mode())?;
            Ok(Transformed::yes(swapped))
        })
        .data()
    }

    fn name(&self) -> &str {
        "build_on_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What a `GROUP BY` aggregate reads, if `plan` is one, seen through operators that
/// never add rows (projections, filters, repartitions) and through its own stages
/// (final over partial).
fn grouped_input(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let any = plan;
    if let Some(aggregate) = any.downcast_ref::<AggregateExec>() {
        if aggregate.group_expr().is_empty() {
            return None;
        }
        return Some(grouped_input(aggregate.input()).unwrap_or_else(|| aggregate.input().clone()));
    }
    let through = any
        .downcast_ref::<ProjectionExec>()
        .map(|p| p.input())
        .or_else(|| any.downcast_ref::<FilterExec>().map(|f| f.input()))
        .or_else(|| any.downcast_ref::<RepartitionExec>().map(|r| r.input()))?;
    grouped_input(through)
}

/// Whether `plan` is known to hold no fewer rows than `aggregated` (what the other
/// side's aggregate reads): its row count must be exact (a whole table, no filter
/// whose selectivity is guessed), the other's may be an estimate; false when either is
/// unknown.
fn at_least_as_large(
    plan: &Arc<dyn ExecutionPlan>,
    aggregated: &Arc<dyn ExecutionPlan>,
) -> Result<bool> {
    let stats = StatisticsContext::new();
    let plan = stats.compute(plan.as_ref(), &StatisticsArgs::new())?;
    let aggregated = stats.compute(aggregated.as_ref(), &StatisticsArgs::new())?;
    Ok(match (&plan.num_rows, aggregated.num_rows.get_value()) {
        (Precision::Exact(p), Some(a)) => p >= a,
        _ => false,
    })
}
