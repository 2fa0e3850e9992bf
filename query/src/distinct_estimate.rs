//! How many distinct values each tag of a table holds, as the planner estimates it.
//!
//! DataFusion sizes a `GROUP BY` by the distinct counts of its grouping columns; without
//! them it assumes one group per row. A join to an aggregate of the same table (the
//! newest row of every host) then looks like a join of two whole tables: it is split by
//! hash into partitions, and the filter the join hands to the table's scan is routed
//! through a hash of every row. With the counts, the aggregate is known to be small, its
//! table is built once (`CollectLeft`), and the scan skips rows on `time` alone.
//!
//! Files carry the counts storage made while writing them (`FileMeta::tag_distinct`);
//! rows in memory are estimated by their dictionaries. Both are estimates (a union of
//! files takes the largest count, as DataFusion itself merges them), so they are
//! declared inexact, and a table with any file that lacks them gets none.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use quiver_storage::{ParquetFileRef, TAG_DISTINCT_COUNTED_MAX};

/// The distinct values of `tag` over `files`: the largest count of any file, or `None`
/// when a file lacks its count or holds "many".
pub(crate) fn files_distinct(files: &[&ParquetFileRef], tag: &str) -> Option<usize> {
    let mut most = 0;
    for file in files {
        let count = file.tag_distinct(tag)?;
        if count >= TAG_DISTINCT_COUNTED_MAX {
            return None;
        }
        most = most.max(count);
    }
    usize::try_from(most).ok()
}

/// The distinct values of column `column` over memory `batches` (tags are dictionaries
/// there, one per write): the largest dictionary, or `None` when the column is not one.
pub(crate) fn memory_distinct(batches: &[RecordBatch], column: usize) -> Option<usize> {
    let mut most = 0;
    for batch in batches {
        // Tag keys may be narrower than the schema's (buffered rows keep them so).
        let dictionary = batch.column(column).as_any_dictionary_opt()?;
        most = most.max(dictionary.values().len() - dictionary.values().null_count());
    }
    Some(most)
}

/// A scan whose statistics gain distinct counts it cannot compute itself (the memory
/// scan's own statistics have none); everything else passes through unchanged.
#[derive(Debug, Clone)]
pub(crate) struct WithDistinctCounts {
    input: Arc<dyn ExecutionPlan>,
    /// One entry per output column: its estimated distinct values, if known.
    distinct: Vec<Option<usize>>,
}

impl WithDistinctCounts {
    /// `input` with `distinct` (one entry per column of its output) in its statistics.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>, distinct: Vec<Option<usize>>) -> Self {
        debug_assert_eq!(distinct.len(), input.schema().fields().len());
        WithDistinctCounts { input, distinct }
    }
}

impl DisplayAs for WithDistinctCounts {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WithDistinctCounts: {:?}", self.distinct)
    }
}

impl ExecutionPlan for WithDistinctCounts {
    fn name(&self) -> &str {
        "WithDistinctCounts"
    }

    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "WithDistinctCounts takes one child, got {}",
                children.len()
            )));
        }
        let input = children.swap_remove(0);
        if input.schema().fields().len() != self.distinct.len() {
            // A child with other columns: the counts no longer say anything about it.
            return Ok(input);
        }
        Ok(Arc::new(WithDistinctCounts::new(
            input,
            self.distinct.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let Some(input) = input_stats.first() else {
            return Ok(Arc::new(Statistics::new_unknown(&self.schema())));
        };
        let mut stats = input.as_ref().clone();
        for (column, distinct) in stats.column_statistics.iter_mut().zip(&self.distinct) {
            if let (Some(n), Precision::Absent) = (distinct, &column.distinct_count) {
                column.distinct_count = Precision::Inexact(*n);
            }
        }
        Ok(Arc::new(stats))
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }

    fn gather_filters_for_pushdown(
        &self,
        _phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        FilterDescription::from_children(parent_filters, &self.children())
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        Ok(FilterPushdownPropagation::if_all(child_pushdown_result))
    }
}
