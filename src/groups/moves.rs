//! Moving a data group's replica from one node to another, and emptying a node.
//!
//! A group's members are its own Raft membership; nothing else has to agree. A move of
//! group `g` from node `from` to node `to` is driven by a voter of `g`:
//!
//! 1. `to` starts `g`'s Raft as a learner-to-be (`host`): empty, never initialising
//!    itself, its rows and reads still going to the members;
//! 2. the leader adds `to` as a learner and waits until it has caught up (the log, or a
//!    snapshot with the group's Parquet files fetched from the leader);
//! 3. one membership change makes `to` a voter, a second removes `from` (each through
//!    Raft's joint consensus, so a majority of old and new voters holds every
//!    acknowledged write throughout);
//! 4. `from` is told to retire the group (`retire`): it checks with a voter that it is
//!    no longer one, stops the group's Raft and deletes its directories.
//!
//! Every step is idempotent, so a move that failed part way is finished by asking for
//! it again. `to` turns itself into a voter of the group (rows and reads served here)
//! when its own Raft says it is one ([`Mover::promote_joined`]); other nodes learn the
//! new members from any member ([`super::RemoteGroup::refresh_members`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use quiver_raft::{GroupId, PeerClient, PeerState, WriteError, FIRST_GROUP, PEER_STATE_PATH};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{group_dirs, members_cache, DataGroup, Group, Groups, RemoteGroup};

pub mod balance;
pub mod leaders;
pub mod repair;

/// Paths of the calls between nodes, before the group's prefix is put in.
pub mod paths {
    /// Start the group here as a learner-to-be.
    pub const HOST: &str = "/internal/host";
    /// Stop the group here and delete its directories: this node left it.
    pub const RETIRE: &str = "/internal/retire";
    /// Drive a move (asked of a voter of the group).
    pub const MOVE: &str = "/internal/move";
}

/// Starts a data group's Raft and storage on this node at run time (the node's start-up
/// code, which knows the settings).
pub trait GroupStarter: Send + Sync {
    /// Starts group `id` whose voters are `members` (this node not among them: it waits
    /// to be added). Returns the group and its background duties.
    fn start(
        &self,
        id: GroupId,
        members: Vec<(u64, String)>,
    ) -> BoxFuture<'_, anyhow::Result<(Group, Vec<JoinHandle<()>>)>>;
}

/// A move asked for: group `group`'s replica on node `from` goes to node `to`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct MoveRequest {
    /// The group.
    pub group: GroupId,
    /// The node giving up its replica.
    pub from: u64,
    /// The node taking it.
    pub to: u64,
}

/// The members a node is told about (host: the voters to wait for; retire: the voters
/// after the move).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MembersMessage {
    /// Voters (id, address).
    pub members: Vec<(u64, String)>,
}

/// Why a move could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The request names nodes or groups that do not fit (400).
    #[error("{0}")]
    Invalid(String),
    /// This node cannot drive it (not a voter of the group) (409).
    #[error("{0}")]
    NotHere(String),
    /// A step failed; asking again finishes the move (503).
    #[error("{0}")]
    Failed(String),
}

/// Where this node is and keeps its groups, for [`Mover::new`].
pub struct MoverPlace {
    /// This node's id.
    pub node_id: u64,
    /// The node's data directory (groups under `groups/`).
    pub data_dir: PathBuf,
    /// The node's log directory.
    pub wal_dir: PathBuf,
    /// Longest wait for another node's group to answer.
    pub timeout: Duration,
    /// `cluster.replication`: a move never leaves a group with fewer voters.
    pub replication: usize,
}

/// What moving replicas needs on this node.
pub struct Mover {
    groups: Groups,
    starter: Arc<dyn GroupStarter>,
    client: PeerClient,
    node_id: u64,
    data_dir: PathBuf,
    wal_dir: PathBuf,
    timeout: Duration,
    replication: usize,
    /// Background duties of the groups started here at run time, stopped on retire.
    duties: parking_lot::Mutex<BTreeMap<GroupId, Vec<JoinHandle<()>>>>,
    /// One host or retire at a time on this node.
    changing: tokio::sync::Mutex<()>,
    /// Groups whose move this node is driving (left alone by [`Mover::retire_if_removed`]).
    driving: parking_lot::Mutex<std::collections::BTreeSet<GroupId>>,
    /// When each running group was last seen without a leader or with this node leaving
    /// it, for [`Mover::retire_if_removed`].
    leaderless_since: parking_lot::Mutex<BTreeMap<GroupId, std::time::Instant>>,
    /// The nodes found down, kept on the metadata leader (see [`repair`]).
    liveness: parking_lot::Mutex<repair::Liveness>,
}

/// How long a group runs here without a leader (or with this node leaving it) before
/// the node asks its members whether it was removed.
const REMOVED_CHECK_AFTER: Duration = Duration::from_secs(3);

/// How long a node waits for a peer's answer to a step of a move (a learner's
/// catch-up is waited for by Raft itself, with its own deadline).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

impl Mover {
    /// The mover of a node whose groups are `groups`.
    pub fn new(
        groups: Groups,
        starter: Arc<dyn GroupStarter>,
        client: PeerClient,
        place: MoverPlace,
        duties: BTreeMap<GroupId, Vec<JoinHandle<()>>>,
    ) -> Self {
        Mover {
            groups,
            starter,
            client,
            node_id: place.node_id,
            data_dir: place.data_dir,
            wal_dir: place.wal_dir,
            timeout: place.timeout,
            replication: place.replication,
            duties: parking_lot::Mutex::new(duties),
            changing: tokio::sync::Mutex::new(()),
            driving: parking_lot::Mutex::new(Default::default()),
            leaderless_since: parking_lot::Mutex::new(BTreeMap::new()),
            liveness: parking_lot::Mutex::new(repair::Liveness::default()),
        }
    }

    /// The address of node `id`, from the first group's membership (every node is a
    /// member of it).
    fn address_of(&self, id: u64) -> Option<String> {
        self.groups.first().node.member_addr(id)
    }

    /// The nodes of the cluster (the first group's voters and learners).
    pub fn nodes(&self) -> Vec<u64> {
        let metrics = self.groups.first().node.raft.metrics();
        let metrics = metrics.borrow();
        let mut ids: Vec<u64> = metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Group `id`'s voters as this node knows them.
    pub fn members_of(&self, id: GroupId) -> Vec<(u64, String)> {
        match self.groups.data_group(id) {
            Some(DataGroup::Local(g)) => g.node.voters(),
            Some(DataGroup::Joining { members, .. } | DataGroup::Remote(members)) => {
                members.members()
            }
            None => Vec::new(),
        }
    }

    /// Moves a replica; this node must be a voter of the group. Returns the voters
    /// after the move.
    pub async fn drive(&self, request: MoveRequest) -> Result<Vec<(u64, String)>, MoveError> {
        if !self.driving.lock().insert(request.group) {
            return Err(MoveError::Failed(format!(
                "a move of group {} is under way on this node; ask again once it ended",
                request.group
            )));
        }
        let result = self.drive_marked(request).await;
        self.driving.lock().remove(&request.group);
        result
    }

    async fn drive_marked(&self, request: MoveRequest) -> Result<Vec<(u64, String)>, MoveError> {
        let MoveRequest { group, from, to } = request;
        if group == FIRST_GROUP {
            return Err(MoveError::Invalid(
                "group 0 (metadata) has every node as a member; it does not move".into(),
            ));
        }
        if from == to {
            return Err(MoveError::Invalid(format!(
                "--from and --to are both node {from}"
            )));
        }
        let Some(local) = self.groups.get(group) else {
            return Err(MoveError::NotHere(format!(
                "node {} is not a voter of group {group}",
                self.node_id
            )));
        };
        let voters = local.node.voters();
        let is_voter = |id: u64| voters.iter().any(|(v, _)| *v == id);
        if is_voter(to) && !is_voter(from) {
            tracing::info!(group, from, to, "the move was made already");
            // Its last step may not have reached the old replica: ask it again.
            self.tell_to_retire(group, from, &voters).await;
            return Ok(voters);
        }
        if !is_voter(from) {
            return Err(MoveError::Invalid(format!(
                "node {from} is not a member of group {group} (members: {:?})",
                ids(&voters)
            )));
        }
        // With the target a voter already, the move only removes `from`: right when an
        // earlier attempt left one voter too many, wrong when the group has no more
        // than it should (a second decider moving another replica to the same node).
        if is_voter(to) && voters.len() <= self.replication {
            return Err(MoveError::Invalid(format!(
                "node {to} is already a member of group {group} (members: {:?}): moving \
                 node {from} there would leave {} replicas, fewer than cluster.replication \
                 ({}); another move of this group ran meanwhile",
                ids(&voters),
                voters.len() - 1,
                self.replication
            )));
        }
        let to_addr = self.address_of(to).ok_or_else(|| {
            MoveError::Invalid(format!(
                "node {to} is not a node of the cluster (nodes: {:?})",
                self.nodes()
            ))
        })?;
        metrics::counter!("quiver_group_moves_started_total").increment(1);
        tracing::info!(group, from, to, "moving a replica");
        if !is_voter(to) {
            // 1. The target runs the group, waiting to be added.
            self.call_peer(
                &to_addr,
                group,
                paths::HOST,
                &MembersMessage {
                    members: voters.clone(),
                },
            )
            .await
            .map_err(|e| {
                MoveError::Failed(format!("node {to} could not start group {group}: {e}"))
            })?;
            // 2. It catches up as a learner (Raft waits for it).
            local
                .node
                .add_learner(to, to_addr.clone())
                .await
                .map_err(|e| failed(group, "adding the learner", e))?;
            // 3a. It becomes a voter.
            local
                .node
                .change_voters([to].into(), Default::default())
                .await
                .map_err(|e| failed(group, "making the learner a voter", e))?;
        }
        // 3b. A leaving leader first hands its leadership to the new voter: removed
        // while leading, the entries it had taken would end with outcomes unknown to
        // their writers (504). Best effort: the removal is safe either way.
        if local.node.raft.metrics().borrow().current_leader == Some(from) {
            if let Err(e) = local.node.ask_leader_to_hand_over(to).await {
                tracing::info!(group, from, to, error = %e,
                    "the leaving replica leads and did not hand over; removing it all the same");
            }
        }
        // 3c. The old replica stops voting and leaves, unless that would leave the
        // group with fewer voters than this move should end with (as many as it
        // started with; one fewer when it started with the target a voter already,
        // finishing an earlier attempt): another move of this group, driven by another
        // voter, took a replica away meanwhile (two deciders, or one move asked twice).
        let end_with = voters.len() - usize::from(is_voter(to));
        let now = local.node.voters();
        if now.len().saturating_sub(1) < end_with.max(1) || !now.iter().any(|(v, _)| *v == to) {
            return Err(MoveError::Failed(format!(
                "removing node {from} would leave group {group} with {} voters (now {:?}), \
                 fewer than the {end_with} this move keeps: another move of this group ran \
                 meanwhile; ask again",
                now.len().saturating_sub(1),
                ids(&now)
            )));
        }
        local
            .node
            .change_voters(Default::default(), [from].into())
            .await
            .map_err(|e| failed(group, "removing the old replica", e))?;
        let after = self.voters_after(&local, from, to, &to_addr);
        // 4. The old replica deletes its copy.
        let retire = MembersMessage {
            members: after.clone(),
        };
        if from == self.node_id {
            self.retire(group, retire)
                .await
                .map_err(|e| MoveError::Failed(format!("retiring group {group} here: {e}")))?;
        } else {
            self.tell_to_retire(group, from, &after).await;
        }
        metrics::counter!("quiver_group_moves_finished_total").increment(1);
        tracing::info!(group, from, to, members = ?ids(&after), "replica moved");
        Ok(after)
    }

    /// Tells node `from`, which left group `group`, to delete its copy. A failure is
    /// only logged: the group is whole without it, and the node retires the group when
    /// it next finds it has left (or when the move is asked again).
    async fn tell_to_retire(&self, group: GroupId, from: u64, after: &[(u64, String)]) {
        let Some(from_addr) = self.address_of(from) else {
            return;
        };
        let message = MembersMessage {
            members: after.to_vec(),
        };
        if let Err(e) = self
            .call_peer(&from_addr, group, paths::RETIRE, &message)
            .await
        {
            tracing::warn!(group, node = from, error = %e, "the old replica has not deleted its copy yet");
        }
    }

    /// The voters once `from` left and `to` joined, as this node's Raft knows them (it
    /// may have left itself: then as they must be).
    fn voters_after(&self, local: &Group, from: u64, to: u64, to_addr: &str) -> Vec<(u64, String)> {
        let mut after: Vec<(u64, String)> = local
            .node
            .voters()
            .into_iter()
            .filter(|(id, _)| *id != from)
            .collect();
        if !after.iter().any(|(id, _)| *id == to) {
            after.push((to, to_addr.to_string()));
        }
        after.sort_unstable();
        after
    }

    async fn call_peer(
        &self,
        addr: &str,
        group: GroupId,
        path: &str,
        message: &MembersMessage,
    ) -> Result<(), String> {
        let answer: Result<(), String> = self
            .client
            .for_group(group)
            .call(addr, path, message, STEP_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        answer
    }

    /// Starts group `group` here, waiting to be added to `members` (the target's step
    /// of a move). Nothing to do if it runs here already.
    pub async fn host(&self, group: GroupId, message: MembersMessage) -> Result<(), String> {
        let _one = self.changing.lock().await;
        let remote = match self.groups.data_group(group) {
            None => return Err(format!("there is no data group {group}")),
            Some(DataGroup::Local(_) | DataGroup::Joining { .. }) => return Ok(()),
            Some(DataGroup::Remote(r)) => r,
        };
        let members: Vec<(u64, String)> = message
            .members
            .into_iter()
            .filter(|(id, _)| *id != self.node_id)
            .collect();
        if members.is_empty() {
            return Err(format!("group {group}: no members to wait for"));
        }
        tracing::info!(group, members = ?ids(&members), "starting the group here to take a replica");
        let (started, duties) = self
            .starter
            .start(group, members.clone())
            .await
            .map_err(|e| format!("starting group {group}: {e:#}"))?;
        self.duties.lock().insert(group, duties);
        remote.set_members(members);
        self.groups.replace(DataGroup::Joining {
            group: started,
            members: remote,
        });
        Ok(())
    }

    /// Stops group `group` here and deletes its directories, once a voter confirms
    /// this node is no longer one (the old replica's step of a move).
    pub async fn retire(&self, group: GroupId, message: MembersMessage) -> Result<(), String> {
        let _one = self.changing.lock().await;
        let running = match self.groups.data_group(group) {
            None => return Err(format!("there is no data group {group}")),
            Some(DataGroup::Remote(_)) => return Ok(()),
            Some(other) => other,
        };
        let Some(here) = running.running().cloned() else {
            return Ok(());
        };
        let members: Vec<(u64, String)> = message
            .members
            .into_iter()
            .filter(|(id, _)| *id != self.node_id)
            .collect();
        let members = self.confirm_left(group, &members).await?;
        tracing::info!(group, members = ?ids(&members), "this node left the group: deleting its copy");
        let remote = Arc::new(RemoteGroup::new(
            group,
            members.clone(),
            &self.client,
            self.timeout,
        ));
        self.groups.replace(DataGroup::Remote(remote));
        if let Err(e) = members_cache::record(&self.data_dir, group, &members) {
            tracing::warn!(group, error = %e, "cannot record the group's members");
        }
        for task in self.duties.lock().remove(&group).unwrap_or_default() {
            task.abort();
        }
        here.node.shutdown().await;
        let dirs = group_dirs(&self.data_dir, &self.wal_dir, group);
        for dir in [dirs.wal, dirs.data] {
            remove_retired(&dir);
        }
        metrics::counter!("quiver_group_replicas_retired_total").increment(1);
        Ok(())
    }

    /// Asks `members` whether this node left group `group`: it did once a majority of
    /// the voters they report (a configuration without this node) say so, since an
    /// entry a majority of the new voters hold stays in every future leader's log.
    /// Returns those voters.
    async fn confirm_left(
        &self,
        group: GroupId,
        members: &[(u64, String)],
    ) -> Result<Vec<(u64, String)>, String> {
        let client = self.client.for_group(group);
        let mut said = Vec::new();
        let mut voters: Option<Vec<(u64, String)>> = None;
        let mut confirmed = 0usize;
        for (id, addr) in members {
            match client
                .get::<PeerState>(addr, PEER_STATE_PATH, STEP_TIMEOUT)
                .await
            {
                Ok(state) if state.members.iter().any(|(m, _)| m == id) => {
                    if state.members.iter().any(|(m, _)| *m == self.node_id) {
                        said.push(format!("node {id}: this node is still a voter"));
                        continue;
                    }
                    confirmed += 1;
                    voters.get_or_insert(state.members);
                }
                Ok(_) => said.push(format!("node {id}: not a voter")),
                Err(e) => said.push(format!("node {id}: {e}")),
            }
        }
        match voters {
            Some(voters) if confirmed > voters.len() / 2 => Ok(voters),
            _ => Err(format!(
                "a majority of group {group}'s voters has not confirmed that this node left it \
                 ({confirmed} did; {})",
                said.join("; ")
            )),
        }
    }

    /// Makes each group this node runs as a learner-to-be a voter here once its Raft
    /// says it is one: rows and reads of the group are then served here.
    pub fn promote_joined(&self) {
        for id in 1..=self.groups.data_count() as GroupId {
            let Some(DataGroup::Joining { group, .. }) = self.groups.data_group(id) else {
                continue;
            };
            let voters = group.node.voters();
            if group.node.membership_in_change() || !voters.iter().any(|(v, _)| *v == self.node_id)
            {
                continue;
            }
            tracing::info!(group = id, members = ?ids(&voters), "this node is a voter of the group now");
            if let Err(e) = members_cache::record(&self.data_dir, id, &voters) {
                tracing::warn!(group = id, error = %e, "cannot record the group's members");
            }
            self.groups.replace(DataGroup::Local(group));
        }
    }

    /// Retires the groups this node runs as a voter but was removed from without being
    /// told (it was down, or the mover's last step did not reach it): a group whose
    /// Raft has heard no leader for a while, or whose membership change leaves this node
    /// out, is checked with its other members, and retired if one that is a voter says
    /// this node is not. Until then its reads may be stale, as a lagging follower's are.
    pub async fn retire_if_removed(&self) {
        let now = std::time::Instant::now();
        for id in 1..=self.groups.data_count() as GroupId {
            let Some(DataGroup::Local(group)) = self.groups.data_group(id) else {
                self.leaderless_since.lock().remove(&id);
                continue;
            };
            if self.driving.lock().contains(&id) {
                continue;
            }
            let voters = group.node.voters();
            let leaving = !voters.iter().any(|(v, _)| *v == self.node_id);
            let leaderless = group.node.raft.metrics().borrow().current_leader.is_none();
            if !leaving && !leaderless {
                self.leaderless_since.lock().remove(&id);
                continue;
            }
            let since = *self.leaderless_since.lock().entry(id).or_insert(now);
            if now.duration_since(since) < REMOVED_CHECK_AFTER {
                continue;
            }
            // Checked again only after another wait.
            self.leaderless_since.lock().insert(id, now);
            let mut others: Vec<(u64, String)> = group
                .node
                .member_addrs_by_id()
                .into_iter()
                .filter(|(n, _)| *n != self.node_id)
                .collect();
            others.extend(voters.into_iter().filter(|(n, _)| *n != self.node_id));
            others.sort_unstable();
            others.dedup();
            if let Ok(after) = self.confirm_left(id, &others).await {
                tracing::warn!(
                    group = id,
                    "this node was removed from the group while it was not told: retiring its copy"
                );
                if let Err(e) = self.retire(id, MembersMessage { members: after }).await {
                    tracing::warn!(group = id, error = %e, "cannot retire the group");
                }
            }
        }
    }

    /// Moves every data group replica off node `node` to the nodes holding fewest
    /// replicas, one at a time. Returns the moves made.
    pub async fn drain(&self, node: u64) -> Result<Vec<MoveRequest>, MoveError> {
        let nodes = self.nodes();
        if !nodes.contains(&node) {
            return Err(MoveError::Invalid(format!(
                "node {node} is not a node of the cluster (nodes: {nodes:?})"
            )));
        }
        let mut moves = Vec::new();
        for group in 1..=self.groups.data_count() as GroupId {
            let members = ids(&self.members_of(group));
            if !members.contains(&node) {
                continue;
            }
            let held = self.replicas_held(&nodes);
            let to = nodes
                .iter()
                .filter(|n| **n != node && !members.contains(n))
                .min_by_key(|n| (held.get(n).copied().unwrap_or(0), **n))
                .copied()
                .ok_or_else(|| {
                    MoveError::Invalid(format!(
                        "group {group} has a replica on every other node: node {node} cannot \
                         be emptied without lowering cluster.replication"
                    ))
                })?;
            let request = MoveRequest {
                group,
                from: node,
                to,
            };
            self.move_anywhere(request).await?;
            moves.push(request);
        }
        Ok(moves)
    }

    /// Moves replicas from the nodes holding most to those holding fewest, one at a
    /// time, until no two nodes differ by more than one replica (a node just added gets
    /// its share). Returns the moves made.
    pub async fn rebalance(&self) -> Result<Vec<MoveRequest>, MoveError> {
        let nodes = self.nodes();
        let groups = self.groups.data_count() as GroupId;
        let mut moves = Vec::new();
        // Each move narrows the spread; the bound only guards against a view that does
        // not change (members not yet learned).
        for _ in 0..(groups as usize * nodes.len()).max(1) {
            let held = self.replicas_held(&nodes);
            let Some((&most, &most_held)) = held
                .iter()
                .max_by_key(|(id, n)| (**n, std::cmp::Reverse(**id)))
            else {
                break;
            };
            let Some((&fewest, &fewest_held)) = held.iter().min_by_key(|(id, n)| (**n, **id))
            else {
                break;
            };
            if most_held <= fewest_held + 1 {
                break;
            }
            let Some(group) = (1..=groups).find(|g| {
                let members = ids(&self.members_of(*g));
                members.contains(&most) && !members.contains(&fewest)
            }) else {
                break;
            };
            let request = MoveRequest {
                group,
                from: most,
                to: fewest,
            };
            self.move_anywhere(request).await?;
            moves.push(request);
        }
        Ok(moves)
    }

    /// Replicas of data groups per node, as this node knows the groups' members.
    fn replicas_held(&self, nodes: &[u64]) -> BTreeMap<u64, usize> {
        let mut held: BTreeMap<u64, usize> = nodes.iter().map(|n| (*n, 0)).collect();
        for group in 1..=self.groups.data_count() as GroupId {
            for (id, _) in self.members_of(group) {
                *held.entry(id).or_default() += 1;
            }
        }
        held
    }

    /// Drives `request` here when this node is a voter of the group, else on one, then
    /// learns the group's new members.
    pub async fn move_anywhere(
        &self,
        request: MoveRequest,
    ) -> Result<Vec<(u64, String)>, MoveError> {
        let group = request.group;
        let members = match self.groups.data_group(group) {
            None => {
                return Err(MoveError::Invalid(format!(
                    "there is no data group {group} (data groups: 1..={})",
                    self.groups.data_count()
                )))
            }
            Some(DataGroup::Local(_)) => return self.drive(request).await,
            Some(DataGroup::Joining { members, .. } | DataGroup::Remote(members)) => members,
        };
        let mut errors = Vec::new();
        for (id, addr) in members.members() {
            let answer: Result<Result<Vec<(u64, String)>, String>, _> = self
                .client
                .for_group(group)
                .call(
                    &addr,
                    paths::MOVE,
                    &request,
                    Duration::from_millis(quiver_raft::MEMBERSHIP_TIMEOUT_MS) * 2 + STEP_TIMEOUT,
                )
                .await;
            match answer {
                Ok(Ok(after)) => {
                    members.set_members(after.clone());
                    return Ok(after);
                }
                Ok(Err(e)) => return Err(MoveError::Failed(format!("node {id}: {e}"))),
                Err(e) if e.refused_before_acting() => errors.push(format!("node {id}: {e}")),
                Err(e) => {
                    return Err(MoveError::Failed(format!(
                        "node {id} did not finish the move (ask again to finish it): {e}"
                    )))
                }
            }
        }
        Err(MoveError::Failed(format!(
            "no member of group {group} could drive the move: {}",
            errors.join("; ")
        )))
    }
}

fn failed(group: GroupId, step: &str, e: WriteError) -> MoveError {
    MoveError::Failed(format!(
        "group {group}: {step}: {e} (ask for the move again to finish it)"
    ))
}

fn ids(members: &[(u64, String)]) -> Vec<u64> {
    members.iter().map(|(id, _)| *id).collect()
}

/// Deletes a directory of a group this node left: renamed first (one atomic step, so a
/// crash part way never leaves a half-deleted group that a restart would run), then
/// removed.
fn remove_retired(dir: &std::path::Path) {
    let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let retired = dir.with_file_name(format!("{RETIRED_PREFIX}{name}"));
    match std::fs::rename(dir, &retired) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot set the group's directory aside");
            return;
        }
    }
    if let Some(parent) = dir.parent() {
        if let Err(e) = std::fs::File::open(parent).and_then(|d| d.sync_all()) {
            tracing::warn!(dir = %parent.display(), error = %e, "cannot sync the directory");
        }
    }
    if let Err(e) = std::fs::remove_dir_all(&retired) {
        tracing::warn!(dir = %retired.display(), error = %e, "cannot delete a left group's directory");
    }
}

/// Prefix of a directory set aside for deletion (a start deletes what is left of it).
pub const RETIRED_PREFIX: &str = "retired-";

/// Deletes directories of left groups that a crash left behind, under `groups/`.
pub fn remove_leftovers(groups_dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(groups_dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(RETIRED_PREFIX)
        {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), error = %e, "cannot delete a left group's directory");
            }
        }
    }
}
