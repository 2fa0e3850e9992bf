//! The query engine: one fresh, sandboxed DataFusion session per query, run on the
//! query runtime.
//!
//! What is built once and shared: the catalog over the [`TableSource`], the function
//! registry (DataFusion's built-ins plus `time_bucket`), the Parquet metadata cache, the
//! query runtime, the admission queue and the node-wide memory budget. What each query
//! gets for itself: a session whose default schema is the requested database, a memory
//! pool of `memory_bytes_max` (also drawing from the node's `node_memory_bytes_max`)
//! with spilling disabled, and a deadline of `timeout_ms` covering queueing, planning
//! and execution.
//!
//! A query's life: [`Admission`](crate::admission) gives it a slot (or a place in the
//! queue, or `Busy`); its session is built here; planning and execution run as one task
//! on the [`QueryRuntime`](crate::runtime) (`produce`), which sends results through a
//! bounded channel to the [`ResultStream`] the caller holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::catalog::{CatalogProviderList, MemoryCatalogProviderList};
use datafusion::common::ScalarValue;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::FunctionRegistry;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use quiver_storage::TableSource;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::admission::Admission;
use crate::catalog::{QueryAccess, QuiverCatalog, CATALOG_NAME};
use crate::config::{QueryConfig, RESULT_CHUNKS_AHEAD_MAX};
use crate::distributed::Distribution;
use crate::encode::BatchEncoder;
use crate::error::Error;
use crate::memory::{NodeMemory, QueryMemoryPool};
use crate::pg_catalog::PgCatalogs;
use crate::produce::{self, Batches, Described, Encoded, QuerySession, Sink};
use crate::runtime::QueryRuntime;
use crate::stream::{EncodedStream, QueryStream, ResultStream};
use crate::udf;

/// URL under which the storage object store is registered in every query's runtime;
/// [`quiver_storage::ParquetFileRef::path`] is resolved against it.
pub const STORAGE_URL: &str = "quiver://storage/";

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

/// What the engine is doing right now, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryStats {
    /// Queries holding a slot (planning, executing or streaming their result).
    pub running: usize,
    /// Queries waiting for a slot.
    pub queued: usize,
    /// Bytes reserved by all running queries together.
    pub memory_bytes: usize,
}

/// Runs read-only SQL over a [`TableSource`]. Cheap to clone; clones share everything.
/// Callers must be inside a Tokio runtime (deadlines use its timer); the queries
/// themselves run on the engine's own runtime.
#[derive(Clone)]
pub struct QueryEngine {
    inner: Arc<Shared>,
}

struct Shared {
    source: Arc<dyn TableSource>,
    config: QueryConfig,
    /// The catalog, the functions and every query's settings (all but the default
    /// database): an unrestricted query's session is a clone of it, which costs a
    /// fraction of `SessionStateBuilder::build` (5 % of a small query's CPU). Its
    /// runtime's memory pool holds nothing (`GreedyMemoryPool` of 0 bytes): a query
    /// executes with its own runtime ([`QueryEngine::runtime_env`], through its
    /// `TaskContext`), so anything reserving memory through this state fails loudly
    /// instead of escaping the query's limits.
    query_state: SessionState,
    /// Holds the caches (Parquet footers and page indexes) every query shares.
    base_runtime: Arc<RuntimeEnv>,
    admission: Admission,
    node_memory: Arc<NodeMemory>,
    /// The `pg_catalog` schemas of Postgres clients, one per database and token scope.
    pg_catalogs: PgCatalogs,
    /// Set when measurements held by other nodes are scanned where they are held.
    distribution: Option<Distribution>,
    /// Functions and settings a worker lends the stages other nodes send it.
    base_state: SessionState,
    /// Last, so it shuts down after everything that could still hand it work.
    runtime: QueryRuntime,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// An engine over `source`, with its runtime started; zeros in `config` are raised
    /// to one. Fails only if the runtime's threads cannot be started.
    pub fn new(source: Arc<dyn TableSource>, config: QueryConfig) -> Result<Self, Error> {
        Self::with_distribution(source, config, None)
    }

    /// An engine that, given `distribution`, runs the scans of measurements held by
    /// other nodes on those nodes (and serves theirs: [`Self::serve_worker`]).
    pub fn with_distribution(
        source: Arc<dyn TableSource>,
        config: QueryConfig,
        distribution: Option<Distribution>,
    ) -> Result<Self, Error> {
        let config = config.sanitized();
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(
            CATALOG_NAME.to_string(),
            Arc::new(
                QuiverCatalog::new(Arc::clone(&source), QueryAccess::all())
                    .scanning_at_members(distribution.is_some()),
            ),
        );
        let base_config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG_NAME, "default")
            .with_create_default_catalog_and_schema(false);
        let mut builder = SessionStateBuilder::new_with_default_features()
            .with_config(base_config)
            .with_catalog_list(Arc::new(catalogs) as Arc<dyn CatalogProviderList>)
            .with_physical_optimizer_rules(physical_rules(config.group_runs));
        // No table factories and no file formats: nothing to back `CREATE EXTERNAL
        // TABLE` or `COPY` even if a statement slipped past the sandbox.
        *builder.table_factories() = Some(HashMap::new());
        *builder.file_formats() = Some(Vec::new());
        // Quiver's `avg` replaces DataFusion's (same name and aliases; see `avg`).
        let aggregates = builder.aggregate_functions().get_or_insert_with(Vec::new);
        aggregates.retain(|f| f.name() != "avg");
        aggregates.push(crate::avg::avg());
        // Postgres's catalog functions and type names first, so that Quiver's own
        // functions of the same name (`quote_ident`, `parse_ident`, `current_schema`,
        // ...) replace the crate's.
        let mut base_state = crate::pg_catalog::install(builder.build())?;
        let pg_catalogs = PgCatalogs::new()?;
        let mut functions = vec![
            udf::time_bucket(),
            crate::pg_parse_ident::function(),
            pg_catalogs.to_regtype()?,
        ];
        functions.extend(crate::pg_functions::functions());
        for function in functions {
            let _replaced = base_state.register_udf(function)?;
        }
        let base_runtime = RuntimeEnvBuilder::new()
            .with_metadata_cache_limit(config.footer_cache_bytes_max)
            .build_arc()?;
        let planning_runtime = runtime_env_for(
            &base_runtime,
            &source,
            Arc::new(GreedyMemoryPool::new(0)) as Arc<dyn MemoryPool>,
        )?;
        let query_state = distributed(
            SessionStateBuilder::new_from_existing(base_state.clone())
                .with_config(session_config(&config, "default"))
                .with_runtime_env(planning_runtime),
            distribution.as_ref(),
            &source,
        )
        .build();
        Ok(QueryEngine {
            inner: Arc::new(Shared {
                source,
                query_state,
                base_runtime,
                admission: Admission::new(config.concurrency_max, config.queue_max),
                pg_catalogs,
                distribution,
                base_state,
                node_memory: Arc::new(NodeMemory::new(config.node_memory_bytes_max)),
                runtime: QueryRuntime::new(config.threads, config.thread_nice)?,
                config,
            }),
        })
    }

    /// The engine's settings.
    pub fn config(&self) -> &QueryConfig {
        &self.inner.config
    }

    /// Running and queued queries and the memory they hold.
    pub fn stats(&self) -> QueryStats {
        QueryStats {
            running: self.inner.admission.running(),
            queued: self.inner.admission.queued(),
            memory_bytes: self.inner.node_memory.used_bytes(),
        }
    }

    /// Runs `sql` against `database` and collects the whole result.
    pub async fn execute(&self, database: &str, sql: &str) -> Result<QueryOutput, Error> {
        self.execute_stream(database, sql).await?.collect().await
    }

    /// Plans `sql` against `database` and starts it; batches arrive as the stream is
    /// polled. The deadline keeps running while the caller consumes the stream.
    pub async fn execute_stream(&self, database: &str, sql: &str) -> Result<QueryStream, Error> {
        self.start(database, sql, &QueryAccess::all(), |_| Batches)
            .await
    }

    /// [`execute_stream`](Self::execute_stream) for a client that may read only the
    /// databases `access` allows, with the statement's placeholders (`$1`, ...) bound to
    /// `params` when given (a prepared statement of the Postgres protocol).
    pub async fn execute_stream_as(
        &self,
        database: &str,
        sql: &str,
        params: Option<Vec<ScalarValue>>,
        access: &QueryAccess,
    ) -> Result<QueryStream, Error> {
        self.start_with(None, database, sql, params, access, |_| Batches)
            .await
    }

    /// Plans `sql` against `database` without running it and tells its result's schema
    /// and its placeholders' types; with `params`, the placeholders are bound first.
    /// Planning takes a query slot and keeps to the query timeout like any query.
    pub async fn describe_as(
        &self,
        database: &str,
        sql: &str,
        params: Option<Vec<ScalarValue>>,
        access: &QueryAccess,
    ) -> Result<Described, Error> {
        let timeout_ms = self.inner.config.timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let _slot = self.inner.admission.admit(deadline, timeout_ms).await?;
        // Planning only: nothing executes, so no memory pool of its own.
        let state = self.session(None, database, access)?;
        let task =
            self.inner
                .runtime
                .handle()
                .spawn(produce::describe(state, sql.to_string(), params));
        let abort = task.abort_handle();
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(described)) => described,
            Ok(Err(e)) => Err(Error::Internal(format!("planning task failed: {e}"))),
            Err(_) => {
                abort.abort();
                Err(Error::Timeout { ms: timeout_ms })
            }
        }
    }

    /// Like [`execute_stream`](Self::execute_stream), but the result is encoded by
    /// `encoder` on the query runtime and arrives as chunks of bytes. The first chunk
    /// carries the format's header with the first rows (or the whole, empty, result).
    pub async fn execute_encoded(
        &self,
        database: &str,
        sql: &str,
        encoder: Box<dyn BatchEncoder>,
    ) -> Result<EncodedStream, Error> {
        self.execute_encoded_as(database, sql, encoder, &QueryAccess::all())
            .await
    }

    /// [`execute_encoded`](Self::execute_encoded) for a client that may read only the
    /// databases `access` allows.
    pub async fn execute_encoded_as(
        &self,
        database: &str,
        sql: &str,
        encoder: Box<dyn BatchEncoder>,
        access: &QueryAccess,
    ) -> Result<EncodedStream, Error> {
        self.start(database, sql, access, |pool| Encoded::new(encoder, pool))
            .await
    }

    /// Runs `sql` against `database` as `source` sees the tables (a continuous query's
    /// window, the rows a delete hid), under the same admission, limits and sandbox as
    /// any query, and collects the result. `source` must read the same object store.
    pub async fn execute_over(
        &self,
        source: Arc<dyn TableSource>,
        database: &str,
        sql: &str,
    ) -> Result<QueryOutput, Error> {
        self.start_over(Some(source), database, sql, &QueryAccess::all(), |_| {
            Batches
        })
        .await?
        .collect()
        .await
    }

    /// Admits the query, builds its session and starts it on the query runtime.
    async fn start<S: Sink>(
        &self,
        database: &str,
        sql: &str,
        access: &QueryAccess,
        sink: impl FnOnce(&Arc<QueryMemoryPool>) -> S,
    ) -> Result<ResultStream<S::Item>, Error> {
        self.start_over(None, database, sql, access, sink).await
    }

    async fn start_over<S: Sink>(
        &self,
        source: Option<Arc<dyn TableSource>>,
        database: &str,
        sql: &str,
        access: &QueryAccess,
        sink: impl FnOnce(&Arc<QueryMemoryPool>) -> S,
    ) -> Result<ResultStream<S::Item>, Error> {
        self.start_with(source, database, sql, None, access, sink)
            .await
    }

    async fn start_with<S: Sink>(
        &self,
        source: Option<Arc<dyn TableSource>>,
        database: &str,
        sql: &str,
        params: Option<Vec<ScalarValue>>,
        access: &QueryAccess,
        sink: impl FnOnce(&Arc<QueryMemoryPool>) -> S,
    ) -> Result<ResultStream<S::Item>, Error> {
        let timeout_ms = self.inner.config.timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let slot = self.inner.admission.admit(deadline, timeout_ms).await?;
        let pool = Arc::new(QueryMemoryPool::new(
            self.inner.config.memory_bytes_max,
            Arc::clone(&self.inner.node_memory),
        ));
        let state = self.session(source, database, access)?;
        let runtime = self.runtime_env(&pool)?;
        let sink = sink(&pool);
        let (tx, rx) = mpsc::channel(RESULT_CHUNKS_AHEAD_MAX);
        let task = self.inner.runtime.handle().spawn(produce::run(
            QuerySession { state, runtime },
            sql.to_string(),
            params,
            self.inner.config.join_pairs_max,
            Arc::clone(&pool),
            sink,
            tx,
        ));
        ResultStream::start(rx, task, slot, deadline, timeout_ms, pool).await
    }

    /// A fresh session for one query against `database`. It plans only: the query
    /// executes with [`Self::runtime_env`] (its memory pool) through its `TaskContext`.
    fn session(
        &self,
        source: Option<Arc<dyn TableSource>>,
        database: &str,
        access: &QueryAccess,
    ) -> Result<SessionState, Error> {
        if !access.is_restricted() && !access.has_pg_catalog() && source.is_none() {
            let mut state = self.inner.query_state.clone();
            state.config_mut().options_mut().catalog.default_schema = database.to_string();
            return Ok(state);
        }
        let source = source.unwrap_or_else(|| Arc::clone(&self.inner.source));
        let mut catalog = QuiverCatalog::new(source, access.clone())
            .scanning_at_members(self.inner.distribution.is_some());
        if access.has_pg_catalog() {
            let pg_catalog = self
                .inner
                .pg_catalogs
                .schema(catalog.clone(), database, access)?;
            catalog = catalog.with_pg_catalog(pg_catalog);
        }
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(CATALOG_NAME.to_string(), Arc::new(catalog));
        Ok(distributed(
            SessionStateBuilder::new_from_existing(self.inner.query_state.clone())
                .with_config(session_config(&self.inner.config, database))
                .with_catalog_list(Arc::new(catalogs) as Arc<dyn CatalogProviderList>),
            self.inner.distribution.as_ref(),
            &self.inner.source,
        )
        .build())
    }

    /// Per-query runtime environment: its memory pool, no spilling, and an object store
    /// registry holding only the storage store (no `file://`).
    fn runtime_env(&self, pool: &Arc<QueryMemoryPool>) -> Result<Arc<RuntimeEnv>, Error> {
        runtime_env_for(
            &self.inner.base_runtime,
            &self.inner.source,
            Arc::clone(pool) as Arc<dyn MemoryPool>,
        )
    }
}

impl QueryEngine {
    /// Serves, on `listener`, the stages other nodes send to run here (scans of the
    /// groups this node holds), on the query runtime and under one query's memory
    /// limit, counted in the node's. Calls without the cluster secret are refused
    /// before anything is decoded. Does nothing without a distribution.
    pub fn serve_worker(&self, listener: std::net::TcpListener) -> Result<(), Error> {
        let Some(distribution) = &self.inner.distribution else {
            return Ok(());
        };
        let pool = Arc::new(QueryMemoryPool::new(
            self.inner.config.memory_bytes_max,
            Arc::clone(&self.inner.node_memory),
        ));
        let worker = crate::distributed::worker(
            &self.inner.base_state,
            distribution,
            &self.inner.source,
            self.runtime_env(&pool)?,
            self.inner.config.group_runs,
        );
        let handle = self.inner.runtime.handle().clone();
        crate::distributed::serve(worker, listener, distribution.secret.clone(), &handle)
    }
}

/// `builder` with what sends stages to other nodes, when the node has a distribution.
fn distributed(
    builder: SessionStateBuilder,
    distribution: Option<&Distribution>,
    source: &Arc<dyn TableSource>,
) -> SessionStateBuilder {
    match distribution {
        Some(d) => crate::distributed::coordinator(builder, d, source),
        None => builder,
    }
}

/// Every query's settings, with `database` as the default schema.
fn session_config(config: &QueryConfig, database: &str) -> SessionConfig {
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
    // Tables declare tags as `Utf8View` themselves (see `provider`); string fields
    // stay `Utf8`, as declared, rather than being coerced to views behind our back.
    parquet.schema_force_view_types = false;
    session_config
}

/// A runtime sharing `base`'s caches, with `pool`, no spilling, and an object store
/// registry holding only the storage store (no `file://`).
fn runtime_env_for(
    base: &Arc<RuntimeEnv>,
    source: &Arc<dyn TableSource>,
    pool: Arc<dyn MemoryPool>,
) -> Result<Arc<RuntimeEnv>, Error> {
    let storage_url = ObjectStoreUrl::parse(STORAGE_URL)?;
    let registry = DefaultObjectStoreRegistry::new();
    // Present by default; nothing in a query may read the local filesystem directly.
    let _local = registry.deregister_store(ObjectStoreUrl::local_filesystem().as_ref());
    registry.register_store(storage_url.as_ref(), source.object_store());
    let runtime = RuntimeEnvBuilder::from_runtime_env(base)
        .with_object_store_registry(Arc::new(registry) as Arc<dyn ObjectStoreRegistry>)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .with_memory_pool(pool)
        .build_arc()?;
    Ok(runtime)
}

/// DataFusion's physical optimizer rules, with Quiver's join build-side rule right after
/// `JoinSelection` (it must run before filters are pushed into joins; see
/// [`crate::build_side`]), and last, with `group_runs`, the removal of repeated rows
/// before a `DISTINCT` ([`crate::collapse_runs`]) and partial aggregation run by run
/// ([`crate::run_aggregate`]).
fn physical_rules(group_runs: bool) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    let after = rules
        .iter()
        .position(|r| r.name() == "join_selection")
        .map_or(0, |i| i + 1);
    debug_assert!(after > 0, "DataFusion has no join_selection rule any more");
    rules.insert(after, Arc::new(crate::build_side::BuildOnAggregate));
    if group_runs {
        rules.push(Arc::new(crate::collapse_runs::CollapseRunsBeforeDistinct));
        rules.push(Arc::new(crate::run_aggregate::PartialAggregateOverRuns));
    }
    // Last: it cuts the settled plan into stages (only plans that scan a measurement
    // held elsewhere, which only a distributed engine plans).
    rules.push(Arc::new(crate::distributed::ScanWhereTheDataIs));
    rules
}
