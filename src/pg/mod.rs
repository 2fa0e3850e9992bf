//! The Postgres wire protocol door (`pg.addr`, `--pg-addr`; off unless set), so that
//! `psql`, Python's psycopg and asyncpg, Grafana's Postgres data source and BI tools
//! query Quiver as they would a Postgres server.
//!
//! - [`startup`]: the database named at startup is the Quiver database; the password is
//!   a token (cleartext; `--auth none` skips it). With `http.tls_cert` set, the door
//!   answers `SSLRequest` with TLS on the node's certificate (PostgreSQL 17's direct TLS
//!   too) and refuses a connection that did not ask for it, so a token never crosses
//!   the network in the clear; without it, `SSLRequest` is answered `N`.
//! - [`session`]: simple and extended query protocols over the one engine (same
//!   sandbox, timeout, memory limits and admission as `/api/v1/query`).
//! - [`cancel`]: cancel requests stop the running query, also while its rows stream.
//! - [`encode`] and [`params`]: Arrow values to and from Postgres's text and binary
//!   formats.
//! - [`search_path`]: Grafana's expansion of `search_path` becomes the database.
//! - [`catalog`]: what the door answers itself (`BEGIN`, `SET`, `SHOW`, psql's `\l`,
//!   `\dt`, `\d`).
//!
//! It is not a way to write: every statement is read-only, as over HTTP.

mod cancel;
mod catalog;
mod encode;
mod params;
mod search_path;
mod session;
mod startup;

use std::sync::Arc;

use pgwire::api::PgWireServerHandlers;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::http::AppState;

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

/// Accepts Postgres connections on `listener` until the task is dropped; at most
/// `connections_max` at once (more are closed at once, and counted). With `tls`, every
/// connection must negotiate TLS.
pub async fn serve(
    listener: TcpListener,
    app: AppState,
    connections_max: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let cancels = Arc::new(cancel::Registry::default());
    let tls = tls.map(pgwire::tokio::TlsAcceptor::from);
    let handlers = Arc::new(Handlers {
        session: Arc::new(session::Session::new(app.clone())),
        startup: Arc::new(startup::Startup::new(
            app,
            Arc::clone(&cancels),
            tls.is_some(),
        )),
        cancel: Arc::new(cancel::Handler(cancels)),
    });
    let permits = Arc::new(Semaphore::new(connections_max));
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
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            metrics::counter!("quiver_pg_connections_refused_total").increment(1);
            tracing::warn!(%peer, connections_max, "pg.connections_max reached; connection closed");
            continue;
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
