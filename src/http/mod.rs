//! The HTTP API (API.md): one file per group of endpoints, this one wires the router.

mod admission;
mod backup;
mod body;
mod cluster;
mod continuous;
mod delete;
mod digest;
mod error;
mod guard;
mod internal;
mod join;
mod line_protocol;
mod moves;
mod msgpack;
mod ops;
mod prom_write;
mod query;
mod query_response;
mod query_sql;
mod remote_group;
mod retention;
pub mod server;
mod tokens;
mod ui;
mod write;
mod write_parts;

pub use admission::{VolumeWatch, WriteBudget};
pub use backup::{SNAPSHOT_INDEX_HEADER, SNAPSHOT_TERM_HEADER};

use std::sync::Arc;
use std::time::Instant;

use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use quiver_query::QueryEngine;
use quiver_raft::RaftNode;
use quiver_storage::Storage;
use tokio::sync::Semaphore;

use crate::auth::Auth;
use crate::config::Config;

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<AppInner>);

/// The shared state behind [`AppState`].
pub struct AppInner {
    /// The Raft node (writes, status).
    pub node: RaftNode,
    /// Storage (schema checks, measurements, overload).
    pub storage: Arc<Storage>,
    /// Every Raft group of this node; `node` and `storage` are the first one's.
    pub groups: crate::groups::Groups,
    /// Moves group replicas between nodes (with several data groups).
    pub mover: Option<Arc<crate::groups::moves::Mover>>,
    /// SQL engine.
    pub query: QueryEngine,
    /// The query workers this node routes stages to (with `cluster.query_workers`).
    pub query_workers: Option<Arc<crate::query_workers::KnownWorkers>>,
    /// Tokens.
    pub auth: Auth,
    /// Configuration in effect.
    pub config: Config,
    /// Bounds writes in flight (429 beyond).
    pub write_permits: Arc<Semaphore>,
    /// Bounds the bytes writes in flight hold (429 beyond).
    pub write_budget: WriteBudget,
    /// Free space of the WAL volume (writes wait below `wal.free_bytes_min`).
    pub wal_volume: Arc<VolumeWatch>,
    /// Free space of the data volume (writes and flushes wait below
    /// `storage.free_bytes_min`).
    pub data_volume: Arc<VolumeWatch>,
    /// Start time, for `/health`.
    pub started: Instant,
    /// Renders `/metrics`.
    pub prometheus: PrometheusHandle,
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

impl AppState {
    /// Wraps the shared state.
    pub fn new(inner: AppInner) -> Self {
        AppState(Arc::new(inner))
    }
}

/// The router of every endpoint. `/internal/` exists only on a node with a cluster
/// secret: without one no peer could call it anyway.
pub fn router(state: AppState) -> Router {
    let clustered = !state.config.cluster.secret.is_empty();
    let public = Router::new()
        .route("/health", get(ops::health))
        .route("/ready", get(ops::ready))
        .route("/metrics", get(ops::metrics))
        .route("/api/v1/write/msgpack", post(msgpack::write_msgpack))
        .route(
            "/api/v1/write/line-protocol",
            post(line_protocol::write_arc),
        )
        .route("/write", post(line_protocol::write_v1))
        .route("/api/v2/write", post(line_protocol::write_v2))
        .route("/api/v3/write_lp", post(line_protocol::write_v3))
        .route("/api/v1/prom/write", post(prom_write::write_prom))
        .route("/ping", get(ops::ping).head(ops::ping))
        .route("/ui", get(ui::page))
        .route("/ui/", get(ui::page))
        .route("/ui/assets/{id}/{name}", get(ui::asset))
        .route("/api/v1/query", post(query::query_json))
        .route("/api/v1/query/arrow", post(query::query_arrow))
        .route(
            "/api/v3/query_sql",
            get(query_sql::query_sql_get).post(query_sql::query_sql_post),
        )
        .route("/api/v1/measurements", get(ops::measurements))
        .route("/api/v1/storage", get(ops::storage))
        .route("/api/v1/cluster/status", get(cluster::cluster_status))
        .route("/api/v1/cluster/groups", get(cluster::cluster_groups))
        .route("/api/v1/cluster/digest", get(digest::digest))
        .route(
            "/api/v1/cluster/add-learner",
            post(cluster::cluster_add_learner),
        )
        .route("/api/v1/cluster/promote", post(cluster::cluster_promote))
        .route("/api/v1/cluster/remove", post(cluster::cluster_remove))
        .route(
            "/api/v1/cluster/groups/{group}/move",
            post(moves::move_replica),
        )
        .route("/api/v1/cluster/drain", post(moves::drain))
        .route("/api/v1/cluster/rebalance", post(moves::rebalance))
        .route("/api/v1/cluster/balance", get(moves::balance))
        .route("/api/v1/backup", get(backup::describe))
        .route(
            "/api/v1/backup/groups/{group}/snapshot",
            post(backup::snapshot),
        )
        .route(
            "/api/v1/backup/groups/{group}/files/{*path}",
            get(backup::file),
        )
        .route("/api/v1/tokens", post(tokens::create).get(tokens::list))
        .route("/api/v1/tokens/{id}", axum::routing::delete(tokens::revoke))
        .route("/api/v1/retention", get(retention::list))
        .route(
            "/api/v1/retention/{db}",
            axum::routing::put(retention::set).delete(retention::clear),
        )
        .route("/api/v1/delete", post(delete::delete))
        .route(
            "/api/v1/continuous_queries",
            post(continuous::create).get(continuous::list),
        )
        .route(
            "/api/v1/continuous_queries/{db}/{name}",
            axum::routing::delete(continuous::drop),
        );
    let routes = if clustered {
        public.merge(internal_router())
    } else {
        public
    };
    // Only on routes that exist: a path Quiver does not serve is 404 with or without a
    // token (QuestDB's client probes `GET /settings` without one, and falls back to
    // protocol version 1 only on a 404).
    routes
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .with_state(state)
}

/// `/internal/`: peers only. Each handler checks the cluster secret before it reads a
/// byte of the body, and reads at most `internal.rs`'s bound.
fn internal_router() -> Router<AppState> {
    Router::new()
        .route(quiver_raft::raft_paths::APPEND, post(internal::append))
        .route(quiver_raft::raft_paths::VOTE, post(internal::vote))
        .route(quiver_raft::raft_paths::SNAPSHOT, post(internal::snapshot))
        .route(quiver_raft::FORWARD_PATH, post(internal::forward))
        .route("/internal/state", get(internal::state))
        .route(crate::join::SETTINGS_PATH, get(join::settings))
        .route(crate::join::JOIN_PATH, post(join::join))
        .route(crate::query_workers::WORKER_PATH, get(join::query_worker))
        .route("/internal/files/{*path}", get(internal::file))
        .route(
            "/internal/groups/{group}/raft/append",
            post(internal::group_append),
        )
        .route(
            "/internal/groups/{group}/raft/vote",
            post(internal::group_vote),
        )
        .route(
            "/internal/groups/{group}/raft/snapshot",
            post(internal::group_snapshot),
        )
        .route(
            "/internal/groups/{group}/forward",
            post(internal::group_forward),
        )
        .route("/internal/groups/{group}/state", get(internal::group_state))
        .route(
            "/internal/groups/{group}/commit",
            post(remote_group::commit),
        )
        .route(
            "/internal/groups/{group}/barrier",
            post(remote_group::barrier),
        )
        .route("/internal/groups/{group}/table", post(remote_group::table))
        .route(
            "/internal/groups/{group}/catalog",
            post(remote_group::catalog),
        )
        .route("/internal/groups/{group}/range", post(remote_group::range))
        .route(
            "/internal/groups/{group}/delete",
            post(remote_group::delete),
        )
        .route(
            "/internal/groups/{group}/files/{*path}",
            get(internal::group_file),
        )
        .route("/internal/groups/{group}/host", post(moves::host))
        .route("/internal/groups/{group}/retire", post(moves::retire))
        .route("/internal/groups/{group}/move", post(moves::drive))
        .route(
            crate::groups::moves::leaders::LEADING_PATH,
            post(moves::leading),
        )
}
