//! Continuous queries on the leader: for each query, each completed window (ended
//! `lag` ago) is computed over exactly the rows in `[start, start + every)` and written
//! through the log together with the query's progress (`Command::CqWindow`), so a window
//! is written once whichever node leads: a new leader resumes at the progress the log
//! records, and a window proposed twice is refused the second time on every replica.
//! Windows in which no source measurement holds a row are skipped without an entry.

use std::sync::Arc;
use std::time::Duration;

use quiver_query::{tables_read, QueryEngine};
use quiver_raft::{CommandResult, CqWindowCommand, RaftNode, WriteCommand};
use quiver_storage::lifecycle::{query_rows_for_write, ContinuousQuery, CqWindowOutcome};
use quiver_storage::{Storage, TimestampNs, View, ViewSource};

/// How often the leader looks for completed windows.
pub const CQ_CHECK_INTERVAL_MS: u64 = 1_000;
/// Most windows one query computes per check (a long backfill proceeds over checks).
const WINDOWS_PER_CHECK_MAX: usize = 64;

/// Why one window could not be written now (it is tried again at the next check).
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// The query failed.
    #[error("query: {0}")]
    Query(#[from] quiver_query::Error),
    /// Its result cannot be written as rows.
    #[error("result: {0}")]
    Rows(#[from] quiver_storage::Error),
    /// The window was not committed.
    #[error("proposal: {0}")]
    Propose(#[from] quiver_raft::WriteError),
    /// The entry holds more than `raft.entry_bytes_max`.
    #[error("the window's {bytes} bytes of rows exceed raft.entry_bytes_max ({max})")]
    TooLarge {
        /// Encoded size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

/// What runs continuous queries; one per node, active while it leads.
pub struct Runner {
    /// The node (leadership, proposals).
    pub node: RaftNode,
    /// The rows and the queries' definitions.
    pub storage: Arc<Storage>,
    /// Runs the queries.
    pub query: QueryEngine,
    /// `raft.entry_bytes_max`.
    pub entry_bytes_max: usize,
    /// `raft.entry_compression`.
    pub entry_compression: quiver_storage::EntryCompression,
}

impl Runner {
    /// Runs until Raft stops.
    pub async fn run(self) {
        loop {
            tokio::time::sleep(Duration::from_millis(CQ_CHECK_INTERVAL_MS)).await;
            if self.node.fatal().is_some() {
                return;
            }
            if !self.node.is_leader() {
                continue;
            }
            let queries: Vec<ContinuousQuery> = self
                .storage
                .with_policies(|p| p.continuous_queries.values().cloned().collect());
            for cq in queries {
                if let Err(e) = self.run_due(&cq).await {
                    metrics::counter!("quiver_cq_window_failures_total").increment(1);
                    tracing::warn!(query = %cq.key(), error = %e, "a continuous query window failed; retrying at the next check");
                }
            }
        }
    }

    /// Computes and writes the query's completed windows, up to a bound.
    async fn run_due(&self, cq: &ContinuousQuery) -> Result<(), WindowError> {
        let sources = tables_read(&cq.database, &cq.query)?;
        let mut start = cq.next_window;
        for _ in 0..WINDOWS_PER_CHECK_MAX {
            let now = TimestampNs::now();
            if !cq.is_due(start, now) {
                return Ok(());
            }
            let Some(earliest) = self.storage.earliest_at_or_after(&sources, start) else {
                return Ok(());
            };
            start = start.max(cq.window_start_of(earliest));
            if !cq.is_due(start, now) {
                return Ok(());
            }
            let window = cq.window(start);
            match self.write_window(cq, window).await? {
                CqWindowOutcome::Written { .. } | CqWindowOutcome::Rejected(_) => {
                    start = window.1;
                }
                CqWindowOutcome::AlreadyDone | CqWindowOutcome::NoSuchQuery => return Ok(()),
            }
        }
        Ok(())
    }

    /// Runs the query over one window and proposes its rows.
    async fn write_window(
        &self,
        cq: &ContinuousQuery,
        window: (TimestampNs, TimestampNs),
    ) -> Result<CqWindowOutcome, WindowError> {
        let rows = compute_window(&self.storage, &self.query, cq, window).await?;
        let command = WriteCommand::encode(&cq.database, &rows, self.entry_compression)?;
        if command.bytes() > self.entry_bytes_max {
            return Err(WindowError::TooLarge {
                bytes: command.bytes(),
                max: self.entry_bytes_max,
            });
        }
        let proposal = CqWindowCommand {
            name: cq.name.clone(),
            window_start: window.0,
            window_end: window.1,
            rows: command,
        };
        match self.node.propose_cq_window(proposal).await? {
            CommandResult::CqWindow(outcome) => {
                if let CqWindowOutcome::Written { rows } = &outcome {
                    metrics::counter!("quiver_cq_windows_written_total").increment(1);
                    tracing::debug!(query = %cq.key(), start = window.0 .0, rows, "continuous query window written");
                }
                Ok(outcome)
            }
            other => Err(WindowError::Propose(quiver_raft::WriteError::Unknown(
                format!("unexpected result {other:?}"),
            ))),
        }
    }
}

/// The rows `cq` produces for `window`, ready for its target measurement.
pub async fn compute_window(
    storage: &Arc<Storage>,
    query: &QueryEngine,
    cq: &ContinuousQuery,
    window: (TimestampNs, TimestampNs),
) -> Result<Vec<(String, arrow::record_batch::RecordBatch)>, WindowError> {
    let source = Arc::new(ViewSource {
        storage: storage.clone(),
        view: View {
            time_from: Some(window.0),
            time_before: Some(window.1),
            ..View::at(TimestampNs::now())
        },
    });
    let output = query.execute_over(source, &cq.database, &cq.query).await?;
    let mut rows = Vec::with_capacity(output.batches.len());
    for batch in output.batches.iter().filter(|b| b.num_rows() > 0) {
        rows.push(query_rows_for_write(batch)?);
    }
    if rows.len() > 1 {
        let schema = rows[0].schema();
        let all = arrow::compute::concat_batches(&schema, &rows)
            .map_err(|e| WindowError::Rows(e.into()))?;
        return Ok(vec![(cq.into.clone(), all)]);
    }
    Ok(rows.into_iter().map(|b| (cq.into.clone(), b)).collect())
}
