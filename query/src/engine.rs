//! The query engine: one fresh, sandboxed DataFusion session per query.
//!
//! What is built once and shared: the catalog over the [`TableSource`], the function
//! registry (DataFusion's built-ins plus `time_bucket`) and the Parquet metadata cache.
//! What each query gets for itself: a session whose default schema is the requested
//! database, a memory pool of `memory_bytes_max` with spilling disabled, and a deadline
//! of `timeout_ms` covering planning and execution.
//!
//! Not yet here: a node-wide memory budget shared by concurrent queries and a queue that
//! bounds how many run at once. Both belong around [`QueryEngine::execute_stream`].

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::catalog::{CatalogProviderList, MemoryCatalogProviderList};
use datafusion::execution::config::SessionConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool, TrackConsumersPool};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use quiver_storage::TableSource;
use tokio::time::Instant;

use crate::catalog::{QuiverCatalog, CATALOG_NAME};
use crate::config::QueryConfig;
use crate::error::Error;
use crate::sandbox;
use crate::stream::QueryStream;
use crate::udf;

/// URL under which the storage object store is registered in every query's runtime;
/// [`quiver_storage::ParquetFileRef::path`] is resolved against it.
pub const STORAGE_URL: &str = "quiver://storage/";

/// Memory consumers named in a "memory limit exceeded" message.
const MEMORY_CONSUMERS_REPORTED: NonZeroUsize = NonZeroUsize::MIN.saturating_add(4);

/// A query's complete result.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    /// Column names and types of the result.
    pub schema: SchemaRef,
    /// The rows, in order.
    pub batches: Vec<RecordBatch>,
}

impl QueryOutput {
    /// Rows over all batches.
    pub fn row_count(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// Runs read-only SQL over a [`TableSource`]. Cheap to clone; clones share everything.
/// Queries must run inside a Tokio runtime: deadlines use its timer.
#[derive(Clone)]
pub struct QueryEngine {
    inner: Arc<Shared>,
}

struct Shared {
    source: Arc<dyn TableSource>,
    config: QueryConfig,
    /// Catalog and functions; each query's session starts as a copy of it.
    base_state: SessionState,
    /// Holds the caches (Parquet footers and page indexes) every query shares.
    base_runtime: Arc<RuntimeEnv>,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// An engine over `source`; zeros in `config` are raised to one.
    pub fn new(source: Arc<dyn TableSource>, config: QueryConfig) -> Self {
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(
            CATALOG_NAME.to_string(),
            Arc::new(QuiverCatalog::new(Arc::clone(&source))),
        );
        let base_config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG_NAME, "default")
            .with_create_default_catalog_and_schema(false);
        let mut builder = SessionStateBuilder::new_with_default_features()
            .with_config(base_config)
            .with_catalog_list(Arc::new(catalogs) as Arc<dyn CatalogProviderList>);
        // No table factories and no file formats: nothing to back `CREATE EXTERNAL
        // TABLE` or `COPY` even if a statement slipped past the sandbox.
        *builder.table_factories() = Some(HashMap::new());
        *builder.file_formats() = Some(Vec::new());
        builder
            .scalar_functions()
            .get_or_insert_with(Vec::new)
            .push(udf::time_bucket());
        QueryEngine {
            inner: Arc::new(Shared {
                source,
                config: config.sanitized(),
                base_state: builder.build(),
                base_runtime: Arc::new(RuntimeEnv::default()),
            }),
        }
    }

    /// The engine's settings.
    pub fn config(&self) -> &QueryConfig {
        &self.inner.config
    }

    /// Runs `sql` against `database` and collects the whole result.
    pub async fn execute(&self, database: &str, sql: &str) -> Result<QueryOutput, Error> {
        let started = Instant::now();
        let output = self.execute_stream(database, sql).await?.collect().await?;
        tracing::debug!(
            database,
            rows = output.row_count(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            "query finished"
        );
        Ok(output)
    }

    /// Plans `sql` against `database` and starts it; batches arrive as the stream is
    /// polled. The deadline keeps running while the caller consumes the stream.
    pub async fn execute_stream(&self, database: &str, sql: &str) -> Result<QueryStream, Error> {
        let timeout_ms = self.inner.config.timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let (state, plan) = tokio::time::timeout_at(deadline, self.plan(database, sql))
            .await
            .map_err(|_| Error::Timeout { ms: timeout_ms })??;
        let memory_pool = Arc::clone(&state.runtime_env().memory_pool);
        let stream = execute_stream(plan, state.task_ctx())?;
        Ok(QueryStream::new(
            stream,
            deadline,
            timeout_ms,
            memory_pool,
            self.inner.config.memory_bytes_max,
        ))
    }

    async fn plan(
        &self,
        database: &str,
        sql: &str,
    ) -> Result<(SessionState, Arc<dyn ExecutionPlan>), Error> {
        let mut state = self.session(database)?;
        let statement = sandbox::parse_read_only(sql, &state.config().options().sql_parser)?;
        // Fixes `now()` for the whole statement; the optimizer folds it into a literal.
        state.mark_start_execution();
        let logical = state.statement_to_plan(statement).await?;
        sandbox::check_plan(&logical)?;
        let physical = state.create_physical_plan(&logical).await?;
        Ok((state, physical))
    }

    /// A fresh session for one query against `database`.
    fn session(&self, database: &str) -> Result<SessionState, Error> {
        let config = &self.inner.config;
        let mut session_config = SessionConfig::new()
            .with_target_partitions(config.target_partitions)
            .with_batch_size(config.batch_size)
            .with_information_schema(true)
            .with_default_catalog_and_schema(CATALOG_NAME, database)
            .with_create_default_catalog_and_schema(false);
        let parquet = &mut session_config.options_mut().execution.parquet;
        // Filter rows while decoding (late materialisation), cheapest predicates first.
        parquet.pushdown_filters = true;
        parquet.reorder_filters = true;
        parquet.enable_page_index = true;
        // Tables declare Utf8 and dictionaries; reading strings as views would only add
        // a cast back.
        parquet.schema_force_view_types = false;
        Ok(
            SessionStateBuilder::new_from_existing(self.inner.base_state.clone())
                .with_config(session_config)
                .with_runtime_env(self.runtime()?)
                .build(),
        )
    }

    /// Per-query runtime: its own memory pool, no spilling, and an object store registry
    /// holding only the storage store (no `file://`).
    fn runtime(&self) -> Result<Arc<RuntimeEnv>, Error> {
        let storage_url = ObjectStoreUrl::parse(STORAGE_URL)?;
        let registry = DefaultObjectStoreRegistry::new();
        // Present by default; nothing in a query may read the local filesystem directly.
        let _local = registry.deregister_store(ObjectStoreUrl::local_filesystem().as_ref());
        registry.register_store(storage_url.as_ref(), self.inner.source.object_store());
        let memory_pool: Arc<dyn MemoryPool> = Arc::new(TrackConsumersPool::new(
            GreedyMemoryPool::new(self.inner.config.memory_bytes_max),
            MEMORY_CONSUMERS_REPORTED,
        ));
        let runtime = RuntimeEnvBuilder::from_runtime_env(&self.inner.base_runtime)
            .with_object_store_registry(Arc::new(registry) as Arc<dyn ObjectStoreRegistry>)
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
            )
            .with_memory_pool(memory_pool)
            .build_arc()?;
        Ok(runtime)
    }
}
