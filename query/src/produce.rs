//! The half of a query that runs on the query runtime: plan, execute, and hand results
//! (batches, or chunks of an encoded format) to the caller through a bounded channel.
//!
//! Protocol on the channel: `Ready(schema)` once planning succeeded, then any number of
//! `Item`s, then `Done`; or `Failed` at any point, after which nothing follows. A channel
//! that closes without `Done` or `Failed` means the task died (a panic) and is reported
//! as an internal error, never as a complete result.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::session_state::SessionState;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::client_types;
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
            self.held.try_grow(batch_bytes(&batch))?;
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

/// Plans and runs `sql` in `state`, sending results to `tx` until done, failed, or the
/// consumer is gone (then it stops at the next batch; the consumer also aborts it).
pub(crate) async fn run<S: Sink>(
    state: SessionState,
    sql: String,
    join_pairs_max: u64,
    pool: Arc<QueryMemoryPool>,
    mut sink: S,
    tx: mpsc::Sender<Message<S::Item>>,
) {
    let started = std::time::Instant::now();
    let outcome = produce(state, &sql, join_pairs_max, &mut sink, &tx).await;
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
    mut state: SessionState,
    sql: &str,
    join_pairs_max: u64,
    sink: &mut S,
    tx: &mpsc::Sender<Message<S::Item>>,
) -> Result<usize, Error> {
    let plan = plan(&mut state, sql).await?;
    join_guard::check_join_sizes(&plan, join_pairs_max)?;
    let client_schema = client_types::client_schema(&plan.schema());
    let schema = client_schema.clone().unwrap_or_else(|| plan.schema());
    sink.begin(&schema)?;
    if tx.send(Message::Ready(schema)).await.is_err() {
        return Ok(0);
    }
    let mut batches = execute_stream(plan, state.task_ctx())?;
    let mut rows = 0;
    while let Some(batch) = batches.next().await {
        let mut batch = batch?;
        if let Some(client_schema) = &client_schema {
            batch = client_types::to_client(&batch, client_schema)?;
        }
        rows += batch.num_rows();
        if let Some(item) = sink.push(batch)? {
            if tx.send(Message::Item(item)).await.is_err() {
                return Ok(rows);
            }
        }
    }
    if let Some(item) = sink.finish()? {
        // A closed channel is noticed by the final send in `run`.
        let _ = tx.send(Message::Item(item)).await;
    }
    Ok(rows)
}

/// Parses, checks and plans one read-only statement.
async fn plan(state: &mut SessionState, sql: &str) -> Result<Arc<dyn ExecutionPlan>, Error> {
    let statement = sandbox::parse_read_only(sql, &state.config().options().sql_parser)?;
    // Fixes `now()` for the whole statement; the optimizer folds it into a literal.
    state.mark_start_execution();
    let logical = state.statement_to_plan(statement).await?;
    sandbox::check_plan(&logical)?;
    Ok(state.create_physical_plan(&logical).await?)
}

/// Bytes of the rows a batch holds. Batches straight from memory can be slices of larger
/// buffers; only the slice counts.
pub(crate) fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| {
            column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size())
        })
        .sum()
}
