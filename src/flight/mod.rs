//! The Arrow Flight SQL door (`flight.addr`, `--flight-addr`; off unless set), so that
//! ADBC and JDBC Flight SQL drivers, Grafana's FlightSQL data source and InfluxDB 3's
//! client libraries query Quiver as they would a Flight SQL server or InfluxDB 3.
//!
//! - [`caller`]: who calls (`authorization: Bearer <token>`, or Basic with the token as
//!   password; `--auth none` skips it) and which database (the `database` header, or
//!   InfluxDB 3's `bucket-name`, `bucket` or `iox-namespace-name`; `default` if none).
//! - [`service`]: Flight SQL's statements and prepared statements over the one engine
//!   (same sandbox, timeout, memory limits and admission as `/api/v1/query`), results
//!   streamed batch by batch as they are produced.
//! - [`prepared`]: the prepared statements a client holds open, and their bound values.
//! - [`metadata`]: `GetSqlInfo`, `GetCatalogs`, `GetDbSchemas`, `GetTables`,
//!   `GetTableTypes`: the catalog is `quiver`, each database a schema, each measurement
//!   a table.
//! - [`xdbc`]: `GetXdbcTypeInfo`, the SQL types a column can have.
//! - [`cancel`]: `CancelFlightInfo` and `CancelQuery`: the running `DoGet`s of a
//!   `FlightInfo`'s tickets end with `CANCELLED`.
//! - [`ticket`]: what a `DoGet` ticket holds: the door's own statement handles, and
//!   InfluxDB 3's JSON tickets; [`door`] routes the latter before Flight SQL decodes.
//! - [`status`]: engine and auth errors as gRPC statuses.
//!
//! - [`incoming`]: the connections served, capped in all and per client address;
//!   with `http.tls_cert` set, gRPC over TLS only, on the node's certificate; without
//!   it, plain HTTP/2 (h2c).
//!
//! It is not a way to write: every statement is read-only, as over HTTP.

mod caller;
mod cancel;
mod door;
mod incoming;
mod metadata;
mod prepared;
mod service;
mod status;
mod ticket;
mod xdbc;

use std::sync::Arc;
use std::time::Duration;

use crate::gate::ConnectionGate;
use crate::http::AppState;
use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;

/// Requests one HTTP/2 connection may have in flight at once (queries are further
/// bounded by the engine's admission: `query.concurrency_max`, `query.queue_max`).
const STREAMS_PER_CONNECTION_MAX: u32 = 64;

/// Largest request message (a ticket, a prepared statement's bound values).
const REQUEST_BYTES_MAX: usize = 4 << 20;

/// Idle connections are probed this often so that dead peers free their slot.
const KEEPALIVE_INTERVAL_MS: u64 = 30_000;

/// Serves Flight SQL on `listener` (over TLS when `tls` is given) until the task is
/// dropped.
pub async fn serve(
    listener: TcpListener,
    app: AppState,
    gate: ConnectionGate,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let service = match service::Service::new(app) {
        Ok(service) => Arc::new(service),
        Err(e) => {
            tracing::error!(error = %e, "flight.addr: cannot start the Flight SQL door");
            return;
        }
    };
    let door = FlightServiceServer::new(door::Door::new(service))
        .max_decoding_message_size(REQUEST_BYTES_MAX);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX)
        .http2_keepalive_interval(Some(Duration::from_millis(KEEPALIVE_INTERVAL_MS)))
        .add_service(door);
    let result = router
        .serve_with_incoming(incoming::incoming(listener, tls, gate))
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "flight.addr: the Flight SQL server stopped");
    }
}
