//! Who calls and which database they mean, from a call's gRPC metadata.
//!
//! The token comes as `authorization: Bearer <token>` (what ADBC's
//! `adbc.flight.sql.authorization_header`, Grafana's token field and InfluxDB 3's
//! clients send) or as `authorization: Basic` with the token as password (the username
//! is ignored); it needs `read` permission, as `/api/v1/query` does. With `--auth none`
//! every call may read everything.
//!
//! Flight SQL has no field for a database, so the client names one in a header:
//! `database` (also InfluxDB 3's `bucket-name`, `bucket` and `iox-namespace-name`).
//! Without one, the database is `default`; tables of another database are reached as
//! `db.measurement` either way.

use axum::http::HeaderMap;
use quiver_query::QueryAccess;
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::status::auth_status;
use crate::auth::{Grant, Permission};
use crate::http::AppState;

/// The headers that may name the database, first match wins.
pub const DATABASE_HEADERS: [&str; 4] = ["database", "bucket-name", "bucket", "iox-namespace-name"];

/// A checked caller: what its token may read.
pub struct Caller {
    grant: Grant,
}

impl Caller {
    /// Checks the call's token for `read` permission.
    pub fn check(app: &AppState, metadata: &MetadataMap) -> Result<Caller, Status> {
        let headers: HeaderMap = metadata.clone().into_headers();
        let grant = app
            .auth
            .check(&headers, None, Permission::Read)
            .map_err(|e| {
                if app.auth.enabled() {
                    metrics::counter!("quiver_flight_auth_failures_total").increment(1);
                }
                auth_status(e, None)
            })?;
        Ok(Caller { grant })
    }

    /// The engine access for a query against `database`, refused if the token may not
    /// read it.
    pub fn access(&self, database: &str) -> Result<QueryAccess, Status> {
        quiver_storage::validate_database_name(database)
            .map_err(|e| Status::invalid_argument(format!("database {database:?}: {e}")))?;
        self.grant
            .database(database)
            .map_err(|e| auth_status(e, Some(database)))?;
        Ok(self.grant.query_access())
    }

    /// The engine access for catalog listings: every database the token may read.
    pub fn listing_access(&self) -> QueryAccess {
        self.grant.query_access()
    }
}

/// The database the call names in its headers, or `default`.
pub fn database(metadata: &MetadataMap) -> Result<String, Status> {
    for name in DATABASE_HEADERS {
        if let Some(value) = metadata.get(name) {
            let value = value.to_str().map_err(|_| {
                Status::invalid_argument(format!("header {name:?} must be an ASCII database name"))
            })?;
            let value = value.trim();
            if !value.is_empty() {
                return Ok(value.to_string());
            }
        }
    }
    Ok("default".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_header_wins_over_influxdb_names_and_defaults_to_default() {
        let mut metadata = MetadataMap::new();
        assert_eq!(database(&metadata).unwrap(), "default");
        metadata.insert("bucket-name", "influx".parse().unwrap());
        assert_eq!(database(&metadata).unwrap(), "influx");
        metadata.insert("database", "mine".parse().unwrap());
        assert_eq!(database(&metadata).unwrap(), "mine");
    }
}
