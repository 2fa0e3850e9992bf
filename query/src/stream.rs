//! A running query's result stream, bounded by the query's deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::execution::SendableRecordBatchStream;
use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

use crate::engine::QueryOutput;
use crate::error::Error;

/// Record batches of a running query, in order. Yields [`Error::Timeout`] once (and then
/// ends) if the query's deadline passes first. Dropping it cancels the query.
pub struct QueryStream {
    schema: SchemaRef,
    inner: SendableRecordBatchStream,
    deadline: Pin<Box<Sleep>>,
    timeout_ms: u64,
    memory_pool: Arc<dyn MemoryPool>,
    memory_bytes_max: usize,
    finished: bool,
}

impl QueryStream {
    pub(crate) fn new(
        inner: SendableRecordBatchStream,
        deadline: Instant,
        timeout_ms: u64,
        memory_pool: Arc<dyn MemoryPool>,
        memory_bytes_max: usize,
    ) -> Self {
        QueryStream {
            schema: inner.schema(),
            inner,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            timeout_ms,
            memory_pool,
            memory_bytes_max,
            finished: false,
        }
    }

    /// Schema of every batch the stream yields.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Runs the query to the end and keeps every batch. The kept batches count against
    /// the query's memory limit, so an oversized result fails instead of exhausting the
    /// node.
    pub async fn collect(mut self) -> Result<QueryOutput, Error> {
        let reservation = MemoryConsumer::new("query result").register(&self.memory_pool);
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await {
            let batch = batch?;
            reservation
                .try_grow(batch_bytes(&batch))
                .map_err(|e| Error::from(e).with_memory_limit(self.memory_bytes_max))?;
            batches.push(batch);
        }
        Ok(QueryOutput {
            schema: self.schema,
            batches,
        })
    }
}

/// Bytes of the rows a batch holds. Batches straight from memory can be slices of larger
/// buffers; only the slice counts.
fn batch_bytes(batch: &RecordBatch) -> usize {
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

impl Stream for QueryStream {
    type Item = Result<RecordBatch, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        // The deadline is checked before the plan is polled, so a plan that always has
        // a batch ready cannot outrun it.
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.finished = true;
            return Poll::Ready(Some(Err(Error::Timeout {
                ms: this.timeout_ms,
            })));
        }
        match this.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(Ok(batch))),
            Poll::Ready(Some(Err(err))) => {
                this.finished = true;
                let err = Error::from(err).with_memory_limit(this.memory_bytes_max);
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
