//! Compaction on this replica: applying `Compact` entries, carrying out the queued jobs
//! on a low-priority thread, and deleting replaced files once no query can still be
//! reading them. What is merged, and why it is safe, is in [`crate::compaction`].

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Storage, TableKey};
use crate::compaction::lifecycle_plan::plan_lifecycle;

/// How far the wall clock may run ahead of a database's newest row before retention
/// stops trusting it for physical drops (see `Storage::compaction_candidates`): a day.
pub const CLOCK_AHEAD_OF_DATA_MAX_NS: i64 = 24 * TimestampNs::HOUR_NS;

/// Says, at most once a minute, that a retention cut was held back.
fn note_clock_ahead_of_data(table: &TableKey, now: TimestampNs, trusted: TimestampNs) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_LOGGED_S: AtomicU64 = AtomicU64::new(0);
    metrics::counter!("quiver_retention_cuts_held_total").increment(1);
    let now_s = (now.0 / 1_000_000_000).max(0) as u64;
    if LAST_LOGGED_S.swap(now_s, Ordering::Relaxed) + 60 <= now_s {
        tracing::warn!(table = %table, ahead_s = (now.0 - trusted.0) / 1_000_000_000 + 86_400,
            "retention drops hold back: the wall clock is more than a day ahead of the newest \
             row of this database (a clock that jumped, or writers that stopped); files past \
             the retention measured from the newest row plus a day are still dropped");
    }
}
use crate::compaction::merge::merge_files;
use crate::compaction::plan::plan_table;
use crate::compaction::{
    supersedes, CompactionJob, CompactionOutcome, CompactionRequest, CompactionSettings,
};
use crate::durable::create_dir_all_durably;
use crate::error::{Error, Result};
use crate::ids::{LogIndex, TimestampNs};
use crate::lifecycle::Tombstone;
use crate::meta::FileMeta;
use crate::paths::compaction_path;

/// Nice value of the thread a compaction runs on: below ingest and replication, like
/// queries.
const COMPACTION_THREAD_NICE: i32 = 10;

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
        let tombstones = self.with_policies(|p| {
            p.tombstones_of(&request.table.database, &request.table.measurement)
                .filter(|t| t.index < index)
                .cloned()
                .collect()
        });
        state.pending.push(CompactionJob {
            request,
            index,
            output,
            log_first,
            log_last,
            tombstones,
        });
        drop(state);
        self.compaction_wakeup.notify_one();
        CompactionOutcome::Scheduled
    }

    /// What the leader should propose now, for each table that has none queued: one
    /// lifecycle job, or every merge due (`plan_table`): files past the retention dropped first, then files the retention reaches
    /// into or a delete hides rows of rewritten, then (when `compaction.enabled`) merges,
    /// oldest buckets first. Every job drops rows past the retention on the way.
    ///
    /// The retention is measured from the wall clock, but never more than
    /// [`CLOCK_AHEAD_OF_DATA_MAX_NS`] beyond the newest row of the table's database: a
    /// leader whose clock jumped a month ahead would otherwise drop a month of live
    /// rows on every replica. Such a cut is held back and logged; a database whose
    /// writers stopped keeps (hidden from queries, which do use the wall clock) its last
    /// retention's worth of files until it receives rows again or they are deleted.
    pub fn compaction_candidates(&self, now: TimestampNs) -> Vec<CompactionRequest> {
        let settings = &self.config.compaction;
        let policies = self.policies.read();
        let newest = if policies.has_retention() {
            self.newest_row_per_database()
        } else {
            BTreeMap::new()
        };
        self.tables
            .read()
            .values()
            .flat_map(|table| {
                let state = table.state.read();
                if !state.pending.is_empty() {
                    return Vec::new();
                }
                let key = &table.key;
                let drop_before = policies
                    .visible_from(&key.database, &key.measurement, now)
                    .map(|cut| {
                        let trusted = newest.get(&key.database).map(|newest| {
                            TimestampNs(newest.saturating_add(CLOCK_AHEAD_OF_DATA_MAX_NS))
                        });
                        match trusted {
                            Some(trusted) if trusted < now => {
                                let held = policies
                                    .visible_from(&key.database, &key.measurement, trusted)
                                    .unwrap_or(cut);
                                note_clock_ahead_of_data(key, now, trusted);
                                held.min(cut)
                            }
                            _ => cut,
                        }
                    })
                    .map(TimestampNs::hour_floor);
                let tombstones: Vec<&Tombstone> = policies
                    .tombstones_of(&key.database, &key.measurement)
                    .collect();
                if let Some(job) = plan_lifecycle(key, &state.files, drop_before, &tombstones) {
                    return vec![job];
                }
                if !settings.enabled {
                    return Vec::new();
                }
                let mut merges = plan_table(key, &state.files, now, settings);
                for merge in &mut merges {
                    merge.drop_before = drop_before;
                }
                merges
            })
            .collect()
    }

    /// The newest row time of each database, files and memory alike.
    fn newest_row_per_database(&self) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for summary in self.summaries(None) {
            if let Some(t) = summary.time_max {
                let newest = out.entry(summary.key.database).or_insert(t);
                *newest = (*newest).max(t);
            }
        }
        out
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
        if job.request.is_drop() {
            return self.drop_files(&table_key, &job, &inputs, started);
        }
        let settings = self.config.parquet.clone();
        let memory_bytes_max = self.config.compaction.memory_bytes_max;
        let staged = self.staging_path(&format!("compaction-{}.parquet", job.index.0));
        let job_owned = job.clone();
        let guard = self.background_io();
        // Inputs in a bucket are downloaded to the staging directory first (removed when
        // `copies` drops); on local disk they are read where they are.
        let mut copies = Vec::with_capacity(inputs.len());
        for meta in &inputs {
            copies.push(self.files.local_copy(&meta.path, meta.size_bytes).await?);
        }
        let on_disk: Vec<(std::path::PathBuf, FileMeta)> = copies
            .iter()
            .zip(inputs)
            .map(|(copy, meta)| (copy.path().to_path_buf(), meta))
            .collect();
        let staged_owned = staged.clone();
        let merged = run_low_priority(move || {
            let keep = |meta: &FileMeta, batch: &arrow::record_batch::RecordBatch| {
                job_owned.row_filter(meta, batch)
            };
            let merged = write_staged(&staged_owned, |sink| {
                merge_files(
                    &job_owned,
                    &on_disk,
                    &settings,
                    memory_bytes_max,
                    &keep,
                    sink,
                )
            });
            let meta = match merged {
                Ok(Some(meta)) => meta,
                other => {
                    remove_staged(&staged_owned);
                    return other;
                }
            };
            let size_bytes = std::fs::metadata(&staged_owned)
                .map_err(|source| Error::Io {
                    path: staged_owned.clone(),
                    source,
                })?
                .len();
            Ok(Some(FileMeta { size_bytes, ..meta }))
        })
        .await;
        drop(copies);
        let output = merged?;
        if let Some(meta) = &output {
            let installed = match self.make_way_for(meta).await {
                Ok(()) => self.files.install(&staged, &meta.path).await,
                Err(e) => Err(e),
            };
            if let Err(e) = installed {
                remove_staged(&staged);
                return Err(e);
            }
        }
        drop(guard);
        if let Some(output) = &output {
            self.catalog.insert(std::slice::from_ref(output))?;
        }
        let replaced = self.install_output(
            &table_key,
            Some(&job),
            output.as_ref(),
            OutputOrigin::Merged,
        )?;
        let bytes_in: u64 = replaced.iter().map(|f| f.size_bytes).sum();
        let (rows_out, bytes_out) = output.as_ref().map_or((0, 0), |o| (o.rows, o.size_bytes));
        metrics::counter!("quiver_compactions_total").increment(1);
        metrics::counter!("quiver_compaction_bytes_read_total").increment(bytes_in);
        metrics::counter!("quiver_compaction_bytes_written_total").increment(bytes_out);
        tracing::info!(table = %table_key, index = job.index.0, inputs = replaced.len(),
            rows_in = replaced.iter().map(|f| f.rows).sum::<u64>(), rows_out, bytes_in, bytes_out,
            ms = started.elapsed().as_millis() as u64,
            output = output.as_ref().map_or("(no rows left)", |o| o.path.as_str()), "compaction done");
        self.memory_freed.notify_one();
        Ok(true)
    }

    /// Carries out a drop of whole files past the retention: no file is read. An input
    /// that is not wholly past `drop_before` (never proposed so) is kept, the same on
    /// every replica since every replica has the same file.
    fn drop_files(
        &self,
        table_key: &TableKey,
        job: &CompactionJob,
        inputs: &[FileMeta],
        started: Instant,
    ) -> Result<bool> {
        let table = self.table(table_key);
        let dropped = {
            let mut state = table.state.write();
            if !state.pending.iter().any(|j| j.index == job.index) {
                // A snapshot installed since the job was picked decides these files.
                return Ok(true);
            }
            state.pending.retain(|j| j.index != job.index);
            let expired = |f: &FileMeta| {
                job.consumes(&f.path)
                    && job
                        .request
                        .drop_before
                        .is_some_and(|before| f.time_max < before)
            };
            state.files.take_where(expired)
        };
        debug_assert_eq!(
            dropped.len(),
            inputs.len(),
            "a drop names expired files only"
        );
        self.condemn(&dropped)?;
        let rows: u64 = dropped.iter().map(|f| f.rows).sum();
        metrics::counter!("quiver_retention_files_dropped_total").increment(dropped.len() as u64);
        metrics::counter!("quiver_retention_rows_dropped_total").increment(rows);
        tracing::info!(table = %table_key, index = job.index.0, files = dropped.len(), rows,
            ms = started.elapsed().as_millis() as u64, "dropped files past the retention");
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
            if job.request.is_drop() {
                return Some((table.key.clone(), job, inputs));
            }
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

    /// Puts a compaction's output (none when no row survived its filter) into the
    /// table in place of what it replaces, in one step under the table's lock (a query
    /// sees the inputs or the output, never both, never neither), and condemns the
    /// replaced files. A job replaces exactly its inputs; an output adopted from a peer
    /// (no job here) replaces every file it supersedes. Returns the replaced files.
    fn install_output(
        &self,
        key: &TableKey,
        job: Option<&CompactionJob>,
        output: Option<&FileMeta>,
        origin: OutputOrigin,
    ) -> Result<Vec<FileMeta>> {
        let table = self.table(key);
        let replaced = {
            let mut state = table.state.write();
            if let (Some(job), OutputOrigin::Merged) = (job, origin) {
                // A snapshot installed while the job ran may have taken its inputs away
                // (replaced by a later output the snapshot lists): putting this output
                // in would hold their rows twice. Moot then; the unlisted output is
                // condemned like a replaced file, so no replica keeps a file its peers
                // do not have (deletion skips the path if it is listed again by then:
                // a re-run of the same job writes the same bytes to the same path).
                let pending = state.pending.iter().any(|j| j.index == job.index);
                let inputs_here = job
                    .request
                    .inputs
                    .iter()
                    .all(|i| state.files.iter().any(|f| f.path == i.path));
                if !(pending && inputs_here) {
                    let listed =
                        output.is_some_and(|o| state.files.iter().any(|f| f.path == o.path));
                    drop(state);
                    if let (Some(output), false) = (output, listed) {
                        self.condemn(std::slice::from_ref(output))?;
                    }
                    tracing::info!(table = %key, index = job.index.0,
                        "compaction moot: a snapshot installed meanwhile replaced its inputs");
                    metrics::counter!("quiver_compactions_moot_total").increment(1);
                    return Ok(Vec::new());
                }
            }
            if let Some(job) = job {
                state.pending.retain(|j| j.index != job.index);
            }
            let replaced = state.files.take_where(|f| match (job, output) {
                (Some(job), _) => job.consumes(&f.path),
                (None, Some(output)) => supersedes(output, f),
                (None, None) => false,
            });
            if let Some(output) = output {
                if !state.files.iter().any(|f| f.path == output.path) {
                    state.add_file(output.clone())?;
                }
            }
            replaced
        };
        self.condemn(&replaced)?;
        Ok(replaced)
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
        if let Some(mark) = meta.compaction {
            let key = TableKey::new(meta.database.as_str(), meta.measurement.as_str());
            let job = self.tables.read().get(&key).and_then(|t| {
                t.state
                    .read()
                    .pending
                    .iter()
                    .find(|j| j.index == mark.index)
                    .cloned()
            });
            self.install_output(&key, job.as_ref(), Some(meta), OutputOrigin::Adopted)?;
        }
        Ok(())
    }
}

/// Where an output being installed comes from.
#[derive(Debug, Clone, Copy)]
enum OutputOrigin {
    /// Merged here by a job picked earlier: valid only if the job is still queued and
    /// its inputs are still here.
    Merged,
    /// Fetched from a peer because an installed snapshot lists it: always installed.
    Adopted,
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

/// Writes a file at `staged` through a buffer and flushes it (the install fsyncs it).
fn write_staged<T>(
    staged: &std::path::Path,
    write: impl FnOnce(&mut (dyn std::io::Write + Send)) -> Result<T>,
) -> Result<T> {
    let io = |source| Error::Io {
        path: staged.to_path_buf(),
        source,
    };
    if let Some(dir) = staged.parent() {
        create_dir_all_durably(dir)?;
    }
    let file = std::fs::File::create(staged).map_err(io)?;
    let mut sink = std::io::BufWriter::with_capacity(1 << 20, file);
    let out = write(&mut sink)?;
    std::io::Write::flush(&mut sink).map_err(io)?;
    Ok(out)
}

/// Removes a staged file that will not be installed (best effort: the next start
/// clears the staging directory).
fn remove_staged(staged: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(staged) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %staged.display(), error = %e, "cannot remove a staged compaction output");
        }
    }
}
