//! A measurement held by other nodes, as DataFusion plans it: its schema only, and a
//! scan that runs where the rows are ([`GroupScanExec`]).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quiver_storage::{HeldElsewhere, TableSource};

use super::group_scan::{GroupScan, GroupScanExec};
use crate::prune;

/// A table whose scan is planned here and run on a member of its group.
pub(crate) struct GroupTable {
    database: String,
    measurement: String,
    held: HeldElsewhere,
    /// The table's schema with tags as `Utf8View`, as a local table declares it.
    schema: SchemaRef,
    source: Arc<dyn TableSource>,
}

impl std::fmt::Debug for GroupTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTable")
            .field("database", &self.database)
            .field("measurement", &self.measurement)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl GroupTable {
    /// `storage_schema` is the schema as storage keeps it (tags dictionary-encoded).
    pub(crate) fn new(
        database: String,
        measurement: String,
        held: HeldElsewhere,
        storage_schema: &SchemaRef,
        source: Arc<dyn TableSource>,
    ) -> Self {
        GroupTable {
            database,
            measurement,
            held,
            schema: crate::provider::plain_strings_schema(storage_schema),
            source,
        }
    }
}

#[async_trait]
impl TableProvider for GroupTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let scan = GroupScan {
            database: self.database.clone(),
            measurement: self.measurement.clone(),
            group: self.held.group,
            members: self.held.members.clone(),
            projection: projection.cloned(),
            filters: filters.to_vec(),
            limit,
            table_schema: Arc::clone(&self.schema),
            partitions: state.config().target_partitions().max(1),
        };
        Ok(Arc::new(GroupScanExec::new(
            scan,
            Arc::clone(&self.source),
        )?))
    }

    /// As a local table answers (see `provider`): the scan that runs on the member
    /// plans the same table with the same filters, so it honours the same bounds.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(prune::pushdown(filters))
    }
}
