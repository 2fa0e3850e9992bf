//! The prepared statements clients hold open: created by `CreatePreparedStatement`
//! (planned once to learn the result's and the placeholders' types), given values by
//! `DoPut`, run by `DoGet`, and forgotten at `ClosePreparedStatement`.
//!
//! The table is bounded ([`PREPARED_MAX`]). A statement unused for [`IDLE_MS_MAX`] is
//! dropped when room is needed, so clients that never close theirs cannot fill it;
//! past that, creating one is refused with `ResourceExhausted`. Handles are random
//! (128 bits) and carry no authority: every call that presents one is authenticated
//! again and its token must still be allowed to read the statement's database.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow::array::Array;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use quiver_query::ScalarValue;
use tonic::Status;

/// Prepared statements open at once on this node.
pub const PREPARED_MAX: usize = 4_096;

/// Rows of parameters one `DoPut` may bind (the query runs once per row).
pub const PARAM_ROWS_MAX: usize = 1_024;

/// A statement unused this long may be dropped to make room.
pub const IDLE_MS_MAX: u64 = 15 * 60 * 1_000;

/// One prepared statement.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The database it runs against.
    pub database: String,
    /// The SQL as the client sent it.
    pub sql: String,
    /// Its result's columns.
    pub schema: SchemaRef,
    /// Its placeholders' types, `$1` first (`None`: not inferred).
    pub params: Vec<Option<DataType>>,
    /// The rows of values bound by the last `DoPut`, if any (at least one row): the
    /// query runs once per row, its answers one after another.
    pub bound: Option<Vec<Vec<ScalarValue>>>,
    used: Instant,
}

impl Prepared {
    /// A statement with nothing bound yet.
    pub fn new(
        database: String,
        sql: String,
        schema: SchemaRef,
        params: Vec<Option<DataType>>,
    ) -> Self {
        Prepared {
            database,
            sql,
            schema,
            params,
            bound: None,
            used: Instant::now(),
        }
    }

    /// The schema Flight SQL clients bind values against: `$1`, `$2`, ... with the
    /// inferred types (`Null` where none was inferred).
    pub fn parameter_schema(&self) -> Schema {
        Schema::new(
            self.params
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Field::new(
                        format!("${}", i + 1),
                        t.clone().unwrap_or(DataType::Null),
                        true,
                    )
                })
                .collect::<Vec<_>>(),
        )
    }

    /// Binds the rows of `batches` (nothing, for no rows) to the placeholders, casting
    /// each value to its placeholder's type. At most [`PARAM_ROWS_MAX`] rows.
    pub fn bind(&mut self, batches: &[RecordBatch]) -> Result<(), Status> {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            self.bound = None;
            return Ok(());
        }
        if rows > PARAM_ROWS_MAX {
            return Err(Status::invalid_argument(format!(
                "{rows} rows of parameters were bound; at most {PARAM_ROWS_MAX} (the query \
                 runs once per row)"
            )));
        }
        let mut bound = Vec::with_capacity(rows);
        for batch in batches.iter().filter(|b| b.num_rows() > 0) {
            if batch.num_columns() != self.params.len() {
                return Err(Status::invalid_argument(format!(
                    "{} parameter values were bound; the statement has {} placeholders",
                    batch.num_columns(),
                    self.params.len()
                )));
            }
            for row in 0..batch.num_rows() {
                let values = batch
                    .columns()
                    .iter()
                    .zip(&self.params)
                    .enumerate()
                    .map(|(i, (column, target))| value(column.as_ref(), row, target.as_ref(), i))
                    .collect::<Result<Vec<_>, Status>>()?;
                bound.push(values);
            }
        }
        debug_assert_eq!(bound.len(), rows);
        self.bound = Some(bound);
        Ok(())
    }
}

/// The value of `$i+1` in `row`, cast to its placeholder's type when known.
fn value(
    column: &dyn Array,
    row: usize,
    target: Option<&DataType>,
    i: usize,
) -> Result<ScalarValue, Status> {
    let value = ScalarValue::try_from_array(column, row)
        .map_err(|e| Status::invalid_argument(format!("parameter ${}: {e}", i + 1)))?;
    match target {
        Some(target) if value.data_type() != *target && !value.is_null() => {
            value.cast_to(target).map_err(|e| {
                Status::invalid_argument(format!("parameter ${}: not a {target}: {e}", i + 1))
            })
        }
        _ => Ok(value),
    }
}

/// The open prepared statements of this node.
#[derive(Default)]
pub struct Registry {
    statements: Mutex<HashMap<Bytes, Prepared>>,
}

impl Registry {
    /// The table; a panic elsewhere while holding it leaves nothing half-changed (each
    /// change is one map operation), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, HashMap<Bytes, Prepared>> {
        self.statements
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `prepared` and returns its new handle.
    pub fn insert(&self, prepared: Prepared) -> Result<Bytes, Status> {
        let mut statements = self.lock();
        if statements.len() >= PREPARED_MAX {
            let idle = Duration::from_millis(IDLE_MS_MAX);
            statements.retain(|_, p| p.used.elapsed() < idle);
        }
        if statements.len() >= PREPARED_MAX {
            metrics::counter!("quiver_flight_errors_total", "kind" => "prepared_full").increment(1);
            return Err(Status::resource_exhausted(format!(
                "{PREPARED_MAX} prepared statements are open on this node; close some \
                 (ClosePreparedStatement) and retry"
            )));
        }
        let handle = Bytes::from(format!("q{:032x}", rand::random::<u128>()));
        statements.insert(handle.clone(), prepared);
        Ok(handle)
    }

    /// The statement `handle` names, marked used.
    pub fn get(&self, handle: &[u8]) -> Result<Prepared, Status> {
        let mut statements = self.lock();
        let prepared = statements.get_mut(handle).ok_or_else(unknown)?;
        prepared.used = Instant::now();
        Ok(prepared.clone())
    }

    /// Changes the statement `handle` names with `f`.
    pub fn update<T>(
        &self,
        handle: &[u8],
        f: impl FnOnce(&mut Prepared) -> Result<T, Status>,
    ) -> Result<T, Status> {
        let mut statements = self.lock();
        let prepared = statements.get_mut(handle).ok_or_else(unknown)?;
        prepared.used = Instant::now();
        f(prepared)
    }

    /// Forgets the statement `handle` names (nothing if it is not open).
    pub fn remove(&self, handle: &[u8]) {
        self.lock().remove(handle);
    }
}

fn unknown() -> Status {
    Status::not_found(
        "no such prepared statement: it was closed, expired after being idle, or was \
         made by another server; prepare it again",
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    fn prepared(params: Vec<Option<DataType>>) -> Prepared {
        Prepared::new(
            "db".into(),
            "SELECT $1".into(),
            Arc::new(Schema::empty()),
            params,
        )
    }

    #[test]
    fn rows_bind_cast_to_the_placeholder_types_in_order() {
        let mut p = prepared(vec![Some(DataType::Float64), None]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let batch = |a: Vec<i64>, b: Vec<&str>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(a)),
                    Arc::new(StringArray::from(b)),
                ],
            )
            .unwrap()
        };
        p.bind(&[batch(vec![2], vec!["x"])]).unwrap();
        let row = |a: f64, b: &str| {
            vec![
                ScalarValue::Float64(Some(a)),
                ScalarValue::Utf8(Some(b.into())),
            ]
        };
        assert_eq!(p.bound, Some(vec![row(2.0, "x")]));
        // Several rows, over several batches (an empty one among them), in order.
        p.bind(&[
            batch(vec![1, 2], vec!["a", "b"]),
            batch(vec![], vec![]),
            batch(vec![3], vec!["c"]),
        ])
        .unwrap();
        assert_eq!(
            p.bound,
            Some(vec![row(1.0, "a"), row(2.0, "b"), row(3.0, "c")])
        );
        // No rows: nothing bound.
        p.bind(&[batch(vec![], vec![])]).unwrap();
        assert_eq!(p.bound, None);
        // Too many rows, or the wrong number of columns, are refused.
        let many: Vec<i64> = (0..=PARAM_ROWS_MAX as i64).collect();
        let names = vec!["n"; many.len()];
        assert_eq!(
            p.bind(&[batch(many, names)]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let mut one = prepared(vec![None]);
        assert_eq!(
            one.bind(&[batch(vec![1], vec!["x"])]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn handles_are_unique_and_closed_ones_are_not_found() {
        let registry = Registry::default();
        let a = registry.insert(prepared(vec![])).unwrap();
        let b = registry.insert(prepared(vec![])).unwrap();
        assert_ne!(a, b);
        registry.remove(&a);
        assert_eq!(registry.get(&a).unwrap_err().code(), tonic::Code::NotFound);
        assert!(registry.get(&b).is_ok());
    }
}
