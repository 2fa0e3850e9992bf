//! What queries read: [`TableSource`] over buffers, frozen segments and files.

use std::sync::Arc;

use object_store::ObjectStore;

use super::{Storage, TableKey};
use crate::table::{ParquetFileRef, TableSnapshot, TableSource};

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
            .keys()
            .filter(|k| k.database == database)
            .map(|k| k.measurement.clone())
            .collect()
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        let table = self
            .tables
            .read()
            .get(&TableKey::new(database, measurement))
            .cloned()?;
        let state = table.state.read();
        let memory = match state.memory_batches() {
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
            files: state
                .files
                .iter()
                .map(|f| ParquetFileRef {
                    path: f.path.clone(),
                    size_bytes: f.size_bytes,
                    rows: f.rows,
                    time_min: f.time_min,
                    time_max: f.time_max,
                })
                .collect(),
        })
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }
}
