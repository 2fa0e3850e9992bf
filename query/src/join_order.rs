//! Builds a hash join on its grouped side: a physical optimizer rule that runs right
//! after DataFusion's `join_selection`.
//!
//! DataFusion builds the hash table on the left input unless statistics say the right
//! is smaller. Against a grouped subquery they cannot say it: a measurement's scan has
//! an exact row count, while an aggregate over the same table estimates its output as
//! its input's row count (nothing tells it how many distinct series there are), so
//! the two tie and nothing is swapped. TSBS's `lastpoint` (a table joined to
//! `SELECT hostname, max(time) ... GROUP BY hostname`) then built a hash table of the
//! whole table, every column of 4.3 M rows, and ran out of its memory limit.
//!
//! The rule swaps a hash join whose left input has no aggregate when its right input
//! is a grouped aggregate (through projections, filters, repartitions and sorts, none
//! of which add rows) over at most as many rows as the left holds. One grouping set
//! produces at most one row per input row, so the new build side holds at most as many
//! rows as the old one: the swap can only shrink the hash table. Which side is built
//! never changes a join's answer; `HashJoinExec::swap_inputs` keeps the output's
//! columns and their order.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;

/// Name of the rule that must run first (it chooses join modes and sides from
/// statistics; this rule only corrects the tie it leaves).
pub(crate) const AFTER_RULE: &str = "join_selection";

/// The rule; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct BuildOnGroupedSide;

impl PhysicalOptimizerRule for BuildOnGroupedSide {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !config.optimizer.join_reordering {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if !should_swap(join)? {
                return Ok(Transformed::no(node));
            }
            let mode = *join.partition_mode();
            Ok(Transformed::yes(join.swap_inputs(mode)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "build_on_grouped_side"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn should_swap(join: &HashJoinExec) -> Result<bool> {
    if !join.join_type().supports_swap() || join.null_aware || has_aggregate(join.left()) {
        return Ok(false);
    }
    let Some(grouped_input) = grouped_aggregate_input(join.right()) else {
        return Ok(false);
    };
    let stats = StatisticsContext::new();
    let left_rows = stats
        .compute(join.left().as_ref(), &StatisticsArgs::new())?
        .num_rows;
    let grouped_rows = stats
        .compute(grouped_input.as_ref(), &StatisticsArgs::new())?
        .num_rows;
    Ok(match (left_rows.get_value(), grouped_rows.get_value()) {
        (Some(left), Some(grouped)) => grouped <= left,
        _ => false,
    })
}

/// The input of the grouped aggregate `plan` is made of, looking through operators
/// that never add rows; `None` if `plan` is not such an aggregate.
fn grouped_aggregate_input(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        if !aggregate.group_expr().is_single() {
            return None;
        }
        // A final aggregate over its partial one: the rows that matter are the partial's
        // input.
        let input = aggregate.input();
        return grouped_aggregate_input(input).or_else(|| Some(Arc::clone(input)));
    }
    if plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<SortExec>()
    {
        let children = plan.children();
        if let [only] = children.as_slice() {
            return grouped_aggregate_input(only);
        }
    }
    None
}

fn has_aggregate(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<AggregateExec>() || plan.children().into_iter().any(has_aggregate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_after_join_selection() {
        let rules = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
        assert!(
            rules.iter().any(|r| r.name() == AFTER_RULE),
            "DataFusion renamed its join selection rule; update AFTER_RULE"
        );
    }
}
