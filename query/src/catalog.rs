//! The catalog DataFusion sees: one catalog, a schema per database, a table per
//! measurement, all asked of the [`TableSource`] when a query is planned.
//!
//! Nothing is registered ahead of time, so a measurement is queryable as soon as its
//! first row is applied. Each table resolved during planning takes one consistent
//! snapshot of that measurement, used for the rest of the query.
//!
//! DataFusion lower-cases unquoted identifiers, while measurement and database names keep
//! their case. When the exact name is missing, a name that differs only in case resolves
//! too, if exactly one such name exists; otherwise the client must quote the name.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::TableType;
use quiver_storage::{resolve_name, validate_database_name, TableSource};

use crate::distributed::GroupTable;
use crate::provider::MeasurementTable;

/// Name of the single catalog; databases are its schemas.
pub const CATALOG_NAME: &str = "quiver";

/// The catalog over the databases of a [`TableSource`] a query may see.
#[derive(Clone)]
pub(crate) struct QuiverCatalog {
    source: Arc<dyn TableSource>,
    access: QueryAccess,
    /// Postgres's catalog, as a schema beside the databases, for the Postgres door.
    pg_catalog: Option<Arc<dyn SchemaProvider>>,
    /// Measurements held by other nodes are scanned there (`distributed`), instead of
    /// their rows being fetched here.
    scan_at_members: bool,
}

impl QuiverCatalog {
    pub(crate) fn new(source: Arc<dyn TableSource>, access: QueryAccess) -> Self {
        QuiverCatalog {
            source,
            access,
            pg_catalog: None,
            scan_at_members: false,
        }
    }

    /// This catalog with measurements held elsewhere scanned where they are held.
    pub(crate) fn scanning_at_members(mut self, on: bool) -> Self {
        self.scan_at_members = on;
        self
    }

    /// This catalog with `pg_catalog` resolving to `schema` (it shadows a database of
    /// that name).
    pub(crate) fn with_pg_catalog(mut self, schema: Arc<dyn SchemaProvider>) -> Self {
        self.pg_catalog = Some(schema);
        self
    }
}

/// Which databases a query may read: all, or a token's list. A database outside the
/// list does not exist for the query (its tables resolve to "not found"), so a
/// restricted token cannot learn or read another database through `db.measurement`,
/// `information_schema` or `SHOW TABLES`.
///
/// It also says how the catalog is presented: a Postgres client
/// ([`with_pg_catalog`](Self::with_pg_catalog)) also finds Postgres's `pg_catalog`.
#[derive(Debug, Clone, Default)]
pub struct QueryAccess {
    databases: Option<Arc<[String]>>,
    pg_catalog: bool,
}

impl QueryAccess {
    /// Every database.
    pub fn all() -> QueryAccess {
        QueryAccess {
            databases: None,
            pg_catalog: false,
        }
    }

    /// Only these databases.
    pub fn only(databases: Vec<String>) -> QueryAccess {
        QueryAccess {
            databases: Some(databases.into()),
            pg_catalog: false,
        }
    }

    /// The same access for a Postgres client: its queries also find `pg_catalog`
    /// (listing the databases this access allows, and the tables of the query's
    /// database), as Postgres drivers and tools expect.
    pub fn with_pg_catalog(mut self) -> QueryAccess {
        self.pg_catalog = true;
        self
    }

    /// Whether queries find `pg_catalog`.
    pub fn has_pg_catalog(&self) -> bool {
        self.pg_catalog
    }

    /// The databases allowed, or `None` for all.
    pub fn databases(&self) -> Option<&[String]> {
        self.databases.as_deref()
    }

    /// Whether the query may read `database`.
    pub fn allows(&self, database: &str) -> bool {
        self.databases
            .as_ref()
            .is_none_or(|list| list.iter().any(|d| d == database))
    }

    /// Whether some databases are hidden.
    pub fn is_restricted(&self) -> bool {
        self.databases.is_some()
    }
}

impl std::fmt::Debug for QuiverCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuiverCatalog").finish_non_exhaustive()
    }
}

impl CatalogProvider for QuiverCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.source.databases();
        names.retain(|d| self.access.allows(d));
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(pg_catalog) = &self.pg_catalog {
            if name == crate::pg_catalog::PG_CATALOG_SCHEMA {
                return Some(Arc::clone(pg_catalog));
            }
        }
        let databases = self.schema_names();
        let database = match resolve_name(name, &databases) {
            Some(existing) => existing.to_string(),
            // A database without measurements yet still resolves (to no tables), so the
            // client hears "table not found" rather than "schema not found".
            None if validate_database_name(name).is_ok() && self.access.allows(name) => {
                name.to_string()
            }
            None => return None,
        };
        Some(Arc::new(DatabaseSchema {
            source: Arc::clone(&self.source),
            database,
            scan_at_members: self.scan_at_members,
        }))
    }
}

/// One database: its measurements are the tables.
struct DatabaseSchema {
    source: Arc<dyn TableSource>,
    database: String,
    scan_at_members: bool,
}

impl std::fmt::Debug for DatabaseSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSchema")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl DatabaseSchema {
    /// The table `name` refers to: a snapshot taken here (a short in-memory copy under
    /// the storage lock), or fetched from a member of the group that holds it.
    fn table_of(
        &self,
        name: &str,
    ) -> BoxFuture<'static, Result<Option<Arc<dyn TableProvider>>, DataFusionError>> {
        let Some(measurement) = self.source.resolve_measurement(&self.database, name) else {
            return Box::pin(std::future::ready(Ok(None)));
        };
        if self.scan_at_members {
            if let Some(held) = self.source.held_elsewhere(&self.database, &measurement) {
                let fetch = self.source.fetch_schema(&self.database, &measurement);
                let (source, database) = (Arc::clone(&self.source), self.database.clone());
                return Box::pin(async move {
                    let schema = fetch
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    // Asked again: the fetch moved the group's preference to the member
                    // that answered it, which the stage should go to first.
                    let held = source
                        .held_elsewhere(&database, &measurement)
                        .unwrap_or(held);
                    Ok(schema.map(|schema| {
                        Arc::new(GroupTable::new(
                            database,
                            measurement,
                            held,
                            &schema,
                            source,
                        )) as Arc<dyn TableProvider>
                    }))
                });
            }
        }
        let fetch = self.source.fetch_table(&self.database, &measurement);
        Box::pin(async move {
            let snapshot = fetch
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            Ok(snapshot.map(|s| Arc::new(MeasurementTable::new(s)) as Arc<dyn TableProvider>))
        })
    }
}

// `SchemaProvider` is declared with `#[async_trait]`; this crate does not depend on that
// macro, so the two async methods below are written in the form it expands to.
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        self.source.measurements(&self.database)
    }

    fn table<'life0, 'life1, 'async_trait>(
        &'life0 self,
        name: &'life1 str,
    ) -> BoxFuture<'async_trait, Result<Option<Arc<dyn TableProvider>>, DataFusionError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.table_of(name)
    }

    fn table_type<'life0, 'life1, 'async_trait>(
        &'life0 self,
        name: &'life1 str,
    ) -> BoxFuture<'async_trait, Result<Option<TableType>, DataFusionError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        // Answered from the names alone, so `information_schema.tables` does not
        // snapshot every measurement (nor list them all once per table).
        let found = self
            .source
            .resolve_measurement(&self.database, name)
            .map(|_| TableType::Base);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.source
            .resolve_measurement(&self.database, name)
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_exactly_then_by_unique_case_fold() {
        let names = vec!["CPU".to_string(), "Mem".to_string(), "mem".to_string()];
        assert_eq!(resolve_name("CPU", &names), Some("CPU"));
        assert_eq!(resolve_name("cpu", &names), Some("CPU"));
        assert_eq!(resolve_name("mem", &names), Some("mem"));
        assert_eq!(
            resolve_name("MEM", &names),
            None,
            "ambiguous without quotes"
        );
        assert_eq!(resolve_name("disk", &names), None);
    }
}
