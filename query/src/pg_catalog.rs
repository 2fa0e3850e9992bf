//! Postgres's `pg_catalog` for the clients of the Postgres door (pgjdbc's
//! `DatabaseMetaData`, SQLAlchemy's dialect and inspector, Npgsql's type loading,
//! psql's backslash commands), from the `datafusion-pg-catalog` crate: its static
//! tables (`pg_type`, `pg_proc`, ...), its tables built from a catalog (`pg_class`,
//! `pg_namespace`, `pg_attribute`, `pg_database`, `pg_tables`) and its functions
//! (`format_type`, `pg_table_is_visible`, `has_*_privilege`, ...).
//!
//! Quiver's model is mapped onto Postgres's so that a connection to database `demo`
//! looks like a Postgres database `demo` with one schema, also named `demo`, holding
//! the measurements (the schema the door's `search_path` names, and the one SQL
//! resolves unqualified names in). `pg_database` lists every database the token may
//! read; no other database's schemas or tables appear, as in Postgres.
//!
//! The tables built from the catalog number their rows with OIDs the crate hands out
//! as it first meets them and keeps for as long as its provider lives; clients join
//! one query's OIDs to the next (psql's `\d`: find the table's OID, then its columns).
//! So one provider per database and token scope lives in the engine
//! ([`PgCatalogs`]), shared by every connection with that scope, and the OIDs stay put
//! across statements and connections, as they do in Postgres.
//!
//! Not here: the SQL rewrites for Postgres-only syntax ([`crate::pg_sql`]) and the
//! session functions that name the connection's database ([`crate::pg_functions`]).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::ScalarUDF;
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};
use parking_lot::Mutex;

use crate::catalog::{QueryAccess, QuiverCatalog};
use crate::client_types;
use crate::error::Error;

/// Name of the schema clients read Postgres's catalog from.
pub const PG_CATALOG_SCHEMA: &str = "pg_catalog";

/// Most providers kept at once (database × token scope). Past it the map starts
/// over: OIDs then change once, which clients survive by asking again.
const PG_CATALOGS_MAX: usize = 1_024;

/// The catalog the crate's setup writes into, thrown away after (see [`install`]).
const SETUP_CATALOG: &str = "pg_catalog_setup";

/// `state` with the crate's functions, table functions and SQL type names added
/// (`setup_pg_catalog`, run on a scratch catalog: the real `pg_catalog` is per
/// database and scope, [`PgCatalogs::schema`]). Functions of the same name already
/// in `state` are replaced; the caller registers Quiver's own versions after this.
pub(crate) fn install(state: SessionState) -> Result<SessionState, Error> {
    let catalogs = Arc::clone(state.catalog_list());
    let scratch = datafusion::catalog::MemoryCatalogProviderList::new();
    datafusion::catalog::CatalogProviderList::register_catalog(
        &scratch,
        SETUP_CATALOG.to_string(),
        Arc::new(datafusion::catalog::MemoryCatalogProvider::new()),
    );
    let context = SessionContext::new_with_state(
        SessionStateBuilder::new_from_existing(state)
            .with_catalog_list(Arc::new(scratch))
            .build(),
    );
    datafusion_pg_catalog::setup_pg_catalog(&context, SETUP_CATALOG, EmptyContextProvider)
        .map_err(|e| Error::Internal(format!("pg_catalog setup: {e}")))?;
    Ok(SessionStateBuilder::new_from_existing(context.state())
        .with_catalog_list(catalogs)
        .build())
}

/// Who sees which `pg_catalog`: the connection's database and the token's databases.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Scope {
    database: String,
    databases: Option<Vec<String>>,
}

/// The `pg_catalog` schemas handed out, one per database and token scope.
pub(crate) struct PgCatalogs {
    static_tables: Arc<PgCatalogStaticTables>,
    providers: Mutex<HashMap<Scope, Arc<dyn SchemaProvider>>>,
}

impl std::fmt::Debug for PgCatalogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCatalogs").finish_non_exhaustive()
    }
}

impl PgCatalogs {
    /// Loads the crate's static tables (once per engine: they are parsed from Arrow
    /// IPC embedded in the binary).
    pub(crate) fn new() -> Result<Self, Error> {
        Ok(PgCatalogs {
            static_tables: Arc::new(
                PgCatalogStaticTables::try_new()
                    .map_err(|e| Error::Internal(format!("pg_catalog tables: {e}")))?,
            ),
            providers: Mutex::new(HashMap::new()),
        })
    }

    /// `to_regtype(name)` over the types of `pg_type`.
    pub(crate) fn to_regtype(&self) -> Result<Arc<ScalarUDF>, Error> {
        crate::pg_to_regtype::function(&self.static_tables.pg_type)
            .map_err(|e| Error::Internal(format!("to_regtype: {e}")))
    }

    /// The `pg_catalog` schema a client connected to `database` with `access` reads,
    /// over `catalog` (which must already be limited to `access`).
    pub(crate) fn schema(
        &self,
        catalog: QuiverCatalog,
        database: &str,
        access: &QueryAccess,
    ) -> Result<Arc<dyn SchemaProvider>, Error> {
        let scope = Scope {
            database: database.to_string(),
            databases: access.databases().map(|list| {
                let mut list = list.to_vec();
                list.sort();
                list
            }),
        };
        let mut providers = self.providers.lock();
        if let Some(found) = providers.get(&scope) {
            return Ok(Arc::clone(found));
        }
        if providers.len() >= PG_CATALOGS_MAX {
            providers.clear();
        }
        let info = DatabaseInfo {
            catalog,
            database: scope.database.clone(),
        };
        let provider: Arc<dyn SchemaProvider> = Arc::new(
            PgCatalogSchemaProvider::try_new(
                info,
                Arc::clone(&self.static_tables),
                EmptyContextProvider,
            )
            .map_err(|e| Error::Internal(format!("pg_catalog: {e}")))?,
        );
        providers.insert(scope, Arc::clone(&provider));
        Ok(provider)
    }
}

/// `schema` as the Postgres door sends its columns: timestamps without a zone (UTC
/// instants in Quiver) as `timestamptz`, so `pg_attribute`, psql's `\d` and pgjdbc's
/// `getColumns` name the type the door's results carry.
fn as_postgres_types(schema: &SchemaRef) -> SchemaRef {
    use datafusion::arrow::datatypes::{DataType, Schema};
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(_, None)))
    {
        return Arc::clone(schema);
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(unit, None) => Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(DataType::Timestamp(*unit, Some("UTC".into()))),
            ),
            _ => Arc::clone(f),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// What the crate's tables list, for one connection: its catalogs are Postgres's
/// databases (the ones the token reads); only the connection's database has schemas:
/// itself, `pg_catalog` and `information_schema`; only the first holds tables.
#[derive(Clone)]
struct DatabaseInfo {
    catalog: QuiverCatalog,
    database: String,
}

impl std::fmt::Debug for DatabaseInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseInfo")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl DatabaseInfo {
    fn is_own(&self, catalog: &str, schema: &str) -> bool {
        catalog == self.database && schema == self.database
    }
}

#[async_trait]
impl CatalogInfo for DatabaseInfo {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        let mut names = self.catalog.schema_names();
        if !names.contains(&self.database) {
            names.push(self.database.clone());
        }
        names.sort();
        Ok(names)
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(Some(if catalog == self.database {
            vec![
                self.database.clone(),
                PG_CATALOG_SCHEMA.to_string(),
                "information_schema".to_string(),
            ]
        } else {
            Vec::new()
        }))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        if !self.is_own(catalog, schema) {
            return Ok(Some(Vec::new()));
        }
        Ok(Some(
            self.catalog
                .schema(&self.database)
                .map(|s| s.table_names())
                .unwrap_or_default(),
        ))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        if !self.is_own(catalog, schema) {
            return Ok(None);
        }
        let Some(database) = self.catalog.schema(&self.database) else {
            return Ok(None);
        };
        Ok(database.table(table).await?.map(|t| {
            let schema = t.schema();
            as_postgres_types(&client_types::client_schema(&schema).unwrap_or(schema))
        }))
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        if !self.is_own(catalog, schema) {
            return Ok(None);
        }
        Ok(self
            .catalog
            .schema(&self.database)
            .filter(|s| s.table_exist(table))
            .map(|_| TableType::Base))
    }
}
