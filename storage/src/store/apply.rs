//! Applying committed log entries: writes into live buffers, flushes into frozen
//! segments, and the flush policy's view of what is due.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;

use super::{Storage, TableKey};
use crate::error::Result;
use crate::ids::{validate_database_name, LogIndex};
use crate::int_width::buffered_form;
use crate::schema::MeasurementSchema;

impl Storage {
    /// Checks a write against the tables' schemas without changing anything: the error
    /// a client gets before its rows enter the log.
    pub fn check_write(&self, database: &str, tables: &[(String, RecordBatch)]) -> Result<()> {
        validate_database_name(database)?;
        let existing = self.tables.read();
        let mut grown: BTreeMap<&str, MeasurementSchema> = BTreeMap::new();
        for (measurement, batch) in tables {
            let base = match grown.get(measurement.as_str()) {
                Some(s) => s.clone(),
                None => existing
                    .get(&TableKey::new(database, measurement.as_str()))
                    .map(|t| t.state.read().schema.clone())
                    .unwrap_or_default(),
            };
            if let Some(next) = base.merge(measurement, &batch.schema())? {
                grown.insert(measurement, next);
            }
        }
        Ok(())
    }

    /// The schema `database.measurement` has now, if it exists: for callers that decide
    /// row by row what conflicts with it.
    pub fn schema_of(&self, database: &str, measurement: &str) -> Option<MeasurementSchema> {
        self.tables
            .read()
            .get(&TableKey::new(database, measurement))
            .map(|t| t.state.read().schema.clone())
    }

    /// Applies a committed write entry. Either every table of the entry takes its rows
    /// or, on a schema conflict, none does (the same on every replica).
    pub fn apply_write(
        &self,
        index: LogIndex,
        database: &str,
        tables: &[(String, RecordBatch)],
    ) -> Result<usize> {
        self.check_write(database, tables)?;
        let now = Instant::now();
        let mut rows = 0;
        for (measurement, batch) in tables {
            let table = self.table(&TableKey::new(database, measurement.as_str()));
            // Replay after a restart skips entries already in Parquet before narrowing.
            if table.state.read().holds(index) {
                continue;
            }
            // Outside the table's lock: queries of the table need not wait for it.
            let narrow = buffered_form(batch);
            let mut state = table.state.write();
            if state.holds(index) {
                continue;
            }
            if let Some(grown) = state.schema.merge(measurement, &batch.schema())? {
                state.schema = grown;
            }
            let bytes = state.append(index, narrow, now);
            self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
            rows += batch.num_rows();
        }
        metrics::counter!("quiver_rows_applied_total").increment(rows as u64);
        Ok(rows)
    }

    /// Applies a committed flush entry: the named tables' live buffers become frozen
    /// segments, and the background writer is woken.
    pub fn apply_flush(&self, index: LogIndex, targets: &[TableKey]) {
        let mut froze = false;
        for key in targets {
            let table = self.tables.read().get(key).cloned();
            if let Some(table) = table {
                froze |= table.state.write().freeze(index);
            }
        }
        if froze {
            self.frozen_wakeup.notify_one();
        }
    }

    /// Tables whose live buffer passed a flush threshold (rows, bytes, age, or idle
    /// with enough bytes to be worth a file). The leader proposes a flush
    /// entry for them; when memory runs high, the biggest buffers are flushed too.
    pub fn flush_candidates(&self, now: Instant) -> Vec<TableKey> {
        let age_max = Duration::from_millis(self.config.flush_age_ms);
        let idle_max = (self.config.flush_idle_ms > 0)
            .then(|| Duration::from_millis(self.config.flush_idle_ms));
        let tables = self.tables.read();
        let mut out = Vec::new();
        let mut sizes: Vec<(usize, TableKey)> = Vec::new();
        for (key, table) in tables.iter() {
            let state = table.state.read();
            if state.active.is_empty() {
                continue;
            }
            let old = state
                .active_since
                .is_some_and(|t| now.duration_since(t) >= age_max);
            let idle = idle_max.is_some_and(|idle_max| {
                state.active_bytes >= self.config.flush_idle_bytes_min
                    && state
                        .active_last
                        .is_some_and(|t| now.duration_since(t) >= idle_max)
            });
            if state.active_rows >= self.config.flush_rows_max
                || state.active_bytes >= self.config.flush_bytes_max
                || old
                || idle
            {
                out.push(key.clone());
            } else {
                sizes.push((state.active_bytes, key.clone()));
            }
        }
        let mut memory = self.memory_bytes();
        if memory > self.config.memory_bytes_max / 2 {
            sizes.sort_by_key(|s| std::cmp::Reverse(s.0));
            for (bytes, key) in sizes {
                if memory <= self.config.memory_bytes_max / 2 {
                    break;
                }
                memory = memory.saturating_sub(bytes);
                out.push(key);
            }
        }
        out
    }

    /// Every table with rows in its live buffer (a flush-all, e.g. before shutdown).
    pub fn tables_with_live_rows(&self) -> Vec<TableKey> {
        self.tables
            .read()
            .iter()
            .filter(|(_, t)| !t.state.read().active.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Bytes held by live and frozen rows of all tables.
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes.load(Ordering::Relaxed)
    }

    /// Whether new writes must be refused until flushes catch up.
    pub fn is_over_memory_limit(&self) -> bool {
        self.memory_bytes() >= self.config.memory_bytes_max
    }
}
