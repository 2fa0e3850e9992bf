//! What a `DoGet` ticket holds.
//!
//! - The door's own statement handle (inside Flight SQL's `TicketStatementQuery`): the
//!   database and the SQL, as JSON with a version number. It is opaque to clients and
//!   carries no authority: the `DoGet` that presents it is authenticated again, and the
//!   token must still be allowed to read the database.
//! - InfluxDB 3's ticket, which its client libraries send as the whole ticket, not as a
//!   Flight SQL command: `{"database": ..., "sql_query": ..., "query_type": "sql"}`.
//!   Only SQL is answered; InfluxQL and query parameters are refused with a message
//!   saying so.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tonic::Status;

/// Version of [`Statement`]'s encoding.
const STATEMENT_VERSION: u32 = 1;

/// A planned statement, as a `TicketStatementQuery` handle carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statement {
    /// Encoding version ([`STATEMENT_VERSION`]).
    v: u32,
    /// The database the statement runs against.
    pub database: String,
    /// The SQL as the client sent it.
    pub sql: String,
    /// This `FlightInfo`'s run: random, so that `CancelFlightInfo` stops this client's
    /// run and not another's of the same SQL (absent from handles of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl Statement {
    /// A statement handle for `sql` against `database`.
    pub fn new(database: String, sql: String) -> Statement {
        Statement {
            v: STATEMENT_VERSION,
            database,
            sql,
            run: Some(format!("s{:032x}", rand::random::<u128>())),
        }
    }

    /// The handle's bytes.
    pub fn encode(&self) -> Result<Bytes, Status> {
        serde_json::to_vec(self)
            .map(Bytes::from)
            .map_err(|e| super::status::internal("encoding a statement handle", e))
    }

    /// The statement a handle names; `InvalidArgument` for anything the door did not
    /// make.
    pub fn decode(handle: &[u8]) -> Result<Statement, Status> {
        let statement: Statement = serde_json::from_slice(handle).map_err(|_| {
            Status::invalid_argument("the statement handle was not made by this server")
        })?;
        if statement.v != STATEMENT_VERSION {
            return Err(Status::invalid_argument(format!(
                "statement handle version {} is not {STATEMENT_VERSION}: get a new \
                 FlightInfo for the query",
                statement.v
            )));
        }
        Ok(statement)
    }
}

/// InfluxDB 3's JSON ticket.
#[derive(Debug, Deserialize)]
struct InfluxWire {
    #[serde(default)]
    database: Option<String>,
    sql_query: String,
    #[serde(default)]
    query_type: Option<String>,
    #[serde(default)]
    params: Option<serde_json::Map<String, serde_json::Value>>,
}

/// An InfluxDB 3 query the door can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfluxQuery {
    /// The database the ticket names, if any (else the call's headers decide).
    pub database: Option<String>,
    /// The SQL.
    pub sql: String,
}

/// InfluxDB 3's ticket, if `ticket` is one (a JSON object; Flight SQL tickets are
/// protobuf and never start with `{`); `Err` when it is one the door cannot answer.
pub fn influx(ticket: &[u8]) -> Option<Result<InfluxQuery, Status>> {
    let first = ticket.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    Some(influx_query(ticket))
}

fn influx_query(ticket: &[u8]) -> Result<InfluxQuery, Status> {
    let wire: InfluxWire = serde_json::from_slice(ticket).map_err(|e| {
        Status::invalid_argument(format!(
            "the ticket is not an InfluxDB 3 query like {{\"database\": \"db\", \
             \"sql_query\": \"SELECT ...\", \"query_type\": \"sql\"}}: {e}"
        ))
    })?;
    match wire
        .query_type
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("sql") => {}
        Some("influxql") => {
            return Err(Status::invalid_argument(
                "query_type \"influxql\" is not supported: Quiver answers SQL only \
                 (send query_type \"sql\", e.g. client.query(sql, language=\"sql\"))",
            ))
        }
        Some(other) => {
            return Err(Status::invalid_argument(format!(
                "query_type {other:?} is not supported: Quiver answers \"sql\""
            )))
        }
    }
    if wire.params.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(Status::invalid_argument(
            "query parameters in InfluxDB 3 tickets are not supported: write the values \
             into the SQL, or use a Flight SQL prepared statement with $1, $2, ...",
        ));
    }
    Ok(InfluxQuery {
        database: wire.database.filter(|d| !d.is_empty()),
        sql: wire.sql_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn statement_handles_round_trip_and_foreign_ones_are_refused() {
        let statement = Statement::new("db".into(), "SELECT 1".into());
        let bytes = statement.encode().unwrap();
        assert_eq!(Statement::decode(&bytes).unwrap(), statement);
        let err = Statement::decode(b"\x0a\x01x").unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[test]
    fn influxdb3_tickets_are_recognised_and_influxql_is_refused() {
        let ticket = br#"{"database": "db", "sql_query": "SELECT 1", "query_type": "sql"}"#;
        let query = influx(ticket).unwrap().unwrap();
        assert_eq!(query.database.as_deref(), Some("db"));
        assert_eq!(query.sql, "SELECT 1");
        let influxql =
            br#"{"database": "db", "sql_query": "SHOW MEASUREMENTS", "query_type": "influxql"}"#;
        let err = influx(influxql).unwrap().unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("influxql"), "{}", err.message());
        // A Flight SQL ticket is a protobuf `Any`: field 1, length-delimited.
        assert!(influx(b"\x0a\x05hello").is_none());
    }
}
