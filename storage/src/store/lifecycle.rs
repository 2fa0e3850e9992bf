//! Applying the lifecycle's log entries that touch rows: deletes (a tombstone, and a
//! freeze of the table's live buffer so segments never straddle the delete), and the
//! retention checks a write meets before it enters the log.

use arrow::array::{AsArray, BooleanArray};
use arrow::datatypes::TimestampNanosecondType;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use super::{Storage, TableKey};
use crate::error::Result;
use crate::ids::{LogIndex, TimestampNs};
use crate::lifecycle::{cq_key, CqWindowOutcome, DeletePredicate, Tombstone};
use crate::schema::TIME_COLUMN;

/// What applying a delete did; identical on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteOutcome {
    /// The tombstone is recorded: matching rows written before it are hidden.
    Recorded,
    /// The measurement does not exist: nothing to delete.
    NoSuchTable,
}

impl Storage {
    /// Applies a committed delete at `index`: the table's live buffer is frozen into a
    /// segment ending just before `index`, then the tombstone is recorded. From then on
    /// queries do not see the rows it matches, and compaction rewrites them away.
    pub fn apply_delete(
        &self,
        index: LogIndex,
        table: &TableKey,
        predicate: DeletePredicate,
    ) -> DeleteOutcome {
        let Some(t) = self.tables.read().get(table).cloned() else {
            return DeleteOutcome::NoSuchTable;
        };
        let froze = t.state.write().freeze_before(index);
        self.policies.write().tombstones.push(Tombstone {
            index,
            table: table.clone(),
            predicate,
        });
        if froze {
            self.frozen_wakeup.notify_one();
        }
        metrics::counter!("quiver_deletes_total").increment(1);
        DeleteOutcome::Recorded
    }

    /// Applies one window of a continuous query at `index`: unless the window is done
    /// already, its rows are written into the query's measurement (in place of what an
    /// earlier query wrote for the same window, if one did), and the query's progress
    /// moves past it, in one step.
    pub fn apply_cq_window(
        &self,
        index: LogIndex,
        database: &str,
        name: &str,
        window: (TimestampNs, TimestampNs),
        rows: &[(String, RecordBatch)],
    ) -> Result<CqWindowOutcome> {
        let key = cq_key(database, name);
        let (into, replace) = {
            let p = self.policies.read();
            let Some(cq) = p.continuous_queries.get(&key) else {
                return Ok(CqWindowOutcome::NoSuchQuery);
            };
            if window.0 < cq.next_window {
                return Ok(CqWindowOutcome::AlreadyDone);
            }
            let written_through = p
                .cq_written_through
                .get(&cq_key(database, &cq.into))
                .copied();
            (
                cq.into.clone(),
                written_through.is_some_and(|t| window.0 < t),
            )
        };
        debug_assert!(
            rows.iter().all(|(m, _)| *m == into),
            "a window writes only its target"
        );
        let outcome = match self.check_write(database, rows) {
            Err(
                e @ (crate::Error::SchemaConflict { .. }
                | crate::Error::InvalidName(_)
                | crate::Error::InvalidPayload(_)),
            ) => {
                tracing::error!(query = %key, error = %e, "a continuous query's rows conflict with its target; the window is skipped");
                metrics::counter!("quiver_cq_windows_refused_total").increment(1);
                CqWindowOutcome::Rejected(e.to_string())
            }
            Err(e) => return Err(e),
            Ok(()) => {
                let target = TableKey::new(database, into.as_str());
                if replace {
                    self.apply_delete(
                        index,
                        &target,
                        DeletePredicate {
                            time_from: Some(window.0),
                            time_before: Some(window.1),
                            tags: Vec::new(),
                        },
                    );
                }
                let written = self.apply_write(index, database, rows)?;
                CqWindowOutcome::Written {
                    rows: written as u64,
                }
            }
        };
        let mut p = self.policies.write();
        if let Some(cq) = p.continuous_queries.get_mut(&key) {
            cq.next_window = window.1;
            cq.last_window_end = Some(window.1);
            cq.windows_written += 1;
        }
        let through = p
            .cq_written_through
            .entry(cq_key(database, &into))
            .or_insert(window.1);
        *through = (*through).max(window.1);
        Ok(outcome)
    }

    /// The oldest time a write to `database.measurement` may carry at `now`: older
    /// rows are past the retention and are refused (not stored to be dropped later).
    pub fn writable_from(
        &self,
        database: &str,
        measurement: &str,
        now: TimestampNs,
    ) -> Option<TimestampNs> {
        self.with_policies(|p| p.visible_from(database, measurement, now))
    }

    /// Applies a write's `retention.default` (see `WriteCommand`): a database that has
    /// neither a table nor a rule yet gets that retention before its first rows.
    pub fn adopt_default_retention(&self, index: LogIndex, database: &str, duration_ns: i64) {
        if self.database_exists(database) {
            return;
        }
        self.apply_policy(
            index,
            crate::PolicyChange::SetRetention {
                database: database.to_string(),
                measurement: None,
                duration_ns,
            },
        );
    }

    /// The earliest time at or after `t` that some row of `tables` may have (files by
    /// their time range, memory exactly), or `None` when none has a row that late: a
    /// continuous query skips the windows before it.
    pub fn earliest_at_or_after(
        &self,
        tables: &[(String, String)],
        t: TimestampNs,
    ) -> Option<TimestampNs> {
        let all = self.tables.read();
        let mut earliest: Option<TimestampNs> = None;
        let mut note = |candidate: TimestampNs| {
            let candidate = candidate.max(t);
            earliest = Some(earliest.map_or(candidate, |e| e.min(candidate)));
        };
        for (database, measurement) in tables {
            let table = all
                .get(&TableKey::new(database.as_str(), measurement.as_str()))
                .or_else(|| {
                    let mut same = all.iter().filter(|(k, _)| {
                        k.database == *database && k.measurement.eq_ignore_ascii_case(measurement)
                    });
                    match (same.next(), same.next()) {
                        (Some((_, t)), None) => Some(t),
                        _ => None,
                    }
                });
            let Some(table) = table else {
                continue;
            };
            let state = table.state.read();
            for f in state.files.iter().filter(|f| f.time_max >= t) {
                note(f.time_min);
            }
            let memory = state
                .frozen
                .iter()
                .flat_map(|f| f.batches.iter())
                .chain(state.active.iter().map(|b| &b.batch));
            for batch in memory {
                if let Some(time) = batch
                    .column_by_name(TIME_COLUMN)
                    .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
                {
                    if let Some(min) = time.values().iter().filter(|&&v| v >= t.0).min() {
                        note(TimestampNs(*min));
                    }
                }
            }
        }
        earliest
    }

    /// Whether `database` is known: it has a table or a retention rule.
    pub fn database_exists(&self, database: &str) -> bool {
        self.tables.read().keys().any(|k| k.database == database)
            || self.with_policies(|p| p.retention.contains_key(database))
    }
}

/// For every row of `batch`, whether its time is at or after `from`.
pub fn rows_at_or_after(batch: &RecordBatch, from: TimestampNs) -> Option<BooleanArray> {
    let time = batch
        .column_by_name(TIME_COLUMN)?
        .as_primitive_opt::<TimestampNanosecondType>()?;
    Some(time.values().iter().map(|&t| Some(t >= from.0)).collect())
}

/// Keeps the rows of `batch` at or after `from`; returns them and how many were older.
pub fn split_past_retention(
    batch: &RecordBatch,
    from: TimestampNs,
) -> Result<(RecordBatch, usize)> {
    let Some(mask) = rows_at_or_after(batch, from) else {
        return Ok((batch.clone(), 0));
    };
    let kept = mask.true_count();
    if kept == batch.num_rows() {
        return Ok((batch.clone(), 0));
    }
    let old = batch.num_rows() - kept;
    Ok((arrow::compute::filter_record_batch(batch, &mask)?, old))
}
