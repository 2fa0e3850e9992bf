//! What queries read: [`TableSource`] over buffers, frozen segments and files.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use object_store::ObjectStore;

use super::{Storage, TableKey};
use crate::ids::{LogIndex, TimestampNs};
use crate::lifecycle::{without_deleted, Tombstone};
use crate::schema::align;
use crate::table::{SnapshotFiles, TableFiles, TableSnapshot, TableSource};
use crate::table_state::TableState;

impl TableSource for Storage {
    fn databases(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .tables
            .read()
            .keys()
            .map(|k| k.database.clone())
            .collect();
        out.dedup();
        out
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        self.tables
            .read()
            .range(TableKey::new(database, "")..)
            .map(|(k, _)| k)
            .take_while(|k| k.database == database)
            .map(|k| k.measurement.clone())
            .collect()
    }

    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        let tables = self.tables.read();
        if tables.contains_key(&TableKey::new(database, name)) {
            return Some(name.to_string());
        }
        let mut folded = tables
            .range(TableKey::new(database, "")..)
            .map(|(k, _)| k)
            .take_while(|k| k.database == database)
            .filter(|k| k.measurement.eq_ignore_ascii_case(name));
        match (folded.next(), folded.next()) {
            (Some(only), None) => Some(only.measurement.clone()),
            _ => None,
        }
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        self.visible_table(database, measurement, TimestampNs::now())
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.files.reader()
    }
}

/// Which rows of a table a query sees, beyond what retention and deletes hide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct View {
    /// The wall clock the retention is measured from.
    pub now: TimestampNs,
    /// Only rows at or after this time (a continuous query's window).
    pub time_from: Option<TimestampNs>,
    /// Only rows before this time.
    pub time_before: Option<TimestampNs>,
    /// Only the rows the delete at this log index hides (to count them), instead of
    /// hiding them.
    pub hidden_by: Option<LogIndex>,
}

impl View {
    /// What an ordinary query sees at `now`.
    pub fn at(now: TimestampNs) -> View {
        View {
            now,
            ..View::default()
        }
    }
}

impl Storage {
    /// What a query at `now` sees of one table: rows past the retention and rows a
    /// delete hides are filtered out of memory here; files wholly past the retention
    /// are left out; the rest carry the tombstones that apply to them.
    pub fn visible_table(
        &self,
        database: &str,
        measurement: &str,
        now: TimestampNs,
    ) -> Option<TableSnapshot> {
        self.view_table(database, measurement, View::at(now))
    }

    /// One table as `view` sees it (see [`View`]).
    pub fn view_table(
        &self,
        database: &str,
        measurement: &str,
        view: View,
    ) -> Option<TableSnapshot> {
        let table = self
            .tables
            .read()
            .get(&TableKey::new(database, measurement))
            .cloned()?;
        let (retained_from, mut tombstones) = self.with_policies(|p| {
            (
                p.visible_from(database, measurement, view.now),
                p.tombstones_of(database, measurement)
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        });
        let visible_from = match (retained_from, view.time_from) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let visible_before = view.time_before;
        // Counting a delete's rows: only what it applies to, matching it, not hidden by
        // another delete.
        let only: Option<Tombstone> = match view.hidden_by {
            Some(index) => {
                let at = tombstones.iter().position(|t| t.index == index)?;
                Some(tombstones.remove(at))
            }
            None => None,
        };
        let window = Window {
            from: visible_from,
            before: visible_before,
        };
        let state = table.state.read();
        let memory = match visible_memory(&state, window, &tombstones, only.as_ref()) {
            Ok(m) => m,
            Err(e) => {
                debug_assert!(false, "buffer batches do not conform to their schema: {e}");
                tracing::error!(table = %table.key, error = %e, "buffer does not conform to its schema");
                return None;
            }
        };
        Some(TableSnapshot {
            database: database.to_string(),
            measurement: measurement.to_string(),
            schema: state.schema.arrow().clone(),
            tag_columns: state.schema.tag_columns(),
            memory,
            files: SnapshotFiles::Table(TableFiles {
                list: state.files.clone(),
                visible_from,
                visible_before,
                only: only.clone(),
                tombstones: tombstones.clone(),
                path_prefix: None,
            }),
            visible_from,
            visible_before,
            tombstones: tombstones.into_iter().map(|t| t.predicate).collect(),
            only_matching: only.map(|o| o.predicate),
        })
    }
}

/// A time window `[from, before)`, either end open.
#[derive(Debug, Clone, Copy)]
struct Window {
    from: Option<TimestampNs>,
    before: Option<TimestampNs>,
}

/// The table's rows in memory, conformed to its schema, inside `window` and not hidden
/// by a delete (or, with `only`, exactly the rows that delete hides). Only frozen
/// segments can hold deleted rows: a delete freezes the live buffer.
fn visible_memory(
    state: &TableState,
    window: Window,
    tombstones: &[Tombstone],
    only: Option<&Tombstone>,
) -> crate::error::Result<Vec<RecordBatch>> {
    let schema = state.schema.arrow();
    let mut out = Vec::new();
    let frozen = state.frozen.iter().flat_map(|f| {
        let applying: Vec<&Tombstone> =
            tombstones.iter().filter(|t| t.index > f.log_last).collect();
        let counted = only.is_none_or(|o| o.index > f.log_last);
        f.batches
            .iter()
            .filter(move |_| counted)
            .map(move |b| (b, applying.clone()))
    });
    let active = state.active.iter().filter(|_| only.is_none()).map(|b| {
        // A delete froze the buffer; a window a continuous query rewrites adds its
        // rows in the entry of its own tombstone, which does not hide them.
        debug_assert!(
            tombstones.iter().all(|t| t.index <= b.index),
            "a delete froze the buffer"
        );
        (&b.batch, Vec::new())
    });
    for (batch, applying) in frozen.chain(active) {
        let mut batch = align(batch, schema)?;
        batch = rows_in(&batch, window)?;
        if let Some(only) = only {
            let matched = only.predicate.matches(&batch)?;
            batch = arrow::compute::filter_record_batch(&batch, &matched)?;
        }
        let batch = without_deleted(&batch, &applying)?;
        if batch.num_rows() > 0 {
            out.push(batch);
        }
    }
    Ok(out)
}

/// Rows of `batch` inside `window`.
fn rows_in(batch: &RecordBatch, window: Window) -> crate::error::Result<RecordBatch> {
    use arrow::array::AsArray;
    use arrow::datatypes::TimestampNanosecondType;
    if window.from.is_none() && window.before.is_none() {
        return Ok(batch.clone());
    }
    let Some(time) = batch
        .column_by_name(crate::schema::TIME_COLUMN)
        .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
    else {
        return Ok(batch.clone());
    };
    let inside =
        |t: i64| window.from.is_none_or(|f| t >= f.0) && window.before.is_none_or(|b| t < b.0);
    if time.values().iter().all(|&t| inside(t)) {
        return Ok(batch.clone());
    }
    let keep: arrow::array::BooleanArray = time.values().iter().map(|&t| Some(inside(t))).collect();
    Ok(arrow::compute::filter_record_batch(batch, &keep)?)
}

/// A [`TableSource`] that sees every table through one [`View`] (a continuous query's
/// window, or the rows one delete hid): the query engine runs ordinary SQL over it.
pub struct ViewSource {
    /// The storage it reads.
    pub storage: Arc<Storage>,
    /// How it sees the tables.
    pub view: View,
}

impl TableSource for ViewSource {
    fn databases(&self) -> Vec<String> {
        self.storage.databases()
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        self.storage.measurements(database)
    }

    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        self.storage.resolve_measurement(database, name)
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        self.storage.view_table(database, measurement, self.view)
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.storage.object_store()
    }
}
