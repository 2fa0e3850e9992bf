//! quiver-query: read-only SQL over Quiver's measurements, through DataFusion.
//!
//! A [`QueryEngine`] plans and runs one SQL statement against one database. Each database
//! is a DataFusion schema and each measurement a table whose scan unions the rows still in
//! memory with the Parquet files whose time range can match the query. Every query runs in
//! a sandbox (no DDL, DML, `COPY`, `SET` or file-reading functions), under a timeout, a
//! memory limit of its own and one shared by all queries, after waiting for one of a
//! bounded number of slots, on a runtime of its own so that queries cannot starve ingest.
//! The [`encode`] module turns results into the wire formats of the HTTP API, batch by
//! batch, so responses stream.
//!
//! It is not the place for authentication, HTTP, read consistency (the caller waits for a
//! read index before calling in), or anything that writes: it never changes storage.
#![deny(missing_docs)]

mod admission;
mod avg;
mod build_side;
mod catalog;
mod client_types;
mod collapse_runs;
mod config;
mod delete_where;
mod distinct_estimate;
mod distributed;
pub mod encode;
mod engine;
mod error;
mod join_guard;
mod memory;
mod page_index_cache;
mod pg_catalog;
mod pg_functions;
mod pg_no_indexes;
mod pg_parse_ident;
mod pg_session_functions;
mod pg_sql;
mod pg_sql_rules;
mod pg_statements;
mod pg_to_regtype;
mod pg_visible;
mod produce;
mod provider;
mod prune;
mod references;
mod run_aggregate;
mod runtime;
mod sandbox;
mod stream;
mod udf;

pub use catalog::{QueryAccess, CATALOG_NAME};
pub use config::{QueryConfig, JOIN_PAIRS_MAX_DEFAULT};
pub use datafusion::scalar::ScalarValue;
pub use delete_where::{parse_delete_where, DELETE_WHERE_BYTES_MAX};
pub use distributed::{Distribution, UnreachableWorkers, WorkerDirectory, WORKER_SECRET_HEADER};
pub use engine::{QueryEngine, QueryOutput, QueryStats, STORAGE_URL};
pub use error::Error;
pub use pg_functions::{setting as pg_setting, SERVER_VERSION, SERVER_VERSION_NUM};
pub use pg_sql::{ColumnName, PgStatement, UNNAMED_COLUMN};
pub use pg_statements::split_statements;
pub use produce::{Described, PARAMS_MAX};
pub use references::tables_read;
pub use stream::{EncodedStream, QueryStream, ResultStream};
