//! The scan of a measurement held by other nodes, as a plan node that can travel.
//!
//! [`GroupScanExec`] names the table, the columns, the filters and the limit, not the
//! rows: planned on the receiving node, it is shipped with the operators above it
//! (filters, partial aggregates; see `stages`) to a member of the measurement's group,
//! which takes its own consistent snapshot there and plans the real scan over it
//! (memory rows unioned with Parquet files, as `provider` does for a local table). Only
//! the stage's output crosses the network.
//!
//! The snapshot is taken where the scan runs, when it runs, so every row the scan reads
//! comes from one snapshot of one replica: splitting one measurement's files over
//! several replicas would mix snapshots taken at different moments (a flush or a merge
//! in between counts rows twice or not at all).

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use quiver_storage::TableSource;
use tokio::sync::OnceCell;

use crate::provider::MeasurementTable;

/// What a [`GroupScanExec`] reads: everything needed to plan the scan again on the node
/// that runs it.
#[derive(Debug, Clone)]
pub(crate) struct GroupScan {
    pub(crate) database: String,
    pub(crate) measurement: String,
    /// The data group holding the measurement, and its members (preferred first).
    pub(crate) group: u64,
    pub(crate) members: Vec<u64>,
    /// Columns of the table's schema, as DataFusion asked for them.
    pub(crate) projection: Option<Vec<usize>>,
    /// The filters DataFusion pushed into the table (exact time bounds and the rest).
    pub(crate) filters: Vec<Expr>,
    pub(crate) limit: Option<usize>,
    /// The whole table's schema at planning (tags as `Utf8View`), which `projection`
    /// indexes.
    pub(crate) table_schema: SchemaRef,
    /// Output partitions, fixed at planning so the stage's shape does not depend on
    /// the node that runs it.
    pub(crate) partitions: usize,
}

impl GroupScan {
    /// The schema the scan produces.
    pub(crate) fn output_schema(&self) -> Result<SchemaRef> {
        Ok(match &self.projection {
            Some(p) => Arc::new(self.table_schema.project(p)?),
            None => Arc::clone(&self.table_schema),
        })
    }
}

/// A scan planned here and run on a member of the measurement's group.
pub(crate) struct GroupScanExec {
    scan: GroupScan,
    /// The node's tables, where the scan runs (a group it holds: local, no network).
    source: Arc<dyn TableSource>,
    properties: Arc<PlanProperties>,
    /// The real scan, planned once at the first partition's execution.
    planned: Arc<OnceCell<Arc<dyn ExecutionPlan>>>,
}

impl fmt::Debug for GroupScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupScanExec")
            .field("scan", &self.scan)
            .finish_non_exhaustive()
    }
}

impl GroupScanExec {
    pub(crate) fn new(scan: GroupScan, source: Arc<dyn TableSource>) -> Result<Self> {
        let schema = scan.output_schema()?;
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(scan.partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(GroupScanExec {
            scan,
            source,
            properties,
            planned: Arc::new(OnceCell::new()),
        })
    }

    pub(crate) fn scan(&self) -> &GroupScan {
        &self.scan
    }
}

impl DisplayAs for GroupScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let members: Vec<String> = self.scan.members.iter().map(u64::to_string).collect();
        write!(
            f,
            "GroupScanExec: {}.{}, group={}, nodes=[{}], partitions={}",
            self.scan.database,
            self.scan.measurement,
            self.scan.group,
            members.join(","),
            self.scan.partitions
        )?;
        if !self.scan.filters.is_empty() {
            let filters: Vec<String> = self.scan.filters.iter().map(|e| e.to_string()).collect();
            write!(f, ", filters=[{}]", filters.join(", "))?;
        }
        if let Some(limit) = self.scan.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GroupScanExec {
    fn name(&self) -> &str {
        "GroupScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let scan = self.scan.clone();
        let source = Arc::clone(&self.source);
        let planned = Arc::clone(&self.planned);
        let stream = futures::stream::once(async move {
            let plan = planned
                .get_or_try_init(|| plan_here(&scan, &source, &context))
                .await?;
            plan.execute(partition, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.boxed(),
        )))
    }
}

/// Plans the scan on this node: a snapshot of the table, the scan `provider` plans for
/// it, the pushed filters handed to the Parquet reader, spread over the partitions the
/// plan was given.
async fn plan_here(
    scan: &GroupScan,
    source: &Arc<dyn TableSource>,
    context: &Arc<TaskContext>,
) -> Result<Arc<dyn ExecutionPlan>> {
    metrics::counter!("quiver_query_stages_run_for_other_nodes_total").increment(1);
    let snapshot = source
        .fetch_table(&scan.database, &scan.measurement)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let expected = scan.output_schema()?;
    let Some(snapshot) = snapshot else {
        // Dropped since planning (retention, a delete of every row): no rows.
        return Ok(Arc::new(
            datafusion::physical_plan::empty::EmptyExec::new(expected)
                .with_partitions(scan.partitions.max(1)),
        ));
    };
    let table = MeasurementTable::new(snapshot);
    let changed = || {
        DataFusionError::Execution(format!(
            "{}.{} changed its columns while the query was planned; run it again",
            scan.database, scan.measurement
        ))
    };
    // Columns are found by name: a column added on this replica since planning moves
    // the others' positions (tags and fields are sorted by name).
    let here = datafusion::catalog::TableProvider::schema(&table);
    let projection = match &scan.projection {
        None if here.fields().len() == scan.table_schema.fields().len() => None,
        None => return Err(changed()),
        Some(p) => Some(
            p.iter()
                .map(|&i| here.index_of(scan.table_schema.field(i).name()))
                .collect::<std::result::Result<Vec<usize>, _>>()
                .map_err(|_| changed())?,
        ),
    };
    let state = SessionStateBuilder::new()
        .with_config(context.session_config().clone())
        .with_runtime_env(context.runtime_env())
        .build();
    let mut plan = table.plan_scan(&state, projection.as_ref(), &scan.filters, scan.limit)?;
    if plan.schema().fields() != expected.fields() {
        return Err(changed());
    }
    // The filters on the columns read, again here, so that the Parquet reader prunes
    // row groups and pages with them as for a local table (the stage's own filter stays
    // above; exact time bounds were applied by the scan itself).
    let readable = scan.filters.iter().filter(|f| {
        f.column_refs()
            .iter()
            .all(|c| expected.field_with_name(&c.name).is_ok())
    });
    if let Some(predicate) = conjunction(readable.cloned()) {
        let df_schema = DFSchema::try_from(Arc::clone(&expected))?;
        let physical = state.create_physical_expr(predicate, &df_schema)?;
        let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(physical, plan)?);
        plan = FilterPushdown::new().optimize(filtered, context.session_config().options())?;
    }
    let partitions = scan.partitions.max(1);
    if plan.output_partitioning().partition_count() != partitions {
        plan = Arc::new(RepartitionExec::try_new(
            plan,
            Partitioning::RoundRobinBatch(partitions),
        )?);
    }
    Ok(plan)
}
