//! Where each part of a plan runs: the operators right above a measurement held by
//! other nodes run on one of those nodes, the rest here.
//!
//! For every [`GroupScanExec`], the longest chain of one-input operators above it
//! (filters, projections, partial aggregates, sorts, limits; see [`runs_at_the_data`])
//! becomes a stage of one task, below a `NetworkCoalesceExec`; the plan is wrapped in
//! datafusion-distributed's `DistributedExec`, which sends each stage to the node the
//! routing handler (`routing`) names and streams its output back.
//!
//! Why not datafusion-distributed's own planner: it sizes stages by file bytes and
//! spreads a leaf's files over tasks, then removes a boundary between one task and one
//! task. A Quiver measurement lives in one group, read through one consistent snapshot
//! on one replica, so its stage has exactly one task, which that planner would fold
//! back into the receiving node. This rule places the boundaries itself, through the
//! library's public nodes, and leaves execution, transport and cancellation to it.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};
use datafusion_distributed::{DistributedExec, NetworkBoundary, NetworkCoalesceExec, Stage};
use uuid::Uuid;

use super::group_scan::GroupScanExec;
use crate::run_aggregate::RunPartialAggregateExec;

/// Runs the operators above a remote measurement's scan on a member of its group.
#[derive(Debug, Default)]
pub struct ScanWhereTheDataIs;

impl PhysicalOptimizerRule for ScanWhereTheDataIs {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut remote = false;
        plan.apply(|node| {
            remote |= node.is::<GroupScanExec>();
            Ok(if remote {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        if !remote || plan.is::<DistributedExec>() {
            return Ok(plan);
        }
        // One stage per plan only: plans with two or more (a join or union of remote
        // measurements, a measurement joined with itself) answered wrongly (rows of
        // one side missing, differently from run to run; benches/tsbs_cluster.py's
        // lastpoint). The cause was a stage ending in a hash repartition (see
        // `place`); with that fixed they answered right in tsbs_cluster.py, but
        // lastpoint ran slower shipped than read here, so their scans still run here,
        // reading the members' snapshots and files as before distribution.
        if stage_count(&plan)? > 1 {
            return Ok(plan);
        }
        let mut stages = Stages {
            query_id: Uuid::new_v4(),
            next: 1,
        };
        let mut placed = stages.place(plan)?;
        // `DistributedExec` runs its plan as one partition (the library's own planner
        // coalesces the same way).
        if placed.output_partitioning().partition_count() > 1 {
            placed = Arc::new(CoalescePartitionsExec::new(placed));
        }
        Ok(Arc::new(DistributedExec::new(placed)))
    }

    fn name(&self) -> &str {
        "scan_where_the_data_is"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

struct Stages {
    query_id: Uuid,
    next: usize,
}

impl Stages {
    /// `node` with every maximal chain above a remote scan made a stage of its own.
    fn place(&mut self, node: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        if chain_to_scan(&node) && node.is::<RepartitionExec>() {
            // A stage never ends in a repartition: the node running a stage strips one
            // at its top (datafusion-distributed re-adds it only behind a shuffle), so
            // a side of a partitioned join would arrive unpartitioned and match rows
            // of the wrong partitions. It runs here, over the stage's output.
            let child = Arc::clone(node.children()[0]);
            let placed = self.place(child)?;
            return node.replace_children(
                vec![placed],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            );
        }
        if chain_to_scan(&node) {
            return self.boundary(node);
        }
        let children: Vec<Arc<dyn ExecutionPlan>> =
            node.children().into_iter().map(Arc::clone).collect();
        if children.is_empty() {
            return Ok(node);
        }
        let placed = children
            .into_iter()
            .map(|child| self.place(child))
            .collect::<Result<Vec<_>>>()?;
        node.replace_children(
            placed,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    /// `stage` run as one task elsewhere, its output read here.
    fn boundary(&mut self, stage: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let coalesce = NetworkCoalesceExec::try_new(shippable(stage)?, 1, 1)?;
        let Stage::Local(mut local) = coalesce.input_stage().clone() else {
            return Err(DataFusionError::Internal(
                "a new network boundary holds a remote stage".into(),
            ));
        };
        // What the library's own planner stamps on the stages it keeps.
        local.query_id = self.query_id;
        local.num = self.next;
        self.next += 1;
        let placed = coalesce.with_input_stage(Stage::Local(local))?;
        Ok(placed as Arc<dyn ExecutionPlan>)
    }
}

/// How many stages `plan` would ship: its maximal chains down to a remote scan.
fn stage_count(plan: &Arc<dyn ExecutionPlan>) -> Result<usize> {
    if chain_to_scan(plan) {
        return Ok(1);
    }
    plan.children()
        .into_iter()
        .map(stage_count)
        .sum::<Result<usize>>()
}

/// Whether `node` and everything below it can run on the scanned measurement's node:
/// a chain of one-input operators [`runs_at_the_data`] ending in a [`GroupScanExec`].
fn chain_to_scan(node: &Arc<dyn ExecutionPlan>) -> bool {
    if node.is::<GroupScanExec>() {
        return true;
    }
    let children = node.children();
    runs_at_the_data(node) && children.len() == 1 && chain_to_scan(children[0])
}

/// Operators a stage may carry: DataFusion's own, which its codec ships, over one
/// input. Since a stage holds a whole measurement, even a final aggregate or a sort
/// over all its partitions is correct there.
fn runs_at_the_data(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<FilterExec>()
        || node.is::<ProjectionExec>()
        || node.is::<AggregateExec>()
        || node.is::<RunPartialAggregateExec>()
        || node.is::<RepartitionExec>()
        || node.is::<CoalescePartitionsExec>()
        || node.is::<SortExec>()
        || node.is::<SortPreservingMergeExec>()
        || node.is::<LocalLimitExec>()
        || node.is::<GlobalLimitExec>()
}

/// `stage` with Quiver's own operators replaced by the DataFusion ones they stand for
/// (the node running the stage applies Quiver's rules again).
fn shippable(stage: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TransformedResult};
    stage
        .transform_up(
            |node| match node.downcast_ref::<RunPartialAggregateExec>() {
                Some(runs) => Ok(Transformed::yes(runs.replaced()?)),
                None => Ok(Transformed::no(node)),
            },
        )
        .data()
}
