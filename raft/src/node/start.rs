//! Starting a node: recovery, the vote barrier's start-up checks, forming a static
//! voter set, and learning the peers' votes after a lost one.

use super::*;

/// A node whose log was purged past its newest snapshot (see
/// [`Recovered::log_lost`]) cannot rebuild its state from what it holds: it closes its
/// vote barrier (it may have lost entries it acknowledged), erases its log and purge
/// point down to its snapshot, and is sent the rest by the leader. Each step is
/// idempotent, so a crash part-way starts over again at the next start.
pub(super) fn start_over(
    config: &RaftConfig,
    fs: &Arc<dyn quiver_wal::WalFs>,
    barrier: &VoteBarrier,
    recovered: &Recovered,
) -> Result<(), Error> {
    let snapshot = recovered.snapshot_last_log_id();
    tracing::error!(
        node_id = config.node_id,
        ?snapshot,
        "this node's log was purged past its newest snapshot (a snapshot install that did \
         not finish): erasing the log; it catches up from the leader and votes again once \
         it has"
    );
    // Where the log ended, recorded before a byte of it goes: the barrier still lets
    // this node vote for candidates at least as up to date as that. A log that cannot
    // be read says nothing, and the barrier then stays wholly closed.
    let log_end = Wal::open_with_fs(config.wal.clone(), fs.clone())
        .map_err(Error::from)
        .and_then(|wal| {
            crate::log_store::last_log_id_on_disk(&wal, recovered.purged()).map_err(Error::from)
        })
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read where the log ended before erasing it");
            None
        });
    barrier.close_erasing(log_end)?;
    let erased = Wal::erase_with_fs(&config.wal.dir, &**fs)?;
    crate::log_store::reset_points(&config.wal.dir, snapshot)?;
    metrics::counter!("quiver_raft_logs_erased_total").increment(1);
    tracing::info!(files = erased, "log erased");
    Ok(())
}

/// A single node whose log directory is new while its data directory is not (it holds
/// a snapshot, or was marked by an earlier start) lost its log, or runs without the
/// volume it lives on: starting would begin a new log at index 1, whose files would
/// take the names (log ranges) of files the old log wrote, and whose indexes would make
/// those files look covered, so a later start's sweep would delete them as garbage. It
/// has no peer to catch up from: the operator decides (mount the volume, or `quiver
/// restore`, which starts the log after the files). A member of a cluster is sent the
/// cluster's own log by its leader, so its files keep their meaning.
pub(super) fn refuse_a_lost_log_alone(
    config: &RaftConfig,
    recovered: &Recovered,
) -> Result<(), Error> {
    if config.peers.len() > 1 {
        return Ok(());
    }
    let wal_known = VoteBarrier::directory_known(&config.wal.dir, config.node_id)?;
    let data_known = VoteBarrier::directory_known(&config.data_dir, config.node_id)?;
    let snapshot = recovered.snapshot_last_log_id();
    if wal_known || !(data_known || snapshot.is_some()) {
        return Ok(());
    }
    Err(Error::LogLost {
        wal_dir: config.wal.dir.display().to_string(),
        data_dir: config.data_dir.display().to_string(),
        snapshot: snapshot.map(|l| l.index),
    })
}

/// A member whose log lost entries it may have acknowledged must not vote until it has
/// them again (see [`VoteBarrier`]). The static voter set's own path (an empty log in a
/// new directory, below) covers the initial voters; this covers the others:
///
/// * a member added later (`add-learner`, `promote`) that lost its data starts with
///   an empty log in a new directory, and nothing in its settings says it is a voter:
///   its peers do. Closed when a peer lists it among the voters, or when no peer
///   answers (it cannot tell, so it assumes the worst);
/// * a node restored from an old copy of its disks starts on a known directory with a
///   log shorter than what it acknowledged: the leader's replication state says how far
///   it had matched. Closed when the log ends before that (also after a `wal.sync =
///   batch` power loss that lost acknowledged entries).
///
/// Peers are asked at once, each within [`BOOTSTRAP_PROBE_TIMEOUT_MS`], and asked again
/// while a peer is silent and no leader has answered (see
/// [`ask_peers_until_a_leader_answers`]); the node serves no vote before this returns.
pub(super) async fn close_barrier_if_votes_were_lost(
    config: &RaftConfig,
    peers: &PeerClient,
    raft: &Raft,
    barrier: &VoteBarrier,
    known: bool,
    initialized: bool,
) -> Result<(), Error> {
    let static_voter = config.peers.iter().any(|(id, _)| *id == config.node_id);
    if (!known && static_voter) || barrier.refusal().is_some() {
        // The static set's path, or already closed.
        return Ok(());
    }
    if known && !initialized {
        return Ok(());
    }
    let states = ask_peers_until_a_leader_answers(config, peers).await;
    let node_id = config.node_id;
    if !known {
        let voter = states.iter().any(|s| s.voters.contains(&node_id));
        if voter || states.is_empty() {
            tracing::warn!(
                node_id,
                peers_answering = states.len(),
                "this node starts with an empty log in a new directory while it is (or may be) a \
                 voter added after the cluster formed: it votes again once it has caught up"
            );
            barrier.close_lost_vote()?;
        }
        return Ok(());
    }
    let own_last = raft.metrics().borrow().last_log_index.unwrap_or(0);
    let matched = states
        .iter()
        .filter_map(|s| s.matched.as_ref()?.get(&node_id).copied())
        .max();
    if let Some(matched) = matched.filter(|m| *m > own_last) {
        tracing::error!(
            node_id,
            matched,
            own_last,
            "the leader saw this node's log reach an index it no longer holds (restored from \
             an old copy, or a lost tail): it votes again once it has caught up"
        );
        barrier.close_lost_vote()?;
    }
    Ok(())
}

/// Asks every other peer for its state, again and again for those that did not answer,
/// until all have answered, one that answered leads (its `matched` is what a restored
/// node needs), or [`BOOTSTRAP_PROBE_PATIENCE_MS`] has passed. One round of one-second
/// probes was not enough: a leader slow to answer on a loaded machine left a node
/// restored from an old copy believing nothing was lost, and it voted at once.
async fn ask_peers_until_a_leader_answers(
    config: &RaftConfig,
    peers: &PeerClient,
) -> Vec<PeerState> {
    let timeout = Duration::from_millis(BOOTSTRAP_PROBE_TIMEOUT_MS);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(BOOTSTRAP_PROBE_PATIENCE_MS);
    let mut unanswered: Vec<&(NodeId, String)> = config
        .peers
        .iter()
        .filter(|(id, _)| *id != config.node_id)
        .collect();
    let mut states: Vec<PeerState> = Vec::new();
    loop {
        let answers = futures::future::join_all(
            unanswered
                .iter()
                .map(|(_, addr)| peers.get::<PeerState>(addr, PEER_STATE_PATH, timeout)),
        )
        .await;
        let mut silent = Vec::new();
        for (peer, answer) in unanswered.into_iter().zip(answers) {
            match answer {
                Ok(state) => states.push(state),
                Err(e) => silent.push((peer, e)),
            }
        }
        let leader_answered = states.iter().any(|s| s.matched.is_some());
        if silent.is_empty() || leader_answered || tokio::time::Instant::now() >= deadline {
            for ((id, _), e) in &silent {
                tracing::info!(node_id = config.node_id, peer = id, error = %e,
                    "a peer did not tell its state while this node started");
            }
            return states;
        }
        unanswered = silent.into_iter().map(|(peer, _)| peer).collect();
        tokio::time::sleep(Duration::from_millis(BOOTSTRAP_PROBE_INTERVAL_MS)).await;
    }
}

/// What a node tells a peer that starts with an empty log (`GET /internal/state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerState {
    /// The node answering.
    pub node_id: NodeId,
    /// Whether it belongs to an initialised cluster.
    pub initialized: bool,
    /// The last index in its log; past 0 the cluster has more than its first
    /// membership entry, so it is not forming any more.
    pub last_log_index: Option<u64>,
    /// The voters it knows.
    pub voters: Vec<NodeId>,
    /// Its vote: a node that lost its own learns from these which leaders are stale
    /// (see `VoteBarrier`). Absent from a peer too old to report it.
    #[serde(default)]
    pub vote: Option<Vote>,
    /// Why it refuses entries now (a volume under its watermark, full buffers), if it
    /// does: the leader polls this (see `RaftNode::takers_loop`). Filled by the node's
    /// HTTP layer, which watches the volumes.
    #[serde(default)]
    pub entries_refused: Option<String>,
    /// On a leader: how far each follower's log is known to match its own (a node
    /// restored from an old copy learns from this that it lost entries it acknowledged).
    #[serde(default)]
    pub matched: Option<BTreeMap<NodeId, u64>>,
    /// The voters with their addresses (a node that is not a member of a data group
    /// learns from this where the group's replicas are after one moved). Empty from a
    /// peer too old to report it.
    #[serde(default)]
    pub members: Vec<(NodeId, String)>,
}

impl RaftNode {
    /// Opens everything and starts Raft. A node whose log and vote are empty
    /// initialises itself as a one-voter cluster; otherwise it resumes. Reads the newest
    /// snapshot itself; a node opens storage with it first and calls
    /// [`RaftNode::start_recovered`].
    pub async fn start(config: RaftConfig, storage: Arc<Storage>) -> Result<RaftNode, Error> {
        let recovered = Recovered::load(&config.data_dir, &config.wal.dir)?;
        Self::start_recovered(config, storage, recovered).await
    }

    /// [`RaftNode::start`] from a snapshot already read (storage was opened with its
    /// [`Recovered::file_set`]).
    pub async fn start_recovered(
        config: RaftConfig,
        storage: Arc<Storage>,
        recovered: Recovered,
    ) -> Result<RaftNode, Error> {
        Self::start_with(config, storage, recovered, Seams::default()).await
    }

    /// [`RaftNode::start_recovered`] with the disk under the WAL and the network to the
    /// peers replaced by `seams` (the simulation's).
    pub async fn start_with(
        config: RaftConfig,
        storage: Arc<Storage>,
        recovered: Recovered,
        seams: Seams,
    ) -> Result<RaftNode, Error> {
        let wal_dir = config.wal.dir.clone();
        let wal_fs: Arc<dyn quiver_wal::WalFs> =
            seams.wal_fs.unwrap_or_else(|| Arc::new(quiver_wal::OsFs));
        let barrier = Arc::new(VoteBarrier::load(&wal_dir)?);
        refuse_a_lost_log_alone(&config, &recovered)?;
        if recovered.log_lost() && config.peers.len() > 1 {
            start_over(&config, &wal_fs, &barrier, &recovered)?;
        }
        let wal = Wal::open_with_fs(config.wal.clone(), wal_fs)?;
        let log = LogStore::open(wal, &wal_dir).await?;
        log.set_commit_floor(recovered.snapshot_last_log_id());
        let covered_at_open = recovered
            .snapshot_last_log_id()
            .map(|l| l.index)
            .max(log.last_index_at_open())
            .unwrap_or(0);
        if config.peers.len() > 1 {
            log.forget_own_leadership(config.node_id);
        }
        let peers = match seams.transport {
            Some(transport) => PeerClient::over(transport, &config.secret),
            None => PeerClient::new(&config.secret, &config.peer_tls)?,
        }
        .for_group(config.group);
        let sm = StateMachine::open_recovered(
            storage.clone(),
            &config.data_dir,
            config.node_id,
            peers.clone(),
            recovered.snapshot,
        )
        .await?;
        let state_machine = sm.clone();
        let takers = Takers::default();
        let raft_config = openraft::Config {
            cluster_name: match config.group {
                crate::FIRST_GROUP => "quiver".to_string(),
                group => format!("quiver-group-{group}"),
            },
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_ms_min,
            election_timeout_max: config.election_timeout_ms_max,
            // Snapshots are taken when flushed segments make them cheap (see below).
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 0,
            purge_batch_size: 1,
            // A follower that needs the log is sent entries in batches of this size.
            max_payload_entries: 64,
            // Off until the vote barrier is known (below): a node that may not vote must
            // not stand either, since a candidate votes for itself.
            enable_elect: false,
            ..Default::default()
        }
        .validate()
        .map_err(|e| Error::Config(e.to_string()))?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            HttpNetworkFactory::new(
                config.node_id,
                peers.clone(),
                config.replication,
                takers.clone(),
            ),
            log.clone(),
            sm,
        )
        .await?;
        let initialized = raft.is_initialized().await?;
        // Whether this log directory has been this node's before: then an empty log is
        // one that never durably held an entry (so never acknowledged one), not a lost
        // one, and the node may vote at once.
        let known = VoteBarrier::directory_known(&wal_dir, config.node_id)?;
        let joining =
            !config.peers.is_empty() && !config.peers.iter().any(|(id, _)| *id == config.node_id);
        if config.peers.len() > 1 {
            close_barrier_if_votes_were_lost(&config, &peers, &raft, &barrier, known, initialized)
                .await?;
        }
        let mut bootstrap_pending = false;
        if joining {
            tracing::info!(
                node_id = config.node_id,
                "not in cluster.peers: waiting to be added (quiver cluster add-learner)"
            );
        } else if !initialized && config.peers.is_empty() {
            let mut members = BTreeMap::new();
            members.insert(
                config.node_id,
                BasicNode::new(config.advertise_addr.clone()),
            );
            tracing::info!(
                node_id = config.node_id,
                "initialising a new single-voter cluster"
            );
            if let Err(e) = raft.initialize(members).await {
                tracing::warn!(error = %e, "initialise skipped");
            }
        } else if !initialized {
            // An empty log in a static voter set: the cluster is forming, this node lost
            // its data, or it never stored an entry before it stopped. In the first two
            // cases it must not vote until the peers tell which.
            if !known {
                barrier.close_lost_vote()?;
            }
            bootstrap_pending = true;
        }
        VoteBarrier::mark_directory(&wal_dir, config.node_id)?;
        // After the log's mark: a data directory marked and a log directory not is a
        // lost (or unmounted) log, never a first start that stopped half-way.
        VoteBarrier::mark_directory(&config.data_dir, config.node_id)?;
        if let Some(reason) = barrier.refusal() {
            tracing::warn!(node_id = config.node_id, "{reason}");
        }
        stand_for_election_when_allowed(&raft, &barrier, &AtomicBool::new(false));
        Ok(RaftNode {
            raft,
            storage,
            log,
            peers,
            barrier,
            bootstrap_pending: Arc::new(AtomicBool::new(bootstrap_pending)),
            config: Arc::new(config),
            state_machine,
            covered_at_open,
            takers,
            refusing_entries: Arc::new(AtomicBool::new(false)),
            yielding: Arc::new(AtomicBool::new(false)),
        })
    }

    /// This node's state for a peer deciding how to start.
    pub fn peer_state(&self) -> PeerState {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let members = voters
            .iter()
            .filter_map(|id| Some((*id, membership.get_node(id)?.addr.clone())))
            .collect();
        PeerState {
            members,
            node_id: self.config.node_id,
            initialized: !voters.is_empty(),
            last_log_index: m.last_log_index,
            voters,
            vote: Some(m.vote),
            entries_refused: None,
            matched: m.replication.as_ref().map(|r| {
                r.iter()
                    .filter_map(|(id, l)| Some((*id, l.as_ref()?.index)))
                    .collect()
            }),
        }
    }

    /// A node of a static voter set that starts with an empty log asks its peers what
    /// they hold. If the cluster already has entries, this node lost its data or joins
    /// late: it does not initialise, and it votes only after catching up (its vote
    /// barrier stays closed until a leader has brought it up to date). If a majority of
    /// the set (itself included) is reachable and none has more than the first
    /// membership entry, the cluster is forming: it opens its barrier and initialises.
    pub(super) async fn bootstrap_loop(self) {
        let mut rounds: u64 = 0;
        loop {
            rounds += 1;
            let mut fresh = 1usize; // this node
            let mut existing: Option<PeerState> = None;
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(state) if state.last_log_index.is_some_and(|l| l > 0) => {
                        existing = Some(state);
                        break;
                    }
                    Ok(_) => fresh += 1,
                    Err(e) => tracing::debug!(peer = id, error = %e, "peer not reachable yet"),
                }
            }
            if let Some(state) = existing {
                tracing::warn!(
                    node_id = self.config.node_id,
                    peer = state.node_id,
                    peer_last_log_index = ?state.last_log_index,
                    member = state.voters.contains(&self.config.node_id),
                    "this node's log is empty but the cluster already holds entries (its data \
                     was lost, or it started late): not initialising; it will not vote until \
                     a leader has brought it up to date"
                );
                self.bootstrap_pending.store(false, Ordering::Relaxed);
                return;
            }
            let majority = self.config.peers.len() / 2 + 1;
            if fresh >= majority {
                match self.barrier.open() {
                    Err(e) => tracing::error!(error = %e, "cannot open the vote barrier; retrying"),
                    Ok(()) => {
                        stand_for_election_when_allowed(
                            &self.raft,
                            &self.barrier,
                            &self.refusing_entries,
                        );
                        let members: BTreeMap<NodeId, BasicNode> = self
                            .config
                            .peers
                            .iter()
                            .map(|(id, addr)| (*id, BasicNode::new(addr.clone())))
                            .collect();
                        tracing::info!(node_id = self.config.node_id, voters = ?members.keys().collect::<Vec<_>>(),
                            "initialising the static voter set from cluster.peers");
                        // Every node of a forming set calls this with the same members:
                        // each writes the same first membership entry, so they form one
                        // cluster whichever starts first.
                        if let Err(e) = self.raft.initialize(members).await {
                            tracing::info!(error = %e, "initialise skipped");
                        }
                        self.bootstrap_pending.store(false, Ordering::Relaxed);
                        return;
                    }
                }
            }
            if rounds.is_multiple_of(BOOTSTRAP_LOG_EVERY_ROUNDS) {
                tracing::info!(
                    reachable_fresh = fresh,
                    majority,
                    "waiting for a majority of cluster.peers to form the cluster"
                );
            }
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(BOOTSTRAP_PROBE_INTERVAL_MS)).await;
        }
    }

    /// The voters of `cluster.peers` other than this node.
    pub(super) fn other_peers(&self) -> impl Iterator<Item = &(NodeId, String)> {
        self.config
            .peers
            .iter()
            .filter(|(id, _)| *id != self.config.node_id)
    }

    /// Asks the peer at `addr` what it holds (`GET /internal/state`).
    pub(super) async fn peer_state_of(&self, addr: &str) -> Result<PeerState, PeerError> {
        let timeout = Duration::from_millis(BOOTSTRAP_PROBE_TIMEOUT_MS);
        self.peers.get(addr, PEER_STATE_PATH, timeout).await
    }

    /// A node that lost its vote with its data asks every peer for its vote until all
    /// have answered, and records the newest as the oldest leader term it takes entries
    /// from (see [`VoteBarrier`]). Ends early if the barrier opens (the cluster was
    /// forming) or Raft stops.
    pub(super) async fn vote_floor_loop(self) {
        let mut rounds: u64 = 0;
        while self.barrier.awaits_vote_floor() {
            rounds += 1;
            let mut newest: Option<Vote> = None;
            let mut silent = Vec::new();
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(PeerState {
                        vote: Some(vote), ..
                    }) => {
                        if newest.is_none_or(|n| vote.leader_id().term > n.leader_id().term) {
                            newest = Some(vote);
                        }
                    }
                    Ok(_) => silent.push((*id, "does not report its vote".to_string())),
                    Err(e) => silent.push((*id, e.to_string())),
                }
            }
            if silent.is_empty() {
                let floor = newest.unwrap_or_default();
                match self.barrier.set_vote_floor(floor) {
                    Ok(()) => {
                        tracing::info!(node_id = self.config.node_id, %floor,
                            "heard every peer's vote: taking entries from leaders of term {} or later",
                            floor.leader_id().term);
                        return;
                    }
                    Err(e) => tracing::error!(error = %e, "cannot record the vote floor; retrying"),
                }
            } else if rounds % BOOTSTRAP_LOG_EVERY_ROUNDS == 1 {
                tracing::warn!(node_id = self.config.node_id, waiting_for = ?silent,
                    "this node lost its data and its vote: it takes no entries until every \
                     peer has told it its vote");
            }
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(BOOTSTRAP_PROBE_INTERVAL_MS)).await;
        }
    }
}

#[cfg(test)]
mod start_over_tests {
    use super::*;
    use crate::command::FlushCommand;
    use crate::types::Entry;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{CommittedLeaderId, EntryPayload, LogId};
    use quiver_storage::TableKey;
    use quiver_wal::SyncMode;

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 2), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Command::Flush(FlushCommand {
                tables: vec![TableKey::new("db", "m")],
            })),
        }
    }

    /// A log purged past any snapshot (a snapshot install that failed) is erased, and
    /// the node still votes for candidates at least as up to date as the erased log,
    /// never for one behind it, across restarts and a second erase of a shortened log.
    #[tokio::test]
    async fn an_erased_log_still_votes_for_candidates_at_least_as_up_to_date_as_it_was() {
        let root = tempfile::tempdir().unwrap();
        let config = RaftConfig {
            data_dir: root.path().join("data"),
            wal: WalConfig {
                dir: root.path().join("wal"),
                sync: SyncMode::Fsync,
                ..WalConfig::default()
            },
            ..RaftConfig::default()
        };
        {
            let wal = Wal::open(config.wal.clone()).unwrap();
            let mut log = LogStore::open(wal, &config.wal.dir).await.unwrap();
            log.blocking_append((0..10).map(|i| entry(2, i)).collect::<Vec<_>>())
                .await
                .unwrap();
            log.purge(log_id(2, 6)).await.unwrap();
        }
        let recovered = Recovered::load(&config.data_dir, &config.wal.dir).unwrap();
        assert!(recovered.log_lost(), "purged with no snapshot");
        let fs: Arc<dyn quiver_wal::WalFs> = Arc::new(quiver_wal::OsFs);
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        start_over(&config, &fs, &barrier, &recovered).unwrap();

        let wal = Wal::open(config.wal.clone()).unwrap();
        assert_eq!(wal.last_index(), None, "the log is erased");
        drop(wal);
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        assert!(barrier.refusal().is_some(), "it does not stand itself");
        assert!(barrier.refusal_for(Some(&log_id(2, 9))).is_none());
        assert!(barrier.refusal_for(Some(&log_id(3, 4))).is_none());
        assert!(barrier.refusal_for(Some(&log_id(2, 8))).is_some());
        assert!(barrier.refusal_for(Some(&log_id(1, 50))).is_some());
        assert!(barrier.refusal_for(None).is_some());
        // Erasing again (a crash part-way left a shorter log) keeps the furthest end.
        barrier.close_erasing(Some(log_id(2, 7))).unwrap();
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        assert!(barrier.refusal_for(Some(&log_id(2, 8))).is_some());
        assert!(barrier.refusal_for(Some(&log_id(2, 9))).is_none());
    }
}
