//! The caller's half of a running query: its results, bounded by the query's deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

use crate::admission::Slot;
use crate::engine::QueryOutput;
use crate::error::Error;
use crate::memory::QueryMemoryPool;
use crate::produce::Message;

/// Record batches of a running query, in order.
pub type QueryStream = ResultStream<RecordBatch>;

/// Chunks of a running query's result in an encoded format, in order; concatenated they
/// are the whole response body.
pub type EncodedStream = ResultStream<Bytes>;

/// The results of a running query. Yields [`Error::Timeout`] once (and then ends) if the
/// query's deadline passes first, and an error instead of a silent end if the query
/// fails or its task dies. Holds the query's concurrency slot; dropping it cancels the
/// query and frees the slot and the query's memory.
pub struct ResultStream<T> {
    schema: SchemaRef,
    rx: mpsc::Receiver<Message<T>>,
    task: AbortOnDrop,
    _slot: Slot,
    deadline: Pin<Box<Sleep>>,
    timeout_ms: u64,
    pool: Arc<QueryMemoryPool>,
    finished: bool,
}

/// Aborts the query task when the consumer goes away; DataFusion's own tasks stop with
/// it (they are aborted when their handles drop).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> ResultStream<T> {
    /// Waits (until the deadline) for the task to report the plan's schema or a failure.
    pub(crate) async fn start(
        mut rx: mpsc::Receiver<Message<T>>,
        task: JoinHandle<()>,
        slot: Slot,
        deadline: Instant,
        timeout_ms: u64,
        pool: Arc<QueryMemoryPool>,
    ) -> Result<Self, Error> {
        let task = AbortOnDrop(task);
        let first = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .map_err(|_| Error::Timeout { ms: timeout_ms })?;
        let schema = match first {
            Some(Message::Ready(schema)) => schema,
            Some(Message::Failed(err)) => return Err(err),
            Some(Message::Item(_) | Message::Done) => {
                return Err(Error::Internal(
                    "query sent results before its schema".into(),
                ))
            }
            None => return Err(died()),
        };
        Ok(ResultStream {
            schema,
            rx,
            task,
            _slot: slot,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            timeout_ms,
            pool,
            finished: false,
        })
    }

    /// Schema of the result.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

fn died() -> Error {
    Error::Internal("the query's task ended without finishing (see the server log)".into())
}

impl ResultStream<RecordBatch> {
    /// Runs the query to the end and keeps every batch. The kept batches count against
    /// the query's and the node's memory limits, so an oversized result fails instead of
    /// exhausting the node.
    pub async fn collect(mut self) -> Result<QueryOutput, Error> {
        let reservation = self.pool.reservation("query result");
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await {
            let batch = batch?;
            reservation
                .try_grow(quiver_storage::held_bytes(&batch))
                .map_err(|e| Error::from(e).with_memory_limit(self.pool.limit_hit()))?;
            batches.push(batch);
        }
        Ok(QueryOutput {
            schema: Arc::clone(&self.schema),
            batches,
        })
    }
}

impl<T> Stream for ResultStream<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        // The deadline is checked before the channel, so a query that always has a
        // result ready cannot outrun it.
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.finished = true;
            this.task.0.abort();
            return Poll::Ready(Some(Err(Error::Timeout {
                ms: this.timeout_ms,
            })));
        }
        let message = match this.rx.poll_recv(cx) {
            Poll::Ready(message) => message,
            Poll::Pending => return Poll::Pending,
        };
        match message {
            Some(Message::Item(item)) => Poll::Ready(Some(Ok(item))),
            Some(Message::Done) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Some(Message::Failed(err)) => {
                this.finished = true;
                Poll::Ready(Some(Err(err)))
            }
            Some(Message::Ready(_)) => {
                this.finished = true;
                Poll::Ready(Some(Err(Error::Internal(
                    "query sent its schema twice".into(),
                ))))
            }
            None => {
                this.finished = true;
                Poll::Ready(Some(Err(died())))
            }
        }
    }
}

impl<T> std::fmt::Debug for ResultStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultStream")
            .field("schema", &self.schema)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}
