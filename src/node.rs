//! `quiver serve`: builds storage → Raft → query engine → HTTP, runs until SIGTERM or
//! Ctrl-C, then stops accepting, finishes in-flight requests and exits cleanly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use quiver_query::{QueryConfig, QueryEngine};
use quiver_raft::{GroupId, PeerTls, RaftConfig, RaftNode, ReplicationLimits, FIRST_GROUP};
use quiver_storage::compaction::CompactionSettings;
use quiver_storage::{ParquetSettings, Storage, StorageConfig};
use quiver_wal::WalConfig;
use tokio::sync::Semaphore;

use crate::auth::Auth;
use crate::config::Config;
use crate::gate::{resolve_peers, ConnectionGate, GateLimits};
use crate::groups::{group_dirs, placement, DataGroup, Group, Groups, GroupsSource, RemoteGroup};
use crate::http::server::{raise_open_files_limit, ServerLimits};
use crate::http::{router, AppInner, AppState, VolumeWatch, WriteBudget};
use quiver_storage::TableSource;

/// Runs a node until it is told to stop.
pub async fn serve(mut config: Config) -> Result<()> {
    let started = Instant::now();
    let prometheus = crate::telemetry::init_metrics()?;
    let addr = config.http_addr()?;
    // TLS material is read before anything is opened, so a bad file fails the start
    // at once with the file named.
    let doors_tls = match config.tls_files()? {
        Some((cert, key)) => Some(crate::tls::DoorsTls::load(cert, key)?),
        None => None,
    };
    let tls = doors_tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(Arc::clone(&t.http)));
    let peer_tls = PeerTls {
        https: tls.is_some(),
        roots: match &config.cluster.tls_ca {
            Some(ca) => crate::tls::reqwest_roots("cluster.tls_ca", ca)?,
            None => Vec::new(),
        },
    };
    let sync = config.wal_sync()?;
    if sync == quiver_wal::SyncMode::None {
        tracing::warn!("wal.sync = none: the log is never fsynced; acknowledged writes can be lost on an OS crash or power loss. For benchmarks only.");
    }
    let data_dir = config.storage.dir.clone();
    // Held until this function returns, which is when the process stops serving.
    let _dir_locks = crate::dir_lock::lock_dirs(&data_dir, &config.wal_dir())?;
    let peer_client = quiver_raft::PeerClient::new(&config.cluster.secret, &peer_tls)
        .context("the client for joining a cluster and learning query workers")?;
    let joining = crate::join::adopt_settings(&mut config, &peer_client).await?;
    let peers = config.peers()?;
    let data_groups = data_groups_of(&config)?;
    let group_start = Arc::new(GroupStart {
        config: config.clone(),
        peers: peers.clone(),
        peer_tls: peer_tls.clone(),
        sync,
        data_groups,
    });
    let mut background = Vec::new();
    let first = group_start
        .start(FIRST_GROUP, &peers, &mut background)
        .await
        .context("starting the first group")?;
    crate::groups::check_layout(
        &data_dir,
        data_groups,
        !first.storage.databases().is_empty(),
    )?;
    let (data, data_duties) = if data_groups > 1 {
        start_data_groups(&group_start).await?
    } else {
        Default::default()
    };
    let groups = Groups::new(first, data);
    let mover = if groups.is_sharded() {
        let mover = Arc::new(crate::groups::moves::Mover::new(
            groups.clone(),
            Arc::new(RuntimeStarter(Arc::clone(&group_start))),
            quiver_raft::PeerClient::new(&config.cluster.secret, &peer_tls)
                .context("the client for moving group replicas")?,
            crate::groups::moves::MoverPlace {
                node_id: config.cluster.node_id,
                data_dir: data_dir.clone(),
                wal_dir: config.wal_dir(),
                timeout: remote_timeout(&config),
                replication: config.cluster.replication,
            },
            data_duties,
        ));
        background.push(tokio::spawn(tend_moves(Arc::clone(&mover))));
        if config.cluster.balance_replicas {
            background.push(tokio::spawn(balance_replicas(
                Arc::clone(&mover),
                config.cluster.balance_bytes_min,
            )));
        }
        background.push(tokio::spawn(replace_dead_replicas(
            Arc::clone(&mover),
            config.cluster.rereplicate_after_ms,
        )));
        if config.cluster.balance_leaders {
            background.push(tokio::spawn(balance_leaders(
                Arc::clone(&mover),
                config.cluster.node_id,
            )));
        }
        background.push(tokio::spawn(keep_remote_groups(
            groups.clone(),
            data_dir.clone(),
        )));
        Some(mover)
    } else {
        None
    };
    let node = groups.first().node.clone();
    let storage = groups.first().storage.clone();
    let auth = if config.auth.enabled {
        Auth::open(&data_dir, std::env::var("QUIVER_BOOTSTRAP_TOKEN").ok())?
            .with_replicated(storage.clone())
    } else {
        tracing::warn!("authentication is OFF (--auth none): for local development only");
        Auth::disabled()
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let or_cores = |value: usize, per_core: usize| {
        if value == 0 {
            cores * per_core
        } else {
            value
        }
    };
    let source: Arc<dyn quiver_storage::TableSource> = if groups.is_sharded() {
        Arc::new(GroupsSource::new(groups.clone()))
    } else {
        storage.clone()
    };
    let (distribution, query_workers) = match crate::query_workers::distribution(&config)? {
        Some((distribution, known)) => (Some(distribution), Some(known)),
        None => (None, None),
    };
    let query = QueryEngine::with_distribution(
        source,
        QueryConfig {
            target_partitions: or_cores(config.query.target_partitions, 1),
            timeout_ms: config.query.timeout_ms,
            memory_bytes_max: config.query.memory_bytes_max,
            node_memory_bytes_max: config.query.node_memory_bytes_max,
            concurrency_max: or_cores(config.query.concurrency_max, 2),
            queue_max: config.query.queue_max,
            threads: or_cores(config.query.threads, 1),
            thread_nice: config.query.thread_nice,
            join_pairs_max: config.query.join_pairs_max,
            footer_cache_bytes_max: config.query.footer_cache_bytes_max,
            group_runs: config.query.group_runs,
            ..QueryConfig::default()
        },
        distribution,
    )
    .context("starting the query engine")?;
    crate::query_workers::serve(&config, &query)?;
    let cq_runner = tokio::spawn(
        crate::continuous::Runner {
            node: node.clone(),
            storage: storage.clone(),
            query: query.clone(),
            entry_bytes_max: config.raft.entry_bytes_max,
            entry_compression: config.raft.entry_compression,
        }
        .run(),
    );
    if let Some(known) = &query_workers {
        background.push(tokio::spawn(crate::query_workers::learn_workers(
            Arc::clone(known),
            node.clone(),
            peer_client.clone(),
        )));
    }
    // Asked for once every door listens (below): a node added at an address it then
    // fails to listen on would be a member no one reaches.
    let join_mover = mover.clone();
    let state = AppState::new(AppInner {
        node: node.clone(),
        storage: storage.clone(),
        groups: groups.clone(),
        mover,
        query,
        query_workers,
        auth,
        write_permits: Arc::new(Semaphore::new(config.http.writes_in_flight_max)),
        write_budget: WriteBudget::new(config.http.write_bytes_in_flight_max),
        wal_volume: Arc::new(VolumeWatch::new(
            "wal.free_bytes_min",
            config.wal_dir(),
            config.wal.free_bytes_min,
        )),
        data_volume: Arc::new(VolumeWatch::new(
            "storage.free_bytes_min",
            data_dir.clone(),
            config.storage.free_bytes_min,
        )),
        config: config.clone(),
        started,
        prometheus,
    });
    let open_files = raise_open_files_limit();
    if (open_files as usize) < config.http.connections_max + FILES_RESERVED {
        tracing::warn!(open_files, connections_max = config.http.connections_max,
            "the open-files limit leaves little room beyond http.connections_max; raise LimitNOFILE");
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("http.addr {addr}: cannot listen"))?;
    tracing::info!(%addr, tls = tls.is_some(), data_dir = %data_dir.display(), wal_dir = %config.wal_dir().display(), wal_sync = %sync, ms = started.elapsed().as_millis() as u64, "quiver is serving");
    let limits = ServerLimits {
        header_timeout_ms: config.http.header_timeout_ms,
        shutdown_timeout_ms: config.http.shutdown_timeout_ms,
    };
    let http_gate = ConnectionGate::new(GateLimits {
        connections_max: config.http.connections_max,
        per_address_max: config.http.connections_per_address_max,
        // At most a quarter of the cap, so a small cap still serves clients.
        reserved_for_peers: config
            .http
            .connections_reserved_for_peers
            .min(config.http.connections_max / 4),
    });
    let peer_watch = tokio::spawn(keep_peer_addresses(
        node.clone(),
        config.peers()?,
        http_gate.clone(),
    ));
    let pg_door = match config.pg_addr()? {
        Some(pg_addr) => {
            let pg_listener = tokio::net::TcpListener::bind(pg_addr)
                .await
                .with_context(|| format!("pg.addr {pg_addr}: cannot listen"))?;
            let pg_tls = doors_tls.as_ref().map(|t| crate::pg::PgTls {
                config: Arc::clone(&t.pg),
                end_point: t.pg_end_point.clone(),
            });
            tracing::info!(%pg_addr, tls = pg_tls.is_some(), "postgres wire protocol listening");
            let pg_gate = ConnectionGate::new(GateLimits {
                connections_max: config.pg.connections_max,
                per_address_max: config.pg.connections_per_address_max,
                reserved_for_peers: 0,
            });
            Some(tokio::spawn(crate::pg::serve(
                pg_listener,
                state.clone(),
                pg_gate,
                pg_tls,
            )))
        }
        None => None,
    };
    let flight_door = match config.flight_addr()? {
        Some(flight_addr) => {
            let flight_listener = tokio::net::TcpListener::bind(flight_addr)
                .await
                .with_context(|| format!("flight.addr {flight_addr}: cannot listen"))?;
            let flight_tls = doors_tls.as_ref().map(|t| Arc::clone(&t.flight));
            tracing::info!(%flight_addr, tls = flight_tls.is_some(), "arrow flight sql listening");
            let flight_gate = ConnectionGate::new(GateLimits {
                connections_max: config.flight.connections_max,
                per_address_max: config.flight.connections_per_address_max,
                reserved_for_peers: 0,
            });
            Some(tokio::spawn(crate::flight::serve(
                flight_listener,
                state.clone(),
                flight_gate,
                flight_tls,
            )))
        }
        None => None,
    };
    if joining {
        background.push(tokio::spawn(crate::join::complete(
            config.clone(),
            node.clone(),
            join_mover,
            peer_client,
        )));
    }
    let fatal = Arc::new(tokio::sync::Notify::new());
    let watchdog = tokio::spawn(watch_for_fatal(groups.clone(), fatal.clone()));
    let stop = async {
        tokio::select! {
            () = shutdown_signal() => {}
            () = fatal.notified() => {}
        }
    };
    crate::http::server::serve(listener, router(state), limits, http_gate, tls, stop)
        .await
        .context("http server")?;
    watchdog.abort();
    peer_watch.abort();
    cq_runner.abort();
    if let Some(door) = pg_door {
        door.abort();
    }
    if let Some(door) = flight_door {
        door.abort();
    }
    for task in background {
        task.abort();
    }
    if let Some(reason) = groups.fatal() {
        // Nothing in this process can bring Raft back; a supervisor restart can.
        anyhow::bail!("raft stopped: {reason}; exiting so that the supervisor restarts the node");
    }
    tracing::info!("stopping: in-flight requests finished");
    for group in groups.all_running() {
        group.node.shutdown().await;
    }
    Ok(())
}

/// Most data groups a cluster may have: each is a Raft instance with its own log on
/// every member, and a few per node is the aim.
const DATA_GROUPS_MAX: usize = 256;

/// `cluster.data_groups`, checked.
fn data_groups_of(config: &Config) -> Result<usize> {
    let groups = config.cluster.data_groups;
    if !(1..=DATA_GROUPS_MAX).contains(&groups) {
        anyhow::bail!("cluster.data_groups = {groups}: must be between 1 and {DATA_GROUPS_MAX}");
    }
    if config.cluster.replication == 0 {
        anyhow::bail!("cluster.replication = 0: a group needs at least one member");
    }
    Ok(groups)
}

/// Starts the data groups this node is a member of and knows the others by their
/// members. A group's members are those last recorded (`groups/members.json`, kept as
/// replicas move) or, for a group never recorded, placement's (from the node ids of
/// `cluster.peers` and `cluster.replication`). A group whose directory is here but
/// that does not list this node among its voters is one this node was taking a replica
/// of: it starts waiting to be added.
#[allow(clippy::type_complexity)] // the groups, and each one's background duties
async fn start_data_groups(
    start: &GroupStart,
) -> Result<(
    Vec<DataGroup>,
    BTreeMap<GroupId, Vec<tokio::task::JoinHandle<()>>>,
)> {
    let config = &start.config;
    let mut nodes: Vec<u64> = start.peers.iter().map(|(id, _)| *id).collect();
    if nodes.is_empty() {
        nodes.push(config.cluster.node_id);
    }
    nodes.sort_unstable();
    nodes.dedup();
    let replication = config.cluster.replication.min(nodes.len());
    crate::groups::check_placement(&config.storage.dir, replication, &nodes)?;
    let recorded = crate::groups::members_cache::load(&config.storage.dir)?;
    for dir in [
        config.storage.dir.join("groups"),
        config.wal_dir().join("groups"),
    ] {
        crate::groups::moves::remove_leftovers(&dir);
    }
    let client = quiver_raft::PeerClient::new(&config.cluster.secret, &start.peer_tls)
        .context("the client for other nodes' groups")?;
    let timeout = remote_timeout(config);
    let me = config.cluster.node_id;
    let mut data = Vec::new();
    let mut duties = BTreeMap::new();
    let mut held = Vec::new();
    for id in 1..=start.data_groups {
        let group = u32::try_from(id).context("cluster.data_groups")?;
        let members: Vec<(u64, String)> = match recorded.get(&group) {
            Some(members) => members.clone(),
            None => {
                let member_ids = placement::members(group, &nodes, replication);
                start
                    .peers
                    .iter()
                    .filter(|(id, _)| member_ids.contains(id))
                    .cloned()
                    .collect()
            }
        };
        let member_here = members.is_empty() || members.iter().any(|(id, _)| *id == me);
        let dirs = group_dirs(&config.storage.dir, &config.wal_dir(), group);
        if member_here {
            let local = start
                .start(group, &members, duties.entry(group).or_default())
                .await
                .with_context(|| format!("starting data group {group}"))?;
            held.push(group);
            data.push(DataGroup::Local(local));
            continue;
        }
        let remote = Arc::new(RemoteGroup::new(group, members.clone(), &client, timeout));
        if dirs.wal.exists() {
            tracing::info!(
                group,
                "this node was taking a replica of the group: waiting to be added"
            );
            let local = start
                .start(group, &members, duties.entry(group).or_default())
                .await
                .with_context(|| format!("starting data group {group}"))?;
            data.push(DataGroup::Joining {
                group: local,
                members: remote,
            });
        } else {
            data.push(DataGroup::Remote(remote));
        }
    }
    tracing::info!(
        data_groups = start.data_groups,
        replication,
        held = ?held,
        "rows are spread over the data groups by measurement"
    );
    Ok((data, duties))
}

/// How long a call to another node's group may take.
fn remote_timeout(config: &Config) -> std::time::Duration {
    std::time::Duration::from_millis(
        config.http.write_timeout_ms.max(config.query.timeout_ms) + REMOTE_MARGIN_MS,
    )
}

/// Starts groups for replicas moved here at run time ([`crate::groups::moves`]).
struct RuntimeStarter(Arc<GroupStart>);

impl crate::groups::moves::GroupStarter for RuntimeStarter {
    fn start(
        &self,
        id: GroupId,
        members: Vec<(u64, String)>,
    ) -> futures::future::BoxFuture<'_, Result<(Group, Vec<tokio::task::JoinHandle<()>>)>> {
        Box::pin(async move {
            let mut duties = Vec::new();
            let group = self.0.start(id, &members, &mut duties).await?;
            Ok((group, duties))
        })
    }
}

/// How often a node looks whether a group it is taking a replica of made it a voter,
/// and whether it was removed from a group it runs.
const MOVES_CHECK_MS: u64 = 250;

/// Makes the groups this node took replicas of voters here once Raft says they are, and
/// retires the groups it was removed from while it was not told (it was down).
async fn tend_moves(mover: Arc<crate::groups::moves::Mover>) {
    loop {
        mover.promote_joined();
        mover.retire_if_removed().await;
        tokio::time::sleep(std::time::Duration::from_millis(MOVES_CHECK_MS)).await;
    }
}

/// Moves data group replicas until the nodes' bytes are even (see
/// `src/groups/moves/balance.rs`); acts only on the metadata leader; paused with
/// `cluster.balance_replicas = false`.
async fn balance_replicas(mover: Arc<crate::groups::moves::Mover>, bytes_min: u64) {
    use crate::groups::moves::balance::{AFTER_A_MOVE, BALANCE_CHECK};
    let mut pause = BALANCE_CHECK;
    loop {
        tokio::time::sleep(pause).await;
        pause = match mover.balance_bytes(bytes_min).await {
            Some(m) => {
                tracing::info!(
                    group = m.group,
                    from = m.from,
                    to = m.to,
                    "moved a replica to even out the nodes' bytes"
                );
                AFTER_A_MOVE
            }
            None => BALANCE_CHECK,
        };
    }
}

/// Probes the nodes from the metadata leader and moves the replicas of a node silent
/// for `after_ms` to live nodes (see `src/groups/moves/repair.rs`); with `after_ms = 0`
/// nodes are still probed (the byte balance waits while one is down) but nothing moves.
async fn replace_dead_replicas(mover: Arc<crate::groups::moves::Mover>, after_ms: u64) {
    use crate::groups::moves::repair::PROBE_EVERY;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if after_ms == 0 {
            mover.probe_nodes().await;
            continue;
        }
        // After a move the next replica goes at once (a dead node's groups wait one
        // move each, not one probe round each).
        while let Some(m) = mover
            .replace_dead_replicas(std::time::Duration::from_millis(after_ms))
            .await
        {
            tracing::warn!(
                group = m.group,
                from = m.from,
                to = m.to,
                "moved a dead node's replica to a live node"
            );
        }
    }
}

/// How often a node looks whether it leads more data groups than its share; offset
/// per node so two nodes rarely hand over at the same moment.
const LEADER_BALANCE_MS: u64 = 2_000;

/// Hands data group leadership to nodes leading fewer, one group per round (see
/// `src/groups/moves/leaders.rs`); paused with `cluster.balance_leaders = false`.
async fn balance_leaders(mover: Arc<crate::groups::moves::Mover>, node_id: u64) {
    let offset = (node_id % 8) * LEADER_BALANCE_MS / 8;
    tokio::time::sleep(std::time::Duration::from_millis(LEADER_BALANCE_MS + offset)).await;
    loop {
        if let Some((group, to)) = mover.balance_leaders().await {
            tracing::info!(
                group,
                to,
                "handed a group's leadership to a node leading fewer"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(LEADER_BALANCE_MS)).await;
    }
}

/// Added to the longest request deadline for calls to another node's group.
const REMOTE_MARGIN_MS: u64 = 5_000;

/// Keeps the members of the groups other nodes hold (a replica may have moved) and
/// the lists of their tables (names for catalogs and `SHOW TABLES`; the tables
/// themselves are always read from a member) fresh, whichever groups those are now.
/// Members learned are recorded (`groups/members.json`), so a restart after replicas
/// moved finds each group even when none of its first members holds it any more.
async fn keep_remote_groups(groups: Groups, data_dir: std::path::PathBuf) {
    let mut recorded = crate::groups::members_cache::load(&data_dir).unwrap_or_default();
    loop {
        let nodes = groups.first().node.member_addrs_by_id();
        let nodes = &nodes;
        let learned = futures::future::join_all(groups.remote().into_iter().map(|group| async move {
            let members = match group.refresh_members(nodes).await {
                Ok((members, _)) => Some(members),
                Err(e) => {
                    tracing::debug!(group = group.id(), error = %e, "cannot ask the group's members who they are");
                    None
                }
            };
            if let Err(e) = group.refresh_catalog().await {
                tracing::debug!(group = group.id(), error = %e, "cannot list the group's tables");
            }
            members.map(|m| (group.id(), m))
        }))
        .await;
        for (id, members) in learned.into_iter().flatten() {
            if recorded.get(&id) != Some(&members) {
                match crate::groups::members_cache::record(&data_dir, id, &members) {
                    Ok(()) => {
                        recorded.insert(id, members);
                    }
                    Err(e) => {
                        tracing::warn!(group = id, error = %e, "cannot record the group's members")
                    }
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(
            crate::groups::remote::CATALOG_REFRESH_MS,
        ))
        .await;
    }
}

/// What starting one group needs from the node's settings.
struct GroupStart {
    config: Config,
    peers: Vec<(u64, String)>,
    peer_tls: PeerTls,
    sync: quiver_wal::SyncMode,
    data_groups: usize,
}

impl GroupStart {
    /// Opens the group's storage and log in its directories, starts its Raft instance
    /// and background duties (pushed onto `background`).
    /// `members` are the group's voters (id, address): every node for the first group.
    async fn start(
        &self,
        id: GroupId,
        members: &[(u64, String)],
        background: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> Result<Group> {
        let config = &self.config;
        let dirs = group_dirs(&config.storage.dir, &config.wal_dir(), id);
        let clustered = members.len() > 1;
        // The newest snapshot says which Parquet files are live; read it before storage.
        let recovered = quiver_raft::Recovered::load(&dirs.data, &dirs.wal)
            .context("reading the newest snapshot")?;
        let mut storage_config = storage_config(config);
        storage_config.dir = dirs.data.clone();
        if id != FIRST_GROUP {
            // The data groups share the node's buffer memory.
            storage_config.memory_bytes_max /= self.data_groups.max(1);
            if let Some(bucket) = &mut storage_config.object_store {
                bucket.url = format!("{}/g{id}", bucket.url.trim_end_matches('/'));
            }
        }
        let storage = Arc::new(open_storage(storage_config, recovered.file_set(clustered)).await?);
        let report = storage.open_report();
        if let Some(reason) = &report.catalog.rebuilt_because {
            tracing::warn!(group = id, %reason, files = report.catalog.files, "catalog was rebuilt from the Parquet files");
        }
        let raft_config = RaftConfig {
            node_id: config.cluster.node_id,
            group: id,
            advertise_addr: crate::config_nodes::advertised_addr(config, &self.peers),
            peers: members.to_vec(),
            secret: config.cluster.secret.clone(),
            peer_tls: self.peer_tls.clone(),
            leader_wait_ms: config.raft.leader_wait_ms,
            data_dir: dirs.data.clone(),
            wal: WalConfig {
                dir: dirs.wal.clone(),
                sync: self.sync,
                sync_interval_ms: config.wal.sync_interval_ms,
                segment_bytes_max: config.wal.segment_bytes_max,
                ..WalConfig::default()
            },
            write_timeout_ms: config.http.write_timeout_ms,
            replication: ReplicationLimits {
                bytes_max: config.raft.replication_bytes_max,
                timeout_ms: config.raft.replication_timeout_ms,
            },
            data_free_bytes_min: config.storage.free_bytes_min,
            heartbeat_interval_ms: config.raft.heartbeat_interval_ms,
            election_timeout_ms_min: config.raft.election_timeout_ms_min,
            election_timeout_ms_max: config.raft.election_timeout_ms_max,
            snapshot_interval_ms_min: config.raft.snapshot_interval_ms_min,
            flush_check_interval_ms: config.raft.flush_check_interval_ms,
            compaction_check_interval_ms: config.compaction.check_interval_ms,
        };
        let node = RaftNode::start_recovered(raft_config, storage.clone(), recovered)
            .await
            .context("starting raft")?;
        // A start reads the newest snapshot's manifest, lists the files on disk and
        // reconciles the catalog: with a million files, several short-lived copies of a
        // million file descriptions (3.7 KB per file resident, about half of it freed).
        quiver_storage::heap::release_freed_memory();
        let span = tracing::info_span!("group", id);
        let _entered = span.enter();
        background.extend(node.spawn_background());
        background.push(tokio::spawn({
            let storage = storage.clone();
            async move { storage.keep_bucket_claim().await }
        }));
        background.push(tokio::spawn(quiver_storage::heap::release_after_frees(
            storage.memory_freed_signal(),
        )));
        Ok(Group { id, node, storage })
    }
}

/// The storage settings of `config` (also what `quiver restore` opens).
pub fn storage_config(config: &Config) -> StorageConfig {
    StorageConfig {
        dir: config.storage.dir.clone(),
        flush_rows_max: config.storage.flush_rows_max,
        flush_bytes_max: config.storage.flush_bytes_max,
        flush_age_ms: config.storage.flush_age_ms,
        flush_idle_ms: config.storage.flush_idle_ms,
        flush_idle_bytes_min: config.storage.flush_idle_bytes_min,
        memory_bytes_max: config.storage.memory_bytes_max,
        parquet: ParquetSettings {
            zstd_level: config.storage.parquet_zstd_level,
            row_group_rows_max: config.storage.parquet_row_group_rows_max,
            page_rows_max: config.storage.parquet_page_rows_max,
        },
        compaction: CompactionSettings {
            enabled: config.compaction.enabled,
            hour_files_min: config.compaction.hour_files_min,
            closed_after_ms: config.compaction.closed_after_ms,
            day_file_bytes_max: config.compaction.day_file_bytes_max,
            memory_bytes_max: config.compaction.memory_bytes_max,
            input_grace_ms: config.compaction.input_grace_ms,
        },
        object_store: config.bucket(),
    }
}

/// How often the addresses of the cluster's members are looked up again (members come
/// and go with `add-learner` and `remove`; a name may move to another address).
const PEER_ADDRESSES_REFRESH_MS: u64 = 30_000;

/// Keeps the HTTP gate's list of peer addresses (which may use the connections
/// reserved for them) to the static peers and the current members.
async fn keep_peer_addresses(node: RaftNode, peers: Vec<(u64, String)>, gate: ConnectionGate) {
    loop {
        let mut hosts: Vec<String> = peers.iter().map(|(_, addr)| addr.clone()).collect();
        hosts.extend(node.member_addrs());
        gate.set_peers(resolve_peers(hosts.iter().map(String::as_str)).await);
        tokio::time::sleep(std::time::Duration::from_millis(PEER_ADDRESSES_REFRESH_MS)).await;
    }
}

/// How often the watchdog looks at Raft's state.
const FATAL_POLL_MS: u64 = 200;

/// Descriptors kept for the node's own files (WAL segments, Parquet files being read
/// or written, sled, snapshots) beyond the connection cap.
const FILES_RESERVED: usize = 1_024;

/// Waits until Raft stops for good (a log or state machine failure), says so, marks
/// the node failed in `/metrics`, and wakes the server so the process exits non-zero.
async fn watch_for_fatal(groups: Groups, fatal: Arc<tokio::sync::Notify>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(FATAL_POLL_MS));
    loop {
        tick.tick().await;
        if let Some(reason) = groups.fatal() {
            tracing::error!(%reason, "raft stopped: the node cannot write; stopping so that it is restarted");
            metrics::gauge!("quiver_node_failed").set(1.0);
            fatal.notify_one();
            return;
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutdown requested");
}

/// Longest wait between two attempts to open storage while its bucket is unreachable.
const STORE_RETRY_MS_MAX: u64 = 10_000;

/// Opens storage; while the bucket holding the Parquet files cannot be listed (an
/// outage, a network partition), waits and tries again rather than exiting: nothing can
/// be decided about the files before they can be seen, and a supervisor restarting the
/// node in a loop would not help. Any other error ends the start.
async fn open_storage(config: StorageConfig, files: quiver_storage::FileSet) -> Result<Storage> {
    // Local disk is opened once, and takes the manifest (a million files, maybe)
    // without a copy; only a bucket is waited for.
    if config.object_store.is_none() {
        return Storage::open_with(config, files)
            .await
            .context("opening storage");
    }
    let mut wait_ms = 250;
    loop {
        match Storage::open_with(config.clone(), files.clone()).await {
            Ok(storage) => return Ok(storage),
            Err(quiver_storage::Error::ObjectStore(e)) => {
                tracing::error!(error = %e, retry_ms = wait_ms,
                    "cannot list the Parquet files in the bucket; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                wait_ms = (wait_ms * 2).min(STORE_RETRY_MS_MAX);
            }
            Err(e) => return Err(e).context("opening storage"),
        }
    }
}
