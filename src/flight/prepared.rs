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
    /// The values bound by the last `DoPut`, if any.
    pub bound: Option<Vec<ScalarValue>>,
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

    /// Binds the one row of `batches` (or nothing, for no rows) to the placeholders,
    /// casting each value to its placeholder's type.
    pub fn bind(&mut self, batches: &[RecordBatch]) -> Result<(), Status> {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            self.bound = None;
            return Ok(());
        }
        if rows > 1 {
            return Err(Status::invalid_argument(format!(
                "{rows} rows of parameters were bound; Quiver runs a prepared query with \
                 one row of values at a time"
            )));
        }
        let Some(batch) = batches.iter().find(|b| b.num_rows() == 1) else {
            return Err(Status::invalid_argument("no row of parameters"));
        };
        if batch.num_columns() != self.params.len() {
            return Err(Status::invalid_argument(format!(
                "{} parameter values were bound; the statement has {} placeholders",
                batch.num_columns(),
                self.params.len()
            )));
        }
        let values = batch
            .columns()
            .iter()
            .zip(&self.params)
            .enumerate()
            .map(|(i, (column, target))| value(column.as_ref(), target.as_ref(), i))
            .collect::<Result<Vec<_>, Status>>()?;
        self.bound = Some(values);
        Ok(())
    }
}

/// The value of `$i+1`, cast to its placeholder's type when known.
fn value(column: &dyn Array, target: Option<&DataType>, i: usize) -> Result<ScalarValue, Status> {
    let value = ScalarValue::try_from_array(column, 0)
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
    fn one_row_binds_cast_to_the_placeholder_types() {
        let mut p = prepared(vec![Some(DataType::Float64), None]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![2])),
                Arc::new(StringArray::from(vec!["x"])),
            ],
        )
        .unwrap();
        p.bind(std::slice::from_ref(&batch)).unwrap();
        assert_eq!(
            p.bound,
            Some(vec![
                ScalarValue::Float64(Some(2.0)),
                ScalarValue::Utf8(Some("x".into()))
            ])
        );
        let two_rows = arrow::compute::concat_batches(&batch.schema(), [&batch, &batch]).unwrap();
        assert_eq!(
            p.bind(&[two_rows]).unwrap_err().code(),
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
