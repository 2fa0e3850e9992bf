//! Partial aggregation one run of equal group keys at a time.
//!
//! Files are sorted by their tags, then time (`quiver_storage::sort_lead`), so the rows a
//! `GROUP BY hostname` or `GROUP BY time_bucket(...), hostname` reads arrive in runs:
//! hundreds of consecutive rows of one group. DataFusion's partial aggregation hashes
//! every row's key and compares it with its group's key; for TSBS's `double-groupby`
//! that was 40 % of the node's CPU (`perf`), the averages themselves a few percent.
//!
//! [`RunPartialAggregateExec`] replaces such a partial aggregation. For each batch it
//! finds where the group keys change (comparing neighbours, as `IS DISTINCT FROM` does,
//! nulls equal to nulls), numbers the runs, and hands DataFusion's own accumulators each
//! run as a group: one partial state per run, in the partial aggregation's own schema.
//! The final aggregation above it merges the states of runs that share a group (a group
//! split by a batch boundary, or met again later), exactly as it merges the partial
//! states of different partitions, so the answer is DataFusion's.
//!
//! Input without runs would give one state per row, so after [`PROBE_ROWS`] a stream
//! whose runs average fewer than [`RUN_ROWS_MIN`] rows hands the rest of its input to
//! DataFusion's partial aggregation, unchanged; the states already sent are merged
//! above like any others.
//!
//! Only partial aggregations reading their input in no particular order, with plain
//! groupings (no grouping sets), no `DISTINCT`, `ORDER BY` or `FILTER` inside an
//! aggregate, no group limit, and accumulators DataFusion can run per group, are
//! replaced.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties, RecordBatchStream,
    SendableRecordBatchStream,
};
use futures::{Stream, StreamExt};

use crate::collapse_runs::key_changes;

/// Input rows a stream aggregates run by run before judging its runs.
pub(crate) const PROBE_ROWS: usize = 64 * 1024;

/// The shortest average run worth aggregating run by run; below it, DataFusion's hash
/// aggregation reduces more per row than one state per run does.
pub(crate) const RUN_ROWS_MIN: usize = 8;

/// Replaces eligible partial aggregations with [`RunPartialAggregateExec`] (see the
/// module documentation). It runs last, after DataFusion's rules have settled the plan.
#[derive(Debug, Default)]
pub struct PartialAggregateOverRuns;

impl PhysicalOptimizerRule for PartialAggregateOverRuns {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let eligible = node
                .downcast_ref::<AggregateExec>()
                .is_some_and(aggregates_runs_alike);
            if !eligible {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(Arc::new(RunPartialAggregateExec::new(
                node,
            )?)))
        })
        .data()
    }

    fn name(&self) -> &str {
        "partial_aggregate_over_runs"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether aggregating `aggregate`'s input run by run gives the states it gives.
fn aggregates_runs_alike(aggregate: &AggregateExec) -> bool {
    let group_by = aggregate.group_expr();
    *aggregate.mode() == AggregateMode::Partial
        && *aggregate.input_order_mode() == InputOrderMode::Linear
        && group_by.is_single()
        && !group_by.expr().is_empty()
        && aggregate.limit_options().is_none()
        && !aggregate.aggr_expr().is_empty()
        && aggregate.filter_expr().iter().all(Option::is_none)
        && aggregate.aggr_expr().iter().all(|a| {
            !a.is_distinct() && a.order_bys().is_empty() && a.groups_accumulator_supported()
        })
}

/// A partial aggregation computed run by run, falling back to the [`AggregateExec`] it
/// replaced (kept in `aggregate`) for input without runs. Its schema and properties are
/// that aggregation's.
#[derive(Debug)]
pub(crate) struct RunPartialAggregateExec {
    aggregate: Arc<dyn ExecutionPlan>,
    input: Arc<dyn ExecutionPlan>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    metrics: ExecutionPlanMetricsSet,
}

impl RunPartialAggregateExec {
    /// The plain [`AggregateExec`] this replaced, over the current input: what a stage
    /// shipped to another node carries (the node applies this rule again).
    pub(crate) fn replaced(&self) -> Result<Arc<dyn ExecutionPlan>> {
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        Arc::clone(&self.aggregate).replace_children(vec![Arc::clone(&self.input)], options)
    }

    /// Replaces `aggregate`, which must be an eligible partial [`AggregateExec`].
    pub(crate) fn new(aggregate: Arc<dyn ExecutionPlan>) -> Result<Self> {
        let Some(exec) = aggregate.downcast_ref::<AggregateExec>() else {
            return Err(DataFusionError::Internal(
                "RunPartialAggregateExec replaces an AggregateExec".into(),
            ));
        };
        debug_assert!(aggregates_runs_alike(exec));
        let group_exprs = exec
            .group_expr()
            .expr()
            .iter()
            .map(|(e, _)| Arc::clone(e))
            .collect();
        let aggregates = exec.aggr_expr().to_vec();
        let input = Arc::clone(exec.input());
        Ok(RunPartialAggregateExec {
            aggregate,
            input,
            group_exprs,
            aggregates,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

impl DisplayAs for RunPartialAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "RunPartialAggregateExec: groups={}, aggr=[{}]",
            self.group_exprs.len(),
            names.join(", ")
        )
    }
}

impl ExecutionPlan for RunPartialAggregateExec {
    fn name(&self) -> &str {
        "RunPartialAggregateExec"
    }

    fn schema(&self) -> SchemaRef {
        self.aggregate.schema()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.aggregate.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let aggregate = Arc::clone(&self.aggregate).replace_children(children, options)?;
        match aggregate.downcast_ref::<AggregateExec>() {
            Some(exec) if aggregates_runs_alike(exec) => {
                Ok(Arc::new(RunPartialAggregateExec::new(aggregate)?))
            }
            _ => Ok(aggregate),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let accumulators = self
            .aggregates
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect::<Result<Vec<_>>>()?;
        let arguments = self.aggregates.iter().map(|a| a.expressions()).collect();
        Ok(Box::pin(RunAggregateStream {
            schema: self.schema(),
            input: Some(input),
            delegate: None,
            group_exprs: self.group_exprs.clone(),
            arguments,
            accumulators,
            fallback: Fallback {
                aggregate: Arc::clone(&self.aggregate),
                input_properties: Arc::clone(self.input.properties()),
                partition,
                context,
            },
            seen_rows: 0,
            runs: 0,
            baseline: BaselineMetrics::new(&self.metrics, partition),
            runs_counted: MetricBuilder::new(&self.metrics).counter("runs", partition),
            fell_back: MetricBuilder::new(&self.metrics).counter("fell_back", partition),
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// What a stream needs to hand the rest of its input to DataFusion's aggregation.
struct Fallback {
    aggregate: Arc<dyn ExecutionPlan>,
    input_properties: Arc<PlanProperties>,
    partition: usize,
    context: Arc<TaskContext>,
}

struct RunAggregateStream {
    schema: SchemaRef,
    /// The input, while runs are aggregated here.
    input: Option<SendableRecordBatchStream>,
    /// DataFusion's partial aggregation of the rest, once the runs proved too short.
    delegate: Option<SendableRecordBatchStream>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Each aggregate's argument expressions.
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    fallback: Fallback,
    seen_rows: usize,
    runs: usize,
    baseline: BaselineMetrics,
    runs_counted: Count,
    fell_back: Count,
}

/// Where runs start in a batch and which run each row belongs to.
struct Runs {
    starts: UInt32Array,
    row_run: Vec<usize>,
}

/// The runs of equal `keys` (all of one length, at least one row).
fn runs_of(keys: &[ArrayRef]) -> Result<Runs> {
    let rows = keys.first().map_or(0, |k| k.len());
    let mut row_run = vec![0usize; rows];
    let mut starts: Vec<u32> = Vec::with_capacity(64);
    if rows == 0 {
        return Ok(Runs {
            starts: UInt32Array::from(starts),
            row_run,
        });
    }
    starts.push(0);
    if let Some(changed) = key_changes(keys)? {
        let mut run = 0;
        let mut from = 0;
        for before in changed.values().set_indices() {
            let start = before + 1;
            row_run[from..start].fill(run);
            run += 1;
            from = start;
            starts.push(
                u32::try_from(start).map_err(|_| {
                    DataFusionError::Internal("a batch of more than 4 G rows".into())
                })?,
            );
        }
        row_run[from..].fill(run);
    }
    Ok(Runs {
        starts: UInt32Array::from(starts),
        row_run,
    })
}

impl RunAggregateStream {
    /// One batch's partial states: one row per run.
    fn aggregate(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let _timer = self.baseline.elapsed_compute().timer();
        let rows = batch.num_rows();
        let keys = self
            .group_exprs
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let runs = runs_of(&keys)?;
        let run_count = runs.starts.len();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for key in &keys {
            columns.push(take(key.as_ref(), &runs.starts, None)?);
        }
        for (accumulator, arguments) in self.accumulators.iter_mut().zip(&self.arguments) {
            let values = arguments
                .iter()
                .map(|e| e.evaluate(batch)?.into_array(rows))
                .collect::<Result<Vec<_>>>()?;
            accumulator.update_batch(&values, &runs.row_run, None, run_count)?;
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        self.seen_rows += rows;
        self.runs += run_count;
        self.runs_counted.add(run_count);
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    /// Whether the runs so far are too short to be worth it.
    fn runs_too_short(&self) -> bool {
        self.seen_rows >= PROBE_ROWS && self.seen_rows < self.runs.saturating_mul(RUN_ROWS_MIN)
    }

    /// Hands the rest of the input to DataFusion's partial aggregation.
    fn fall_back(&mut self) -> Result<()> {
        let Some(input) = self.input.take() else {
            return Ok(());
        };
        let replay = Arc::new(ReplayExec {
            stream: Mutex::new(Some(input)),
            properties: Arc::clone(&self.fallback.input_properties),
        });
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep);
        let aggregate =
            Arc::clone(&self.fallback.aggregate).replace_children(vec![replay], options)?;
        self.delegate =
            Some(aggregate.execute(self.fallback.partition, Arc::clone(&self.fallback.context))?);
        self.fell_back.add(1);
        Ok(())
    }

    fn poll_runs(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<RecordBatch>>> {
        loop {
            if let Some(delegate) = self.delegate.as_mut() {
                return delegate.poll_next_unpin(cx);
            }
            let Some(input) = self.input.as_mut() else {
                return Poll::Ready(None);
            };
            match input.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(batch))) if batch.num_rows() == 0 => continue,
                Poll::Ready(Some(Ok(batch))) => {
                    let states = self.aggregate(&batch);
                    if states.is_ok() && self.runs_too_short() {
                        if let Err(e) = self.fall_back() {
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                    return Poll::Ready(Some(states));
                }
                Poll::Ready(None) => {
                    self.input = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }
}

impl Stream for RunAggregateStream {
    type Item = Result<RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        let polled = self.poll_runs(cx);
        self.baseline.record_poll(polled)
    }
}

impl RecordBatchStream for RunAggregateStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// The rest of an input stream, as a plan DataFusion's aggregation can execute once.
struct ReplayExec {
    stream: Mutex<Option<SendableRecordBatchStream>>,
    properties: Arc<PlanProperties>,
}

impl std::fmt::Debug for ReplayExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayExec")
    }
}

impl DisplayAs for ReplayExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayExec")
    }
}

impl ExecutionPlan for ReplayExec {
    fn name(&self) -> &str {
        "ReplayExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            return Ok(self);
        }
        Err(DataFusionError::Internal(
            "ReplayExec has no children".into(),
        ))
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let taken = self
            .stream
            .lock()
            .map_err(|_| DataFusionError::Internal("ReplayExec lock poisoned".into()))?
            .take();
        match taken {
            Some(stream) => Ok(Box::pin(RecordBatchStreamAdapter::new(
                stream.schema(),
                stream,
            ))),
            None => Err(DataFusionError::Internal(
                "ReplayExec executed twice".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringViewArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;

    #[test]
    fn runs_are_found_in_every_key_column_with_nulls_equal() {
        let hosts: ArrayRef = Arc::new(StringViewArray::from(vec![
            Some("a"),
            Some("a"),
            Some("a"),
            None,
            None,
            Some("b"),
        ]));
        let hours: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(1),
            Some(1),
            Some(2),
            None,
            None,
            None,
        ]));
        let runs = runs_of(&[hosts, hours]).expect("runs");
        assert_eq!(runs.starts.values().to_vec(), vec![0, 2, 3, 5]);
        assert_eq!(runs.row_run, vec![0, 0, 1, 2, 2, 3]);
        let one: ArrayRef = Arc::new(Int64Array::from(vec![7]));
        let runs = runs_of(&[one]).expect("runs");
        assert_eq!(runs.starts.values().to_vec(), vec![0]);
        assert_eq!(runs.row_run, vec![0]);
    }

    /// `rows` rows of (host, hour, value) in two partitions; `sorted` gives runs of a
    /// few hundred rows per (host, hour), otherwise keys change on nearly every row.
    fn table(rows: usize, sorted: bool) -> MemTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", DataType::Utf8View, true),
            Field::new("hour", DataType::Int64, true),
            Field::new("value", DataType::Float64, true),
        ]));
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut partitions = Vec::new();
        for part in 0..2 {
            let mut batches = Vec::new();
            let mut row = 0;
            while row < rows / 2 {
                let len = (rows / 2 - row).min(8192);
                let mut hosts = Vec::with_capacity(len);
                let mut hours = Vec::with_capacity(len);
                let mut values = Vec::with_capacity(len);
                for i in row..row + len {
                    let (host, hour) = if sorted {
                        (i / 3000 + part * 100, (i / 300) % 10)
                    } else {
                        ((next() % 40) as usize, (next() % 3) as usize)
                    };
                    // Every 97th host is null, as a tag a row lacks.
                    hosts.push((host % 97 != 5).then(|| format!("host_{host}")));
                    hours.push(Some(hour as i64));
                    values.push((i % 11 != 0).then(|| (next() % 1000) as f64 / 10.0));
                }
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(StringViewArray::from(hosts)),
                    Arc::new(Int64Array::from(hours)),
                    Arc::new(Float64Array::from(values)),
                ];
                batches.push(RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch"));
                row += len;
            }
            partitions.push(batches);
        }
        MemTable::try_new(schema, partitions).expect("table")
    }

    fn context(rows: usize, sorted: bool, with_rule: bool) -> SessionContext {
        let mut builder = SessionStateBuilder::new()
            .with_default_features()
            .with_config(SessionConfig::new().with_target_partitions(2));
        if with_rule {
            builder = builder.with_physical_optimizer_rule(Arc::new(PartialAggregateOverRuns));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.register_table("t", Arc::new(table(rows, sorted)))
            .expect("register");
        ctx
    }

    async fn run(ctx: &SessionContext, sql: &str) -> String {
        let batches = ctx
            .sql(sql)
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        pretty_format_batches(&batches).expect("format").to_string()
    }

    /// Sums and means rounded: floating-point addition in another order differs in the
    /// last bits, as it does between DataFusion's own partitionings.
    const SQL: &str = "SELECT host, hour, count(*), count(value), round(sum(value), 6), \
                       round(avg(value), 6), min(value), max(value) FROM t \
                       GROUP BY host, hour ORDER BY host, hour";

    async fn same_answer_as_datafusion(rows: usize, sorted: bool) -> String {
        let with = context(rows, sorted, true);
        let without = context(rows, sorted, false);
        let analyzed = run(&with, &format!("EXPLAIN ANALYZE {SQL}")).await;
        assert!(analyzed.contains("RunPartialAggregateExec"), "{analyzed}");
        assert_eq!(run(&with, SQL).await, run(&without, SQL).await);
        analyzed
    }

    #[tokio::test]
    async fn runs_give_datafusion_s_answer_with_one_state_per_run() {
        let analyzed = same_answer_as_datafusion(200_000, true).await;
        assert!(analyzed.contains("fell_back=0"), "{analyzed}");
    }

    #[tokio::test]
    async fn input_without_runs_falls_back_to_datafusion_and_gives_its_answer() {
        let analyzed = same_answer_as_datafusion(200_000, false).await;
        assert!(analyzed.contains("fell_back=2"), "{analyzed}");
    }

    #[tokio::test]
    async fn aggregates_it_cannot_run_per_run_keep_datafusion_s_operator() {
        let ctx = context(1_000, true, true);
        for sql in [
            "SELECT host, count(DISTINCT hour), count(DISTINCT value) FROM t GROUP BY host",
            "SELECT host, sum(value) FILTER (WHERE hour > 3) FROM t GROUP BY host",
            "SELECT host, array_agg(value ORDER BY hour) FROM t GROUP BY host",
            "SELECT sum(value) FROM t",
        ] {
            let plan = run(&ctx, &format!("EXPLAIN {sql}")).await;
            assert!(!plan.contains("RunPartialAggregateExec"), "{sql}: {plan}");
        }
    }
}
