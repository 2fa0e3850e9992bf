//! The Postgres wire protocol door (`pg.addr`, `--pg-addr`; off unless set), so that
//! `psql`, Python's psycopg and asyncpg, Grafana's Postgres data source and BI tools
//! query Quiver as they would a Postgres server.
//!
//! - [`startup`]: the database named at startup is the Quiver database; the password is
//!   a token, checked by SCRAM-SHA-256 ([`scram`]; over TLS also SCRAM-SHA-256-PLUS,
//!   bound to the certificate by [`channel_binding`]) when the user name is the token's id
//!   (`bootstrap` for the bootstrap token), as a cleartext password otherwise
//!   (`--auth none` skips it). With `http.tls_cert` set, the door
//!   answers `SSLRequest` with TLS on the node's certificate (PostgreSQL 17's direct TLS
//!   too) and refuses a connection that did not ask for it, so a token never crosses
//!   the network in the clear; without it, `SSLRequest` is answered `N`.
//! - [`session`]: simple and extended query protocols over the one engine (same
//!   sandbox, timeout, memory limits and admission as `/api/v1/query`).
//! - [`cancel`]: cancel requests stop the running query, also while its rows stream.
//! - [`encode`] and [`params`]: Arrow values to and from Postgres's text and binary
//!   formats.
//! - [`search_path`]: Grafana's expansion of `search_path` becomes the database.
//! - [`local`]: what the door answers itself (`BEGIN`, `SET`, `SHOW`). Catalog
//!   queries (psql's `\l`, `\dt`, `\d`, pgjdbc's `DatabaseMetaData`, SQLAlchemy's
//!   inspector) run on the engine, which gives Postgres clients a `pg_catalog` over
//!   the databases their token reads (`quiver_query::PgStatement`).
//!
//! It is not a way to write: every statement is read-only, as over HTTP.

mod cancel;
mod channel_binding;
mod encode;
mod local;
mod params;
mod scram;
mod search_path;
mod session;
mod startup;

use std::sync::Arc;

use pgwire::api::PgWireServerHandlers;
use tokio::net::TcpListener;

use crate::gate::{ConnectionGate, GateRefusal};
use crate::http::AppState;

pub use channel_binding::end_point_hash;

/// The door's TLS: its listener configuration and the certificate's channel-binding
/// value (`None`: SCRAM-SHA-256-PLUS is not offered).
pub struct PgTls {
    /// The listener's rustls configuration.
    pub config: Arc<rustls::ServerConfig>,
    /// `tls-server-end-point` of the door's certificate.
    pub end_point: Option<Arc<[u8]>>,
}

/// Everything one connection needs; shared by all of them.
struct Handlers {
    session: Arc<session::Session>,
    startup: Arc<startup::Startup>,
    cancel: Arc<cancel::Handler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        Arc::clone(&self.session)
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        Arc::clone(&self.session)
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        Arc::clone(&self.startup)
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::clone(&self.cancel)
    }
}

/// Accepts Postgres connections on `listener` until the task is dropped, as many as
/// `gate` lets in (`pg.connections_max`, `pg.connections_per_address_max`): more are
/// told so with Postgres's own `too_many_connections` error, then closed, and counted.
/// With `tls`, every connection must negotiate TLS.
pub async fn serve(listener: TcpListener, app: AppState, gate: ConnectionGate, tls: Option<PgTls>) {
    let cancels = Arc::new(cancel::Registry::default());
    let end_point = tls.as_ref().and_then(|t| t.end_point.clone());
    let tls = tls.map(|t| pgwire::tokio::TlsAcceptor::from(t.config));
    let handlers = Arc::new(Handlers {
        session: Arc::new(session::Session::new(app.clone())),
        startup: Arc::new(startup::Startup::new(
            app,
            Arc::clone(&cancels),
            tls.is_some(),
            end_point,
        )),
        cancel: Arc::new(cancel::Handler(cancels)),
    });
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: wait a moment rather than spin.
                tracing::warn!(error = %e, "pg.addr: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(ACCEPT_BACKOFF_MS)).await;
                continue;
            }
        };
        let permit = match gate.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                metrics::counter!("quiver_pg_connections_refused_total", "reason" => refusal.label())
                    .increment(1);
                tracing::warn!(%peer, reason = refusal.label(), "pg connection refused");
                tokio::spawn(refuse(socket, refusal));
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let handlers = Arc::clone(&handlers);
        let tls = tls.clone();
        tokio::spawn(async move {
            if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                tracing::debug!(%peer, error = %e, "pg connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Pause after a failed `accept` (for example when out of file descriptors).
const ACCEPT_BACKOFF_MS: u64 = 100;

/// Most time spent telling a refused connection why.
const REFUSAL_WRITE_MS: u64 = 1_000;

/// Sends a refused connection Postgres's `FATAL 53300 too_many_connections` (what a
/// Postgres server answers past `max_connections`; libpq reports it whether it sent a
/// startup or an SSL request first), then closes it.
async fn refuse(mut socket: tokio::net::TcpStream, refusal: GateRefusal) {
    use tokio::io::AsyncWriteExt;
    let setting = match refusal {
        GateRefusal::Full => "pg.connections_max",
        GateRefusal::AddressFull => "pg.connections_per_address_max",
    };
    let mut fields = Vec::new();
    for (code, value) in [
        (b'S', "FATAL".to_string()),
        (b'V', "FATAL".to_string()),
        (b'C', "53300".to_string()),
        (b'M', refusal.message(setting)),
    ] {
        fields.push(code);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut message = vec![b'E'];
    message.extend_from_slice(&((fields.len() + 4) as u32).to_be_bytes());
    message.extend_from_slice(&fields);
    let write = async {
        socket.write_all(&message).await?;
        socket.shutdown().await
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(REFUSAL_WRITE_MS), write).await;
}
