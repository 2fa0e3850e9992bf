//! Compaction on this replica: applying `Compact` entries, carrying out the queued jobs
//! on a low-priority thread, and deleting replaced files once no query can still be
//! reading them. What is merged, and why it is safe, is in [`crate::compaction`].

use std::io::Write;
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;

use super::{Storage, TableKey};
use crate::compaction::merge::merge_files;
use crate::compaction::plan::plan_table;
use crate::compaction::{
    supersedes, CompactionJob, CompactionOutcome, CompactionRequest, CompactionSettings,
};
use crate::durable::replace_file_durably;
use crate::error::{Error, Result};
use crate::ids::{LogIndex, TimestampNs};
use crate::meta::FileMeta;
use crate::paths::compaction_path;

/// Nice value of the thread a compaction runs on: below ingest and replication, like
/// queries.
const COMPACTION_THREAD_NICE: i32 = 10;

/// A file replaced by a compaction, deleted once `due`.
#[derive(Debug, Clone)]
pub(crate) struct Condemned {
    path: String,
    due: Instant,
}

impl Storage {
    /// Applies a committed `Compact` entry at `index`: queues the job (the compactor is
    /// woken), or says why it cannot be done, identically on every replica.
    pub fn apply_compact(&self, index: LogIndex, request: CompactionRequest) -> CompactionOutcome {
        let Some(table) = self.tables.read().get(&request.table).cloned() else {
            return CompactionOutcome::Rejected(format!("no table {}", request.table));
        };
        let (Some(log_first), Some(log_last)) = (
            request.inputs.iter().map(|i| i.log_first).min(),
            request.inputs.iter().map(|i| i.log_last).max(),
        ) else {
            return CompactionOutcome::Rejected("a compaction needs inputs".into());
        };
        let output = compaction_path(
            &request.table.database,
            &request.table.measurement,
            request.bucket_start,
            log_first,
            log_last,
            index,
        );
        let mut state = table.state.write();
        if state.files.iter().any(|f| f.path == output) {
            return CompactionOutcome::AlreadyDone;
        }
        if let Some(reason) = state.compaction_refusal(&request) {
            tracing::warn!(table = %request.table, index = index.0, %reason, "compaction refused");
            return CompactionOutcome::Rejected(reason);
        }
        state.pending.push(CompactionJob {
            request,
            index,
            output,
            log_first,
            log_last,
        });
        drop(state);
        self.compaction_wakeup.notify_one();
        CompactionOutcome::Scheduled
    }

    /// What the leader should propose now: at most one merge per table that has none
    /// queued, oldest buckets first.
    pub fn compaction_candidates(&self, now: TimestampNs) -> Vec<CompactionRequest> {
        let settings = &self.config.compaction;
        if !settings.enabled {
            return Vec::new();
        }
        self.tables
            .read()
            .values()
            .filter_map(|table| {
                let state = table.state.read();
                if !state.pending.is_empty() {
                    return None;
                }
                plan_table(&table.key, &state.files, now, settings)
            })
            .collect()
    }

    /// Waits until a compaction may have been queued.
    pub async fn compaction_queued(&self) {
        self.compaction_wakeup.notified().await
    }

    /// Compactions committed but not yet carried out on this replica.
    pub fn compaction_backlog(&self) -> usize {
        self.tables
            .read()
            .values()
            .map(|t| t.state.read().pending.len())
            .sum()
    }

    /// Carries out the oldest queued compaction whose inputs are all written here.
    /// Returns false if none can run now. On error the job stays queued (nothing was
    /// changed: the output is only recorded once it is durable).
    pub async fn compact_next(&self) -> Result<bool> {
        let Some((table_key, job, inputs)) = self.runnable_compaction() else {
            return Ok(false);
        };
        let started = Instant::now();
        let local = self.local.clone();
        let settings = self.config.parquet.clone();
        let job_owned = job.clone();
        let encoded = run_low_priority(move || {
            let mut on_disk = Vec::with_capacity(inputs.len());
            for meta in inputs {
                let path = local.path_to_filesystem(&ObjectPath::from(meta.path.as_str()))?;
                on_disk.push((path, meta));
            }
            let encoded = merge_files(&job_owned, &on_disk, &settings)?;
            let target = local.path_to_filesystem(&ObjectPath::from(encoded.meta.path.as_str()))?;
            replace_file_durably(&target, |w| {
                w.write_all(&encoded.bytes).map_err(|source| Error::Io {
                    path: target.clone(),
                    source,
                })
            })?;
            Ok(encoded.meta)
        })
        .await?;
        let output = encoded;
        self.catalog.insert(std::slice::from_ref(&output))?;
        let replaced = self.install_output(&table_key, &output, Some(job.index))?;
        let bytes_in: u64 = replaced.iter().map(|f| f.size_bytes).sum();
        metrics::counter!("quiver_compactions_total").increment(1);
        metrics::counter!("quiver_compaction_bytes_read_total").increment(bytes_in);
        metrics::counter!("quiver_compaction_bytes_written_total").increment(output.size_bytes);
        tracing::info!(table = %table_key, index = job.index.0, inputs = replaced.len(),
            rows = output.rows, bytes_in, bytes_out = output.size_bytes,
            ms = started.elapsed().as_millis() as u64, output = %output.path, "compaction done");
        Ok(true)
    }

    /// The first queued job of some table whose inputs are all files here, with their
    /// metadata. A job whose bucket holds a file it does not name inside its log range
    /// would make [`supersedes`] wrong; it is dropped loudly instead (a policy bug).
    fn runnable_compaction(&self) -> Option<(TableKey, CompactionJob, Vec<FileMeta>)> {
        let tables = self.tables.read();
        for table in tables.values() {
            let mut state = table.state.write();
            let Some(job) = state.pending.first().cloned() else {
                continue;
            };
            let inputs: Option<Vec<FileMeta>> = job
                .request
                .inputs
                .iter()
                .map(|i| state.files.iter().find(|f| f.path == i.path).cloned())
                .collect();
            let Some(inputs) = inputs else {
                continue;
            };
            let mark_holder = FileMeta {
                path: job.output.clone(),
                log_first: job.log_first,
                log_last: job.log_last,
                compaction: Some(job.mark()),
                ..inputs[0].clone()
            };
            let stray = state
                .files
                .iter()
                .find(|f| supersedes(&mark_holder, f) && !job.consumes(&f.path));
            let straddling = state.files.iter().find(|f| {
                !job.consumes(&f.path)
                    && f.log_first <= job.log_last
                    && job.log_first <= f.log_last
                    && !(f.log_first >= job.log_first && f.log_last <= job.log_last)
                    && job.mark().bucket_contains(f.time_min)
            });
            if let Some(other) = stray.or(straddling) {
                debug_assert!(
                    false,
                    "compaction {} leaves out {}",
                    job.index.0, other.path
                );
                tracing::error!(table = %table.key, index = job.index.0, left_out = %other.path,
                    "compaction skipped: it leaves out a file of its bucket and range");
                metrics::counter!("quiver_compactions_skipped_total").increment(1);
                state.pending.remove(0);
                continue;
            }
            return Some((table.key.clone(), job, inputs));
        }
        None
    }

    /// Puts a durable compaction output into the table in place of every file it
    /// supersedes (in one step under the table's lock: a query sees the inputs or the
    /// output, never both, never neither), and condemns those files. Returns them.
    fn install_output(
        &self,
        key: &TableKey,
        output: &FileMeta,
        job_index: Option<LogIndex>,
    ) -> Result<Vec<FileMeta>> {
        let table = self.table(key);
        let replaced = {
            let mut state = table.state.write();
            if let Some(index) = job_index {
                state.pending.retain(|j| j.index != index);
            }
            let (replaced, kept): (Vec<FileMeta>, Vec<FileMeta>) = std::mem::take(&mut state.files)
                .into_iter()
                .partition(|f| supersedes(output, f));
            state.files = kept;
            if !state.files.iter().any(|f| f.path == output.path) {
                state.add_file(output.clone())?;
            }
            replaced
        };
        for file in &replaced {
            self.catalog.remove(&file.path)?;
        }
        let due = Instant::now() + Duration::from_millis(self.config.compaction.input_grace_ms);
        self.condemned
            .lock()
            .extend(replaced.iter().map(|f| Condemned {
                path: f.path.clone(),
                due,
            }));
        Ok(replaced)
    }

    /// Deletes replaced files whose grace period is over. Returns how many.
    pub fn delete_condemned(&self) -> usize {
        let now = Instant::now();
        let due: Vec<Condemned> = {
            let mut condemned = self.condemned.lock();
            let (due, later) = std::mem::take(&mut *condemned)
                .into_iter()
                .partition(|c| c.due <= now);
            *condemned = later;
            due
        };
        let mut deleted = 0;
        for c in due {
            let path = match self
                .local
                .path_to_filesystem(&ObjectPath::from(c.path.as_str()))
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(path = %c.path, error = %e, "cannot resolve a replaced file");
                    continue;
                }
            };
            match std::fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Left for the next start, which deletes every superseded file.
                Err(e) => {
                    tracing::warn!(path = %c.path, error = %e, "cannot delete a replaced file")
                }
            }
        }
        if deleted > 0 {
            metrics::counter!("quiver_compaction_files_deleted_total").increment(deleted as u64);
        }
        deleted
    }

    /// When the next replaced file may be deleted, if any waits.
    pub fn next_condemned_due(&self) -> Option<Duration> {
        let now = Instant::now();
        self.condemned
            .lock()
            .iter()
            .map(|c| c.due.saturating_duration_since(now))
            .min()
    }

    /// Whether this node holds `meta`, or a compaction output that replaced it (a
    /// snapshot taken before a compaction names its inputs).
    pub fn has_file_or_successor(&self, meta: &FileMeta) -> bool {
        self.tables
            .read()
            .get(&TableKey::new(
                meta.database.as_str(),
                meta.measurement.as_str(),
            ))
            .is_some_and(|t| {
                t.state
                    .read()
                    .files
                    .iter()
                    .any(|f| f.path == meta.path || supersedes(f, meta))
            })
    }

    /// The compaction settings.
    pub fn compaction_settings(&self) -> &CompactionSettings {
        &self.config.compaction
    }

    pub(super) fn note_compaction_output_adopted(&self, meta: &FileMeta) -> Result<()> {
        if meta.compaction.is_some() {
            let key = TableKey::new(meta.database.as_str(), meta.measurement.as_str());
            self.install_output(&key, meta, meta.compaction.map(|m| m.index))?;
        }
        Ok(())
    }
}

/// Runs `work` on a thread of its own at a lower priority, so a merge competes with
/// neither ingest nor replication for the CPU.
async fn run_low_priority<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("quiver-compact".into())
        .spawn(move || {
            lower_thread_priority(COMPACTION_THREAD_NICE);
            let _ = tx.send(work());
        })
        .map_err(|source| Error::Io {
            path: "compaction thread".into(),
            source,
        })?;
    rx.await
        .map_err(|_| Error::Catalog("the compaction thread stopped without an answer".into()))?
}

fn lower_thread_priority(nice: i32) {
    // SAFETY: setpriority only reads its integer arguments; `who = 0` is the calling
    // thread on Linux.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc != 0 {
        tracing::debug!(nice, "cannot lower the priority of the compaction thread");
    }
}
