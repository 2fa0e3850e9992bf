//! Files leaving the disk. A file removed from its table (replaced by a compaction,
//! dropped by retention, rewritten for a delete) is deleted only when both hold:
//!
//! * its grace period is over (`compaction.input_grace_ms`), so queries that listed it
//!   before it was removed can finish reading it; and
//! * a durable snapshot taken after its removal exists. A node restarts from its newest
//!   snapshot's manifest (see [`crate::FileSet`]), so a file that snapshot still lists
//!   must still be on disk; the files written since are rebuilt from the log.
//!
//! The second rule is kept with a generation count: every removal takes the next
//! generation, a memory image records the generation it saw *before* it read the
//! tables, and [`Storage::snapshot_durable`] is told that generation once the snapshot
//! holding the image is on disk. A file removed at generation `g` is listed by no
//! durable snapshot once a snapshot of generation `g` or later is durable.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Storage, TableKey};
use crate::error::Result;
use crate::meta::FileMeta;

/// A file removed from its table, waiting to be deleted.
#[derive(Debug, Clone)]
pub(crate) struct Condemned {
    table: TableKey,
    path: String,
    /// End of the grace period.
    due: Instant,
    /// The removal's generation.
    generation: u64,
}

impl Storage {
    /// Records that `files` were removed from their tables (the caller has done that
    /// under the table's lock): forgets them in the catalog and schedules their deletion.
    pub(crate) fn condemn(&self, files: &[FileMeta]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        for file in files {
            self.catalog.remove(&file.path)?;
        }
        // Taken after the tables changed: an image that still lists one of these files
        // read the tables before this point, so it saw an older generation.
        let generation = self.file_generation.fetch_add(1, Ordering::SeqCst) + 1;
        let due = Instant::now() + Duration::from_millis(self.config.compaction.input_grace_ms);
        self.condemned
            .lock()
            .extend(files.iter().map(|f| Condemned {
                table: TableKey::new(f.database.as_str(), f.measurement.as_str()),
                path: f.path.clone(),
                due,
                generation,
            }));
        Ok(())
    }

    /// Tells storage that a snapshot is being sent to a peer: the peer fetches the files
    /// it lists after receiving it, so no removed file (any of them may be listed) is
    /// deleted for another grace period from now. Without this, a follower receiving an
    /// older snapshot while the leader replaced and deleted files it lists failed its
    /// install (found by the simulation, `raft/tests/it/sim`).
    pub fn snapshot_handed_out(&self) {
        let due = Instant::now() + Duration::from_millis(self.config.compaction.input_grace_ms);
        for c in self.condemned.lock().iter_mut() {
            c.due = c.due.max(due);
        }
    }

    /// The removal generation now; a memory image reads it before the tables.
    pub(crate) fn file_generation(&self) -> u64 {
        self.file_generation.load(Ordering::SeqCst)
    }

    /// Tells storage that a snapshot holding an image of `generation` is durable.
    pub fn snapshot_durable(&self, generation: u64) {
        self.durable_generation
            .fetch_max(generation, Ordering::SeqCst);
    }

    fn deletable(&self, c: &Condemned, now: Instant) -> bool {
        c.due <= now && c.generation <= self.durable_generation.load(Ordering::SeqCst)
    }

    /// Deletes removed files whose grace period is over and that no durable snapshot
    /// lists. Returns how many.
    pub async fn delete_condemned(&self) -> usize {
        let now = Instant::now();
        let due: Vec<Condemned> = {
            let mut condemned = self.condemned.lock();
            let (due, later) = std::mem::take(&mut *condemned)
                .into_iter()
                .partition(|c| self.deletable(c, now));
            *condemned = later;
            due
        };
        let mut deleted = 0;
        for c in due {
            if self.lists(&c.table, &c.path) {
                // Listed again (the same job re-run, or a snapshot naming the same
                // output): the path now holds a live file.
                continue;
            }
            match self.files.delete(&c.path).await {
                Ok(()) => deleted += 1,
                // Left for the next start, which deletes every file its snapshot does
                // not list.
                Err(e) => {
                    tracing::warn!(path = %c.path, error = %e, "cannot delete a removed file")
                }
            }
        }
        if deleted > 0 {
            metrics::counter!("quiver_parquet_files_deleted_total").increment(deleted as u64);
        }
        deleted
    }

    fn lists(&self, table: &TableKey, path: &str) -> bool {
        self.tables
            .read()
            .get(table)
            .is_some_and(|t| t.state.read().files.iter().any(|f| f.path == path))
    }

    /// When the next removed file may be deleted, if one only waits for its grace
    /// period.
    pub fn next_condemned_due(&self) -> Option<Duration> {
        let now = Instant::now();
        let durable = self.durable_generation.load(Ordering::SeqCst);
        self.condemned
            .lock()
            .iter()
            .filter(|c| c.generation <= durable)
            .map(|c| c.due.saturating_duration_since(now))
            .min()
    }

    /// Whether removed files wait for a snapshot before they can be deleted (the node
    /// takes one so the disk is freed).
    pub fn condemned_awaiting_snapshot(&self) -> bool {
        let durable = self.durable_generation.load(Ordering::SeqCst);
        self.condemned.lock().iter().any(|c| c.generation > durable)
    }

    /// Files removed but not yet deleted (for `/api/v1/storage` and metrics).
    pub fn condemned_files(&self) -> usize {
        self.condemned.lock().len()
    }
}
