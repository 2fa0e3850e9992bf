//! The half of a query that runs on the query runtime: plan, execute, and hand results
//! (batches, or chunks of an encoded format) to the caller through a bounded channel.
//!
//! Protocol on the channel: `Ready(schema)` once planning succeeded, then any number of
//! `Item`s, then `Done`; or `Failed` at any point, after which nothing follows. A channel
//! that closes without `Done` or `Failed` means the task died (a panic) and is reported
//! as an internal error, never as a complete result.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::client_types;
use crate::distributed::Reruns;
use crate::encode::BatchEncoder;
use crate::error::Error;
use crate::join_guard;
use crate::memory::QueryMemoryPool;
use crate::sandbox;

/// One message from a running query to its consumer.
#[derive(Debug)]
pub(crate) enum Message<T> {
    /// Planned; every item has this schema.
    Ready(SchemaRef),
    /// A batch, or a chunk of encoded bytes.
    Item(T),
    /// The result is complete.
    Done,
    /// The query failed; nothing follows.
    Failed(Error),
}

/// What the task turns batches into before sending them.
pub(crate) trait Sink: Send + 'static {
    /// What the consumer receives.
    type Item: Send + 'static;
    /// Called once with the result's schema, before any batch.
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), Error>;
    /// Takes one batch; returns what to send now, if anything.
    fn push(&mut self, batch: RecordBatch) -> Result<Option<Self::Item>, Error>;
    /// Called after the last batch; returns what to send last, if anything.
    fn finish(&mut self) -> Result<Option<Self::Item>, Error>;
}

/// Sends batches as they are.
pub(crate) struct Batches;

impl Sink for Batches {
    type Item = RecordBatch;

    fn begin(&mut self, _schema: &SchemaRef) -> Result<(), Error> {
        Ok(())
    }

    fn push(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>, Error> {
        Ok((batch.num_rows() > 0).then_some(batch))
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>, Error> {
        Ok(None)
    }
}

/// Encodes batches on the query runtime and sends the bytes. What comes before the first
/// row is sent together with the first rows (or the end), so a consumer that waits for
/// the first chunk learns about early failures before it has committed to success.
pub(crate) struct Encoded {
    encoder: Box<dyn BatchEncoder>,
    pending: Vec<u8>,
    /// What an encoder holding the whole result keeps, counted against the limits.
    held: MemoryReservation,
}

impl Encoded {
    pub(crate) fn new(encoder: Box<dyn BatchEncoder>, pool: &Arc<QueryMemoryPool>) -> Self {
        Encoded {
            encoder,
            pending: Vec::new(),
            held: pool.reservation("encoded result"),
        }
    }

    fn take_pending(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.pending)))
    }
}

impl Sink for Encoded {
    type Item = Bytes;

    fn begin(&mut self, schema: &SchemaRef) -> Result<(), Error> {
        self.encoder.begin(schema, &mut self.pending)
    }

    fn push(&mut self, batch: RecordBatch) -> Result<Option<Bytes>, Error> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        if self.encoder.holds_result() {
            self.held.try_grow(quiver_storage::held_bytes(&batch))?;
        }
        self.encoder.write_batch(&batch, &mut self.pending)?;
        Ok(self.take_pending())
    }

    fn finish(&mut self) -> Result<Option<Bytes>, Error> {
        self.encoder.finish(&mut self.pending)?;
        self.held.free();
        Ok(self.take_pending())
    }
}

/// What a query plans with, and the runtime it executes in: the runtime carries the
/// query's memory pool, the session (shared settings, cloned) only plans.
pub(crate) struct QuerySession {
    /// Catalog, functions and settings, the default database set.
    pub(crate) state: SessionState,
    /// The query's own runtime (memory pool, object store, caches).
    pub(crate) runtime: Arc<RuntimeEnv>,
}

/// Plans and runs `sql` in `state`, sending results to `tx` until done, failed, or the
/// consumer is gone (then it stops at the next batch; the consumer also aborts it).
pub(crate) async fn run<S: Sink>(
    session: QuerySession,
    sql: String,
    params: Option<Vec<ScalarValue>>,
    join_pairs_max: u64,
    pool: Arc<QueryMemoryPool>,
    mut sink: S,
    tx: mpsc::Sender<Message<S::Item>>,
) {
    let started = std::time::Instant::now();
    let outcome = produce(session, &sql, params, join_pairs_max, &mut sink, &tx).await;
    let message = match outcome {
        Ok(rows) => {
            tracing::debug!(
                rows,
                elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                "query finished"
            );
            Message::Done
        }
        Err(err) => Message::Failed(err.with_memory_limit(pool.limit_hit())),
    };
    // The consumer may be gone already; then nobody needs to hear the end.
    let _ = tx.send(message).await;
}

/// The rows sent, or why it stopped. A consumer that went away ends it with `Ok`.
async fn produce<S: Sink>(
    QuerySession { mut state, runtime }: QuerySession,
    sql: &str,
    params: Option<Vec<ScalarValue>>,
    join_pairs_max: u64,
    sink: &mut S,
    tx: &mpsc::Sender<Message<S::Item>>,
) -> Result<usize, Error> {
    let logical = plan_logical(&mut state, sql, params).await?;
    // The query's own runtime: its memory pool and limits (the session only plans).
    let context = Arc::new(TaskContext::from(&state).with_runtime(runtime));
    let mut reruns = Reruns::new(state.config());
    let mut began = false;
    loop {
        reruns.starting();
        // Planned for every run: a run again after a worker failed is routed anew.
        let plan = state.create_physical_plan(&logical).await?;
        join_guard::check_join_sizes(&plan, join_pairs_max)?;
        let client_schema = client_types::client_schema(&plan.schema());
        if !began {
            let schema = client_schema.clone().unwrap_or_else(|| plan.schema());
            sink.begin(&schema)?;
            if tx.send(Message::Ready(schema)).await.is_err() {
                return Ok(0);
            }
            began = true;
        }
        match send_rows(plan, &context, client_schema.as_ref(), sink, tx).await {
            Ok(rows) => return Ok(rows),
            Err(Failure::Run { sent: false, .. }) if reruns.run_again() => continue,
            Err(Failure::Run { error, .. })
                if reruns.worker_failed()
                    && !matches!(error.find_root(), DataFusionError::ResourcesExhausted(_)) =>
            {
                return Err(Error::Unavailable(format!(
                    "a node holding data this query reads could not be reached; retry \
                     later: {}",
                    error.strip_backtrace()
                )))
            }
            Err(Failure::Run { error, .. }) => return Err(error.into()),
            Err(Failure::Send(error)) => return Err(error),
        }
    }
}

/// Why a run stopped.
enum Failure {
    /// The plan failed; `sent` says whether rows had reached the sink by then.
    Run { error: DataFusionError, sent: bool },
    /// Handing rows on failed (encoding, the result's memory): never run again.
    Send(Error),
}

/// Executes `plan` and sends its rows through `sink`; the rows sent, or why it failed.
async fn send_rows<S: Sink>(
    plan: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    client_schema: Option<&SchemaRef>,
    sink: &mut S,
    tx: &mpsc::Sender<Message<S::Item>>,
) -> Result<usize, Failure> {
    let mut sent = false;
    let mut batches =
        execute_stream(plan, Arc::clone(context)).map_err(|error| Failure::Run { error, sent })?;
    let mut rows = 0;
    while let Some(batch) = batches.next().await {
        let mut batch = batch.map_err(|error| Failure::Run { error, sent })?;
        if let Some(client_schema) = client_schema {
            batch = client_types::to_client(&batch, client_schema).map_err(Failure::Send)?;
        }
        rows += batch.num_rows();
        // From the first batch on, the sink holds rows: the run cannot be repeated.
        sent = true;
        if let Some(item) = sink.push(batch).map_err(Failure::Send)? {
            if tx.send(Message::Item(item)).await.is_err() {
                return Ok(rows);
            }
        }
    }
    if let Some(item) = sink.finish().map_err(Failure::Send)? {
        // A closed channel is noticed by the final send in `run`.
        let _ = tx.send(Message::Item(item)).await;
    }
    Ok(rows)
}

/// Parses, checks and plans one read-only statement, its placeholders (`$1`, ...)
/// replaced by `params` when given.
async fn plan_logical(
    state: &mut SessionState,
    sql: &str,
    params: Option<Vec<ScalarValue>>,
) -> Result<LogicalPlan, Error> {
    let statement = sandbox::parse_read_only(sql, &state.config().options().sql_parser)?;
    // Fixes `now()` for the whole statement; the optimizer folds it into a literal.
    state.mark_start_execution();
    let mut logical = state.statement_to_plan(statement).await?;
    sandbox::check_plan(&logical)?;
    if let Some(params) = params {
        logical = logical.with_param_values(ParamValues::List(
            params.into_iter().map(Into::into).collect(),
        ))?;
    }
    Ok(logical)
}

/// What a statement would answer without running it: its result's schema (as clients
/// see it) and the types of its placeholders, `$1` first (`None` where the statement
/// does not constrain one).
#[derive(Debug, Clone)]
pub struct Described {
    /// Columns of the result.
    pub schema: SchemaRef,
    /// Placeholder types by position.
    pub params: Vec<Option<DataType>>,
}

/// Plans `sql` in `state` (with `params` bound when given) and describes it.
pub(crate) async fn describe(
    mut state: SessionState,
    sql: String,
    params: Option<Vec<ScalarValue>>,
) -> Result<Described, Error> {
    let with_params = params.is_some();
    let logical = plan_logical(&mut state, &sql, params).await?;
    let mut types: Vec<Option<DataType>> = Vec::new();
    if !with_params {
        for (name, data_type) in logical.get_parameter_types()? {
            // `$1` is the first; anything else is not a positional placeholder.
            let Some(position) = name
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| (1..=PARAMS_MAX).contains(n))
            else {
                return Err(Error::Sql(format!(
                    "placeholder {name} must be $1 to ${PARAMS_MAX}"
                )));
            };
            if types.len() < position {
                types.resize(position, None);
            }
            types[position - 1] = data_type;
        }
    }
    let schema = Arc::new(logical.schema().as_arrow().clone());
    let schema = client_types::client_schema(&schema).unwrap_or(schema);
    Ok(Described {
        schema,
        params: types,
    })
}

/// Most placeholders one statement may have (the Postgres protocol's own bound).
pub const PARAMS_MAX: usize = 65_535;
