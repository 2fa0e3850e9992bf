//! Cancel requests (psql's Ctrl-C, `conn.cancel()`): a second connection names a
//! connection by its (process id, secret key) and asks it to stop its query.
//!
//! pgwire's own cancel support covers a query until its handler returns, but a Quiver
//! query does most of its work afterwards, while its rows stream to the client. So the
//! door keeps its own registry: each connection has a [`Cancel`] whose generation a
//! cancel request bumps; a query watches it while it plans and while its rows stream,
//! and stops with `57014` (dropping the query's stream frees its slot and memory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use pgwire::api::cancel::CancelHandler;
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::watch;

/// One connection's cancel signal.
#[derive(Debug)]
pub struct Cancel(watch::Sender<u64>);

impl Cancel {
    /// Resolves when a cancel request arrives after this call.
    pub fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            if rx.changed().await.is_err() {
                // The connection is gone; nobody will cancel.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The error a cancelled query ends with.
pub fn cancelled_error() -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        "57014".to_string(),
        "canceling statement due to user request".to_string(),
    )))
}

type Key = (i32, Bytes);

/// Every open connection's [`Cancel`], by (process id, secret key).
#[derive(Debug, Default)]
pub struct Registry {
    connections: Mutex<HashMap<Key, Arc<Cancel>>>,
}

/// Keeps a connection registered; unregisters it when the connection ends.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Registry>,
    key: Key,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.key);
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Arc<Cancel>>> {
        // The map stays consistent whatever panicked while holding it.
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a connection; keep the [`Registration`] as long as it is open.
    pub fn register(self: &Arc<Self>, pid: i32, secret: &SecretKey) -> (Arc<Cancel>, Registration) {
        let key = (pid, secret.to_bytes());
        let cancel = Arc::new(Cancel(watch::channel(0).0));
        self.lock().insert(key.clone(), Arc::clone(&cancel));
        (
            cancel,
            Registration {
                registry: Arc::clone(self),
                key,
            },
        )
    }
}

/// Answers cancel requests from the registry.
pub struct Handler(pub Arc<Registry>);

#[async_trait]
impl CancelHandler for Handler {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let cancel = self.0.lock().get(&key).cloned();
        match cancel {
            Some(cancel) => {
                metrics::counter!("quiver_pg_cancels_total").increment(1);
                cancel.0.send_modify(|generation| *generation += 1);
            }
            // A wrong key cancels nothing, as in Postgres (and says nothing).
            None => tracing::debug!(pid = request.pid, "pg cancel request for no connection"),
        }
    }
}
