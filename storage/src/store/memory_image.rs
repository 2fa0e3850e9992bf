//! The rows not yet in Parquet, as a snapshot captures and restores them.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Storage, TableKey};
use crate::compaction::CompactionJob;
use crate::error::Result;
use crate::ids::LogIndex;
use crate::int_width::buffered_form;
use crate::meta::FileMeta;
use crate::policies::Policies;
use crate::sort_lead::SortDecision;
use crate::table_state::{held_bytes, Buffered, Frozen};

impl Storage {
    /// Rows not yet in Parquet and the list of files, captured per table under its lock
    /// so a segment written meanwhile is in one or the other, never in neither (cheap:
    /// batches are shared, not copied).
    pub fn memory_image(&self) -> MemoryImage {
        // Read before the tables (see `condemned`): a file removed after this read may
        // still be listed below, and its removal's generation is higher.
        let generation = self.file_generation();
        let tables = self.tables.read();
        let mut out = Vec::new();
        let mut files = Vec::new();
        let mut compactions = Vec::new();
        let mut sort_leads = Vec::new();
        for (key, table) in tables.iter() {
            let state = table.state.read();
            files.extend(state.files.iter().cloned());
            compactions.extend(state.pending.iter().cloned());
            if let SortDecision::Decided(lead) = &state.sort {
                sort_leads.push((key.clone(), lead.clone()));
            }
            if state.frozen.is_empty() && state.active.is_empty() {
                continue;
            }
            out.push(TableImage {
                key: key.clone(),
                frozen: state.frozen.iter().cloned().collect(),
                active: state.active.clone(),
            });
        }
        MemoryImage {
            tables: out,
            files,
            policies: self.policies.read().clone(),
            compactions,
            sort_leads: Some(sort_leads),
            generation,
        }
    }

    /// Every Parquet file, for a snapshot's manifest.
    pub fn files(&self) -> Vec<FileMeta> {
        let tables = self.tables.read();
        tables
            .values()
            .flat_map(|t| t.state.read().files.to_vec())
            .collect()
    }

    /// Before installing a snapshot from another node: removes (and condemns) every file
    /// this node holds that the snapshot's state does not have. Kept are the files the
    /// manifest lists, outputs of compactions the image still queues, and files of
    /// segments the image still holds frozen (this node wrote them sooner); anything
    /// else was replaced or dropped by entries this node never applied. Returns how
    /// many files were removed.
    pub fn retain_for_snapshot(&self, image: &MemoryImage) -> Result<usize> {
        let listed: std::collections::BTreeSet<&str> =
            image.files.iter().map(|f| f.path.as_str()).collect();
        let outputs: std::collections::BTreeSet<&str> = image
            .compactions
            .iter()
            .map(|j| j.output.as_str())
            .collect();
        let frozen: std::collections::BTreeSet<(&TableKey, LogIndex, LogIndex)> = image
            .tables
            .iter()
            .flat_map(|t| {
                t.frozen
                    .iter()
                    .map(move |f| (&t.key, f.log_first, f.log_last))
            })
            .collect();
        let mut removed_total = 0;
        for table in self.tables.read().values() {
            let removed: Vec<FileMeta> = {
                let mut state = table.state.write();
                let removed = state.files.take_where(|f| {
                    !(listed.contains(f.path.as_str())
                        || outputs.contains(f.path.as_str())
                        || (f.compaction.is_none()
                            && frozen.contains(&(&table.key, f.log_first, f.log_last))))
                });
                if !removed.is_empty() {
                    state.recompute_flushed_through();
                }
                removed
            };
            if !removed.is_empty() {
                tracing::info!(table = %table.key, files = removed.len(),
                    "removing files the installed snapshot no longer has");
            }
            removed_total += removed.len();
            self.condemn(&removed)?;
        }
        Ok(removed_total)
    }

    /// Drops every unwritten row (before installing a snapshot that replaces them).
    pub fn reset_memory(&self) {
        for table in self.tables.read().values() {
            let mut state = table.state.write();
            state.active.clear();
            state.active_rows = 0;
            state.active_bytes = 0;
            state.active_since = None;
            state.frozen.clear();
            state.frozen_through = state.flushed_through;
            state.pending.clear();
        }
        self.memory_bytes.store(0, Ordering::Relaxed);
    }

    /// Puts a snapshot's unwritten rows back, skipping what the files already hold
    /// (segments written after the snapshot was taken). Call before replaying the log.
    pub fn restore_memory(&self, image: MemoryImage) -> Result<()> {
        let now = Instant::now();
        *self.policies.write() = image.policies;
        // Decisions first: replayed flushes after the image decide only undecided tables.
        let legacy = image.sort_leads.is_none();
        for (key, lead) in image.sort_leads.into_iter().flatten() {
            self.table(&key).state.write().sort = SortDecision::Decided(lead);
        }
        let mut frozen_any = false;
        for TableImage {
            key,
            frozen,
            active,
        } in image.tables
        {
            let table = self.table(&key);
            let mut state = table.state.write();
            if legacy && !frozen.is_empty() && state.sort == SortDecision::Undecided {
                // Frozen by a build without leads: written, and merged, in name order.
                state.sort = SortDecision::Decided(None);
            }
            for mut segment in frozen {
                if segment.log_last <= state.frozen_through {
                    continue;
                }
                // Images carry integers at full width (`int_width`); memory holds them
                // narrow, and counts what it holds.
                segment.batches = segment.batches.iter().map(buffered_form).collect();
                segment.bytes = segment.batches.iter().map(held_bytes).sum();
                if let Some(grown) = state.schema.merge(&key.measurement, &segment.schema)? {
                    state.schema = grown;
                }
                self.memory_bytes
                    .fetch_add(segment.bytes, Ordering::Relaxed);
                state.frozen_through = segment.log_last;
                state.frozen.push_back(segment);
                frozen_any = true;
            }
            for buffered in active {
                if state.holds(buffered.index) {
                    continue;
                }
                if let Some(grown) = state
                    .schema
                    .merge(&key.measurement, &buffered.batch.schema())?
                {
                    state.schema = grown;
                }
                let bytes = state.append(buffered.index, buffered_form(&buffered.batch), now);
                self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        if frozen_any {
            self.frozen_wakeup.notify_one();
        }
        // Queued compactions last: their inputs may be the frozen segments above. One
        // already carried out here (its output is a file) is skipped; one whose inputs
        // this node no longer has (replaced by a later output) is moot.
        let mut queued_any = false;
        for job in image.compactions {
            let table = self.table(&job.request.table);
            let mut state = table.state.write();
            if state.files.iter().any(|f| f.path == job.output)
                || state.pending.iter().any(|j| j.index == job.index)
                || state.compaction_refusal(&job.request).is_some()
            {
                continue;
            }
            state.pending.push(job);
            queued_any = true;
        }
        if queued_any {
            self.compaction_wakeup.notify_one();
        }
        Ok(())
    }
}

/// Rows in memory across all tables, as a snapshot carries them.
#[derive(Debug, Clone, Default)]
pub struct MemoryImage {
    /// Tables with unwritten rows.
    pub tables: Vec<TableImage>,
    /// Every Parquet file at capture time (the snapshot's manifest).
    pub files: Vec<FileMeta>,
    /// The replicated settings at capture time.
    pub policies: Policies,
    /// Compactions committed but not yet carried out, in log order per table.
    pub compactions: Vec<CompactionJob>,
    /// Every decided table's sort lead (`None` for an image written before leads:
    /// its tables holding rows keep name order).
    pub sort_leads: Option<Vec<(TableKey, Option<String>)>>,
    /// The file-removal generation the image was captured at (this node's own count,
    /// not written into snapshots); see [`Storage::snapshot_durable`].
    pub generation: u64,
}

/// One table's unwritten rows.
#[derive(Debug, Clone)]
pub struct TableImage {
    /// The table.
    pub key: TableKey,
    /// Frozen segments, oldest first.
    pub frozen: Vec<Frozen>,
    /// Live buffer, in log order.
    pub active: Vec<Buffered>,
}
